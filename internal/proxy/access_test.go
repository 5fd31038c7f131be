package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/cube"
)

// headerEcho stands in for a web server in a sandbox: it answers with the
// request headers it received, as JSON.
func headerEcho(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(r.Header)
	}))
	t.Cleanup(up.Close)
	return up
}

func TestAPIKeysNeverReachSandbox(t *testing.T) {
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	up := headerEcho(t)
	isKey := func(v string) bool { return v == key }
	cases := []struct {
		name      string
		isKey     func(string) bool
		hdr       http.Header
		wantKey   []string // X-Api-Key the sandbox sees
		wantAuthz []string // Authorization the sandbox sees
	}{
		{"key header", isKey, http.Header{"X-Api-Key": {key}}, nil, nil},
		{"bearer key", isKey, http.Header{"Authorization": {"Bearer " + key}}, nil, nil},
		{"bearer key, odd case and spaces", isKey, http.Header{"Authorization": {"  bEaReR   " + key + " "}}, nil, nil},
		{"both, one base URL for API and sandbox", isKey, http.Header{"X-Api-Key": {key}, "Authorization": {"Bearer " + key}}, nil, nil},
		{"basic picks the envd user", isKey, http.Header{"Authorization": {"Basic dXNlcjo="}}, nil, []string{"Basic dXNlcjo="}},
		{"the app's own bearer token", isKey, http.Header{"Authorization": {"Bearer app-jwt"}}, nil, []string{"Bearer app-jwt"}},
		{"the app's own key header", isKey, http.Header{"X-Api-Key": {"app-key"}}, []string{"app-key"}, nil},
		{"key among app values", isKey, http.Header{"Authorization": {"Bearer " + key, "Basic dXNlcjo="}}, nil, []string{"Basic dXNlcjo="}},
		{"no matcher: every key header and bearer go", nil, http.Header{"X-Api-Key": {"app-key"}, "Authorization": {"Bearer app-jwt"}}, nil, nil},
		{"no matcher: basic stays", nil, http.Header{"Authorization": {"Basic dXNlcjo="}}, nil, []string{"Basic dXNlcjo="}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(New(Config{IsAPIKey: c.isKey}, resolver{"sb1": {Addr: hostPort(t, up.URL)}}))
			defer srv.Close()
			req, _ := http.NewRequest("GET", srv.URL+"/", nil)
			for k, vs := range c.hdr {
				req.Header[k] = vs
			}
			req.Header.Set(HeaderSandboxID, "sb1")
			req.Header.Set(HeaderSandboxPort, "8080")
			res, body := send(t, req)
			if res.StatusCode != 200 {
				t.Fatalf("status %d: %s", res.StatusCode, body)
			}
			var seen http.Header
			if err := json.Unmarshal([]byte(body), &seen); err != nil {
				t.Fatal(err)
			}
			if got := seen["X-Api-Key"]; fmt.Sprint(got) != fmt.Sprint(c.wantKey) {
				t.Errorf("sandbox saw X-Api-Key %q, want %q", got, c.wantKey)
			}
			if got := seen["Authorization"]; fmt.Sprint(got) != fmt.Sprint(c.wantAuthz) {
				t.Errorf("sandbox saw Authorization %q, want %q", got, c.wantAuthz)
			}
		})
	}
}

// pausable is a resolver with one sandbox that starts paused and may be
// resumed by traffic.
type pausable struct {
	addr, token, envdToken string

	mu      sync.Mutex
	paused  bool
	resumes int
}

func (p *pausable) Resolve(ctx context.Context, id string, port int) (Target, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id != "sb1" {
		return Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", id)
	}
	if p.paused {
		return Target{Paused: true, TrafficAccessToken: p.token, EnvdAccessToken: p.envdToken}, nil
	}
	return Target{Addr: p.addr, TrafficAccessToken: p.token}, nil
}

func (p *pausable) Resume(ctx context.Context, id string, port int) (Target, error) {
	p.mu.Lock()
	p.paused = false
	p.resumes++
	p.mu.Unlock()
	return p.Resolve(ctx, id, port)
}

func (p *pausable) state() (paused bool, resumes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused, p.resumes
}

func TestPausedSandboxResumesOnlyWithToken(t *testing.T) {
	up := headerEcho(t)
	sb := &pausable{addr: hostPort(t, up.URL), token: "secret", paused: true}
	px := newProxy(t, sb, "")
	get := func(token string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", px.URL+"/", nil)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "8080")
		if token != "" {
			req.Header.Set(HeaderTrafficToken, token)
		}
		return send(t, req)
	}
	for _, tok := range []string{"", "wrong"} {
		res, body := get(tok)
		wantProxyError(t, res, body, http.StatusForbidden, "sb1", "e2b-traffic-access-token")
		if paused, resumes := sb.state(); !paused || resumes != 0 {
			t.Fatalf("after a request with token %q: paused=%v, %d resumes; want still paused", tok, paused, resumes)
		}
	}
	if res, body := get("secret"); res.StatusCode != 200 {
		t.Fatalf("with the token: %d %s", res.StatusCode, body)
	}
	if paused, resumes := sb.state(); paused || resumes != 1 {
		t.Errorf("after the authorised request: paused=%v, %d resumes; want resumed once", paused, resumes)
	}
}

// envd guards its own port with the sandbox's access token, and the SDKs
// send no traffic token there: a private sandbox's commands and files work
// with the access token alone, while its other ports still want the
// traffic token, and a paused one is woken through envd's port only by a
// request that carries one of the two.
func TestPrivateSandboxEnvdPortTakesTheAccessToken(t *testing.T) {
	up := headerEcho(t)
	sb := &pausable{addr: hostPort(t, up.URL), token: "traffic", envdToken: "access", paused: true}
	px := newProxy(t, sb, "")
	get := func(port int, hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", px.URL+"/", nil)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, strconv.Itoa(port))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		return send(t, req)
	}
	for _, hdr := range [][]string{nil, {"X-Access-Token", "wrong"}, {HeaderTrafficToken, "wrong"}} {
		res, body := get(49983, hdr...)
		wantProxyError(t, res, body, http.StatusForbidden, "sb1", "access token")
		if paused, resumes := sb.state(); !paused || resumes != 0 {
			t.Fatalf("envd request with %v woke the paused sandbox", hdr)
		}
	}
	if res, body := get(49983, "X-Access-Token", "access"); res.StatusCode != 200 {
		t.Fatalf("envd request with the access token: %d %s", res.StatusCode, body)
	}
	if paused, resumes := sb.state(); paused || resumes != 1 {
		t.Fatalf("paused=%v, %d resumes; want resumed once", paused, resumes)
	}
	// Running: envd's port passes without the traffic token (envd checks
	// the access token itself); a user port does not.
	if res, body := get(49983); res.StatusCode != 200 {
		t.Fatalf("envd port of a running private sandbox without the traffic token: %d %s", res.StatusCode, body)
	}
	res, body := get(8080)
	wantProxyError(t, res, body, http.StatusForbidden, "sb1", "e2b-traffic-access-token")
	if res, body := get(8080, HeaderTrafficToken, "traffic"); res.StatusCode != 200 {
		t.Fatalf("user port with the traffic token: %d %s", res.StatusCode, body)
	}
}

func TestPublicPausedSandboxResumes(t *testing.T) {
	up := headerEcho(t)
	sb := &pausable{addr: hostPort(t, up.URL), paused: true}
	px := newProxy(t, sb, "")
	req, _ := http.NewRequest("GET", px.URL+"/", nil)
	req.Host = "8080-sb1.cube.test"
	if res, body := send(t, req); res.StatusCode != 200 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	if paused, resumes := sb.state(); paused || resumes != 1 {
		t.Errorf("paused=%v, %d resumes; want resumed once", paused, resumes)
	}
}

// counting counts lookups; every sandbox is unknown except "paused",
// which is paused without auto-resume.
type counting struct {
	mu      sync.Mutex
	lookups map[string]int
}

func (c *counting) Resolve(ctx context.Context, id string, port int) (Target, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups[id]++
	if id == "paused" {
		return Target{}, fmt.Errorf("sandbox %q is paused", id)
	}
	return Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", id)
}

func (c *counting) Resume(ctx context.Context, id string, port int) (Target, error) {
	return Target{}, fmt.Errorf("sandbox %q cannot resume", id)
}

func (c *counting) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookups[id]
}

func TestUnknownSandboxesRemembered(t *testing.T) {
	res := &counting{lookups: map[string]int{}}
	p := New(Config{}, res)
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	p.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := httptest.NewServer(p)
	defer srv.Close()
	get := func(id string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.Header.Set(HeaderSandboxID, id)
		req.Header.Set(HeaderSandboxPort, "49983")
		res, body := send(t, req)
		want := MsgNotFound
		if id == "paused" {
			want = "is paused"
		}
		wantProxyError(t, res, body, http.StatusBadGateway, id, want)
	}
	for i := 0; i < 3; i++ {
		get("ghost")
		get("paused")
	}
	if n := res.count("ghost"); n != 1 {
		t.Errorf("unknown sandbox looked up %d times for 3 requests, want once", n)
	}
	if n := res.count("paused"); n != 3 {
		t.Errorf("existing sandbox looked up %d times for 3 requests, want every time", n)
	}
	mu.Lock()
	now = now.Add(unknownTTL)
	mu.Unlock()
	get("ghost")
	if n := res.count("ghost"); n != 2 {
		t.Errorf("after the TTL: %d lookups, want 2", n)
	}
}

// The memory of unknown IDs stays bounded however many a client invents.
func TestUnknownSandboxesBounded(t *testing.T) {
	var u unknownIDs
	now := time.Unix(1000, 0)
	for i := 0; i < 3*unknownSize; i++ {
		u.add("id"+strconv.Itoa(i), cube.Errorf(cube.NotFound, "sandbox %q not found", ""), now)
		if len(u.ids) > unknownSize {
			t.Fatalf("%d IDs held, want at most %d", len(u.ids), unknownSize)
		}
	}
	last := "id" + strconv.Itoa(3*unknownSize-1)
	if u.get(last, now) == nil {
		t.Error("the newest unknown ID was not remembered")
	}
}

func TestRateLimitPerSource(t *testing.T) {
	up := headerEcho(t)
	// One token every 1000 s: the bucket does not refill during the test.
	p := New(Config{RateLimit: 0.001, RateBurst: 2}, resolver{"sb1": {Addr: hostPort(t, up.URL)}})
	get := func(remote string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = remote
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "8080")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		return rec
	}
	for _, remote := range []string{"192.0.2.1:1000", "192.0.2.1:2000"} {
		if rec := get(remote); rec.Code != 200 {
			t.Fatalf("%s within the burst: %d %s", remote, rec.Code, rec.Body)
		}
	}
	rec := get("192.0.2.1:3000")
	res := rec.Result()
	wantProxyError(t, res, rec.Body.String(), http.StatusTooManyRequests, "sb1", "too many requests")
	if n, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After = %q, want whole seconds", res.Header.Get("Retry-After"))
	}
	if rec := get("192.0.2.2:1000"); rec.Code != 200 {
		t.Errorf("another address shares the bucket: %d", rec.Code)
	}
	// One IPv6 host holds a /64: its addresses share a bucket.
	get("[2001:db8::1]:1")
	get("[2001:db8::2]:1")
	if rec := get("[2001:db8::3]:1"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("third request from the same /64: %d, want 429", rec.Code)
	}
	if rec := get("[2001:db8:0:1::1]:1"); rec.Code != 200 {
		t.Errorf("another /64: %d, want 200", rec.Code)
	}
}

func TestNoRateLimitByDefault(t *testing.T) {
	up := headerEcho(t)
	p := New(Config{}, resolver{"sb1": {Addr: hostPort(t, up.URL)}})
	for i := 0; i < 200; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "8080")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("request %d: %d %s", i+1, rec.Code, strings.TrimSpace(rec.Body.String()))
		}
	}
}
