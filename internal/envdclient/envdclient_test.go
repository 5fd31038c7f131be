package envdclient

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/envd/protocol"
)

// fakeEnvd answers /init and /envs the way envd does, with knobs for the
// ways a real one (or a tampered one) departs from that.
type fakeEnvd struct {
	mu    sync.Mutex
	token string
	// failFirst answers that many /init attempts with 503.
	failFirst int
	// initStatus, when set, answers every /init with it, applying nothing.
	initStatus int
	// keepToken answers /init with 204 but keeps the old token too.
	keepToken bool
	// ignoreToken answers /init with 204 and applies nothing.
	ignoreToken bool

	inits      []protocol.Init
	initTokens []string
}

func (f *fakeEnvd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	tok := r.Header.Get(protocol.HeaderAccessToken)
	switch r.URL.Path {
	case "/init":
		var in protocol.Init
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.inits = append(f.inits, in)
		f.initTokens = append(f.initTokens, tok)
		switch {
		case len(f.inits) <= f.failFirst:
			http.Error(w, "not yet", http.StatusServiceUnavailable)
		case f.initStatus != 0:
			http.Error(w, "refused", f.initStatus)
		case f.token != "" && tok != f.token:
			http.Error(w, "bad token", http.StatusUnauthorized)
		default:
			if !f.keepToken && !f.ignoreToken && in.AccessToken != nil && *in.AccessToken != "" {
				f.token = *in.AccessToken
			}
			w.WriteHeader(http.StatusNoContent)
		}
	case "/envs":
		if f.token != "" && tok != f.token && !(f.keepToken && tok != "") {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		w.Write([]byte("{}"))
	default:
		http.NotFound(w, r)
	}
}

func start(t *testing.T, h http.Handler) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return New(srv.Client(), netip.MustParseAddrPort(u.Host))
}

func initFor(token string) protocol.Init {
	need := true
	return protocol.Init{
		EnvVars: map[string]string{"A": "1"}, AccessToken: &token,
		DefaultUser: "user", DefaultWorkdir: "/home/user", CodeContextsNeedToken: &need,
	}
}

func TestInitRetriesWithAFreshTimestamp(t *testing.T) {
	f := &fakeEnvd{token: "old", failFirst: 2}
	c := start(t, f)
	if err := c.Init(context.Background(), initFor("new"), "old"); err != nil {
		t.Fatal(err)
	}
	if f.token != "new" {
		t.Fatalf("token is %q after Init", f.token)
	}
	if len(f.inits) != 3 {
		t.Fatalf("%d /init attempts, want 3", len(f.inits))
	}
	var prev time.Time
	for i, in := range f.inits {
		if in.Timestamp == nil || !in.Timestamp.After(prev) {
			t.Fatalf("attempt %d stamped %v, not after %v", i, in.Timestamp, prev)
		}
		prev = *in.Timestamp
		if f.initTokens[i] != "old" {
			t.Fatalf("attempt %d authorised by %q, not the old token", i, f.initTokens[i])
		}
		if in.EnvVars["A"] != "1" || in.DefaultUser != "user" || in.DefaultWorkdir != "/home/user" ||
			in.CodeContextsNeedToken == nil || !*in.CodeContextsNeedToken {
			t.Fatalf("attempt %d sent %+v", i, in)
		}
	}
}

func TestInitRetriesUntilEnvdListens(t *testing.T) {
	// Take a port, close it, and only listen again after a while: what a
	// restored sandbox whose network is still coming up looks like.
	srv := httptest.NewUnstartedServer(&fakeEnvd{})
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	srv.Listener.Close()
	c := New(http.DefaultClient, addr)
	done := make(chan error, 1)
	go func() { done <- c.Init(context.Background(), initFor("new"), "") }()
	time.Sleep(100 * time.Millisecond)
	srv2 := &http.Server{Handler: &fakeEnvd{}}
	ln, err := listenRetry(addr.String())
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	go srv2.Serve(ln)
	defer srv2.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestInitRefusalIsNotRetried(t *testing.T) {
	f := &fakeEnvd{token: "old", initStatus: http.StatusConflict}
	c := start(t, f)
	err := c.Init(context.Background(), initFor("new"), "old")
	if err == nil || !strings.Contains(err.Error(), "refused its new access token") || !strings.Contains(err.Error(), "409") {
		t.Fatalf("Init = %v, want a refusal naming the 409", err)
	}
	if len(f.inits) != 1 {
		t.Fatalf("%d /init attempts after a refusal, want 1", len(f.inits))
	}
}

func TestInitRefusalAfterALostAnswerSucceeds(t *testing.T) {
	// The token is already the new one: an earlier /init applied it and
	// its answer was lost, so this one, sent with the old token, is refused.
	f := &fakeEnvd{token: "new"}
	c := start(t, f)
	if err := c.Init(context.Background(), initFor("new"), "old"); err != nil {
		t.Fatalf("Init = %v, want success: the new token is served", err)
	}
}

func TestInitFailsWhenTheOldTokenStillWorks(t *testing.T) {
	f := &fakeEnvd{token: "old", keepToken: true}
	c := start(t, f)
	err := c.Init(context.Background(), initFor("new"), "old")
	if err == nil || !strings.Contains(err.Error(), "still accepts the access token it had before") {
		t.Fatalf("Init = %v, want the old token reported as still accepted", err)
	}
}

func TestInitFailsWhenTheNewTokenIsRefused(t *testing.T) {
	f := &fakeEnvd{token: "old", ignoreToken: true}
	c := start(t, f)
	err := c.Init(context.Background(), initFor("new"), "old")
	if err == nil || !strings.Contains(err.Error(), "does not accept its new access token") {
		t.Fatalf("Init = %v, want the new token reported as refused", err)
	}
}

func TestInitWithoutAnOldToken(t *testing.T) {
	// Without a token before, the check is that requests without one are
	// now refused.
	if err := start(t, &fakeEnvd{}).Init(context.Background(), initFor("new"), ""); err != nil {
		t.Fatalf("Init = %v", err)
	}
	err := start(t, &fakeEnvd{ignoreToken: true}).Init(context.Background(), initFor("new"), "")
	if err == nil || !strings.Contains(err.Error(), "still accepts the access token it had before") {
		t.Fatalf("Init of an agent that stays open = %v", err)
	}
}

func TestInitGivesUp(t *testing.T) {
	f := &fakeEnvd{failFirst: 1 << 30}
	c := start(t, f)
	c.initTimeout = 200 * time.Millisecond
	err := c.Init(context.Background(), initFor("new"), "")
	if err == nil || !strings.Contains(err.Error(), "did not answer") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Init = %v, want it to give up naming the last answer", err)
	}
}

func TestInitStopsWithItsContext(t *testing.T) {
	f := &fakeEnvd{failFirst: 1 << 30}
	c := start(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := c.Init(ctx, initFor("new"), ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Init = %v, want the context's error", err)
	}
}

func TestMetrics(t *testing.T) {
	c := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" || r.Header.Get(protocol.HeaderAccessToken) != "tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(protocol.Metrics{MemCache: 1, DiskUsed: 2, DiskTotal: 3})
	}))
	m, err := c.Metrics(context.Background(), "tok")
	if err != nil || m.MemCache != 1 || m.DiskUsed != 2 || m.DiskTotal != 3 {
		t.Fatalf("Metrics = %+v, %v", m, err)
	}
	if _, err := c.Metrics(context.Background(), "other"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("Metrics with the wrong token = %v", err)
	}
}

// listenRetry listens on addr, retrying briefly while the port is still
// being released.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, err
}

// An agent answering /metrics without end (sandbox code can stand in for
// envd on its port) gets an error, not the server's memory.
func TestMetricsAnswerIsBounded(t *testing.T) {
	c := start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"memCache":"`))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range (1 << 30) / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.Metrics(context.Background(), "tok")
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("an endless /metrics answer was accepted")
	}
	if grew := int64(after.TotalAlloc - before.TotalAlloc); grew > 64<<20 {
		t.Fatalf("reading an endless /metrics answer allocated %d MB", grew>>20)
	}
}

// The node reaches envds without keeping connections, yet one Init (the
// /init and both token checks) goes over one connection, closed after it.
func TestInitUsesOneConnectionAndClosesIt(t *testing.T) {
	f := &fakeEnvd{token: "old"}
	srv := httptest.NewUnstartedServer(f)
	var mu sync.Mutex
	states := map[http.ConnState]int{}
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		mu.Lock()
		states[st]++
		mu.Unlock()
	}
	srv.Start()
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := New(NoKeepAlive, netip.MustParseAddrPort(u.Host))
	if err := c.Init(context.Background(), initFor("new"), "old"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		opened, closed := states[http.StateNew], states[http.StateClosed]
		mu.Unlock()
		if closed == opened || time.Now().After(deadline) {
			if opened != 1 || closed != 1 {
				t.Fatalf("Init opened %d connections and closed %d; want one, closed", opened, closed)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Other calls still open a connection each, kept by nobody.
	if err := c.Health(context.Background()); err == nil {
		t.Fatal("the fake has no health route, yet Health succeeded")
	}
	if _, err := c.Metrics(context.Background(), "new"); err == nil {
		t.Fatal("the fake has no metrics route, yet Metrics succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if states[http.StateNew] != 3 {
		t.Fatalf("%d connections after two more calls, want 3", states[http.StateNew])
	}
}
