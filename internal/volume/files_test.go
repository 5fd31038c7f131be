package volume

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/cube"
)

// openTemp opens the content of a plain directory standing for a mounted
// volume, with a secret file next to it that no operation may reach.
func openTemp(t *testing.T) (*Files, string, string) {
	t.Helper()
	base := t.TempDir()
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := OpenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, dir, secret
}

func wantKind(t *testing.T, what string, err error, k cube.Kind) {
	t.Helper()
	if cube.KindOf(err) != k {
		t.Fatalf("%s: err = %v (kind %v), want kind %v", what, err, cube.KindOf(err), k)
	}
}

func TestFilesWriteReadListRemove(t *testing.T) {
	f, dir, _ := openTemp(t)
	e, err := f.WriteFile("/a/b/c.txt", strings.NewReader("hello"), cube.VolumeWrite{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "/a/b/c.txt" || e.Name != "c.txt" || e.Type != "file" || e.Size != 5 || e.Mode.Perm() != DefaultFileMode {
		t.Errorf("entry = %+v", e)
	}
	if os.Geteuid() == 0 && (e.UID != OwnerUID || e.GID != OwnerGID) {
		t.Errorf("owner = %d:%d, want %d:%d", e.UID, e.GID, OwnerUID, OwnerGID)
	}
	_, err = f.WriteFile("a/b/c.txt", strings.NewReader("again"), cube.VolumeWrite{})
	wantKind(t, "write over an existing file without force", err, cube.Conflict)
	_, err = f.WriteFile("/x/y.txt", strings.NewReader("x"), cube.VolumeWrite{})
	wantKind(t, "write into a missing directory without force", err, cube.NotFound)

	rc, _, err := f.ReadFile("a/b/c.txt")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if string(data) != "hello" {
		t.Errorf("read %q", data)
	}
	_, _, err = f.ReadFile("/a/b")
	wantKind(t, "read a directory", err, cube.Invalid)

	es, err := f.List("/", 3)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range es {
		paths = append(paths, e.Path)
	}
	if strings.Join(paths, " ") != "/a /a/b /a/b/c.txt" {
		t.Errorf("listed %v", paths)
	}
	_, err = f.List("/", MaxDepth+1)
	wantKind(t, "depth past the maximum", err, cube.Invalid)

	if err := f.Remove("/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("removed directory still there: %v", err)
	}
	wantKind(t, "remove the root", f.Remove("/"), cube.Invalid)
	wantKind(t, "remove a missing path", f.Remove("/a"), cube.NotFound)
}

func TestFilesMakeDirAndSetAttr(t *testing.T) {
	f, _, _ := openTemp(t)
	mode := uint32(0o700)
	e, err := f.MakeDir("/p/q", cube.VolumeWrite{Force: true, Mode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	if e.Type != "directory" || e.Mode.Perm() != 0o700 {
		t.Errorf("entry = %+v", e)
	}
	if _, err := f.MakeDir("/p/q", cube.VolumeWrite{Force: true}); err != nil {
		t.Errorf("force on an existing directory: %v", err)
	}
	_, err = f.MakeDir("/p/q", cube.VolumeWrite{})
	wantKind(t, "make an existing directory", err, cube.Conflict)
	_, err = f.MakeDir("/r/s", cube.VolumeWrite{})
	wantKind(t, "make a directory under a missing one", err, cube.NotFound)

	m := uint32(0o4755)
	e, err = f.SetAttr("/p", cube.VolumeAttr{Mode: &m})
	if err != nil {
		t.Fatal(err)
	}
	if e.Mode.Perm() != 0o755 || e.Mode&os.ModeSetuid == 0 {
		t.Errorf("mode after SetAttr = %v", e.Mode)
	}
}

// TestFilesStayInsideTheVolume tries the ways out of a volume a user (or
// a sandbox that made symlinks in it) has: none reaches the host file.
func TestFilesStayInsideTheVolume(t *testing.T) {
	f, dir, secret := openTemp(t)
	for _, p := range []string{"../secret", "/../secret", "a/../../secret", "/.."} {
		_, _, err := f.ReadFile(p)
		wantKind(t, "read "+p, err, cube.Invalid)
		_, err = f.WriteFile(p, strings.NewReader("x"), cube.VolumeWrite{Force: true})
		wantKind(t, "write "+p, err, cube.Invalid)
		wantKind(t, "remove "+p, f.Remove(p), cube.Invalid)
	}
	// Symlinks as a sandbox would make them: absolute, relative, to a
	// directory outside.
	links := map[string]string{"abs": secret, "rel": "../secret", "dir": filepath.Dir(secret), "root": "/"}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/abs", "/rel", "/dir/secret", "/root/etc/passwd"} {
		rc, _, err := f.ReadFile(p)
		if err == nil {
			data, _ := io.ReadAll(rc)
			rc.Close()
			t.Fatalf("read %s through a symlink out of the volume: %q", p, data)
		}
		wantKind(t, "read "+p, err, cube.Invalid)
	}
	_, err := f.WriteFile("/abs", strings.NewReader("overwritten"), cube.VolumeWrite{Force: true})
	if err == nil {
		t.Fatal("write through a symlink succeeded")
	}
	_, err = f.WriteFile("/dir/new", strings.NewReader("x"), cube.VolumeWrite{Force: true})
	wantKind(t, "write under a symlinked directory", err, cube.Invalid)
	_, err = f.List("/dir", 1)
	if err == nil {
		t.Fatal("listed a directory outside the volume")
	}
	m := uint32(0o777)
	if _, err := f.SetAttr("/dir/secret", cube.VolumeAttr{Mode: &m}); err == nil {
		t.Fatal("changed the mode of a file outside the volume")
	}
	// Removing a link removes the link only.
	if err := f.Remove("/dir"); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(secret); err != nil || string(data) != "host secret" {
		t.Fatalf("the host file after all attempts: %q, %v", data, err)
	}
	if fi, _ := os.Stat(secret); fi.Mode().Perm() != 0o600 {
		t.Fatalf("the host file's mode changed to %v", fi.Mode())
	}
	e, err := f.Stat("/abs")
	if err != nil || e.Type != "symlink" || e.Target != secret {
		t.Fatalf("stat of a symlink: %+v, %v", e, err)
	}
}
