package server

import (
	"os"
	"path/filepath"
	"testing"
)

func TestPrivateSubdirs(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	tpl := filepath.Join(rootfs, "sha256-abc")
	if err := os.MkdirAll(tpl, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rootfs, 0o755)
	os.WriteFile(filepath.Join(dir, "api-key"), []byte("k"), 0o600)
	if err := privateSubdirs(dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(rootfs); fi.Mode().Perm() != 0o700 {
		t.Errorf("rootfs/ is %04o, want 0700", fi.Mode().Perm())
	}
	// A template's own root stays as the image made it: sandboxes see it as /.
	if fi, _ := os.Stat(tpl); fi.Mode().Perm() != 0o755 {
		t.Errorf("rootfs/<digest> is %04o, want 0755 kept", fi.Mode().Perm())
	}
}

func TestCheckPrivate(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o700)
	if err := checkPrivate(dir); err != nil {
		t.Fatalf("0700 dir refused: %v", err)
	}
	for _, mode := range []os.FileMode{0o755, 0o750, 0o701, 0o777} {
		os.Chmod(dir, mode)
		if err := checkPrivate(dir); err == nil {
			t.Errorf("mode %04o accepted", mode)
		}
	}
}
