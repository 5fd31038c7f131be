package gvisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/runtime"
)

// holder runs the holder workload's command in sb and returns its output.
func holder(t *testing.T, sb runtime.Sandbox, args ...string) (string, error) {
	t.Helper()
	out, err := sb.Exec(ctx(t), append([]string{runtime.AgentMount + "/holder"}, args...)...)
	return string(out), err
}

// wantFile checks a file's content inside sb.
func wantFile(t *testing.T, sb runtime.Sandbox, path, want string) {
	t.Helper()
	if got, err := holder(t, sb, "cat", path); err != nil || got != want {
		t.Fatalf("%s in %s = %q, %v; want %q", path, sb.ID(), got, err, want)
	}
}

// A files image carries what a sandbox wrote and deleted over its rootfs,
// from a booted and from a restored sandbox, into a fresh boot: files
// back, memory not (the holder's token is new), the host rootfs untouched.
func TestSaveFilesBootsAfreshWithTheFiles(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	if err := os.WriteFile(filepath.Join(f.rootfs, "etc", "base"), []byte("from the image"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := f.rt.Boot(c, f.spec("fsa"))
	if err != nil {
		t.Fatal(err)
	}
	tokA := token(t, a)
	if out, err := holder(t, a, "write", "/etc/note", "kept"); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	if out, err := holder(t, a, "rm", "/etc/base"); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	// The server saves files of a frozen sandbox.
	if err := a.Pause(c); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(t.TempDir(), "first")
	if err := a.SaveFiles(c, first); err != nil {
		t.Fatal(err)
	}
	if err := a.Kill(c); err != nil {
		t.Fatal(err)
	}

	spec := f.spec("fsb")
	spec.Files = filepath.Join(first, runtime.FilesImage)
	b, err := f.rt.Boot(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	if tokB := token(t, b); tokB == tokA {
		t.Fatal("the boot with files came back with the old memory")
	}
	wantFile(t, b, "/etc/note", "kept")
	if out, err := holder(t, b, "cat", "/etc/base"); err == nil || !strings.Contains(out, "no such file") {
		t.Fatalf("a file deleted before the save is back: %q, %v", out, err)
	}
	if got, err := os.ReadFile(filepath.Join(f.rootfs, "etc", "base")); err != nil || string(got) != "from the image" {
		t.Fatalf("host rootfs changed: %q, %v", got, err)
	}

	// A restored sandbox's files (what it was restored with and what it
	// wrote since) are saved the same way.
	img := filepath.Join(t.TempDir(), "img")
	if err := b.Checkpoint(c, img, false); err != nil {
		t.Fatal(err)
	}
	r, err := f.rt.Restore(c, img, f.spec("fsr"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := holder(t, r, "write", "/etc/later", "after restore"); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	// /tmp is a tmpfs of its own, memory like a rebooted Linux's: not
	// part of the files.
	if out, err := holder(t, r, "write", "/tmp/scratch", "gone after a reboot"); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	second := filepath.Join(t.TempDir(), "second")
	if err := r.SaveFiles(c, second); err != nil {
		t.Fatal(err)
	}
	spec = f.spec("fsd")
	spec.Files = filepath.Join(second, runtime.FilesImage)
	d, err := f.rt.Boot(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	wantFile(t, d, "/etc/note", "kept")
	wantFile(t, d, "/etc/later", "after restore")
	if out, err := holder(t, d, "cat", "/tmp/scratch"); err == nil {
		t.Fatalf("/tmp outlived the boot: %q", out)
	}
	for _, sb := range []runtime.Sandbox{r, d} {
		if err := sb.Kill(c); err != nil {
			t.Fatal(err)
		}
	}
}
