package node_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/nodetest"
)

// corrupt flips a byte in the middle of file and returns a function that
// puts it back.
func corrupt(t *testing.T, file string) (restore func()) {
	t.Helper()
	orig, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), orig...)
	bad[len(bad)/2] ^= 0xff
	if err := os.WriteFile(file, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(file, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDamagedPauseImageIsDetected: a sandbox paused on disk whose image no
// longer matches the checksum taken at write-out is not restored; it
// stays paused with its image kept, and resumes with its memory once the
// image is whole again.
func TestDamagedPauseImageIsDetected(t *testing.T) {
	n := nodetest.New(t, nodetest.Options{PauseWriteDelay: 0})
	n.TinyTemplate(t, "tiny")
	f := &fixture{n}
	sb := f.create(t, "tiny", time.Minute)
	tok := f.holderToken(t, sb)
	f.write(t, sb, "/tmp/kept", "still here")
	if err := f.PauseSandbox(ctx(t), sb.ID, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if rec, err := f.Store.Sandboxes().Get(ctx(t), sb.ID); err == nil && rec.PauseImage != "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rec, _ := f.Store.Sandboxes().Get(ctx(t), sb.ID)
	if rec.PauseImage == "" || rec.PauseChecksum == "" || rec.PauseImageTarget != "" {
		t.Fatalf("written-out record: image %q checksum %q target %q", rec.PauseImage, rec.PauseChecksum, rec.PauseImageTarget)
	}
	img := filepath.Join(rec.PauseImage, "checkpoint.img")
	restore := corrupt(t, img)

	_, _, err := f.ConnectSandbox(ctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute})
	if cube.KindOf(err) != cube.Damaged || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("resume from a damaged image: %v", err)
	}
	if got, err := f.GetSandbox(ctx(t), sb.ID); err != nil || got.State != cube.StatePaused {
		t.Fatalf("after the refused resume: %+v %v", got, err)
	}
	if _, err := os.Stat(img); err != nil {
		t.Fatalf("the damaged image was removed: %v", err)
	}
	if ids, _ := f.Runtime.List(ctx(t)); len(ids) != 0 {
		t.Fatalf("a refused resume started containers: %v", ids)
	}

	restore()
	if _, resumed, err := f.ConnectSandbox(ctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("resume from the repaired image: %v %v", resumed, err)
	}
	if got := f.holderToken(t, sb); got != tok {
		t.Fatalf("memory after resume: %s, want %s", got, tok)
	}
	if got := f.read(t, sb, "/tmp/kept"); got != "still here" {
		t.Fatalf("file after resume: %q", got)
	}
	if _, err := os.Stat(rec.PauseImage); !os.IsNotExist(err) {
		t.Fatalf("pause image kept after the resume: %v", err)
	}
}

// TestDamagedTemplateIsDetected: a template built from a rootfs records
// its image's checksum, so a damaged image is reported before a restore.
func TestDamagedTemplateIsDetected(t *testing.T) {
	f := newFixture(t)
	tpl, err := f.Store.Templates().Get(ctx(t), "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Checksum == "" {
		t.Fatal("built template has no checksum")
	}
	restore := corrupt(t, filepath.Join(tpl.Checkpoint, "checkpoint.img"))
	_, err = f.CreateSandbox(ctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
	if cube.KindOf(err) != cube.Damaged || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("create from a damaged template: %v", err)
	}
	restore()
	f.create(t, "tiny", time.Minute)
}

// The agent is installed with one mode whatever the umask: manifests
// record it, and another node's copy of a template is checked against it.
func TestInstallEnvdModeIgnoresUmask(t *testing.T) {
	src := filepath.Join(t.TempDir(), "cube-envd")
	if err := os.WriteFile(src, []byte("agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir, err := node.InstallEnvd(t.TempDir(), src)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, "cube-envd"), dir} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want 0755", p, st.Mode(), err)
		}
	}
}
