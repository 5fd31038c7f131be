package server_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// A server keeps its state in PostgreSQL with --store: sandboxes survive
// a kill -9 in the database, and a second server under the same node name
// is refused, since it would take the first one's sandboxes for leftovers.
func TestServerOnPostgres(t *testing.T) {
	dsn := testenv.Postgres(t)
	dataDir := t.TempDir()
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir, Store: dsn})
	n.TinyTemplate(t, "tiny")
	n.Close()
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	// One node on this host, which nothing reaches as a peer.
	cluster := []string{"--store", dsn, "--cluster-secret", clusterSecret, "--node-id", "pg-a", "--cluster-insecure-transport"}
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr, cluster...)

	code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "timeout": 300}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &sb)
	if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "POST", "/files?path=/tmp/kept.txt", []byte("in the sandbox")); code != 200 {
		t.Fatalf("write: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "state.db")); !os.IsNotExist(err) {
		t.Fatalf("state written to the data directory instead of PostgreSQL: %v", err)
	}

	// A second server on the same database under the same node name
	// exits at once, saying why; so does one without the cluster secret,
	// and one whose peers would pass it keys in clear.
	other := t.TempDir()
	os.Chmod(other, 0o700)
	for _, c := range []struct {
		args []string
		says string
	}{
		{cluster, "another cube-server uses this state database under the same node name"},
		{[]string{"--store", dsn, "--node-id", "pg-b", "--cluster-insecure-transport"}, "--cluster-secret"},
		{[]string{"--store", dsn, "--cluster-secret", clusterSecret, "--node-id", "pg-c"}, "--peer-listen"},
	} {
		cmd := exec.Command(testenv.Bin(t, "cube-server"), append([]string{"--data-dir", other, "--listen", "127.0.0.1:0", "--tls-listen", "",
			"--slot-prefix", prefix + "x", "--host-cidr", cidr.String()}, c.args...)...)
		cmd.Env = testenv.Environ("CUBE_API_KEY=" + apiKey)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.says) {
			t.Fatalf("a second server on the database with %q: %v\n%s", c.args, err, out)
		}
	}

	// Killed without a chance to clean up, restarted: the sandbox is
	// re-adopted from the database, files and all.
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()
	d = startDaemon(t, dataDir, prefix, cidr.String(), addr, cluster...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body = d.do(t, "GET", "/sandboxes/"+sb.SandboxID, nil, nil)
		if code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code != 200 || !strings.Contains(string(body), `"running"`) {
		t.Fatalf("after the restart: %d %s", code, body)
	}
	if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/files?path=/tmp/kept.txt", nil); code != 200 || out != "in the sandbox" {
		t.Fatalf("read after the restart: %d %q", code, out)
	}
}
