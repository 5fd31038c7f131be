package oci

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fuzzBase holds the fuzz target's trees: memory-backed where the machine
// has it, which makes a run several times faster than on a disk file
// system, so the fuzzer gets far within a few seconds.
var fuzzBase = func() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}()

// fuzzOutside is a fixed directory that seeds aim symlinks and paths at;
// an unpack must never create anything in it.
var fuzzOutside = filepath.Join(fuzzBase, "cube-unpack-fuzz-outside")

// FuzzUnpackLayers applies two arbitrary uncompressed layers under small
// limits. Whatever the bytes, unpacking must not panic, must write nothing
// outside its directory, and a tree it accepts must respect the limits.
func FuzzUnpackLayers(f *testing.F) {
	seeds := [][2][]ent{
		{{dir("etc/", 0o755), file("etc/passwd", 0o644, "root:x:0:0::/root:/bin/sh\n")}, nil},
		{{symlink("out", fuzzOutside), symlink("up", "../../../../../../.."+fuzzOutside)}, {file("out/a", 0o644, "a"), file("up/b", 0o644, "b")}},
		{{file("../../../../"+fuzzOutside+"/c", 0o644, "c")}, nil},
		{{file("f", 0o644, "x"), hardlink("h", "f"), hardlink("h2", "../../../etc/passwd")}, {file(".wh.f", 0o644, ""), dir("d/", 0o555), file("d/.wh..wh..opq", 0o644, "")}},
		{{symlink("loop", "loop")}, {file("loop/x", 0o644, "x")}},
	}
	for _, s := range seeds {
		f.Add(tarOfF(f, s[0]...), tarOfF(f, s[1]...))
	}
	f.Add(sparseTar("pax"), []byte(nil))
	f.Add(sparseTar("gnu"), []byte(nil))

	lim := Limits{MaxBytes: 1 << 20, MaxFileBytes: 64 << 10}
	f.Fuzz(func(t *testing.T, l1, l2 []byte) {
		if err := os.MkdirAll(fuzzOutside, 0o755); err != nil {
			t.Fatal(err)
		}
		box, err := os.MkdirTemp(fuzzBase, "cube-unpack-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		defer removeTree(box)
		root := filepath.Join(box, "rootfs")
		if err := os.Mkdir(root, 0o700); err != nil {
			t.Fatal(err)
		}
		// The core of Unpack without the image around it (digests, the
		// final rename), which would only slow each run down.
		u := newUnpacker(root, lim)
		err = u.applyTar(bytes.NewReader(l1))
		if err == nil && l2 != nil {
			err = u.applyTar(bytes.NewReader(l2))
		}
		if err == nil {
			err = u.finishDirs()
		}

		if got := dirEntries(t, fuzzOutside); len(got) != 0 {
			for _, n := range got {
				os.RemoveAll(filepath.Join(fuzzOutside, n))
			}
			t.Fatalf("unpack wrote %v outside its directory (err %v)", got, err)
		}
		if got := dirEntries(t, box); len(got) != 1 || got[0] != "rootfs" {
			t.Fatalf("unpack left %v beside rootfs/", got)
		}
		// Limits hold for what a failed unpack wrote, too.
		var total int64
		seen := map[uint64]bool{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			st, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Size() > lim.MaxFileBytes {
				t.Errorf("%s has %d bytes, over the file limit", p, st.Size())
			}
			if ino := st.Sys().(*syscall.Stat_t).Ino; !seen[ino] {
				seen[ino] = true
				total += st.Size()
			}
			return nil
		})
		if total > lim.MaxBytes {
			t.Errorf("tree holds %d bytes, over the image limit", total)
		}
	})
}

// tarOfF is tarOf for the seed corpus (nil for no entries: no layer).
func tarOfF(f *testing.F, ents ...ent) []byte {
	if len(ents) == 0 {
		return nil
	}
	return tarOf(f, ents...)
}
