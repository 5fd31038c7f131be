package treecopy

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
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

// tarOf is an archive of hdrs; regular files are empty.
func tarOf(tb testing.TB, hdrs ...tar.Header) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(&h); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// outsideFile makes a file beside the destination, for archives to aim at.
func outsideFile(t *testing.T) (string, os.FileInfo) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, fi
}

// unchanged fails t when the file at p differs from before in mode,
// owner, links or time.
func unchanged(t *testing.T, p string, before os.FileInfo) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	a, b := before.Sys().(*syscall.Stat_t), fi.Sys().(*syscall.Stat_t)
	if fi.Mode() != before.Mode() || a.Uid != b.Uid || a.Gid != b.Gid || a.Nlink != b.Nlink || !fi.ModTime().Equal(before.ModTime()) {
		t.Errorf("%s changed: mode %v → %v, owner %d:%d → %d:%d, links %d → %d, time %v → %v", p,
			before.Mode(), fi.Mode(), a.Uid, a.Gid, b.Uid, b.Gid, a.Nlink, b.Nlink, before.ModTime(), fi.ModTime())
	}
}

// A directory entry named like a symbolic link the archive made earlier
// must not reach, through the link, the file outside it points at: its
// mode (setuid, world-writable), owner and time stay as they were.
func TestExtractDirOverSymlinkLeavesTargetAlone(t *testing.T) {
	secret, before := outsideFile(t)
	archive := tarOf(t,
		tar.Header{Name: "rootfs/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "rootfs/x", Typeflag: tar.TypeSymlink, Linkname: secret},
		tar.Header{Name: "rootfs/x/", Typeflag: tar.TypeDir, Mode: 0o4777, Uid: 1234, Gid: 1234, ModTime: time.Unix(1, 0)},
	)
	_, err := Extract(bytes.NewReader(archive), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "rootfs/x") {
		t.Errorf("Extract = %v, want an error naming rootfs/x", err)
	}
	unchanged(t, secret, before)
}

// A hard link's target is found without following the archive's
// symbolic links, so it cannot link (and then change) a file outside.
func TestExtractHardLinkThroughSymlink(t *testing.T) {
	secret, before := outsideFile(t)
	archive := tarOf(t,
		tar.Header{Name: "rootfs/out", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(secret)},
		tar.Header{Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "rootfs/out/secret"},
		tar.Header{Name: "rootfs/h/", Typeflag: tar.TypeDir, Mode: 0o4777},
	)
	dst := t.TempDir()
	_, err := Extract(bytes.NewReader(archive), dst)
	if err == nil || !strings.Contains(err.Error(), "rootfs/h") {
		t.Errorf("Extract = %v, want an error naming rootfs/h", err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "rootfs/h")); err == nil {
		t.Error("rootfs/h was linked to the file outside")
	}
	unchanged(t, secret, before)
}

// Entries below a symbolic link the archive made, at any depth, are
// refused, and nothing appears in or changes about the directory the
// link points at.
func TestExtractThroughSymlinkedDir(t *testing.T) {
	for name, entry := range map[string]tar.Header{
		"file":       {Name: "rootfs/d/new", Typeflag: tar.TypeReg, Mode: 0o644},
		"deep file":  {Name: "rootfs/d/a/b/new", Typeflag: tar.TypeReg, Mode: 0o644},
		"dir":        {Name: "rootfs/d/new/", Typeflag: tar.TypeDir, Mode: 0o755},
		"symlink":    {Name: "rootfs/d/new", Typeflag: tar.TypeSymlink, Linkname: "/"},
		"fifo":       {Name: "rootfs/d/new", Typeflag: tar.TypeFifo, Mode: 0o666},
		"hard link":  {Name: "rootfs/d/new", Typeflag: tar.TypeLink, Linkname: "rootfs/f"},
		"dir itself": {Name: "rootfs/d/", Typeflag: tar.TypeDir, Mode: 0o777},
	} {
		t.Run(name, func(t *testing.T) {
			secret, before := outsideFile(t)
			outside := filepath.Dir(secret)
			dirBefore, _ := os.Lstat(outside)
			archive := tarOf(t,
				tar.Header{Name: "rootfs/f", Typeflag: tar.TypeReg, Mode: 0o644},
				tar.Header{Name: "rootfs/d", Typeflag: tar.TypeSymlink, Linkname: outside},
				entry,
			)
			_, err := Extract(bytes.NewReader(archive), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), entry.Name) {
				t.Errorf("Extract = %v, want an error naming %s", err, entry.Name)
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 1 {
				t.Errorf("the directory outside holds %v", entries)
			}
			unchanged(t, secret, before)
			unchanged(t, outside, dirBefore)
		})
	}
}

// Names and link targets that are absolute or climb with ".." are
// refused, even where they would come back inside, with an error that
// names the entry.
func TestExtractRefusesDotDotAndAbsolute(t *testing.T) {
	for _, h := range []tar.Header{
		{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "rootfs/../../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "rootfs/a/../b", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "../", Typeflag: tar.TypeDir, Mode: 0o777},
		{Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"},
		{Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "rootfs/a/../f"},
		{Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "/etc/passwd"},
	} {
		base := t.TempDir()
		dst := filepath.Join(base, "a", "dst")
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		archive := tarOf(t, tar.Header{Name: "rootfs/f", Typeflag: tar.TypeReg, Mode: 0o644}, h)
		_, err := Extract(bytes.NewReader(archive), dst)
		if err == nil || !strings.Contains(err.Error(), h.Name) {
			t.Errorf("%s → %q: Extract = %v, want an error naming it", h.Name, h.Linkname, err)
		}
		if entries, _ := os.ReadDir(filepath.Join(base, "a")); len(entries) != 1 {
			t.Errorf("%s: wrote beside the destination: %v", h.Name, entries)
		}
		if fi, _ := os.Stat(filepath.Join(base, "a")); fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: the destination's parent is now %v", h.Name, fi.Mode())
		}
	}
}

// WritePaths names entries relative to its directory, in lexical order,
// and writes every name of a linked file in full: an archive hashed to
// name it must not depend on how its files are linked.
func TestWritePaths(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "src/b"), 0o755))
	must(os.Chmod(filepath.Join(dir, "src"), 0o755))
	must(os.Chmod(filepath.Join(dir, "src/b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "src/z"), []byte("zz"), 0o755))
	must(os.Chmod(filepath.Join(dir, "src/z"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "src/b/a"), []byte("same"), 0o644))
	must(os.Chmod(filepath.Join(dir, "src/b/a"), 0o644))
	must(os.Link(filepath.Join(dir, "src/b/a"), filepath.Join(dir, "src/b/c")))
	must(os.Symlink("b/a", filepath.Join(dir, "src/link")))
	must(os.WriteFile(filepath.Join(dir, "cfg"), []byte("cfg"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "ignored"), []byte("no"), 0o600))

	var buf bytes.Buffer
	must(WritePaths(&buf, dir, "./src/", "cfg"))
	var got []string
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		data, err := io.ReadAll(tr)
		must(err)
		if hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s names its owner %q:%q", hdr.Name, hdr.Uname, hdr.Gname)
		}
		got = append(got, fmt.Sprintf("%s %c %o %s%s", hdr.Name, hdr.Typeflag, hdr.Mode, data, hdr.Linkname))
	}
	want := []string{
		"src/ 5 755 ", "src/b/ 5 755 ", "src/b/a 0 644 same", "src/b/c 0 644 same",
		"src/link 2 777 b/a", "src/z 0 755 zz", "cfg 0 600 cfg",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWritePathsMissing(t *testing.T) {
	if err := WritePaths(&bytes.Buffer{}, t.TempDir(), "nothing"); !os.IsNotExist(err) {
		t.Fatalf("WritePaths of a missing path = %v", err)
	}
}
