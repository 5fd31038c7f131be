package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/store"
	"cube/internal/testenv"
)

const apiKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// daemon is a cube-server process under test.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	logs *bytes.Buffer
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startDaemon(t *testing.T, dataDir, prefix, cidr, addr string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"--slot-prefix", prefix, "--host-cidr", cidr, "--slots", "16", "--pause-write-delay", "2s"}, extra...)
	return runDaemon(t, dataDir, addr, args, nil, "cube-server")
}

// runDaemon starts cube-server on dataDir and addr with args and env
// (beyond the test key) and waits until it answers /health. The server is
// stopped, its sandboxes removed, when the test ends; name heads its logs
// if the test failed.
func runDaemon(t *testing.T, dataDir, addr string, args, env []string, name string) *daemon {
	t.Helper()
	return runDaemonIn(t, "", dataDir, addr, args, env, name)
}

// runDaemonIn is runDaemon in the named network namespace ("" for this
// process's).
func runDaemonIn(t *testing.T, netns, dataDir, addr string, args, env []string, name string) *daemon {
	t.Helper()
	// t.TempDir makes 0755 folders; cube-server runs only on private ones.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	// The HTTPS listener on a free port: tests run servers side by side.
	if !slices.Contains(args, "--tls-listen") {
		args = append([]string{"--tls-listen", "127.0.0.1:0"}, args...)
	}
	cmd := exec.Command(testenv.Bin(t, "cube-server"), append([]string{"--data-dir", dataDir, "--listen", addr}, args...)...)
	if netns != "" {
		// nsenter execs the server: cmd's process is the server's.
		cmd = exec.Command("nsenter", append([]string{"--net=/run/netns/" + netns, "--"}, cmd.Args...)...)
	}
	cmd.Env = testenv.Environ(append([]string{"CUBE_API_KEY=" + apiKey}, env...)...)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, url: "http://" + addr, logs: &logs}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			d.stop(t)
		}
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, logs.String())
		}
	})
	for i := 0; i < 300; i++ {
		if resp, err := http.Get(d.url + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return d
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("cube-server did not answer /health:\n%s", logs.String())
	return nil
}

// tinyDataDir is a data dir holding a ready template "tiny" (see
// nodetest.TinyTemplate), built by an in-process node that is gone again.
func tinyDataDir(t *testing.T) string {
	t.Helper()
	dataDir := t.TempDir()
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir})
	n.TinyTemplate(t, "tiny")
	n.Close()
	return dataDir
}

// startTiny runs a server on a fresh tinyDataDir.
func startTiny(t *testing.T) (*daemon, string) {
	t.Helper()
	dataDir := tinyDataDir(t)
	prefix, cidr := nodetest.SlotRange()
	return startDaemon(t, dataDir, prefix, cidr.String(), freeAddr(t)), dataDir
}

// stop removes every sandbox the server holds, then stops it with
// SIGTERM, so a test leaves no sandbox, slot or mount behind.
func (d *daemon) stop(t *testing.T) {
	if code, body := d.do(t, "GET", "/v2/sandboxes?state=running,paused", nil, nil); code == 200 {
		var list []struct{ SandboxID string }
		json.Unmarshal(body, &list)
		for _, s := range list {
			d.do(t, "DELETE", "/sandboxes/"+s.SandboxID, nil, nil)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
}

func (d *daemon) do(t *testing.T, method, path string, body any, hdr map[string]string) (int, []byte) {
	t.Helper()
	resp, out := d.request(t, method, path, body, hdr)
	return resp.StatusCode, out
}

// request is do, answering the whole response (its body already read).
func (d *daemon) request(t *testing.T, method, path string, body any, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	if b, ok := body.([]byte); ok {
		r = bytes.NewReader(b)
	} else if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, d.url+path, r)
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := nodetest.NoKeepAlive.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp, out
}

// envd talks to a sandbox's envd through the server's proxy.
func (d *daemon) envd(t *testing.T, sandboxID, token, method, path string, body []byte) (int, string) {
	t.Helper()
	code, out := d.do(t, method, path, body, map[string]string{
		"E2b-Sandbox-Id": sandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": token,
		"Content-Type": "application/octet-stream", "Authorization": "Basic cm9vdDo=",
	})
	return code, string(out)
}

func netObjects(t *testing.T, prefix string) []string {
	var found []string
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			found = append(found, "netns "+e.Name())
		}
	}
	links, _ := net.Interfaces()
	for _, l := range links {
		if strings.HasPrefix(l.Name, prefix+"-") {
			found = append(found, "link "+l.Name)
		}
	}
	return found
}

func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir) {
			out = append(out, f[4])
		}
	}
	return out
}

func runscProcesses(root string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(root)) {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// TestCrashRecovery starts a server with three sandboxes, kills it with
// SIGKILL, plants the leftovers a crash mid-operation leaves, and checks
// that the next start re-adopts the sandboxes and removes the rest; then
// that a clean shutdown with no sandboxes leaves nothing on the host.
func TestCrashRecovery(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := tinyDataDir(t)
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr)

	type sb struct{ ID, Token string }
	var sbs []sb
	for i := 0; i < 3; i++ {
		code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "timeout": 600}, nil)
		if code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
		var s struct {
			SandboxID       string `json:"sandboxID"`
			EnvdAccessToken string `json:"envdAccessToken"`
		}
		json.Unmarshal(body, &s)
		sbs = append(sbs, sb{s.SandboxID, s.EnvdAccessToken})
		if code, out := d.envd(t, s.SandboxID, s.EnvdAccessToken, "POST", "/files?path=/tmp/mark", []byte(s.SandboxID)); code != 200 {
			t.Fatalf("upload: %d %s", code, out)
		}
	}

	// One sandbox paused long enough to be written to disk, one paused a
	// moment before the crash and so still frozen in memory.
	if code, body := d.do(t, "POST", "/sandboxes/"+sbs[1].ID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	waitFile(t, filepath.Join(dataDir, "sandboxes", sbs[1].ID, "pause", "checkpoint.img"))
	if code, body := d.do(t, "POST", "/sandboxes/"+sbs[2].ID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}

	// Crash.
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()

	// Leftovers of operations the crash interrupted.
	st, err := store.Open(filepath.Join(dataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	st.Sandboxes().Put(context.Background(), &store.Sandbox{ID: "halfmade", State: store.Creating, Slot: -1})
	st.Close()
	half := filepath.Join(dataDir, "templates", "tiny", "checkpoint.tmp")
	os.MkdirAll(half, 0o700)
	os.WriteFile(filepath.Join(half, "pages.img"), []byte("partial"), 0o600)
	orphanDir := filepath.Join(dataDir, "sandboxes", "orphan")
	os.MkdirAll(orphanDir, 0o700)
	// A runsc create killed after it took its container's lock and made
	// the sandbox's control socket, before it saved the state.
	unsaved := []string{
		filepath.Join(dataDir, "runsc", "cutshort_sandbox:cutshort.lock"),
		filepath.Join(dataDir, "runsc", "runsc-cutshort.sock"),
	}
	for _, p := range unsaved {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stray := prefix + "-s99"
	if out, err := exec.Command("ip", "netns", "add", stray).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", stray).Run()

	d = startDaemon(t, dataDir, prefix, cidr.String(), addr)
	code, body := d.do(t, "GET", "/v2/sandboxes", nil, nil)
	if code != 200 {
		t.Fatalf("list: %d %s", code, body)
	}
	for i, s := range sbs {
		if !bytes.Contains(body, []byte(s.ID)) {
			t.Errorf("sandbox %s not re-adopted: %s", s.ID, body)
		}
		if i > 0 {
			// Paused across the crash: still paused, then resumed by connect.
			if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 200 || !bytes.Contains(out, []byte(`"state":"paused"`)) {
				t.Errorf("sandbox %s after restart: %d %s", s.ID, code, out)
			}
			if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}, nil); code != 201 {
				t.Errorf("connect %s: %d %s", s.ID, code, out)
			}
		}
		if code, out := d.envd(t, s.ID, s.Token, "GET", "/files?path=/tmp/mark", nil); code != 200 || out != s.ID {
			t.Errorf("sandbox %s after restart: %d %q", s.ID, code, out)
		}
	}
	if bytes.Contains(body, []byte("halfmade")) {
		t.Errorf("half-created sandbox listed: %s", body)
	}
	for _, p := range append([]string{half, orphanDir, "/run/netns/" + stray}, unsaved...) {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived reconciliation", p)
		}
	}
	// A second server on the same data dir refuses to start.
	second := exec.Command(testenv.Bin(t, "cube-server"), "--data-dir", dataDir, "--listen", freeAddr(t))
	second.Env = testenv.Environ()
	if out, err := second.CombinedOutput(); err == nil || !strings.Contains(string(out), "another cube-server") {
		t.Fatalf("second server on the same data dir: %v\n%s", err, out)
	}

	// A new sandbox still works beside the re-adopted ones.
	if code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny"}, nil); code != 201 {
		t.Fatalf("create after restart: %d %s", code, body)
	} else {
		var s struct{ SandboxID string }
		json.Unmarshal(body, &s)
		sbs = append(sbs, sb{ID: s.SandboxID})
	}

	for _, s := range sbs {
		if code, body := d.do(t, "DELETE", "/sandboxes/"+s.ID, nil, nil); code != 204 {
			t.Fatalf("delete %s: %d %s", s.ID, code, body)
		}
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("cube-server exit after SIGTERM: %v\n%s", err, d.logs)
	}
	if left := netObjects(t, prefix); len(left) > 0 {
		t.Errorf("network objects left: %v", left)
	}
	if left := mountsUnder(dataDir); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}
	if left := runscProcesses(filepath.Join(dataDir, "runsc")); len(left) > 0 {
		t.Errorf("runsc processes left: %v", left)
	}
	// runsc's root keeps only the mount point of the gofers' empty network
	// namespace: no state, lock or socket of a container.
	if left, _ := filepath.Glob(filepath.Join(dataDir, "runsc", "*")); len(left) != 1 || filepath.Base(left[0]) != "null-netns" {
		t.Errorf("runsc files left: %v", left)
	}
	st, _ = store.Open(filepath.Join(dataDir, "state.db"))
	defer st.Close()
	if recs, _ := st.Sandboxes().List(context.Background()); len(recs) != 0 {
		t.Errorf("store still holds %d sandboxes", len(recs))
	}
}

// TestStartupErrors checks the one-line errors for a machine cube-server
// cannot run on.
func TestStartupErrors(t *testing.T) {
	bin := testenv.Bin(t, "cube-server")
	run := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = testenv.Environ()
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if os.Geteuid() == 0 {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, nil, 0o600)
		code, out := run("--data-dir", filepath.Join(file, "sub"), "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(out, "--data-dir") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Fatalf("unwritable data dir: %d %q", code, out)
		}
		open := t.TempDir()
		os.Chmod(open, 0o755)
		code, out = run("--data-dir", open, "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(out, "chmod 700") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Fatalf("world-readable data dir: %d %q", code, out)
		}
		if entries, _ := os.ReadDir(open); len(entries) != 0 {
			t.Fatalf("refused start left files: %v", entries)
		}
		dir := t.TempDir()
		os.Chmod(dir, 0o700)
		code, out = run("--data-dir", dir, "--runsc", "/nonexistent/runsc", "--listen", "127.0.0.1:0")
		if code == 0 || !strings.Contains(out, "make build") {
			t.Fatalf("missing runsc: %d %q", code, out)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Fatalf("failed start left files: %v", entries)
		}
		return
	}
	code, out := run("--data-dir", t.TempDir())
	if code == 0 || !strings.Contains(out, "needs root") {
		t.Fatalf("non-root: %d %q", code, out)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	for i := 0; i < 300; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}
