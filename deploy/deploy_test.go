// Package deploy holds what puts a Cube node on a host: the systemd unit
// that scripts/install.sh (make install) installs. Its test stages an
// install and runs the server from it.
package deploy

import (
	"net"
	"net/http"
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

// install stages `make install` under a temporary DESTDIR.
func install(t *testing.T, dest string) {
	t.Helper()
	for _, b := range []string{"cube-server", "cubemastercli", "cube-bench", "cube-envd", "cube-console", "runsc"} {
		testenv.Bin(t, b) // fails with what to do when make build has not run
	}
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "install.sh"))
	cmd.Env = testenv.Environ("DESTDIR="+dest, "PREFIX=/usr/local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
}

func TestInstallStagesANodeThatRuns(t *testing.T) {
	testenv.RequireRoot(t)
	dest := t.TempDir()
	install(t, dest)
	lib := filepath.Join(dest, "usr/local/lib/cube")

	for _, b := range []string{"cube-server", "cubemastercli", "cube-bench"} {
		if target, err := os.Readlink(filepath.Join(dest, "usr/local/bin", b)); err != nil || target != "/usr/local/lib/cube/"+b {
			t.Errorf("%s on the PATH links to %q, %v", b, target, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dest, "var/lib/cube")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("data directory: %v %v, want 0700", st, err)
	}
	if st, err := os.Stat(filepath.Join(dest, "etc/cube/cube-server.env")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("settings file: %v %v, want 0600 (it may hold the API key)", st, err)
	}
	unit, err := os.ReadFile(filepath.Join(dest, "etc/systemd/system/cube-server.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ExecStart=/usr/local/lib/cube/cube-server --data-dir /var/lib/cube $CUBE_FLAGS", "KillMode=process", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	// systemd accepts the unit, pointed at the staged binaries.
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		staged := filepath.Join(t.TempDir(), "cube-server.service")
		os.WriteFile(staged, []byte(strings.ReplaceAll(string(unit), "/usr/local/lib/cube", lib)), 0o644)
		if out, err := exec.Command(analyze, "verify", staged).CombinedOutput(); err != nil {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}

	// A second install keeps the operator's settings.
	os.WriteFile(filepath.Join(dest, "etc/cube/cube-server.env"), []byte("CUBE_FLAGS=--debug\n"), 0o600)
	install(t, dest)
	if got, _ := os.ReadFile(filepath.Join(dest, "etc/cube/cube-server.env")); string(got) != "CUBE_FLAGS=--debug\n" {
		t.Errorf("reinstall replaced the settings: %q", got)
	}

	// The installed server finds runsc and cube-envd beside itself.
	data := filepath.Join(t.TempDir(), "data")
	os.Mkdir(data, 0o700)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	prefix, cidr := nodetest.SlotRange()
	srv := exec.Command(filepath.Join(lib, "cube-server"), "--data-dir", data, "--listen", addr, "--tls-listen", "",
		"--slot-prefix", prefix, "--host-cidr", cidr.String(), "--slots", "4")
	srv.Env = testenv.Environ("CUBE_API_KEY=e2b_0123456789abcdef0123456789abcdef01234567")
	var logs strings.Builder
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(syscall.SIGTERM)
		srv.Wait()
	}()
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if i == 300 {
			t.Fatalf("the installed cube-server does not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
