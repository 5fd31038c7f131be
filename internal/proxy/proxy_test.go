package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"cube/internal/cube"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		name     string
		host     string
		hdr      map[string]string
		domain   string
		wantOK   bool
		wantErr  bool
		wantID   string
		wantPort int
	}{
		{"headers", "127.0.0.1:3000", map[string]string{HeaderSandboxID: "abc123", HeaderSandboxPort: "49983"}, "", true, false, "abc123", 49983},
		{"headers win over host", "8080-other.cube.test", map[string]string{HeaderSandboxID: "abc", HeaderSandboxPort: "49999"}, "cube.test", true, false, "abc", 49999},
		{"id header only", "127.0.0.1:3000", map[string]string{HeaderSandboxID: "abc"}, "", true, true, "abc", 0},
		{"bad port header", "127.0.0.1:3000", map[string]string{HeaderSandboxID: "abc", HeaderSandboxPort: "70000"}, "", true, true, "abc", 0},
		{"signed port header", "127.0.0.1:3000", map[string]string{HeaderSandboxID: "abc", HeaderSandboxPort: "+80"}, "", true, true, "abc", 0},
		{"bad id header", "127.0.0.1:3000", map[string]string{HeaderSandboxID: "ABC", HeaderSandboxPort: "80"}, "", true, true, "ABC", 0},
		{"host with domain", "3000-abc123.cube.test", nil, "cube.test", true, false, "abc123", 3000},
		{"host names ignore case", "3000-ABC123.Cube.Test:3000", nil, "cube.test", true, false, "abc123", 3000},
		{"host with client suffix", "3000-abc123-client.cube.test:80", nil, "cube.test", true, false, "abc123", 3000},
		{"host, other domain", "3000-abc123.other.test", nil, "cube.test", false, false, "", 0},
		{"host, any domain", "3000-abc123.other.test", nil, "", true, false, "abc123", 3000},
		{"host, port 0", "0-abc123.cube.test", nil, "", true, true, "abc123", 0},
		{"api by ip", "127.0.0.1:3000", nil, "", false, false, "", 0},
		{"api by name", "localhost:3000", nil, "", false, false, "", 0},
		{"api on domain", "api.cube.test", nil, "cube.test", false, false, "", 0},
		{"bare domain", "cube.test", nil, "cube.test", false, false, "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/x", nil)
			r.Host = c.host
			for k, v := range c.hdr {
				r.Header.Set(k, v)
			}
			rt, ok, err := Match(r, c.domain)
			if ok != c.wantOK || (err != nil) != c.wantErr {
				t.Fatalf("Match = %+v, %v, %v; want ok=%v err=%v", rt, ok, err, c.wantOK, c.wantErr)
			}
			if ok && c.wantID != "" && rt.SandboxID != c.wantID {
				t.Errorf("id %q, want %q", rt.SandboxID, c.wantID)
			}
			if ok && !c.wantErr && rt.Port != c.wantPort {
				t.Errorf("port %d, want %d", rt.Port, c.wantPort)
			}
		})
	}
}

// resolver knows running sandboxes only.
type resolver map[string]Target

func (r resolver) Resolve(ctx context.Context, id string, port int) (Target, error) {
	t, ok := r[id]
	if !ok {
		return Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", id)
	}
	return t, nil
}

func (r resolver) Resume(ctx context.Context, id string, port int) (Target, error) {
	return Target{}, fmt.Errorf("sandbox %q is not paused", id)
}

func hostPort(t *testing.T, url string) string {
	t.Helper()
	return strings.TrimPrefix(url, "http://")
}

func newProxy(t *testing.T, r Resolver, domain string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(New(Config{Domain: domain}, r))
	t.Cleanup(srv.Close)
	return srv
}

func send(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func wantProxyError(t *testing.T, res *http.Response, body string, status int, id, msg string) {
	t.Helper()
	if res.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", res.StatusCode, status, body)
	}
	var pe ErrorBody
	if err := json.Unmarshal([]byte(body), &pe); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if pe.Code != status || pe.SandboxID != id || !strings.Contains(pe.Message, msg) {
		t.Errorf("error %+v, want code %d sandbox %q message with %q", pe, status, id, msg)
	}
}

func TestForwardsRequest(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Up", "yes")
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "%s %s host=%s id=%q port=%q token=%q xff=%t body=%s",
			r.Method, r.URL.RequestURI(), r.Host, r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderSandboxPort),
			r.Header.Get(HeaderTrafficToken), r.Header.Get("X-Forwarded-For") != "", body)
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL)}}, "cube.test")

	req, _ := http.NewRequest("POST", px.URL+"/files?path=/a%20b", strings.NewReader("payload"))
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "49983")
	res, body := send(t, req)
	if res.StatusCode != http.StatusTeapot || res.Header.Get("X-Up") != "yes" {
		t.Fatalf("status %d headers %v", res.StatusCode, res.Header)
	}
	want := fmt.Sprintf(`POST /files?path=/a%%20b host=%s id="" port="" token="" xff=true body=payload`, hostPort(t, px.URL))
	if body != want {
		t.Errorf("upstream saw\n %s\nwant\n %s", body, want)
	}

	req, _ = http.NewRequest("GET", px.URL+"/x", nil)
	req.Host = "8080-sb1.cube.test"
	_, body = send(t, req)
	if !strings.HasPrefix(body, "GET /x host=8080-sb1.cube.test ") {
		t.Errorf("host-routed request: upstream saw %s", body)
	}
}

func TestMaskRequestHost(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host)
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL), MaskRequestHost: "localhost:${PORT}"}}, "")
	req, _ := http.NewRequest("GET", px.URL+"/", nil)
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "8888")
	if _, body := send(t, req); body != "localhost:8888" {
		t.Errorf("upstream Host %q, want localhost:8888", body)
	}
}

func TestTrafficToken(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "token=%q", r.Header.Get(HeaderTrafficToken))
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL), TrafficAccessToken: "secret"}}, "")
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", px.URL+"/", nil)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "80")
		if tok != "" {
			req.Header.Set("e2b-traffic-access-token", tok)
		}
		res, body := send(t, req)
		wantProxyError(t, res, body, http.StatusForbidden, "sb1", "e2b-traffic-access-token")
	}
	req, _ := http.NewRequest("GET", px.URL+"/", nil)
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "80")
	req.Header.Set("e2b-traffic-access-token", "secret")
	res, body := send(t, req)
	if res.StatusCode != 200 || body != `token=""` {
		t.Errorf("with token: %d %s (the token must not reach the sandbox)", res.StatusCode, body)
	}
}

func TestUnreachableSandboxes(t *testing.T) {
	// A port nothing listens on: bind, note the address, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	px := newProxy(t, resolver{"dead": {Addr: dead}}, "")

	cases := []struct {
		id, port, wantID, msg string
	}{
		{"nope", "49983", "nope", "The sandbox was not found"},
		{"dead", "49983", "dead", "The sandbox is running but port is not open"},
		{"dead", "", "dead", "both"},
		{"Bad!", "80", "Bad!", "invalid sandbox id"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", px.URL+"/health", nil)
		req.Header.Set(HeaderSandboxID, c.id)
		if c.port != "" {
			req.Header.Set(HeaderSandboxPort, c.port)
		}
		res, body := send(t, req)
		wantProxyError(t, res, body, http.StatusBadGateway, c.wantID, c.msg)
	}
}

// TestStreamsArriveInPieces checks that each piece of a long response
// reaches the client while the sandbox is still writing: the upstream
// sends its second piece only after the client has read the first.
func TestStreamsArriveInPieces(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		io.WriteString(w, `{"type":"stdout","text":"one"}`+"\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `{"type":"end_of_execution"}`+"\n")
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL)}}, "")

	req, _ := http.NewRequest("POST", px.URL+"/execute", strings.NewReader(`{"code":"1"}`))
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "49999")
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	first, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(first, "one") {
		t.Fatalf("first piece %q, %v", first, err)
	}
	close(release)
	second, err := rd.ReadString('\n')
	if err != nil || !strings.Contains(second, "end_of_execution") {
		t.Fatalf("second piece %q, %v", second, err)
	}
	if _, err := rd.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the stream: %v, want EOF", err)
	}
}

func TestWebSocketEcho(t *testing.T) {
	up := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) {
		io.Copy(ws, ws)
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL)}}, "")

	cfg, err := websocket.NewConfig("ws://"+hostPort(t, px.URL)+"/ws", "http://localhost/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Header = http.Header{HeaderSandboxID: {"sb1"}, HeaderSandboxPort: {"8080"}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(time.Minute))
	for _, msg := range []string{"hello", "second message"} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		if err := websocket.Message.Receive(ws, &got); err != nil {
			t.Fatal(err)
		}
		if got != msg {
			t.Errorf("echo %q, want %q", got, msg)
		}
	}
}

// FuzzMatch checks that routing never panics and that whatever it accepts
// is a valid sandbox id and port.
func FuzzMatch(f *testing.F) {
	for _, seed := range [][3]string{
		{"3000-abc.cube.test", "", ""}, {"", "abc", "49983"}, {"0-a.b", "", ""}, {"1-.x", "", ""},
		{"99999999999999999999-a.b", "", ""}, {"x", "ABC", "-1"}, {"8080-abc-def.cube.test:1", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, host, id, port string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = host
		if id != "" {
			r.Header.Set(HeaderSandboxID, id)
		}
		if port != "" {
			r.Header.Set(HeaderSandboxPort, port)
		}
		for _, domain := range []string{"", "cube.test"} {
			rt, ok, err := Match(r, domain)
			if ok && err == nil {
				if rt.Port < 1 || rt.Port > 65535 || rt.SandboxID == "" || strings.Trim(rt.SandboxID, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
					t.Fatalf("host %q id %q port %q → accepted %+v", host, id, port, rt)
				}
			}
		}
	})
}

// A sandbox may answer before it has read the whole request; the rest of
// the request must still reach it, and the answer must not be cut.
func TestAnswerBeforeRequestBodyEnds(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NewResponseController(w).EnableFullDuplex()
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		w.Write(b)
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL)}}, "")

	pr, pw := io.Pipe()
	go func() {
		io.WriteString(pw, "first half, ")
		time.Sleep(200 * time.Millisecond) // the answer's headers are out by now
		io.WriteString(pw, "second half")
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", px.URL+"/echo", pr)
	req.ContentLength = int64(len("first half, second half"))
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "8000")
	res, body := send(t, req)
	if res.StatusCode != 200 || body != "first half, second half" {
		t.Fatalf("status %d, body %q", res.StatusCode, body)
	}
}

// A sandbox that answers a POST without reading its body and closes the
// connection (Python's http.server answers 501 so) must not leave the
// proxy reading the client's connection from two goroutines: the next
// request on that keep-alive connection is served as usual.
func TestAnswerWithoutReadingBodyKeepsConnectionUsable(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusNotImplemented)
			io.WriteString(w, "Unsupported method")
			return
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	px := newProxy(t, resolver{"sb1": {Addr: hostPort(t, up.URL)}}, "")
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 20 {
		// A chunked body whose end comes a moment after its first bytes:
		// the sandbox has answered by then.
		pr, pw := io.Pipe()
		go func() {
			io.WriteString(pw, "x=1")
			time.Sleep(20 * time.Millisecond)
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", px.URL+"/p", pr)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "8000")
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("POST %d: %v", i, err)
		}
		io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusNotImplemented {
			t.Fatalf("POST %d: status %d", i, res.StatusCode)
		}
		req, _ = http.NewRequest("GET", px.URL+"/g", nil)
		req.Header.Set(HeaderSandboxID, "sb1")
		req.Header.Set(HeaderSandboxPort, "8000")
		res, err = client.Do(req)
		if err != nil {
			t.Fatalf("GET after POST %d: %v", i, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "ok" {
			t.Fatalf("GET after POST %d: %d %q", i, res.StatusCode, b)
		}
	}
}

// When a sandbox's container stops, the node tells the proxy (Forget);
// a stream in flight from it (a command's output) ends then, instead of
// waiting on a connection whose other end is gone without a reset.
func TestForgetEndsStreamsInFlight(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "first line\n")
		w.(http.Flusher).Flush()
		close(started)
		<-release // a sandbox that says nothing more
	}))
	defer up.Close()
	defer close(release)
	p := New(Config{}, resolver{"sb1": {Addr: hostPort(t, up.URL), Upstream: "sb1-c1"}})
	px := httptest.NewServer(p)
	defer px.Close()

	req, _ := http.NewRequest("GET", px.URL+"/stream", nil)
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "8000")
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-started
	done := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(res.Body)
		done <- err
	}()
	select {
	case <-done:
		t.Fatal("the stream ended before the sandbox was gone")
	case <-time.After(100 * time.Millisecond):
	}
	p.Forget("sb1-c1")
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream from a forgotten sandbox is still open")
	}
	// Another sandbox's streams are not touched: the map is empty again.
	p.pool.mu.Lock()
	left := len(p.pool.active)
	p.pool.mu.Unlock()
	if left != 0 {
		t.Fatalf("requests still tracked after the stream ended: %d upstreams", left)
	}
}

// A port the sandbox serves over HTTPS (network.httpsPorts) is reached
// over TLS, its self-signed certificate accepted; the client still talks
// plain HTTP (or the proxy's own HTTPS) to the proxy.
func TestHTTPSPortIsReachedOverTLS(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "tls=%v host=%s", r.TLS != nil, r.Host)
	}))
	defer up.Close()
	addr := strings.TrimPrefix(up.URL, "https://")
	px := newProxy(t, resolver{"sb1": {Addr: addr, HTTPS: true}, "sb2": {Addr: addr}}, "")
	req, _ := http.NewRequest("GET", px.URL+"/", nil)
	req.Header.Set(HeaderSandboxID, "sb1")
	req.Header.Set(HeaderSandboxPort, "8443")
	if res, body := send(t, req); res.StatusCode != 200 || !strings.HasPrefix(body, "tls=true") {
		t.Fatalf("https port: %d %q", res.StatusCode, body)
	}
	// The same server as a plain port does not answer HTTP: proof the
	// proxy spoke TLS above because the port was listed.
	req, _ = http.NewRequest("GET", px.URL+"/", nil)
	req.Header.Set(HeaderSandboxID, "sb2")
	req.Header.Set(HeaderSandboxPort, "8443")
	if res, body := send(t, req); res.StatusCode == 200 && strings.HasPrefix(body, "tls=") {
		t.Fatalf("plain port reached a TLS server: %q", body)
	}
}
