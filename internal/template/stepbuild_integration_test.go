package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"cube/internal/cube"
)

// busyboxApplets are the commands the step tests and Cube's own build
// scripts use.
var busyboxApplets = []string{"sh", "tar", "cp", "mkdir", "chown", "chmod", "id", "grep", "cut", "rm", "dirname",
	"adduser", "addgroup", "cat", "echo", "dd", "sleep", "head", "ls", "touch", "test", "[", "od"}

// busyboxImage is a small image with a shell: Debian's static busybox and
// its applets, and root as its only user.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	data, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the step build tests need Debian's busybox-static (make deps): %v", err)
	}
	entries := []entry{
		{name: "bin/", typ: tar.TypeDir}, {name: "bin/busybox", body: string(data), mode: 0o755},
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\n"}, {name: "etc/group", body: "root:x:0:\n"},
		{name: "proc/", typ: tar.TypeDir}, {name: "dev/", typ: tar.TypeDir}, {name: "sys/", typ: tar.TypeDir},
		{name: "root/", typ: tar.TypeDir, mode: 0o700}, {name: "home/", typ: tar.TypeDir}, {name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "usr/", typ: tar.TypeDir}, {name: "usr/bin/", typ: tar.TypeDir}, {name: "usr/sbin/", typ: tar.TypeDir},
	}
	for _, a := range busyboxApplets {
		entries = append(entries, entry{name: "bin/" + a, typ: tar.TypeSymlink, linkname: "busybox"})
	}
	img, err := mutate.AppendLayers(empty.Image, layerOf(t, entries...))
	if err != nil {
		t.Fatal(err)
	}
	return configured(t, img, func(cf *v1.ConfigFile) {
		cf.OS, cf.Architecture = "linux", "amd64"
		cf.Config.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "FROM_IMAGE=1"}
	})
}

// filesTar is a gzipped tar of files (name → body) and the hash it is
// uploaded under.
func filesTar(t *testing.T, files map[string]string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	zw.Close()
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:])
}

// stepBuildRun requests, uploads for and starts a build, and waits for
// its end.
func (r *realNode) stepBuildRun(t *testing.T, name string, spec cube.BuildSpec, uploads map[string][]byte) (*cube.BuildTicket, *cube.BuildStatus) {
	t.Helper()
	ctx := context.Background()
	tk, err := r.b.RequestBuild(ctx, cube.BuildIntent{Name: name, CPUCount: 1, MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	for hash, body := range uploads {
		if err := r.b.PutFiles(ctx, tk.TemplateID, hash, bytes.NewReader(body), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.b.StartBuild(ctx, "", tk.TemplateID, tk.BuildID, spec); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		st, err := r.b.BuildStatus(ctx, "", tk.TemplateID, tk.BuildID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Status == cube.BuildReady || st.Status == cube.BuildError {
			return tk, st
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("build %s did not end", tk.BuildID)
	return nil, nil
}

func logText(st *cube.BuildStatus) string {
	var b strings.Builder
	for _, e := range st.Logs {
		b.WriteString("[" + e.Step + "] " + e.Message + "\n")
	}
	return b.String()
}

// assertNothingLeft checks a build left no overlay mount, unfinished
// layer or build sandbox.
func (r *realNode) assertNothingLeft(t *testing.T) {
	t.Helper()
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), filepath.Join(r.dir, "layers")) {
		t.Errorf("an overlay mount is left under %s", filepath.Join(r.dir, "layers"))
	}
	ents, _ := os.ReadDir(filepath.Join(r.dir, "layers"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("unfinished layer left: %s", e.Name())
		}
	}
	ids, _ := r.rt.List(context.Background())
	for _, id := range ids {
		if strings.HasPrefix(id, "build-") {
			t.Errorf("build sandbox left: %s", id)
		}
	}
}

// TestStepBuildOnGVisor builds a template by steps from an image, starts
// a sandbox from it and checks each step's effect; a rebuild with its last
// step changed takes the others from the cache.
func TestStepBuildOnGVisor(t *testing.T) {
	r := newRealNode(t)
	host := pushed(t, busyboxImage(t), func(h http.Handler) http.Handler { return h })
	files, hash := filesTar(t, map[string]string{"files/a.txt": "from the client\n", "files/sub/b.txt": "nested\n"})
	steps := func(last string) []cube.BuildStep {
		return []cube.BuildStep{
			{Type: cube.StepRun, Args: []string{"echo built > /etc/marker && head -c 8 /dev/urandom | od -An -tx1 > /etc/random; echo step one ran", "root"}},
			{Type: cube.StepCopy, Args: []string{"files", "/app/"}, FilesHash: hash},
			{Type: cube.StepEnv, Args: []string{"GREETING", "hello from env"}},
			{Type: cube.StepWorkdir, Args: []string{"/work"}},
			{Type: cube.StepRun, Args: []string{last}},
		}
	}
	spec := cube.BuildSpec{FromImage: host + "/demo/app:v1", Steps: steps(`echo "$GREETING" > out.txt; id -un > whoami.txt`),
		StartCmd: "echo started > /tmp/started && sleep 100000", ReadyCmd: "[ -f /tmp/started ]"}
	tk, st := r.stepBuildRun(t, "stepped", spec, map[string][]byte{hash: files})
	if st.Status != cube.BuildReady {
		t.Fatalf("build: %s %+v\n%s", st.Status, st.Reason, logText(st))
	}
	if !strings.Contains(logText(st), "] step one ran\n") {
		t.Errorf("the RUN step's output is not in the log:\n%s", logText(st))
	}

	sb, err := r.n.CreateSandbox(context.Background(), cube.CreateRequest{Template: "stepped", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/etc/marker": "built\n", "/app/a.txt": "from the client\n", "/app/sub/b.txt": "nested\n",
		"/work/out.txt": "hello from env\n", "/work/whoami.txt": "user\n", "/tmp/started": "started\n",
	} {
		if code, body := r.envdGet(t, sb, path); code != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
	if code, body := r.envdGet(t, sb, "/etc/passwd"); code != 200 || !strings.Contains(body, "\nuser:") {
		t.Errorf("the template has no user 'user': %d %q", code, body)
	}
	r.n.KillSandbox(context.Background(), sb.ID)

	// One changed step: every step before it comes from the cache.
	spec.Steps = steps(`echo changed > out.txt`)
	tk2, st2 := r.stepBuildRun(t, "stepped", spec, nil)
	if st2.Status != cube.BuildReady || tk2.TemplateID != tk.TemplateID {
		t.Fatalf("rebuild: %s %+v (template %s, first %s)\n%s", st2.Status, st2.Reason, tk2.TemplateID, tk.TemplateID, logText(st2))
	}
	logs := logText(st2)
	for _, want := range []string{"CACHED [1/5] RUN", "CACHED [2/5] COPY", "CACHED [3/5] ENV GREETING=hello from env", "CACHED [4/5] WORKDIR"} {
		if !strings.Contains(logs, want) {
			t.Errorf("rebuild log lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "CACHED [5/5]") || strings.Contains(logs, "] step one ran\n") {
		t.Errorf("the rebuild took the changed step from the cache, or reran a cached one:\n%s", logs)
	}
	sb, err = r.n.CreateSandbox(context.Background(), cube.CreateRequest{Template: "stepped", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer r.n.KillSandbox(context.Background(), sb.ID)
	if code, body := r.envdGet(t, sb, "/work/out.txt"); code != 200 || body != "changed\n" {
		t.Errorf("after the rebuild /work/out.txt is %d %q", code, body)
	}
	r.assertNothingLeft(t)

	// A forced step reruns, and so does every step after it.
	_, before := r.envdGet(t, sb, "/etc/random")
	forced := spec
	forced.Steps = steps(`echo changed > out.txt`)
	forced.Steps[0].Force = true
	_, st3 := r.stepBuildRun(t, "stepped", forced, nil)
	if st3.Status != cube.BuildReady || strings.Contains(logText(st3), "CACHED [") {
		t.Fatalf("forced rebuild: %s %+v\n%s", st3.Status, st3.Reason, logText(st3))
	}
	sb3, err := r.n.CreateSandbox(context.Background(), cube.CreateRequest{Template: "stepped", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, after := r.envdGet(t, sb3, "/etc/random"); after == before || after == "" {
		t.Errorf("the forced step did not run again: /etc/random %q before, %q after", before, after)
	}
	r.n.KillSandbox(context.Background(), sb3.ID)

	// Deleting the template collects its layers; its sandbox keeps its files.
	if err := r.n.DeleteTemplate(context.Background(), "", "stepped"); err != nil {
		t.Fatal(err)
	}
	if err := r.b.CollectLayers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(r.dir, "layers")); len(ents) != 0 {
		t.Errorf("layers left after the template's delete: %d", len(ents))
	}
	if code, body := r.envdGet(t, sb, "/app/a.txt"); code != 200 || body != "from the client\n" {
		t.Errorf("the sandbox lost a file of its deleted template: %d %q", code, body)
	}
}

// TestStepBuildFailuresOnGVisor checks that a failing step, a timeout and
// an over-quota layer each end the build with a reason, and leave nothing
// behind.
func TestStepBuildFailuresOnGVisor(t *testing.T) {
	r := newRealNode(t)
	host := pushed(t, busyboxImage(t), func(h http.Handler) http.Handler { return h })
	image := host + "/demo/app:v1"

	_, st := r.stepBuildRun(t, "fails", cube.BuildSpec{FromImage: image, Steps: []cube.BuildStep{
		{Type: cube.StepRun, Args: []string{"echo about to fail; exit 3"}},
	}}, nil)
	if st.Status != cube.BuildError || st.Reason == nil || st.Reason.Step != "1" || !strings.Contains(st.Reason.Message, "exited with code 3") {
		t.Fatalf("failing step: %s %+v", st.Status, st.Reason)
	}
	if !strings.Contains(logText(&cube.BuildStatus{Logs: st.Reason.Logs}), "about to fail") {
		t.Errorf("the reason's log lines lack the step's output: %+v", st.Reason.Logs)
	}
	if tpl, err := r.n.Template(context.Background(), "fails"); err != nil || tpl.Status != "failed" {
		t.Errorf("the template of a failed first build: %+v %v", tpl, err)
	}

	r.b.cfg.MaxLayerBytes = 1 << 20
	_, st = r.stepBuildRun(t, "too-big", cube.BuildSpec{FromImage: image, Steps: []cube.BuildStep{
		{Type: cube.StepRun, Args: []string{"dd if=/dev/zero of=/big bs=1M count=8 && sleep 5", "root"}},
	}}, nil)
	if st.Status != cube.BuildError || st.Reason == nil || !strings.Contains(st.Reason.Message, "wrote more than 1 MiB") {
		t.Fatalf("over-quota layer: %s %+v", st.Status, st.Reason)
	}
	r.b.cfg.MaxLayerBytes = DefaultMaxLayerBytes

	r.b.cfg.BuildTimeout = 4 * time.Second
	_, st = r.stepBuildRun(t, "too-slow", cube.BuildSpec{FromImage: image, Steps: []cube.BuildStep{
		{Type: cube.StepRun, Args: []string{"sleep 60"}},
	}}, nil)
	if st.Status != cube.BuildError || st.Reason == nil || !strings.Contains(st.Reason.Message, "took longer than 4s") {
		t.Fatalf("timeout: %s %+v", st.Status, st.Reason)
	}
	r.assertNothingLeft(t)
}
