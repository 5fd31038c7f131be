package oci

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// buildTree makes a small rootfs on disk with everything WriteArchive must
// keep: modes with setuid/setgid/sticky, a hard link, symlinks, a read-only
// directory, non-root owners (when root) and a FIFO it should carry along.
func buildTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	mk := func(rel string, mode uint32, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/bin/su", 0o4755, "su")
	mk("usr/bin/wall", 0o2755, "wall")
	mk("etc/os-release", 0o644, "ID=debian\n")
	mk("home/user/.bashrc", 0o644, "PS1='$ '\n")
	os.Link(filepath.Join(root, "usr/bin/su"), filepath.Join(root, "usr/bin/su-again"))
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	os.Symlink("/etc/os-release", filepath.Join(root, "os-release"))
	os.MkdirAll(filepath.Join(root, "tmp"), 0o755)
	syscall.Chmod(filepath.Join(root, "tmp"), 0o1777)
	mk("ro/file", 0o444, "r")
	syscall.Chmod(filepath.Join(root, "ro"), 0o555)
	t.Cleanup(func() { os.Chmod(filepath.Join(root, "ro"), 0o755) })
	if err := syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if isRoot() {
		for _, p := range []string{"home/user", "home/user/.bashrc"} {
			if err := os.Lchown(filepath.Join(root, p), 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func TestWriteArchiveRoundTrip(t *testing.T) {
	for _, gz := range []bool{false, true} {
		name := "uncompressed"
		if gz {
			name = "gzip"
		}
		t.Run(name, func(t *testing.T) {
			src := buildTree(t)
			out := filepath.Join(t.TempDir(), "image.tar")
			cfg := ImageConfig{
				Env:          []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
				WorkingDir:   "/home/user",
				ExposedPorts: []int{49983, 49999},
			}
			created := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
			if err := WriteArchive(src, out, cfg, ArchiveOptions{Gzip: gz, Created: created}); err != nil {
				t.Fatal(err)
			}
			if got := dirEntries(t, filepath.Dir(out)); !reflect.DeepEqual(got, []string{"image.tar"}) {
				t.Errorf("output directory holds %v, want only image.tar (no temp files)", got)
			}

			img, err := Open(context.Background(), Source{Kind: KindOCIArchive, Path: out}, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rf, err := Unpack(context.Background(), img, rootsDir(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rf.Config, cfg) {
				t.Errorf("config = %+v, want %+v", rf.Config, cfg)
			}
			want := listTree(t, src, isRoot())
			// FIFOs travel in the archive but are not unpacked.
			for i, l := range want {
				if strings.HasPrefix(l, "fifo ?") {
					want = append(want[:i], want[i+1:]...)
					break
				}
			}
			diffLines(t, listTree(t, rf.Dir, isRoot()), want)
			a, _ := os.Stat(filepath.Join(rf.Dir, "usr/bin/su"))
			b, _ := os.Stat(filepath.Join(rf.Dir, "usr/bin/su-again"))
			if !os.SameFile(a, b) {
				t.Error("hard link not preserved")
			}
			sa, _ := os.Stat(filepath.Join(src, "etc/os-release"))
			sb, _ := os.Stat(filepath.Join(rf.Dir, "etc/os-release"))
			if sa.ModTime().Unix() != sb.ModTime().Unix() {
				t.Errorf("mtime %v, want %v", sb.ModTime(), sa.ModTime())
			}

			// go-containerregistry's own validator agrees the image is sound
			// (it reads layers only as gzip; Unpack checked the plain one).
			lay := filepath.Join(t.TempDir(), "layout")
			untar(t, out, lay)
			idx, err := layout.ImageIndexFromPath(lay)
			if err != nil {
				t.Fatal(err)
			}
			m, err := idx.IndexManifest()
			if err != nil || len(m.Manifests) != 1 || m.Manifests[0].Annotations[refNameAnnotation] != "latest" {
				t.Fatalf("index = %+v, %v; want one image tagged latest", m, err)
			}
			vimg, err := idx.Image(m.Manifests[0].Digest)
			if err != nil {
				t.Fatal(err)
			}
			var vopts []validate.Option
			if !gz {
				vopts = append(vopts, validate.Fast)
			}
			if err := validate.Image(vimg, vopts...); err != nil {
				t.Errorf("validate.Image: %v", err)
			}
			cf, _ := vimg.ConfigFile()
			if !cf.Created.Time.Equal(created) || cf.OS != "linux" || cf.Architecture != "amd64" {
				t.Errorf("config created=%v os=%s arch=%s", cf.Created, cf.OS, cf.Architecture)
			}
		})
	}
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, h.Name)
		if h.Typeflag == tar.TypeDir {
			os.MkdirAll(p, 0o755)
			continue
		}
		os.MkdirAll(filepath.Dir(p), 0o755)
		w, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(w, tr)
		w.Close()
	}
}

func TestWriteArchiveErrors(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.tar")
	if err := WriteArchive("/does/not/exist", out, ImageConfig{}, ArchiveOptions{}); err == nil {
		t.Error("WriteArchive of a missing directory succeeded")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Error("a failed WriteArchive left its output behind")
	}
}
