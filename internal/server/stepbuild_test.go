package server_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/oci"
	"cube/internal/testenv"
)

// busyboxRootfs writes a small tree with a shell into dir: Debian's
// static busybox and the applets Cube's build steps use.
func busyboxRootfs(t *testing.T, dir string) {
	t.Helper()
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("builds by steps need Debian's busybox-static (make deps): %v", err)
	}
	for _, d := range []string{"bin", "etc", "tmp", "home", "root", "proc", "dev", "sys"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.Chmod(filepath.Join(dir, "tmp"), 0o1777)
	os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755)
	for _, a := range []string{"sh", "tar", "cp", "mkdir", "chown", "chmod", "id", "grep", "cut", "rm", "dirname", "adduser", "addgroup", "cat", "echo", "sleep", "test", "["} {
		os.Symlink("busybox", filepath.Join(dir, "bin", a))
	}
	os.WriteFile(filepath.Join(dir, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc", "group"), []byte("root:x:0:\n"), 0o644)
}

// TestTemplateBuildByStepsThroughCLI builds a template from the SDK's
// template JSON with `cubemastercli tpl build` against a running server
// (a local image archive, a RUN, a COPY the CLI uploads, a start and a
// ready command), reads its log back with `tpl logs`, starts a sandbox
// from it, and commits that sandbox as a template with `tpl commit`.
func TestTemplateBuildByStepsThroughCLI(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir, work := t.TempDir(), t.TempDir()
	prefix, cidr := nodetest.SlotRange()
	d := startDaemon(t, dataDir, prefix, cidr.String(), freeAddr(t))

	rootfs := filepath.Join(work, "rootfs")
	busyboxRootfs(t, rootfs)
	if err := oci.WriteArchive(rootfs, filepath.Join(dataDir, "imports", "bb.tar"), oci.ImageConfig{Env: []string{"PATH=/bin"}}, oci.ArchiveOptions{}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(work, "files"), 0o755)
	os.WriteFile(filepath.Join(work, "files", "a.txt"), []byte("copied by the CLI\n"), 0o644)
	spec := map[string]any{
		"name":      "cli-built",
		"fromImage": "oci-archive:bb.tar",
		"steps": []map[string]any{
			{"type": "RUN", "args": []string{"echo built > /etc/marker; echo hello from the step", "root"}},
			{"type": "COPY", "args": []string{"files", "/srv/"}},
			{"type": "ENV", "args": []string{"FROM_JSON", "yes"}},
		},
		"startCmd": "echo up > /tmp/up && sleep 100000",
		"readyCmd": "[ -f /tmp/up ]",
	}
	data, _ := json.Marshal(spec)
	file := filepath.Join(work, "template.json")
	os.WriteFile(file, data, 0o644)

	out, err := d.cli(t, "tpl", "build", "--file", file)
	if err != nil || !strings.Contains(out, "READY") || !strings.Contains(out, "hello from the step") {
		t.Fatalf("tpl build: %v\n%s", err, out)
	}
	ids := regexp.MustCompile(`template_id: (\S+)\nbuild_id: (\S+)`).FindStringSubmatch(out)
	if ids == nil {
		t.Fatalf("tpl build printed no IDs:\n%s", out)
	}
	if logs, err := d.cli(t, "tpl", "logs", "--template-id", ids[1], "--build-id", ids[2]); err != nil || !strings.Contains(logs, "COPY files /srv/") {
		t.Errorf("tpl logs: %v\n%s", err, logs)
	}

	code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "cli-built"}, nil)
	if code != 201 {
		t.Fatalf("create from the built template: %d %s", code, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &sb)
	for path, want := range map[string]string{"/etc/marker": "built\n", "/srv/a.txt": "copied by the CLI\n", "/tmp/up": "up\n"} {
		if code, got := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/files?path="+path, nil); code != 200 || got != want {
			t.Errorf("%s: %d %q, want %q", path, code, got, want)
		}
	}
	if code, got := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/envs", nil); code != 200 || !strings.Contains(got, `"FROM_JSON":"yes"`) {
		t.Errorf("ENV step: %d %s", code, got)
	}

	// The running sandbox becomes a template of its own.
	if out, err := d.cli(t, "tpl", "commit", "--sandbox-id", sb.SandboxID, "--alias", "committed"); err != nil {
		t.Fatalf("tpl commit: %v\n%s", err, out)
	}
	if code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "committed"}, nil); code != 201 {
		t.Fatalf("create from the committed template: %d %s", code, body)
	}

	// A step that fails ends the build, and the CLI, with its reason.
	spec["name"], spec["steps"] = "cli-fails", []map[string]any{{"type": "RUN", "args": []string{"exit 9"}}}
	data, _ = json.Marshal(spec)
	os.WriteFile(file, data, 0o644)
	if out, err := d.cli(t, "tpl", "build", "--file", file); err == nil || !strings.Contains(out, "exited with code 9") {
		t.Errorf("failing build: err=%v\n%s", err, out)
	}
}

// TestStepBuildCrash kills the server in the middle of a build step and
// checks the restart settles it: the build failed with the restart as its
// reason, no overlay mount, half-made layer or build sandbox left, and
// the template builds again.
func TestStepBuildCrash(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir, work := t.TempDir(), t.TempDir()
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr)
	busyboxRootfs(t, filepath.Join(work, "rootfs"))
	if err := oci.WriteArchive(filepath.Join(work, "rootfs"), filepath.Join(dataDir, "imports", "bb.tar"), oci.ImageConfig{Env: []string{"PATH=/bin"}}, oci.ArchiveOptions{}); err != nil {
		t.Fatal(err)
	}
	build := func(steps []map[string]any) (tid, bid string) {
		t.Helper()
		code, body := d.do(t, "POST", "/v3/templates", map[string]any{"name": "crashy"}, nil)
		if code != 202 {
			t.Fatalf("request build: %d %s", code, body)
		}
		var tk struct{ TemplateID, BuildID string }
		json.Unmarshal(body, &tk)
		if code, body := d.do(t, "POST", "/v2/templates/"+tk.TemplateID+"/builds/"+tk.BuildID,
			map[string]any{"fromImage": "oci-archive:bb.tar", "steps": steps}, nil); code != 202 {
			t.Fatalf("start build: %d %s", code, body)
		}
		return tk.TemplateID, tk.BuildID
	}
	status := func(tid, bid string) (string, string) {
		code, body := d.do(t, "GET", "/templates/"+tid+"/builds/"+bid+"/status", nil, nil)
		if code != 200 {
			t.Fatalf("status: %d %s", code, body)
		}
		var st struct {
			Status string
			Reason *struct{ Message string }
		}
		json.Unmarshal(body, &st)
		if st.Reason != nil {
			return st.Status, st.Reason.Message
		}
		return st.Status, ""
	}
	layers := filepath.Join(dataDir, "layers")
	mounted := func() bool {
		m, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Contains(string(m), layers+"/")
	}

	tid, bid := build([]map[string]any{{"type": "RUN", "args": []string{"echo step started; sleep 600"}}})
	for i := 0; !mounted(); i++ {
		if i == 300 {
			t.Fatal("the build step never mounted its overlay")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the step's sandbox is running
	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()

	d = startDaemon(t, dataDir, prefix, cidr.String(), addr)
	if st, reason := status(tid, bid); st != "error" || !strings.Contains(reason, "restart") {
		t.Errorf("the interrupted build: %s %q", st, reason)
	}
	if mounted() {
		t.Error("an overlay mount of the interrupted step survived the restart")
	}
	ents, _ := os.ReadDir(layers)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("half-made layer survived the restart: %s", e.Name())
		}
	}
	out, _ := exec.Command(testenv.Bin(t, "runsc"), "--root", filepath.Join(dataDir, "runsc"), "list").CombinedOutput()
	if strings.Contains(string(out), "build-") {
		t.Errorf("a build sandbox survived the restart:\n%s", out)
	}

	tid, bid = build([]map[string]any{{"type": "RUN", "args": []string{"echo fine"}}})
	for i := 0; ; i++ {
		st, reason := status(tid, bid)
		if st == "ready" {
			break
		}
		if st == "error" || i == 600 {
			t.Fatalf("build after the restart: %s %q", st, reason)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
