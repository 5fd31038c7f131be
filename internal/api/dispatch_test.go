package api

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
)

// upstream stands in for a port inside a sandbox: /stream sends two lines,
// the second only after release is closed; /ws echoes WebSocket messages;
// anything else describes the request.
func upstream(t *testing.T, release chan struct{}) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "one\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "two\n")
	})
	mux.Handle("/ws", websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sandbox saw %s %s key=%q", r.Method, r.URL.Path, r.Header.Get("X-API-Key"))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestProxyOnSameListener(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, func(c *envConfig) { c.Domain = "cube.test" })
	e.fake.upstream = strings.TrimPrefix(upstream(t, release).URL, "http://")
	sb := e.create("base", nil)

	// Header routing needs no API key and reaches the sandbox, not the API.
	r := e.do("GET", "/health", nil, "X-API-Key", "", "E2b-Sandbox-Id", sb.SandboxID, "E2b-Sandbox-Port", "49983")
	if r.status != 200 || string(r.body) != `sandbox saw GET /health key=""` {
		t.Errorf("header-routed: %d %s", r.status, r.body)
	}
	// Host routing on the configured domain.
	r = e.do("GET", "/sandboxes", nil, "Host", "3000-"+sb.SandboxID+".cube.test")
	if r.status != 200 || !strings.HasPrefix(string(r.body), "sandbox saw GET /sandboxes") {
		t.Errorf("host-routed: %d %s", r.status, r.body)
	}
	// Another host on the domain is the API.
	r = e.do("GET", "/v2/sandboxes", nil, "Host", "api.cube.test")
	if r.status != 200 || !strings.Contains(string(r.body), sb.SandboxID) {
		t.Errorf("API by host: %d %s", r.status, r.body)
	}
	// Unknown sandbox: the proxy's 502, even without an API key.
	r = e.do("GET", "/", nil, "X-API-Key", "", "E2b-Sandbox-Id", "zzz", "E2b-Sandbox-Port", "49983")
	if r.status != 502 || !strings.Contains(string(r.body), `"sandboxId":"zzz"`) || !strings.Contains(string(r.body), `"code":502`) {
		t.Errorf("unknown sandbox: %d %s", r.status, r.body)
	}

	// Streams are flushed through the server's wrappers.
	req, _ := http.NewRequest("GET", e.srv.URL+"/stream", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	res, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	rd := bufio.NewReader(res.Body)
	if line, err := rd.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	if line, err := rd.ReadString('\n'); err != nil || line != "two\n" {
		t.Fatalf("second line %q, %v", line, err)
	}

	// WebSocket upgrades pass through the server's wrappers.
	cfg, _ := websocket.NewConfig("ws://"+strings.TrimPrefix(e.srv.URL, "http://")+"/ws", "http://localhost/")
	cfg.Header = http.Header{"E2b-Sandbox-Id": {sb.SandboxID}, "E2b-Sandbox-Port": {"8080"}}
	ws, err := websocket.DialConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.SetDeadline(time.Now().Add(time.Minute))
	if err := websocket.Message.Send(ws, "ping"); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := websocket.Message.Receive(ws, &got); err != nil || got != "ping" {
		t.Errorf("echo %q, %v", got, err)
	}

	// Proxied requests are counted under their own route label.
	m := e.do("GET", "/metrics", nil)
	if !strings.Contains(string(m.body), `cube_http_requests_total{code="200",route="proxy"}`) {
		t.Error("/metrics does not count proxied requests")
	}
}
