package api

import (
	"net/http"
	"strconv"
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
