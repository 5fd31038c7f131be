package users

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// throwaway is an account no file on the host belongs to; it needs no
// passwd entry because MakeDirs only uses its ids.
var throwaway = &User{Name: "throwaway", UID: 12345, GID: 23456, Home: "/nonexistent"}

func owner(t *testing.T, path string) (uid, gid uint32, mode os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode()
}

func TestMakeDirsGivesNewDirectoriesToTheUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	base := t.TempDir()
	existing := filepath.Join(base, "existing")
	os.Mkdir(existing, 0o700)
	os.Chmod(existing, 0o700)

	if err := throwaway.MakeDirs(filepath.Join(existing, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/c"} {
		uid, gid, mode := owner(t, filepath.Join(existing, p))
		if uid != 12345 || gid != 23456 || mode != os.ModeDir|0o755 {
			t.Errorf("%s: uid %d gid %d mode %v, want 12345 23456 drwxr-xr-x", p, uid, gid, mode)
		}
	}
	// Existing ancestors keep their owner and mode.
	for _, p := range []string{existing, base} {
		before, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		if uid, _, _ := owner(t, p); uid != 0 {
			t.Errorf("%s: uid %d, want root's", p, uid)
		}
		if p == existing && before.Mode() != os.ModeDir|0o700 {
			t.Errorf("%s: mode %v, want drwx------", p, before.Mode())
		}
	}
	// Doing it again changes nothing and is no error.
	os.Chown(filepath.Join(existing, "a"), 0, 0)
	if err := throwaway.MakeDirs(filepath.Join(existing, "a", "b")); err != nil {
		t.Fatal(err)
	}
	if uid, _, _ := owner(t, filepath.Join(existing, "a")); uid != 0 {
		t.Errorf("an existing directory was given to the user again")
	}
}

func TestMakeDirsStopsAtAFile(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o644)
	err := throwaway.MakeDirs(filepath.Join(file, "sub", "deeper"))
	if !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("MakeDirs below a file: %v, want ENOTDIR", err)
	}
	if _, err := os.Lstat(filepath.Join(file, "sub")); err == nil {
		t.Fatal("something was created below a file")
	}
	if err := throwaway.MakeDirs(file); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("MakeDirs of a file: %v, want ENOTDIR", err)
	}
}

// Concurrent requests making the same directories all succeed.
func TestMakeDirsConcurrently(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "x", "y", "z")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < cap(errs); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- throwaway.MakeDirs(target)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
		t.Fatalf("%s: %v", target, err)
	}
}

func TestAncestorsOutermostFirst(t *testing.T) {
	got := ancestors("/a/b//c/")
	want := []string{"/a", "/a/b", "/a/b/c"}
	if len(got) != len(want) {
		t.Fatalf("ancestors: %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ancestors: %v, want %v", got, want)
		}
	}
	if got := ancestors("/"); len(got) != 0 {
		t.Fatalf("ancestors of /: %v", got)
	}
}
