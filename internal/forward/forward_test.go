package forward

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cube/internal/cluster"
)

func TestSubjectOfPaths(t *testing.T) {
	for _, c := range []struct{ method, path, kind, id string }{
		{"POST", "/sandboxes", "create", ""},
		{"POST", "/v2/sandboxes", "create", ""},
		{"GET", "/sandboxes", "", ""},
		{"GET", "/v2/sandboxes", "", ""},
		{"GET", "/sandboxes/metrics", "", ""},
		{"POST", "/sandboxes/abc/pause", "sandbox", "abc"},
		{"GET", "/v2/sandboxes/abc/logs", "sandbox", "abc"},
		{"DELETE", "/templates/t1", "template", "t1"},
		{"POST", "/v2/templates/t1/builds/b1", "template", "t1"},
		{"GET", "/templates/aliases/base", "", ""},
		{"POST", "/templates/tags", "", ""},
		{"GET", "/volumecontent/v1/file", "volume", "v1"},
		{"DELETE", "/volumes/v1", "volume", "v1"},
		{"GET", "/health", "", ""},
		{"GET", "/", "", ""},
	} {
		kind, id := subject(httptest.NewRequest(c.method, c.path, nil))
		if kind != c.kind || id != c.id {
			t.Errorf("%s %s: %q %q, want %q %q", c.method, c.path, kind, id, c.kind, c.id)
		}
	}
}

func TestSignatures(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	now := time.Unix(1_800_000_000, 0)
	signed := func() *http.Request {
		r := httptest.NewRequest("POST", "http://49983-abc.cube.localhost/files?path=/x", strings.NewReader("data"))
		sign(r, "node-a", secret, now, bodyDigest([]byte("data")))
		return r
	}
	v := verifier{secret: secret, seen: newNonces(16)}
	if _, err := v.verify(signed(), now.Add(time.Second)); err != nil {
		t.Fatalf("a fresh signature: %v", err)
	}
	for name, c := range map[string]struct {
		change func(*http.Request)
		at     time.Time
		says   string
	}{
		"other secret": {func(*http.Request) {}, now, "bad signature"},
		"other path":   {func(r *http.Request) { r.URL.RawQuery = "path=/etc/shadow" }, now, "bad signature"},
		"other host":   {func(r *http.Request) { r.Host = "49983-def.cube.localhost" }, now, "bad signature"},
		"other node": {func(r *http.Request) {
			r.Header.Set(Header, strings.Replace(r.Header.Get(Header), "node-a", "node-b", 1))
		}, now, "bad signature"},
		"other body":        {func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader("datb")) }, now, "not the one it signed"},
		"a Cube header":     {func(r *http.Request) { r.Header.Set(MoveHeader, "node-c") }, now, "bad signature"},
		"old":               {func(*http.Request) {}, now.Add(2 * time.Minute), "old"},
		"malformed":         {func(r *http.Request) { r.Header.Set(Header, "node-a") }, now, "malformed"},
		"a malformed nonce": {func(r *http.Request) { r.Header.Set(Header, strings.Replace(r.Header.Get(Header), ";", ";x", 2)) }, now, "malformed"},
	} {
		r := signed()
		c.change(r)
		v := verifier{secret: secret, seen: newNonces(16)}
		if name == "other secret" {
			v.secret = []byte("another secret of the same size")
		}
		if _, err := v.verify(r, c.at); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.says)
		}
	}
}

// peersOfOne is a cluster of this node alone.
type peersOfOne struct{}

func (peersOfOne) Self() string { return "node-a" }
func (peersOfOne) Peer(context.Context, string) (string, bool, error) {
	return "", false, errors.New("no peers")
}
func (peersOfOne) Place(context.Context, cluster.Want) (string, func(), error) {
	return "node-a", func() {}, nil
}
func (peersOfOne) AlivePeers() []string { return nil }

// The routes nodes call on each other take only signed requests, and a
// sandbox's own paths under the same prefix stay the sandbox's.
func TestInternalRoutesAreTheNodesOnly(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	served := ""
	h := New(Config{Peers: peersOfOne{}, Secret: secret,
		Local:    http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = "local" }),
		Internal: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served = "internal" }),
		SandboxOf: func(r *http.Request) (string, bool) {
			return "abc", strings.HasPrefix(r.Host, "8000-abc.")
		},
		Runs: func(string) bool { return true },
	})
	for _, c := range []struct {
		name, host string
		signed     bool
		want       string
		status     int
	}{
		{"unsigned, API", "api.cube.localhost", false, "", 403},
		{"signed, API", "api.cube.localhost", true, "internal", 200},
		{"unsigned, a sandbox's path", "8000-abc.cube.localhost", false, "local", 200},
		{"signed, a sandbox's path", "8000-abc.cube.localhost", true, "local", 200},
	} {
		served = ""
		r := httptest.NewRequest("GET", "http://"+c.host+"/cluster/templates/t/files", nil)
		if c.signed {
			sign(r, "node-b", secret, time.Now(), emptyBody)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if served != c.want || w.Code != c.status {
			t.Errorf("%s: served by %q with %d, want %q with %d", c.name, served, w.Code, c.want, c.status)
		}
	}
}

// Signed file URLs no sandbox of this node made are looked for among the
// peers at a bounded rate per source address, since each costs a call on
// every peer and needs no key.
func TestSignedURLLookupsAreLimited(t *testing.T) {
	local := 0
	h := New(Config{Peers: peersOfOne{}, Secret: []byte("0123456789abcdef0123"),
		Local:     http.HandlerFunc(func(http.ResponseWriter, *http.Request) { local++ }),
		SandboxOf: func(*http.Request) (string, bool) { return "", false },
	})
	limited := 0
	for range 3 * lookupsPerSecond {
		r := httptest.NewRequest("GET", "/files?path=/x&signature=v1_forged", nil)
		r.RemoteAddr = "192.0.2.7:4000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == 429 {
			limited++
			if w.Header().Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		}
	}
	if limited == 0 || local == 0 || local+limited != 3*lookupsPerSecond {
		t.Fatalf("%d answered here, %d limited", local, limited)
	}
	r := httptest.NewRequest("GET", "/files?path=/x&signature=v1_forged", nil)
	r.RemoteAddr = "192.0.2.8:4000"
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code == 429 {
		t.Fatal("another address was limited too")
	}
}

// countedPeers is a cluster of this node and node-b, counting the room it
// holds for creates.
type countedPeers struct{ places *int }

func (countedPeers) Self() string { return "node-a" }
func (countedPeers) Peer(context.Context, string) (string, bool, error) {
	return "http://node-b.invalid", true, nil
}
func (p countedPeers) Place(context.Context, cluster.Want) (string, func(), error) {
	*p.places++
	return "node-b", func() {}, nil
}
func (countedPeers) AlivePeers() []string { return []string{"node-b"} }

// countedBody is a large request body that counts what is read of it.
type countedBody struct{ read, left int }

func (b *countedBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), b.left)
	b.read, b.left = b.read+n, b.left-n
	return n, nil
}

// A request without a key the API takes is answered 401, in the API's
// error shape, before the forwarding reads its body, asks the database
// where its subject is or holds room for a create: an anonymous client
// must not make a node work for it.
func TestKeyCheckedBeforeAnyWork(t *testing.T) {
	queries, places := 0, 0
	lookup := func(context.Context, string) (string, error) { queries++; return "node-b", nil }
	h := New(Config{Peers: countedPeers{&places}, Secret: []byte("0123456789abcdef0123"),
		Local:       http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) }),
		SandboxOf:   func(*http.Request) (string, bool) { return "", false },
		Runs:        func(string) bool { return false },
		SandboxNode: lookup, TemplateNode: lookup, VolumeNode: lookup,
		Authorized: func(r *http.Request) bool { return r.Header.Get("X-API-Key") == "e2b_the_key" },
	})
	for _, c := range []struct{ method, path string }{
		{"POST", "/sandboxes"},
		{"POST", "/v2/sandboxes"},
		{"POST", "/sandboxes/abc/connect"},
		{"DELETE", "/sandboxes/abc"},
		{"DELETE", "/templates/t1"},
		{"PUT", "/volumecontent/v1/file?path=/x"},
	} {
		body := &countedBody{left: 64 << 20}
		r := httptest.NewRequest(c.method, c.path, body)
		r.Header.Set("X-API-Key", "e2b_a_wrong_key")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var answer struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		json.Unmarshal(w.Body.Bytes(), &answer)
		if w.Code != 401 || answer.Code != 401 || !strings.Contains(answer.Message, "API key") {
			t.Errorf("%s %s with a wrong key: %d %s", c.method, c.path, w.Code, w.Body)
		}
		if body.read != 0 || queries != 0 || places != 0 {
			t.Errorf("%s %s with a wrong key: %d bytes of its body read, %d queries, %d creates placed", c.method, c.path, body.read, queries, places)
		}
		queries, places = 0, 0
	}
	// The right key is let through to the API, which places the create
	// (see the server's clustered service) once it has decoded it.
	r := httptest.NewRequest("POST", "/sandboxes", strings.NewReader(`{"templateID":"base"}`))
	r.Header.Set("X-API-Key", "e2b_the_key")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 299 || queries != 0 || places != 0 {
		t.Fatalf("a create with the key: %d, %d queries, %d creates placed; want it passed to the API untouched", w.Code, queries, places)
	}
}
