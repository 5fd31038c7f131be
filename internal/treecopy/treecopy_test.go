package treecopy

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A tree with what a root filesystem holds comes out the same: contents,
// modes with setuid, owners, times, symbolic and hard links.
func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(src, "usr/bin/sudo"), []byte("suid"), 0o755))
	must(os.Chmod(filepath.Join(src, "usr/bin/sudo"), 0o755|fs.ModeSetuid))
	must(os.WriteFile(filepath.Join(src, "usr/bin/a"), []byte("same file"), 0o644))
	must(os.Link(filepath.Join(src, "usr/bin/a"), filepath.Join(src, "usr/bin/b")))
	must(os.Symlink("/usr/bin/a", filepath.Join(src, "usr/bin/c")))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	must(os.Chtimes(filepath.Join(src, "usr/bin/a"), old, old))
	if os.Geteuid() == 0 {
		must(os.Lchown(filepath.Join(src, "usr/bin/a"), 1000, 1000))
	}
	agent := filepath.Join(t.TempDir(), "cube-envd")
	must(os.WriteFile(agent, []byte("agent"), 0o755))

	var buf bytes.Buffer
	must(Write(&buf, Tree{"rootfs", src}, Tree{"envd/cube-envd", agent}))
	dst := t.TempDir()
	n, err := Extract(&buf, dst)
	must(err)
	if n != int64(len("suid")+len("same file")+len("agent")) {
		t.Errorf("wrote %d bytes of content", n)
	}
	fi, err := os.Stat(filepath.Join(dst, "rootfs/usr/bin/sudo"))
	if err != nil || fi.Mode()&fs.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Fatalf("sudo: %v %v", fi.Mode(), err)
	}
	a, _ := os.Stat(filepath.Join(dst, "rootfs/usr/bin/a"))
	b, _ := os.Stat(filepath.Join(dst, "rootfs/usr/bin/b"))
	if !os.SameFile(a, b) {
		t.Error("the hard link became two files")
	}
	if !a.ModTime().Equal(old) {
		t.Errorf("time %v, want %v", a.ModTime(), old)
	}
	if os.Geteuid() == 0 {
		if st := a.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("owner %d:%d", st.Uid, st.Gid)
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "rootfs/usr/bin/c")); err != nil || l != "/usr/bin/a" {
		t.Errorf("symlink %q %v", l, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "envd/cube-envd")); string(got) != "agent" {
		t.Errorf("single file %q", got)
	}
}

// Entries that would land outside the directory, or write through a
// symbolic link the archive made, are refused.
func TestExtractStaysInside(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"dot-dot":        {{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"absolute link":  {{Name: "x", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
		"through a link": {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "l/evil", Typeflag: tar.TypeReg, Mode: 0o644}},
	} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range entries {
			h := h
			tw.WriteHeader(&h)
		}
		tw.Close()
		dir := t.TempDir()
		if _, err := Extract(&buf, dir); err == nil {
			t.Errorf("%s: extracted", name)
		}
		if _, err := os.Stat("/tmp/evil"); err == nil && strings.HasPrefix(name, "through") {
			t.Errorf("%s: wrote /tmp/evil", name)
		}
	}
}

// BenchmarkExtract extracts a tree of 4096 small files, eight to a
// directory, six directories deep, as a root filesystem's /usr is laid
// out: what the per-entry checks cost beside the writes.
func BenchmarkExtract(b *testing.B) {
	src := b.TempDir()
	for i := range 4096 {
		dir := filepath.Join(src, "usr", "lib", "x", fmt.Sprintf("d%d", i/512), fmt.Sprintf("e%d", i/64), fmt.Sprintf("f%d", i/8))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%d", i)), []byte("x"), 0o644)
	}
	var archive bytes.Buffer
	if err := Write(&archive, Tree{"rootfs", src}); err != nil {
		b.Fatal(err)
	}
	base := b.TempDir()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		dst, _ := os.MkdirTemp(base, "x")
		b.StartTimer()
		if _, err := Extract(bytes.NewReader(archive.Bytes()), dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
}
