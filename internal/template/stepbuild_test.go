package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/store"
	"cube/internal/testenv"
)

// TestFlattenAppliesLayers checks that flattening shows what overlayfs
// shows: later layers win, whiteouts delete, opaque directories hide what
// is under them, and files are links to the layers, not copies.
func TestFlattenAppliesLayers(t *testing.T) {
	testenv.RequireRoot(t) // whiteouts are device nodes
	dir := t.TempDir()
	base, l1, dst := filepath.Join(dir, "base"), filepath.Join(dir, "l1"), filepath.Join(dir, "dst")
	write := func(p, body string) {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(base, "etc/keep"), "base\n")
	write(filepath.Join(base, "etc/replaced"), "old\n")
	write(filepath.Join(base, "etc/deleted"), "gone\n")
	write(filepath.Join(base, "opaque/old"), "hidden\n")
	os.Symlink("keep", filepath.Join(base, "etc/link"))
	write(filepath.Join(l1, "etc/replaced"), "new\n")
	if err := unix.Mknod(filepath.Join(l1, "etc/deleted"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	write(filepath.Join(l1, "opaque/new"), "shown\n")
	if err := unix.Setxattr(filepath.Join(l1, "opaque"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(l1, "etc/replaced"), 1000, 1000)

	if err := flatten(dst, base, []string{l1}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"etc/keep": "base\n", "etc/replaced": "new\n", "opaque/new": "shown\n", "etc/link": "base\n"} {
		if got, err := os.ReadFile(filepath.Join(dst, p)); err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"etc/deleted", "opaque/old"} {
		if _, err := os.Lstat(filepath.Join(dst, p)); !os.IsNotExist(err) {
			t.Errorf("%s should be gone: %v", p, err)
		}
	}
	var a, b unix.Stat_t
	unix.Stat(filepath.Join(dst, "etc/replaced"), &a)
	unix.Stat(filepath.Join(l1, "etc/replaced"), &b)
	if a.Ino != b.Ino || a.Uid != 1000 {
		t.Errorf("etc/replaced is not the layer's file (inode %d vs %d, uid %d)", a.Ino, b.Ino, a.Uid)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "etc/link")); l != "keep" {
		t.Errorf("symlink: %q", l)
	}
}

func TestChainKeyDependsOnEverythingBefore(t *testing.T) {
	run := func(cmd string) cube.BuildStep { return cube.BuildStep{Type: cube.StepRun, Args: []string{cmd}} }
	a := chainKey(chainKey("base", run("x")), run("y"))
	if a != chainKey(chainKey("base", run("x")), run("y")) {
		t.Fatal("the same chain gives different keys")
	}
	for name, other := range map[string]string{
		"earlier step":  chainKey(chainKey("base", run("z")), run("y")),
		"other base":    chainKey(chainKey("base2", run("x")), run("y")),
		"args split":    chainKey("base", cube.BuildStep{Type: cube.StepRun, Args: []string{"a", "b"}}),
		"files changed": chainKey(chainKey("base", run("x")), cube.BuildStep{Type: cube.StepRun, Args: []string{"y"}, FilesHash: "h"}),
	} {
		if other == a {
			t.Errorf("%s: same key", name)
		}
	}
	if chainKey("base", cube.BuildStep{Type: "RUN", Args: []string{"a", "b"}}) == chainKey("base", cube.BuildStep{Type: "RUN", Args: []string{"a\x00b"}}) {
		t.Error("argument boundaries do not count")
	}
}

func TestDescribeSteps(t *testing.T) {
	for _, c := range []struct {
		step cube.BuildStep
		want string
	}{
		{cube.BuildStep{Type: cube.StepRun, Args: []string{"make", "root"}}, "RUN make (as root)"},
		{cube.BuildStep{Type: cube.StepRun, Args: []string{"make"}}, "RUN make"},
		{cube.BuildStep{Type: cube.StepCopy, Args: []string{"src", "/app/", "", ""}}, "COPY src /app/"},
		{cube.BuildStep{Type: cube.StepEnv, Args: []string{"A", "1", "B", "two words"}}, "ENV A=1 B=two words"},
		{cube.BuildStep{Type: cube.StepWorkdir, Args: []string{"/w"}}, "WORKDIR /w"},
	} {
		if got := describe(c.step); got != c.want {
			t.Errorf("describe(%+v) = %q, want %q", c.step, got, c.want)
		}
	}
}

// stepFixture is a Builder with a store and one requested build, no node.
func stepFixture(t *testing.T) (*Builder, *cube.BuildTicket) {
	t.Helper()
	f := newFixture(t)
	tk, err := f.b.RequestBuild(context.Background(), cube.BuildIntent{Name: "app:v1"})
	if err != nil {
		t.Fatal(err)
	}
	return f.b, tk
}

func tarOf(t *testing.T, gz bool, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w = &buf
	var zw *gzip.Writer
	tw := tar.NewWriter(w)
	if gz {
		zw = gzip.NewWriter(w)
		tw = tar.NewWriter(zw)
	}
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return buf.Bytes()
}

func TestPutFiles(t *testing.T) {
	b, tk := stepFixture(t)
	ctx := context.Background()
	hash := strings.Repeat("ab", 32)
	if present, err := b.FilesPresent(ctx, "", tk.TemplateID, hash); err != nil || present {
		t.Fatalf("before upload: %v %v", present, err)
	}
	if err := b.PutFiles(ctx, tk.TemplateID, hash, bytes.NewReader(tarOf(t, true, map[string]string{"a.txt": "hi"})), false); err != nil {
		t.Fatal(err)
	}
	if present, err := b.FilesPresent(ctx, "", tk.TemplateID, hash); err != nil || !present {
		t.Fatalf("after upload: %v %v", present, err)
	}
	// Stored unpacked from gzip, as a plain tar.
	data, err := os.ReadFile(b.filesPath(tk.TemplateID, hash))
	if err != nil || !bytes.Equal(data[:5], []byte("a.txt")) {
		t.Errorf("stored files: %v %q", err, data[:min(len(data), 16)])
	}

	other := strings.Repeat("cd", 32)
	if err := b.PutFiles(ctx, tk.TemplateID, other, strings.NewReader("not a tar archive at all, just text"), false); cube.KindOf(err) != cube.Invalid {
		t.Errorf("not a tar: %v", err)
	}
	b.cfg.MaxFilesBytes = 1024
	if err := b.PutFiles(ctx, tk.TemplateID, other, bytes.NewReader(tarOf(t, true, map[string]string{"big": strings.Repeat("x", 4096)})), false); cube.KindOf(err) != cube.TooLarge {
		t.Errorf("over the limit unpacked: %v", err)
	}
	if present, _ := b.FilesPresent(ctx, "", tk.TemplateID, other); present {
		t.Error("a refused upload is present")
	}
	if _, err := b.FilesPresent(ctx, "", "no-such-template", hash); cube.KindOf(err) != cube.NotFound {
		t.Errorf("unknown template: %v", err)
	}
	if _, err := b.FilesPresent(ctx, "", tk.TemplateID, "../../etc"); cube.KindOf(err) != cube.Invalid {
		t.Errorf("bad hash: %v", err)
	}
	ents, _ := os.ReadDir(filepath.Dir(b.filesPath(tk.TemplateID, hash)))
	if len(ents) != 1 {
		t.Errorf("files directory holds %d entries, want the one upload (no temporary files)", len(ents))
	}
}

func TestRequestBuild(t *testing.T) {
	b, tk := stepFixture(t)
	ctx := context.Background()
	if len(tk.Names) != 1 || tk.Names[0] != "app" || len(tk.Tags) != 1 || tk.Tags[0] != "v1" {
		t.Fatalf("ticket: %+v", tk)
	}
	st, err := b.BuildStatus(ctx, "", tk.TemplateID, tk.BuildID, 0)
	if err != nil || st.Status != cube.BuildWaiting {
		t.Fatalf("requested build: %+v %v", st, err)
	}
	// A new request for the name, before the first started, takes its place.
	tk2, err := b.RequestBuild(ctx, cube.BuildIntent{Name: "app"})
	if err != nil || tk2.TemplateID != tk.TemplateID || tk2.BuildID == tk.BuildID {
		t.Fatalf("second request: %+v %v", tk2, err)
	}
	waitFor(t, func() bool {
		st, err := b.BuildStatus(ctx, "", tk.TemplateID, tk.BuildID, 0)
		return err == nil && st.Status == cube.BuildError && strings.Contains(st.Reason.Message, "superseded")
	})
	if err := b.StartBuild(ctx, "", tk.TemplateID, tk.BuildID, cube.BuildSpec{FromTemplate: "x"}); cube.KindOf(err) != cube.Conflict && cube.KindOf(err) != cube.Unsupported {
		t.Errorf("starting a superseded build: %v", err)
	}
	if _, err := b.RequestBuild(ctx, cube.BuildIntent{Name: "Bad Name"}); cube.KindOf(err) != cube.Invalid {
		t.Errorf("bad name: %v", err)
	}
	if _, err := b.BuildStatus(ctx, "", tk.TemplateID, "nope", 0); cube.KindOf(err) != cube.NotFound {
		t.Errorf("unknown build: %v", err)
	}
	tpl, err := b.st.Templates().Get(ctx, tk.TemplateID)
	if err != nil || tpl.Status != store.TemplateBuilding || tpl.BuildJob != tk2.BuildID {
		t.Errorf("template after the second request: %+v %v", tpl, err)
	}
}

func TestBuildLogCapsStepOutput(t *testing.T) {
	b, _ := stepFixture(t)
	l := b.newBuildLog("capped")
	defer l.close()
	w := &lineWriter{log: l, step: "1", level: "info"}
	for range maxOutputLines + 50 {
		w.Write([]byte("line\n"))
	}
	l.infof("finalize", "still logged")
	got := l.snapshot()
	if len(got) != maxOutputLines+2 {
		t.Fatalf("%d entries, want %d", len(got), maxOutputLines+2)
	}
	if got[maxOutputLines].Level != "warn" || got[len(got)-1].Message != "still logged" {
		t.Errorf("the cap's notice or Cube's own lines are missing: %+v %+v", got[maxOutputLines], got[len(got)-1])
	}
	if read := b.readLog("capped"); len(read) != len(got) {
		t.Errorf("the log file holds %d entries, memory %d", len(read), len(got))
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 500 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// TestPutFilesVerifiedAndKept: with verify, the hash must be the SHA-256
// of the (ungzipped) tar or nothing is stored; and files stored under a
// hash are never replaced by a later upload under it.
func TestPutFilesVerifiedAndKept(t *testing.T) {
	b, tk := stepFixture(t)
	ctx := context.Background()
	plain := tarOf(t, false, map[string]string{"a.txt": "hi"})
	sum := sha256.Sum256(plain)
	hash := hex.EncodeToString(sum[:])

	wrong := strings.Repeat("cd", 32)
	err := b.PutFiles(ctx, tk.TemplateID, wrong, bytes.NewReader(plain), true)
	if cube.KindOf(err) != cube.Invalid || !strings.Contains(err.Error(), hash) || !strings.Contains(err.Error(), wrong) {
		t.Errorf("a mismatched upload: %v", err)
	}
	if present, _ := b.FilesPresent(ctx, "", tk.TemplateID, wrong); present {
		t.Error("a mismatched upload is present")
	}
	// Gzipped on the wire, the hash is still the tar's.
	if err := b.PutFiles(ctx, tk.TemplateID, hash, bytes.NewReader(tarOf(t, true, map[string]string{"a.txt": "hi"})), true); err != nil {
		t.Fatalf("a matching upload: %v", err)
	}

	// A second upload under a stored hash, verified or not, changes nothing.
	if err := b.PutFiles(ctx, tk.TemplateID, hash, bytes.NewReader(tarOf(t, false, map[string]string{"evil.sh": "rm -rf /"})), false); err != nil {
		t.Errorf("a second upload: %v", err)
	}
	if data, _ := os.ReadFile(b.filesPath(tk.TemplateID, hash)); !bytes.Equal(data, plain) {
		t.Error("a second upload replaced the stored files")
	}
	ents, _ := os.ReadDir(filepath.Dir(b.filesPath(tk.TemplateID, hash)))
	if len(ents) != 1 {
		t.Errorf("files directory holds %d entries, want the one upload", len(ents))
	}
}

// A step printing long lines without end keeps at most maxOutputBytes of
// them, in memory and in the log file, however many lines that is.
func TestBuildLogCapsStepOutputBytes(t *testing.T) {
	b, _ := stepFixture(t)
	l := b.newBuildLog("bytes")
	defer l.close()
	w := &lineWriter{log: l, step: "1", level: "info"}
	line := []byte(strings.Repeat("x", 8<<10-1) + "\n")
	for range maxOutputLines {
		w.Write(line)
	}
	var kept int
	for _, e := range l.snapshot() {
		kept += len(e.Message)
	}
	if kept > maxOutputBytes+1<<10 {
		t.Fatalf("the log kept %d MB of output, the cap is %d MB", kept>>20, maxOutputBytes>>20)
	}
	got := l.snapshot()
	if last := got[len(got)-1]; last.Level != "warn" || !strings.Contains(last.Message, "not kept") {
		t.Errorf("no notice of the cap: %+v", last)
	}
}
