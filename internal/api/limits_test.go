package api

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func TestRateLimitPerKey(t *testing.T) {
	// One token every 1000 s: the bucket does not refill during the test.
	e := newEnv(t, func(c *envConfig) { c.RateLimit = 0.001; c.RateBurst = 2 })
	e.do("GET", "/v2/sandboxes", nil).decode(t, http.StatusOK, nil)
	e.do("GET", "/v2/sandboxes", nil).decode(t, http.StatusOK, nil)
	r := e.do("GET", "/v2/sandboxes", nil)
	r.wantError(t, http.StatusTooManyRequests, "rate limit")
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After = %q", r.header.Get("Retry-After"))
	}
	// Another key has its own bucket; open routes are not limited.
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "e2b_other").decode(t, http.StatusOK, nil)
	e.do("GET", "/health", nil).decode(t, http.StatusOK, nil)
	// A wrong key is refused as such, not counted.
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "e2b_wrong").wantError(t, http.StatusUnauthorized, "API key")
}

func TestEnsureAPIKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "api-key")
	k1, created, err := EnsureAPIKey(path)
	if err != nil || !created || !strings.HasPrefix(k1, "e2b_") || len(k1) != 44 {
		t.Fatalf("first call: %q %v %v", k1, created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi.Mode(), err)
	}
	k2, created, err := EnsureAPIKey(path)
	if err != nil || created || k2 != k1 {
		t.Errorf("second call: %q %v %v, want %q", k2, created, err, k1)
	}
	if HashAPIKey(k1+"\n") != HashAPIKey(k1) {
		t.Error("a trailing newline changes the key digest")
	}
	empty := filepath.Join(t.TempDir(), "api-key")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, _, err := EnsureAPIKey(empty); err == nil {
		t.Error("empty key file accepted")
	}
}
