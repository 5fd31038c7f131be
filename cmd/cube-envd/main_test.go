package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/gen/process/processpbconnect"
)

// The test binary doubles as cube-envd, so the tests run the real main.
func TestMain(m *testing.M) {
	if os.Getenv("CUBE_ENVD_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"cube-envd"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// isolate, run as root, gives envd its own PID namespace (it is PID 1 there,
// as in a sandbox) and private copies of the account databases and /home,
// so creating the default user never touches the host. With
// CUBE_TEST_BARE_ETC=1 envd sees an /etc with no account databases at all,
// as in a minimal image.
const isolate = `set -e
mount --make-rprivate /
if [ "$CUBE_TEST_BARE_ETC" = 1 ]; then
	mkdir -p "$CUBE_TEST_ETC/bare"
	cp /etc/ld.so.cache "$CUBE_TEST_ETC/bare/" 2>/dev/null || true
	mount --bind "$CUBE_TEST_ETC/bare" /etc
fi
for f in passwd group shadow; do
	if [ -e /etc/$f ]; then cp /etc/$f "$CUBE_TEST_ETC/$f"; mount --bind "$CUBE_TEST_ETC/$f" /etc/$f; fi
done
mkdir -p "$CUBE_TEST_ETC/home"
mount --bind "$CUBE_TEST_ETC/home" /home
exec "$@"
`

type envdProc struct {
	cmd  *exec.Cmd
	pid  int // envd's pid as the host sees it
	url  string
	proc processpbconnect.ProcessClient
	done chan struct{} // closed when envd has exited, with err set
	err  error
}

func startEnvd(t *testing.T, asPID1 bool, extraEnv []string, startCmd ...string) *envdProc {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--port", strconv.Itoa(port), "--code-port", "0"}
	if len(startCmd) > 0 {
		args = append(append(args, "--"), startCmd...)
	}
	var cmd *exec.Cmd
	if asPID1 {
		cmd = exec.Command("unshare", append([]string{"--mount", "--pid", "--fork", "--mount-proc", "--", "/bin/sh", "-c", isolate, "sh", self}, args...)...)
	} else {
		cmd = exec.Command(self, args...)
	}
	cmd.Env = append(append(os.Environ(), "CUBE_ENVD_TEST_RUN_MAIN=1", "CUBE_TEST_ETC="+t.TempDir()), extraEnv...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &envdProc{cmd: cmd, pid: cmd.Process.Pid, url: fmt.Sprintf("http://127.0.0.1:%d", port), done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		cmd.Process.Kill()
		<-p.done
	})
	p.proc = processpbconnect.NewProcessClient(http.DefaultClient, p.url)
	waitUntil(t, "envd to answer /health", func() bool {
		select {
		case <-p.done:
			t.Fatalf("envd exited early: %v", p.err)
		default:
		}
		res, err := http.Get(p.url + "/health")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusNoContent
	})
	if asPID1 {
		p.pid = childOf(t, cmd.Process.Pid)
	}
	return p
}

func (p *envdProc) signal(sig syscall.Signal) { syscall.Kill(p.pid, sig) }

// childOf is the only child of pid (unshare's forked child, envd).
func childOf(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("unshare has children %q", b)
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *envdProc) run(t *testing.T, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	root := "/"
	stream, err := p.proc.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}, Cwd: &root}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out string
	for stream.Receive() {
		out += string(stream.Msg().GetEvent().GetData().GetStdout())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// start starts a process and returns once it printed ready.
func (p *envdProc) start(t *testing.T, name string, args ...string) (uint32, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	root := "/"
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: name, Args: args, Cwd: &root}})
	// As envd's own account: the test's temp directory is private to it.
	if u, err := user.Current(); err == nil {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username+":")))
	}
	stream, err := p.proc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	for out := ""; !strings.Contains(out, "ready"); {
		if !stream.Receive() {
			t.Fatalf("process ended before it was ready: %v", stream.Err())
		}
		out += string(stream.Msg().GetEvent().GetData().GetStdout())
	}
	return pid, func() { cancel(); stream.Close() }
}

func testLifecycle(t *testing.T, asPID1 bool) {
	marker := filepath.Join(t.TempDir(), "marker")
	p := startEnvd(t, asPID1, []string{"CUBE_TEMPLATE_ENV=from-template"},
		"/bin/sh", "-c", `echo "$CUBE_TEMPLATE_ENV" > `+marker+`; exit 4`)

	// The start command ran with the template's environment, exited, and
	// envd kept serving.
	waitUntil(t, "the start command's marker", func() bool {
		b, _ := os.ReadFile(marker)
		return string(b) == "from-template\n"
	})
	if out := p.run(t, `echo "$CUBE_TEMPLATE_ENV"`); out != "from-template\n" {
		t.Fatalf("process environment: %q", out)
	}

	// An orphan left by a command is reaped once it ends: no zombie stays.
	orphan := strings.TrimSpace(p.run(t, "sleep 0.3 & echo $!"))
	if _, err := strconv.Atoi(orphan); err != nil {
		t.Fatalf("orphan pid %q", orphan)
	}
	if asPID1 {
		waitUntil(t, "the orphan to be reaped", func() bool {
			return p.run(t, "test -e /proc/"+orphan+" && cat /proc/"+orphan+"/stat || echo gone") == "gone\n"
		})
	} else {
		n, _ := strconv.Atoi(orphan)
		waitUntil(t, "the orphan to be reaped", func() bool { return syscall.Kill(n, 0) == syscall.ESRCH })
	}

	// SIGTERM to envd reaches its children (the sleep dies of it well
	// before it would end) and envd then exits cleanly.
	termMarker := filepath.Join(filepath.Dir(marker), "term")
	_, detach := p.start(t, "/bin/sh", "-c", "trap 'echo got-term > "+termMarker+"; exit 0' TERM; sleep 600 & echo ready; wait")
	defer detach()
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Fatalf("envd exit after SIGTERM: %v", p.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("envd did not exit after SIGTERM")
	}
	if b, _ := os.ReadFile(termMarker); string(b) != "got-term\n" {
		t.Fatalf("the child did not receive SIGTERM (marker %q)", b)
	}
}

func TestLifecycleAsOrdinaryProcess(t *testing.T) {
	if os.Geteuid() == 0 {
		// As root, main would create the default user on the host; the
		// PID 1 test covers the same ground in a private namespace.
		t.Skip("covered by TestLifecycleAsPID1 when root")
	}
	testLifecycle(t, false)
}

func TestLifecycleAsPID1(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	testLifecycle(t, true)
}
