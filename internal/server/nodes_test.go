package server_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"cube/internal/nodetest"
)

// The server is a node of the service: it lists itself, and while drained
// it refuses new sandboxes with what undoes it, also after a restart.
func TestServerIsANodeThatCanBeDrained(t *testing.T) {
	dataDir := tinyDataDir(t)
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr)
	code, body := d.do(t, "GET", "/nodes", nil, nil)
	var nodes []struct {
		ID, Status, Address string
		Self                bool
		SlotsTotal          int
		Metrics             struct{ CPUCount int }
	}
	if code != 200 || json.Unmarshal(body, &nodes) != nil || len(nodes) != 1 {
		t.Fatalf("GET /nodes: %d %s", code, body)
	}
	self := nodes[0]
	if !self.Self || self.Status != "ready" || self.Address != d.url || self.SlotsTotal != 16 || self.Metrics.CPUCount < 1 {
		t.Fatalf("the node: %+v", self)
	}
	if kept, _ := os.ReadFile(filepath.Join(dataDir, "node-id")); strings.TrimSpace(string(kept)) != self.ID {
		t.Fatalf("node name kept as %q, listed as %q", kept, self.ID)
	}

	if code, body := d.do(t, "POST", "/nodes/"+self.ID, map[string]string{"status": "draining"}, nil); code != 204 {
		t.Fatalf("drain: %d %s", code, body)
	}
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil)
	if code != 503 || !strings.Contains(string(body), "draining") || !strings.Contains(string(body), "uncordon") {
		t.Fatalf("create on a drained node: %d %s", code, body)
	}
	if code, body := d.do(t, "POST", "/nodes/"+self.ID, map[string]string{"status": "unhealthy"}, nil); code != 400 {
		t.Fatalf("setting unhealthy by hand: %d %s", code, body)
	}
	if code, _ := d.do(t, "DELETE", "/nodes/"+self.ID, nil, nil); code != 409 {
		t.Fatalf("removing the running node: %d", code)
	}

	// Still drained after a restart: the decision is the operator's.
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	d = startDaemon(t, dataDir, prefix, cidr.String(), addr)
	if code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil); code != 503 {
		t.Fatalf("create after a restart of a drained node: %d %s", code, body)
	}
	if code, body := d.do(t, "POST", "/nodes/"+self.ID, map[string]string{"status": "ready"}, nil); code != 204 {
		t.Fatalf("uncordon: %d %s", code, body)
	}
	if code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil); code != 201 {
		t.Fatalf("create after uncordon: %d %s", code, body)
	}
}
