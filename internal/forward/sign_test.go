package forward

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/cluster"
	"cube/internal/cube"
)

// nodeB is the cluster as node-a sees it: node-b at addr, where creates
// go.
type nodeB struct{ addr string }

func (nodeB) Self() string { return "node-a" }
func (p nodeB) Peer(context.Context, string) (string, bool, error) {
	return p.addr, true, nil
}
func (nodeB) Place(context.Context, cluster.Want) (string, func(), error) {
	return "node-b", func() {}, nil
}
func (nodeB) AlivePeers() []string { return []string{"node-b"} }

// onlyB is the cluster as node-b sees it.
type onlyB struct{}

func (onlyB) Self() string                                       { return "node-b" }
func (onlyB) Peer(context.Context, string) (string, bool, error) { return "", false, nil }
func (onlyB) Place(context.Context, cluster.Want) (string, func(), error) {
	return "node-b", func() {}, nil
}
func (onlyB) AlivePeers() []string { return nil }

// passed is a request as it went from node-a to node-b, trailers and all.
type passed struct {
	method, uri, host string
	header, trailer   http.Header
	body              []byte
}

// served is what node-b's API got of a request.
type served struct {
	path, moveFrom string
	body           []byte
	readErr        error
	cubeHeaders    []string
}

// wire is node-a forwarding to node-b through a man in the middle, which
// records each request it passes on and may change it first.
type wire struct {
	t *testing.T
	a *Handler
	// client is node-a's client of node-b, through the middle.
	client *Client
	// own is node-b's own service, as far as typed calls reach it.
	own    *ownSandboxes
	b      *httptest.Server
	mu     sync.Mutex
	passed []passed
	served []served
	// change alters a request in the middle.
	change func(*passed)
}

func newWire(t *testing.T) *wire {
	secret := []byte("0123456789abcdef0123")
	wr := &wire{t: t, own: &ownSandboxes{}}
	internal := http.NewServeMux()
	ServeSandboxes(internal, wr.own, 1<<20)
	b := New(Config{Peers: onlyB{}, Secret: secret, SandboxOf: func(*http.Request) (string, bool) { return "", false },
		Internal: internal,
		Local: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := served{path: r.URL.Path, moveFrom: r.Header.Get(MoveHeader)}
			s.body, s.readErr = io.ReadAll(r.Body)
			for name := range r.Header {
				if strings.HasPrefix(name, "X-Cube-") {
					s.cubeHeaders = append(s.cubeHeaders, name)
				}
			}
			wr.mu.Lock()
			wr.served = append(wr.served, s)
			wr.mu.Unlock()
			if s.readErr != nil {
				http.Error(w, s.readErr.Error(), http.StatusBadRequest)
			}
		})})
	wr.b = httptest.NewServer(b)
	t.Cleanup(wr.b.Close)
	mitm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := passed{method: r.Method, uri: r.URL.RequestURI(), host: r.Host, header: r.Header.Clone()}
		p.body, _ = io.ReadAll(r.Body)
		p.trailer = r.Trailer.Clone()
		wr.mu.Lock()
		wr.passed = append(wr.passed, p)
		change := wr.change
		wr.mu.Unlock()
		if change != nil {
			change(&p)
		}
		resp := wr.send(p)
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		resp.Body.Close()
	}))
	t.Cleanup(mitm.Close)
	wr.a = New(Config{Peers: nodeB{mitm.URL}, Secret: secret, Local: http.NotFoundHandler(),
		SandboxOf:   func(*http.Request) (string, bool) { return "", false },
		Runs:        func(string) bool { return false },
		SandboxNode: func(context.Context, string) (string, error) { return "node-b", nil },
		VolumeNode:  func(context.Context, string) (string, error) { return "node-b", nil },
		Authorized:  func(*http.Request) bool { return true },
	})
	wr.client = NewClient(ClientConfig{Peers: nodeB{mitm.URL}, Secret: secret})
	return wr
}

// ownSandboxes is a node's own service as far as its peers' typed calls
// on sandboxes reach it: it records them.
type ownSandboxes struct {
	Local
	mu    sync.Mutex
	calls []string
}

func (o *ownSandboxes) record(call string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, call)
}

func (o *ownSandboxes) made() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls...)
}

func (o *ownSandboxes) SetTimeout(_ context.Context, id string, d time.Duration, extendOnly bool) error {
	o.record(fmt.Sprintf("timeout %s %s %v", id, d, extendOnly))
	return nil
}

func (o *ownSandboxes) ConnectSandbox(_ context.Context, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	o.record(fmt.Sprintf("connect %s %s from %q", id, req.Timeout, req.MoveFrom))
	return &cube.Sandbox{ID: id, Node: "node-b", State: cube.StateRunning}, true, nil
}

// send passes p to node-b as it is, a body with trailers chunked.
func (wr *wire) send(p passed) *http.Response {
	var body io.Reader = bytes.NewReader(p.body)
	if len(p.trailer) > 0 {
		body = io.MultiReader(body) // of unknown length: chunked
	}
	r, err := http.NewRequest(p.method, wr.b.URL+p.uri, body)
	if err != nil {
		wr.t.Fatal(err)
	}
	r.Host = p.host
	r.Header = p.header.Clone()
	r.Header.Del("Content-Length")
	r.Trailer = p.trailer.Clone()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		wr.t.Fatal(err)
	}
	return resp
}

// do sends a request to node-a and answers its status.
func (wr *wire) do(method, path string, body io.Reader) int {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(method, path, body)
	r.Header.Set("X-API-Key", "e2b_key")
	wr.a.ServeHTTP(w, r)
	return w.Code
}

func (wr *wire) last() (passed, []served) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.passed[len(wr.passed)-1], append([]served(nil), wr.served...)
}

// A request node-a forwards (about a volume node-b holds) reaches node-b
// once and as it was sent: a replay of it, a changed body, or an
// X-Cube-Move-From header added on the way is refused before node-b's
// API sees it. So is a typed call node-a makes on node-b (a timeout, a
// connect that moves a sandbox): replayed, with its arguments changed
// (the node to take a sandbox over from among them), or with an
// X-Cube-Move-From header added, it is refused before node-b's service
// sees it.
func TestForwardedRequestsAreSealed(t *testing.T) {
	wr := newWire(t)
	if code := wr.do("PATCH", "/volumecontent/v1/path?path=/a", strings.NewReader(`{"mode":420}`)); code != 200 {
		t.Fatalf("a forwarded request: %d", code)
	}
	p, got := wr.last()
	if len(got) != 1 || string(got[0].body) != `{"mode":420}` || got[0].moveFrom != "" || len(got[0].cubeHeaders) != 0 {
		t.Fatalf("node-b served %+v", got)
	}

	t.Run("replayed", func(t *testing.T) {
		resp := wr.send(p)
		resp.Body.Close()
		if _, got := wr.last(); resp.StatusCode != 403 || len(got) != 1 {
			t.Fatalf("the same signed request again: %d, node-b served %d", resp.StatusCode, len(got))
		}
	})
	for name, change := range map[string]func(*passed){
		"body changed": func(p *passed) { p.body = []byte(`{"mode":511}`) },
		"X-Cube-Move-From added": func(p *passed) {
			p.header.Set(MoveHeader, "node-c")
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, before := wr.last()
			wr.change = change
			defer func() { wr.change = nil }()
			code := wr.do("PATCH", "/volumecontent/v1/path?path=/a", strings.NewReader(`{"mode":420}`))
			if _, after := wr.last(); code != 403 || len(after) != len(before) {
				t.Fatalf("%d, node-b served %+v", code, after[len(before):])
			}
		})
	}

	ctx := context.Background()
	t.Run("typed calls", func(t *testing.T) {
		if err := wr.client.SetTimeout(ctx, "node-b", "abc", time.Minute, false); err != nil {
			t.Fatalf("a timeout on node-b: %v", err)
		}
		if got := wr.own.made(); len(got) != 1 || got[0] != "timeout abc 1m0s false" {
			t.Fatalf("node-b's service was asked %q", got)
		}
		p, _ := wr.last()
		resp := wr.send(p)
		resp.Body.Close()
		if got := wr.own.made(); resp.StatusCode != 403 || len(got) != 1 {
			t.Fatalf("the same signed call again: %d, node-b's service asked %q", resp.StatusCode, got)
		}
		for name, change := range map[string]func(*passed){
			"arguments changed": func(p *passed) {
				p.body = bytes.Replace(p.body, []byte("60000000000"), []byte("86400000000000"), 1)
			},
			"X-Cube-Move-From added": func(p *passed) { p.header.Set(MoveHeader, "node-c") },
		} {
			wr.change = change
			err := wr.client.SetTimeout(ctx, "node-b", "abc", time.Minute, false)
			wr.change = nil
			if got := wr.own.made(); cube.KindOf(err) != cube.Forbidden || len(got) != 1 {
				t.Fatalf("a timeout with %s on the way: %v, node-b's service asked %q", name, err, got)
			}
		}
	})
	t.Run("a move changed", func(t *testing.T) {
		req := cube.ConnectRequest{Timeout: time.Minute, MoveFrom: "node-c"}
		if sb, resumed, err := wr.client.ConnectSandbox(ctx, "node-b", "moving", req); err != nil || sb.ID != "moving" || !resumed {
			t.Fatalf("a resume moved to node-b: %+v %v %v", sb, resumed, err)
		}
		before := wr.own.made()
		if last := before[len(before)-1]; last != `connect moving 1m0s from "node-c"` {
			t.Fatalf("node-b was asked %s, want the sandbox taken from node-c", last)
		}
		wr.change = func(p *passed) { p.body = bytes.Replace(p.body, []byte("node-c"), []byte("node-d"), 1) }
		defer func() { wr.change = nil }()
		_, _, err := wr.client.ConnectSandbox(ctx, "node-b", "moving", req)
		if after := wr.own.made(); cube.KindOf(err) != cube.Forbidden || len(after) != len(before) {
			t.Fatalf("a move changed on the way: %v, node-b's service asked %q", err, after[len(before):])
		}
	})
}

// A body too large to be read before it is sent (an upload) streams from
// node to node; one changed on the way ends in an error where node-b's
// API reads it, instead of its end.
func TestStreamedBodiesAreSealed(t *testing.T) {
	wr := newWire(t)
	upload := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	if code := wr.do("PUT", "/volumecontent/v1/file?path=/big", bytes.NewReader(upload)); code != 200 {
		t.Fatalf("a forwarded upload: %d", code)
	}
	if _, got := wr.last(); !bytes.Equal(got[0].body, upload) || got[0].readErr != nil || len(got[0].cubeHeaders) != 0 {
		t.Fatalf("node-b read %d bytes of the upload (%v), with %q", len(got[0].body), got[0].readErr, got[0].cubeHeaders)
	}
	wr.change = func(p *passed) { p.body[len(p.body)/2] ^= 1 }
	code := wr.do("PUT", "/volumecontent/v1/file?path=/big", bytes.NewReader(upload))
	if _, got := wr.last(); len(got) != 2 || got[1].readErr == nil || code == 200 {
		t.Fatalf("a changed upload: %d, node-b read it with %v", code, got[len(got)-1].readErr)
	}
}

// Nonces are kept while their signatures are good and no longer; a full
// record refuses rather than forgets.
func TestNonces(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newNonces(3000)
	nonce := func(i int) string { return fmt.Sprintf("%032x", i) }
	for i := range 3000 {
		if err := s.first(nonce(i), now.Add(time.Minute), now); err != nil {
			t.Fatalf("nonce %d: %v", i, err)
		}
	}
	if err := s.first(nonce(1), now.Add(time.Minute), now); cube.KindOf(err) != cube.Forbidden {
		t.Fatalf("a nonce again: %v", err)
	}
	if err := s.first(nonce(5000), now.Add(time.Minute), now); cube.KindOf(err) != cube.Unavailable {
		t.Fatalf("a nonce more than the record holds: %v", err)
	}
	later := now.Add(time.Minute + time.Second)
	if err := s.first(nonce(1), later.Add(time.Minute), later); err != nil {
		t.Fatalf("a nonce whose signature expired, again: %v", err)
	}
	if s.n != 1 || len(s.until) != 1 {
		t.Fatalf("%d nonces kept after the others expired", s.n)
	}
}

// Between nodes over TLS (HTTP/2), a streamed body's digest follows it
// the same way.
func TestStreamedBodiesOverHTTP2(t *testing.T) {
	secret := []byte("0123456789abcdef0123")
	var proto int
	var got []byte
	var readErr error
	b := httptest.NewUnstartedServer(New(Config{Peers: onlyB{}, Secret: secret, SandboxOf: func(*http.Request) (string, bool) { return "", false },
		Local: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			proto = r.ProtoMajor
			got, readErr = io.ReadAll(r.Body)
		})}))
	b.EnableHTTP2 = true
	b.StartTLS()
	defer b.Close()
	a := New(Config{Peers: nodeB{b.URL}, Secret: secret, Local: http.NotFoundHandler(),
		SandboxOf:  func(*http.Request) (string, bool) { return "", false },
		Runs:       func(string) bool { return false },
		VolumeNode: func(context.Context, string) (string, error) { return "node-b", nil },
		Authorized: func(*http.Request) bool { return true },
		PeerTLS:    b.Client().Transport.(*http.Transport).TLSClientConfig,
	})
	upload := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	w := httptest.NewRecorder()
	a.ServeHTTP(w, httptest.NewRequest("PUT", "/volumecontent/v1/file?path=/big", bytes.NewReader(upload)))
	if w.Code != 200 || proto != 2 || readErr != nil || !bytes.Equal(got, upload) {
		t.Fatalf("%d over HTTP/%d: node-b read %d bytes (%v)", w.Code, proto, len(got), readErr)
	}
}

// A node that talks to its peers over mutual TLS sends nothing, and so no
// client's key or token, to a peer whose address is plain HTTP.
func TestNoPlainHTTPFromATLSNode(t *testing.T) {
	arrived := 0
	b := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { arrived++ }))
	defer b.Close()
	a := New(Config{Peers: nodeB{b.URL}, Secret: []byte("0123456789abcdef0123"), Local: http.NotFoundHandler(),
		SandboxOf:    func(*http.Request) (string, bool) { return "abc", true },
		Runs:         func(string) bool { return false },
		SandboxNode:  func(context.Context, string) (string, error) { return "node-b", nil },
		PeersOverTLS: true,
	})
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "http://49983-abc.cube.localhost/files?path=/x", nil)
	r.Header.Set("X-Access-Token", "the-sandbox-token")
	a.ServeHTTP(w, r)
	if w.Code != 503 || arrived != 0 {
		t.Fatalf("sandbox traffic for a peer at %s: %d, %d requests arrived there", b.URL, w.Code, arrived)
	}
	if resp, err := a.Get(context.Background(), "node-b", InternalPrefix+"templates/t/files"); err == nil || arrived != 0 {
		if err == nil {
			resp.Body.Close()
		}
		t.Fatalf("a call on a peer at %s: %v, %d requests arrived there", b.URL, err, arrived)
	}
}
