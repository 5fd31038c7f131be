package treecopy

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fuzzBase holds the fuzz target's trees: memory-backed where the machine
// has it, so the fuzzer gets far within a few seconds.
var fuzzBase = func() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}()

// fuzzOutside is a fixed directory the seeds aim symbolic links, hard
// links and names at. It holds one file, fuzzSecret, whose mode, owner
// and time an extraction must never change.
var (
	fuzzOutside = filepath.Join(fuzzBase, "cube-treecopy-fuzz-outside")
	fuzzSecret  = filepath.Join(fuzzOutside, "secret")
	fuzzTime    = time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
)

// FuzzExtract extracts arbitrary archives. Whatever the bytes, Extract
// must not panic and must write nothing outside its directory: nothing
// new beside it or in fuzzOutside, and no change to fuzzSecret or to
// fuzzOutside itself.
func FuzzExtract(f *testing.F) {
	seeds := [][]tar.Header{
		{{Name: "rootfs/", Typeflag: tar.TypeDir, Mode: 0o755}, {Name: "rootfs/f", Typeflag: tar.TypeReg, Mode: 0o4755}, {Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "rootfs/f"}},
		{{Name: "rootfs/x", Typeflag: tar.TypeSymlink, Linkname: fuzzSecret}, {Name: "rootfs/x/", Typeflag: tar.TypeDir, Mode: 0o4777}},
		{{Name: "rootfs/x", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../.." + fuzzSecret}, {Name: "rootfs/x/", Typeflag: tar.TypeDir, Mode: 0o4777}},
		{{Name: "rootfs/d", Typeflag: tar.TypeSymlink, Linkname: fuzzOutside}, {Name: "rootfs/d/", Typeflag: tar.TypeDir, Mode: 0o777}, {Name: "rootfs/d/new", Typeflag: tar.TypeReg, Mode: 0o644}},
		{{Name: "rootfs/d", Typeflag: tar.TypeSymlink, Linkname: fuzzOutside}, {Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "rootfs/d/secret"}, {Name: "rootfs/h/", Typeflag: tar.TypeDir, Mode: 0o4777}},
		{{Name: "rootfs/d", Typeflag: tar.TypeSymlink, Linkname: fuzzOutside}, {Name: "rootfs/d/p", Typeflag: tar.TypeFifo, Mode: 0o666}, {Name: "rootfs/d/l", Typeflag: tar.TypeSymlink, Linkname: "/"}},
		{{Name: "../x", Typeflag: tar.TypeReg, Mode: 0o644}, {Name: "./", Typeflag: tar.TypeDir, Mode: 0o777}, {Name: "../", Typeflag: tar.TypeDir, Mode: 0o777}},
		{{Name: "rootfs/h", Typeflag: tar.TypeLink, Linkname: "../../../../../../../.." + fuzzSecret}},
	}
	for _, s := range seeds {
		f.Add(tarOf(f, s...))
	}

	f.Fuzz(func(t *testing.T, archive []byte) {
		outsideBefore, secretBefore := fuzzSetOutside(t)
		box, err := os.MkdirTemp(fuzzBase, "cube-treecopy-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(box)
		dst := filepath.Join(box, "dst")
		if err := os.Mkdir(dst, 0o700); err != nil {
			t.Fatal(err)
		}
		boxBefore, _ := os.Lstat(box)

		_, err = Extract(bytes.NewReader(archive), dst)

		if names := dirNames(t, fuzzOutside); !slices.Equal(names, []string{"secret"}) {
			for _, n := range names {
				if n != "secret" {
					os.RemoveAll(filepath.Join(fuzzOutside, n))
				}
			}
			t.Fatalf("extract wrote %v outside its directory (err %v)", names, err)
		}
		if names := dirNames(t, box); !slices.Equal(names, []string{"dst"}) {
			t.Fatalf("extract left %v beside its directory (err %v)", names, err)
		}
		unchanged(t, fuzzSecret, secretBefore)
		unchanged(t, fuzzOutside, outsideBefore)
		unchanged(t, box, boxBefore)
		if t.Failed() {
			os.RemoveAll(fuzzOutside)
		}
	})
}

// fuzzSetOutside makes fuzzOutside and fuzzSecret as they should be and
// returns what they look like.
func fuzzSetOutside(t *testing.T) (dir, secret os.FileInfo) {
	if err := os.MkdirAll(fuzzOutside, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(fuzzSecret); err != nil {
		if err := os.WriteFile(fuzzSecret, []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(fuzzSecret, fuzzTime, fuzzTime); err != nil {
			t.Fatal(err)
		}
	}
	dir, err := os.Lstat(fuzzOutside)
	if err != nil {
		t.Fatal(err)
	}
	secret, err = os.Lstat(fuzzSecret)
	if err != nil {
		t.Fatal(err)
	}
	return dir, secret
}

func dirNames(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
