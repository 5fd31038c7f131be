package forward

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"cube/internal/cluster"
	"cube/internal/envd/protocol"
	"cube/internal/store"
)

// sandboxes is the shared store's sandboxes as a token source: every
// read is a full one.
type sandboxes struct {
	mu    sync.Mutex
	all   []store.SandboxToken
	reads int
	fail  error
}

func (s *sandboxes) SandboxTokens(context.Context, store.Cursor) (store.TokenChanges, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if s.fail != nil {
		return store.TokenChanges{}, s.fail
	}
	return store.TokenChanges{Full: true, Changed: append([]store.SandboxToken(nil), s.all...)}, nil
}

func (s *sandboxes) add(id, node, token string) {
	s.mu.Lock()
	s.all = append(s.all, store.SandboxToken{ID: id, Node: node, EnvdToken: token, State: store.Running})
	s.mu.Unlock()
}

// unasked is a cluster of node-a and node-b (at addr) in which nothing
// may be asked of the peers but node-b's address.
type unasked struct {
	t    *testing.T
	addr string
}

func (unasked) Self() string { return "node-a" }
func (p unasked) Peer(_ context.Context, id string) (string, bool, error) {
	if id != "node-b" {
		p.t.Errorf("asked for node %s", id)
	}
	return p.addr, true, nil
}
func (p unasked) Place(context.Context, cluster.Want) (string, func(), error) {
	p.t.Error("placed")
	return "", nil, fmt.Errorf("no")
}
func (p unasked) AlivePeers() []string {
	p.t.Error("the peers that heartbeat were listed: a signed URL is looked for among them")
	return nil
}

// signedURLFor is a download URL of path signed with a sandbox's token.
func signedURLFor(path, token string, expires int64) string {
	q := url.Values{"path": {path}, "username": {"user"}, "signature_expiration": {strconv.FormatInt(expires, 10)},
		"signature": {protocol.SignFileURL(path, "read", "user", token, expires)}}
	return "/files?" + q.Encode()
}

// A signed URL made by a sandbox of another node is passed straight to
// that node, found in this node's index of the cluster's tokens: no peer
// is asked whose sandbox made it.
func TestSignedURLResolvedWithoutAskingPeers(t *testing.T) {
	var mu sync.Mutex
	var atB []string
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == SignedFilesPath {
			t.Errorf("node-b was asked whether it made a URL: %s", r.URL)
		}
		if r.Header.Get(Header) == "" {
			t.Errorf("an unsigned request reached node-b: %s", r.URL)
		}
		mu.Lock()
		atB = append(atB, r.URL.RequestURI())
		mu.Unlock()
		io.WriteString(w, "node-b")
	}))
	defer b.Close()
	src := &sandboxes{}
	src.add("sbx-b", "node-b", "token-of-b")
	src.add("sbx-a", "node-a", "token-of-a")
	for i := range 100 {
		src.add(fmt.Sprintf("other-%d", i), "node-b", fmt.Sprintf("token-%d", i))
	}
	h := New(Config{Peers: unasked{t, b.URL}, Secret: []byte("0123456789abcdef0123"),
		Local:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "local") }),
		SandboxOf: func(*http.Request) (string, bool) { return "", false },
		Tokens:    cluster.NewTokens(src),
	})
	get := func(uri string) string {
		t.Helper()
		r := httptest.NewRequest("GET", uri, nil)
		r.RemoteAddr = "192.0.2.9:4000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			t.Fatalf("%s: %d %s", uri, w.Code, w.Body)
		}
		return w.Body.String()
	}
	exp := time.Now().Add(time.Minute).Unix()
	ofB := signedURLFor("/tmp/x", "token-of-b", exp)
	if got := get(ofB); got != "node-b" || len(atB) != 1 || atB[0] != ofB {
		t.Fatalf("node-b's sandbox's URL: answered by %q; node-b got %v", got, atB)
	}
	// Again: the sandbox the URL was found made by is checked first.
	if got := get(ofB); got != "node-b" {
		t.Fatalf("node-b's sandbox's URL again: answered by %q", got)
	}
	// This node's own sandbox (its proxy routes what runs here) and a
	// URL nobody made are answered here.
	if got := get(signedURLFor("/tmp/x", "token-of-a", exp)); got != "local" {
		t.Fatalf("this node's sandbox's URL: answered by %q", got)
	}
	if got := get(signedURLFor("/tmp/x", "nobody's", exp)); got != "local" {
		t.Fatalf("a URL no sandbox made: answered by %q", got)
	}
	if got := get("/files?path=/tmp/x&signature=v1_forged"); got != "local" {
		t.Fatalf("a malformed signature: answered by %q", got)
	}
	// A sandbox made since the index was read is found: a lookup that
	// finds nothing reads the changes once more.
	time.Sleep(cluster.TokensMinRefresh)
	src.add("sbx-new", "node-b", "token-of-new")
	if got := get(signedURLFor("/tmp/y", "token-of-new", exp)); got != "node-b" {
		t.Fatalf("a new sandbox's URL: answered by %q", got)
	}
	// Ten lookups of URLs nobody made read the store at most once more:
	// a forged URL does not cost a query each.
	src.mu.Lock()
	before := src.reads
	src.mu.Unlock()
	for i := range 10 {
		get(signedURLFor("/tmp/x", fmt.Sprintf("forged-%d", i), exp))
	}
	if src.reads > before+1 {
		t.Fatalf("ten forged URLs read the store %d times", src.reads-before)
	}
}

// While the store cannot be read the index answers from what it read,
// and a node that has read nothing yet says the database is out of
// reach.
func TestSignedURLWhileTheStoreIsOut(t *testing.T) {
	src := &sandboxes{fail: fmt.Errorf("connection refused")}
	h := New(Config{Peers: peersOfOne{}, Secret: []byte("0123456789abcdef0123"),
		Local:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "local") }),
		SandboxOf: func(*http.Request) (string, bool) { return "", false },
		Tokens:    cluster.NewTokens(src),
	})
	r := httptest.NewRequest("GET", signedURLFor("/x", "t", 0), nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("with nothing read and the store out: %d %s", w.Code, w.Body)
	}
}

// The check of a token is envd's signature, for any path, user and
// expiry, and nothing else.
func TestSignedURLCheckIsEnvdsSignature(t *testing.T) {
	for _, c := range []struct {
		method, op string
		expires    int64
	}{{"GET", "read", 0}, {"HEAD", "read", 1_800_000_000}, {"POST", "write", 1_800_000_000}, {"PUT", "write", 0}} {
		q := url.Values{"path": {"/home/user/a b.txt"}, "username": {"root"},
			"signature": {protocol.SignFileURL("/home/user/a b.txt", c.op, "root", "tok", c.expires)}}
		if c.expires != 0 {
			q.Set("signature_expiration", strconv.FormatInt(c.expires, 10))
		}
		u, ok := parseSignedURL(httptest.NewRequest(c.method, "/files?"+q.Encode(), nil))
		if !ok || !u.made("tok") || u.made("tok2") || u.made("") {
			t.Errorf("%s with expiry %d: parsed %v, made by its token %v", c.method, c.expires, ok, ok && u.made("tok"))
		}
	}
	if _, ok := parseSignedURL(httptest.NewRequest("DELETE", signedURLFor("/x", "t", 0), nil)); ok {
		t.Error("a DELETE is no signed URL")
	}
}

// BenchmarkSignedURLLookup measures one lookup of a signed URL among
// 20,000 sandboxes: a URL nobody made (every token tried: the most a
// lookup costs), one made by a sandbox the index has not remembered
// (on average half of them tried), and one it has.
func BenchmarkSignedURLLookup(b *testing.B) {
	const n = 20000
	src := &sandboxes{}
	for i := range n {
		src.add(fmt.Sprintf("sbx-%05d", i), fmt.Sprintf("node-%02d", i%100), fmt.Sprintf("envd-token-%032d", i))
	}
	idx := cluster.NewTokens(src)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour).Unix()
	lookup := func(b *testing.B, token string, want bool) {
		r := httptest.NewRequest("GET", signedURLFor("/home/user/data/file.csv", token, exp), nil)
		for b.Loop() {
			u, _ := parseSignedURL(r)
			if _, _, ok, err := idx.Find(ctx, "", u.made); ok != want || err != nil {
				b.Fatal(ok, err)
			}
		}
	}
	b.Run("nobody's", func(b *testing.B) { lookup(b, "forged", false) })
	b.Run("a sandbox's", func(b *testing.B) {
		i := 0
		r := func() *http.Request {
			i = (i + 7919) % n
			return httptest.NewRequest("GET", signedURLFor("/home/user/data/file.csv", fmt.Sprintf("envd-token-%032d", i), exp), nil)
		}
		for b.Loop() {
			b.StopTimer()
			req := r()
			b.StartTimer()
			u, _ := parseSignedURL(req)
			if _, _, ok, _ := idx.Find(ctx, "", u.made); !ok {
				b.Fatal("not found")
			}
		}
	})
	b.Run("remembered", func(b *testing.B) {
		r := httptest.NewRequest("GET", signedURLFor("/home/user/data/file.csv", "envd-token-00000000000000000000000000012345", exp), nil)
		for b.Loop() {
			u, _ := parseSignedURL(r)
			if _, _, ok, _ := idx.Find(ctx, u.key(), u.made); !ok {
				b.Fatal("not found")
			}
		}
	})
}
