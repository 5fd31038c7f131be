package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// nodeServer plays the nodes routes for nodes "a" (ready) and "b"
// (unhealthy); it answers 404 for others and 409 for removing "a".
type nodeServer struct {
	mu   sync.Mutex
	reqs []request
}

func (s *nodeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, request{r.Method, r.URL.Path, r.URL.RawQuery, strings.TrimSpace(string(body))})
	s.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	a := wire.Node{ID: "a", Status: "ready", SandboxCount: 3, SlotsUsed: 4, SlotsTotal: 64, Address: "http://10.0.0.1:3000",
		HeartbeatAt: time.Now(), Self: true, Metrics: wire.NodeMetrics{CPUPercent: 12, CPUCount: 2, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 8 << 30}}
	b := wire.Node{ID: "b", Status: "unhealthy", Address: "http://10.0.0.2:3000", HeartbeatAt: time.Now().Add(-time.Minute)}
	switch {
	case r.Method == "GET" && r.URL.Path == "/nodes":
		reply(200, []wire.Node{a, b})
	case r.Method == "GET" && r.URL.Path == "/nodes/a":
		reply(200, a)
	case r.Method == "POST" && (r.URL.Path == "/nodes/a" || r.URL.Path == "/nodes/b"):
		reply(204, nil)
	case r.Method == "DELETE" && r.URL.Path == "/nodes/a":
		reply(409, wire.Error{Code: 409, Message: "node a is running: stop it first, then remove it"})
	case r.Method == "DELETE" && r.URL.Path == "/nodes/b":
		reply(204, nil)
	default:
		reply(404, wire.Error{Code: 404, Message: "node not found"})
	}
}

func TestNodeCommands(t *testing.T) {
	f := &nodeServer{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")

	out, _, err := run(t, "node", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NODE_ID") || !strings.Contains(lines[1], "a") || !strings.Contains(lines[1], "4/64") ||
		!strings.Contains(lines[1], "12% of 2") || !strings.Contains(lines[2], "unhealthy") {
		t.Fatalf("node list:\n%s", out)
	}
	if out, _, err := run(t, "node", "info", "a"); err != nil || !strings.Contains(out, `"id": "a"`) {
		t.Fatalf("node info: %v\n%s", err, out)
	}
	for verb, status := range map[string]string{"drain": "draining", "isolate": "standby", "uncordon": "ready"} {
		f.reqs = nil
		out, _, err := run(t, "node", verb, "a", "b")
		if err != nil || out != "a: "+status+"\nb: "+status+"\n" {
			t.Fatalf("node %s: %v\n%s", verb, err, out)
		}
		if len(f.reqs) != 2 || f.reqs[0].String() != `POST /nodes/a {"status":"`+status+`"}` {
			t.Fatalf("node %s sent %v", verb, f.reqs)
		}
	}
	if _, _, err := run(t, "node", "drain", "nope"); err == nil || !strings.Contains(err.Error(), "drain nope") {
		t.Fatalf("drain of an unknown node: %v", err)
	}
	if out, _, err := run(t, "node", "rm", "b"); err != nil || out != "b: removed\n" {
		t.Fatalf("rm b: %v %q", err, out)
	}
	if _, _, err := run(t, "node", "rm", "a"); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("rm of a running node: %v", err)
	}
}
