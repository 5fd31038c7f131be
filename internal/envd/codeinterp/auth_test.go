package codeinterp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// statusOf sends one request with token (none when empty).
func statusOf(t *testing.T, url, method, path, token string) int {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(`{"code":"1"}`))
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func needsSecret(r *http.Request) bool { return r.Header.Get("X-Access-Token") == "secret" }

func TestAuthorize(t *testing.T) {
	ts := newTestServer(t, []string{t.TempDir()}, needsSecret)
	do := func(method, path, token string) int { return statusOf(t, ts.url, method, path, token) }
	if got := do("GET", "/health", ""); got != http.StatusOK {
		t.Errorf("health without token: %d", got)
	}
	for _, r := range [][2]string{{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"}, {"DELETE", "/contexts/x"}, {"POST", "/contexts/x/restart"}} {
		if got := do(r[0], r[1], ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without token: %d", r[0], r[1], got)
		}
		if got := do(r[0], r[1], "wrong"); got != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong token: %d", r[0], r[1], got)
		}
	}
	if got := do("GET", "/contexts", "secret"); got != http.StatusOK {
		t.Errorf("list with token: %d", got)
	}
}

// ContextsOpen opens the context routes and nothing else.
func TestOpenContextRoutes(t *testing.T) {
	srv := New(Options{Authorize: needsSecret, ContextsOpen: func() bool { return true }, KernelSpecDirs: []string{t.TempDir()}, DefaultCwd: t.TempDir()})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close() })
	ts := struct{ url string }{hs.URL}
	for pattern := range ContextRoutes {
		method, path, _ := strings.Cut(strings.ReplaceAll(pattern, "{id}", "x"), " ")
		if got := statusOf(t, ts.url, method, path, ""); got == http.StatusUnauthorized {
			t.Errorf("%s without token: 401, want it open", pattern)
		}
	}
	for _, r := range [][2]string{{"POST", "/execute"}, {"GET", "/no-such-route"}} {
		if got := statusOf(t, ts.url, r[0], r[1], ""); got != http.StatusUnauthorized {
			t.Errorf("%s %s without token: %d, want 401", r[0], r[1], got)
		}
	}
}
