package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"cube/internal/proxy"
)

// FuzzCreateBody feeds arbitrary bodies to sandbox creation: every answer
// must be a 201 or a JSON error with a 4xx status, never a crash or a 5xx.
func FuzzCreateBody(f *testing.F) {
	for _, seed := range []string{
		`{"templateID":"base"}`, `{"templateID":"base","timeout":-1}`, `{"templateID":1}`,
		`{"templateID":"base","metadata":{"a":"b"},"envVars":{"X":"1"},"network":{"allowOut":["1.1.1.1"]}}`,
		`{"templateID":"base","mcp":{}}`, `[]`, `null`, `{"templateID":"base"`, "\x00", `{"timeout":1e99}`,
	} {
		f.Add(seed)
	}
	fake := newFake()
	s, err := NewServer(Config{Teams: adminKeys(testKey), MaxBodyBytes: 4096}, fake)
	if err != nil {
		f.Fatal(err)
	}
	h := Mount(s, proxy.New(proxy.Config{IsAPIKey: s.IsAPIKey}, fake))
	f.Fuzz(func(t *testing.T, body string) {
		req := httptest.NewRequest("POST", "/v2/sandboxes", strings.NewReader(body))
		req.Header.Set("X-API-Key", testKey)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated && (rec.Code < 400 || rec.Code > 499) {
			t.Fatalf("body %q → %d %s", body, rec.Code, rec.Body)
		}
		if rec.Code != http.StatusCreated && !strings.Contains(rec.Body.String(), `"code":`) {
			t.Fatalf("body %q → error without the E2B shape: %s", body, rec.Body)
		}
	})
}

// FuzzMetadataFilter checks the list filter parser never fails on input a
// client can send, except with a 400.
func FuzzMetadataFilter(f *testing.F) {
	for _, seed := range []string{"user%3Dann%2520smith", "a=b&c=d", "%", "=x", "a=%ZZ", "&&&"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		md, err := parseMetadataFilter(raw)
		if err != nil {
			if StatusOf(err) != http.StatusBadRequest {
				t.Fatalf("%q: %v", raw, err)
			}
			return
		}
		for k := range md {
			if k == "" {
				t.Fatalf("%q: empty key accepted", raw)
			}
		}
	})
}
