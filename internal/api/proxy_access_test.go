package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/proxy"
)

// headerEcho stands in for a web server in a sandbox: it answers with the
// request headers it received, as JSON.
func headerEcho(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(up.Close)
	return strings.TrimPrefix(up.URL, "http://")
}

// A client that uses one base URL for the API and its sandboxes sends its
// API key with every request; the sandbox never receives it.
func TestProxyKeepsAPIKeysFromSandboxes(t *testing.T) {
	e := newEnv(t, func(c *envConfig) { c.Domain = "cube.test" })
	e.fake.upstream = headerEcho(t)
	sb := e.create("base", nil)
	routes := map[string][]string{
		"header-routed": {"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080"},
		"host-routed":   {"Host", "8080-" + sb.SandboxID + ".cube.test"},
	}
	for name, route := range routes {
		hdr := append([]string{"X-API-Key", testKey, "Authorization", "Bearer " + testKey}, route...)
		r := e.do("GET", "/", nil, hdr...)
		var seen http.Header
		r.decode(t, http.StatusOK, &seen)
		if v := seen.Values("X-Api-Key"); len(v) > 0 {
			t.Errorf("%s: sandbox received X-Api-Key %q", name, v)
		}
		if v := seen.Values("Authorization"); len(v) > 0 {
			t.Errorf("%s: sandbox received Authorization %q", name, v)
		}
	}
	// What is not the API key is the sandbox's business: Basic picks the
	// envd user, and an application may use its own tokens.
	r := e.do("GET", "/", nil, "X-API-Key", "app-key", "Authorization", "Basic dXNlcjo=",
		"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080")
	var seen http.Header
	r.decode(t, http.StatusOK, &seen)
	if seen.Get("X-Api-Key") != "app-key" || seen.Get("Authorization") != "Basic dXNlcjo=" {
		t.Errorf("sandbox saw X-Api-Key %q, Authorization %q; want the application's own values",
			seen.Get("X-Api-Key"), seen.Get("Authorization"))
	}
}

func (e *testEnv) state(id string) cube.SandboxState {
	e.t.Helper()
	var d wire.SandboxDetail
	e.do("GET", "/sandboxes/"+id, nil).decode(e.t, http.StatusOK, &d)
	return cube.SandboxState(d.State)
}

// A paused private sandbox is woken only by a request that carries its
// traffic token.
func TestProxiedRequestWithoutTokenLeavesSandboxPaused(t *testing.T) {
	e := newEnv(t)
	e.fake.upstream = headerEcho(t)
	sb := e.create("base", map[string]any{
		"autoPause": true, "autoResume": map[string]any{"enabled": true},
		"network": map[string]any{"allowPublicTraffic": false},
	})
	e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil).decode(t, http.StatusNoContent, nil)
	route := []string{"X-API-Key", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080"}

	for _, tok := range []string{"", "wrong"} {
		r := e.do("GET", "/", nil, append(route, "E2b-Traffic-Access-Token", tok)...)
		wantProxyError(t, r, http.StatusForbidden, sb.SandboxID, "e2b-traffic-access-token")
		if st := e.state(sb.SandboxID); st != cube.StatePaused {
			t.Fatalf("after a request with token %q the sandbox is %s, want paused", tok, st)
		}
	}
	r := e.do("GET", "/", nil, append(route, "E2b-Traffic-Access-Token", *sb.TrafficAccessToken)...)
	r.decode(t, http.StatusOK, nil)
	if st := e.state(sb.SandboxID); st != cube.StateRunning {
		t.Errorf("after a request with the token the sandbox is %s, want running", st)
	}
}

func wantProxyError(t *testing.T, r resp, status int, sandboxID, msg string) {
	t.Helper()
	var pe proxy.ErrorBody
	if err := json.Unmarshal(r.body, &pe); err != nil || r.status != status {
		t.Fatalf("status %d body %s, want %d in the proxy's error shape", r.status, r.body, status)
	}
	if pe.Code != status || pe.SandboxID != sandboxID || !strings.Contains(pe.Message, msg) {
		t.Errorf("error %+v, want code %d, sandboxId %q, message with %q", pe, status, sandboxID, msg)
	}
}

func TestProxyRemembersUnknownSandboxes(t *testing.T) {
	e := newEnv(t)
	for i := 0; i < 5; i++ {
		r := e.do("GET", "/", nil, "X-API-Key", "", "E2b-Sandbox-Id", "zzz", "E2b-Sandbox-Port", "49983")
		wantProxyError(t, r, http.StatusBadGateway, "zzz", proxy.MsgNotFound)
	}
	e.fake.mu.Lock()
	n := e.fake.resolves["zzz"]
	e.fake.mu.Unlock()
	if n != 1 {
		t.Errorf("5 requests for an unknown sandbox cost %d lookups, want 1", n)
	}
}

func TestProxyRateLimitPerAddress(t *testing.T) {
	// One token every 1000 s: the bucket does not refill during the test.
	e := newEnv(t, func(c *envConfig) { c.Proxy.RateLimit = 0.001; c.Proxy.RateBurst = 2 })
	e.fake.upstream = headerEcho(t)
	sb := e.create("base", nil)
	route := []string{"E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "8080"}
	e.do("GET", "/", nil, route...).decode(t, http.StatusOK, nil)
	e.do("GET", "/", nil, route...).decode(t, http.StatusOK, nil)
	r := e.do("GET", "/", nil, route...)
	wantProxyError(t, r, http.StatusTooManyRequests, sb.SandboxID, "too many requests")
	if n, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After = %q, want whole seconds", r.header.Get("Retry-After"))
	}
	// The API has its own limit, off here.
	e.do("GET", "/v2/sandboxes", nil).decode(t, http.StatusOK, nil)
}
