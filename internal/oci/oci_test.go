package oci

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestParseSource(t *testing.T) {
	good := []struct {
		in   string
		want Source
	}{
		{"docker.io/library/python:3.12-slim", Source{Kind: KindRegistry, Ref: "index.docker.io/library/python:3.12-slim"}},
		{"python", Source{Kind: KindRegistry, Ref: "index.docker.io/library/python:latest"}},
		{"localhost:5000/x:tag", Source{Kind: KindRegistry, Ref: "localhost:5000/x:tag"}},
		{"docker://localhost:5000/x:tag", Source{Kind: KindRegistry, Ref: "localhost:5000/x:tag"}},
		{"ghcr.io/o/r@sha256:" + strings.Repeat("a", 64), Source{Kind: KindRegistry, Ref: "ghcr.io/o/r@sha256:" + strings.Repeat("a", 64)}},
		{"oci-archive:/tmp/img.tar", Source{Kind: KindOCIArchive, Path: "/tmp/img.tar"}},
		{"oci-archive:/tmp/img.tar:v2", Source{Kind: KindOCIArchive, Path: "/tmp/img.tar", Tag: "v2"}},
		{"docker-archive:img.tar", Source{Kind: KindDockerArchive, Path: "img.tar"}},
		{"oci:/srv/layout", Source{Kind: KindOCILayout, Path: "/srv/layout"}},
		{"oci:/srv/layout:v1", Source{Kind: KindOCILayout, Path: "/srv/layout", Tag: "v1"}},
		{"oci:rel/dir", Source{Kind: KindOCILayout, Path: "rel/dir"}},
	}
	for _, c := range good {
		got, err := ParseSource(c.in)
		if err != nil {
			t.Errorf("ParseSource(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseSource(%q) = %+v, want %+v", c.in, got, c.want)
		}
		if again, err := ParseSource(got.String()); err != nil || again != got {
			t.Errorf("ParseSource(%q.String()=%q) = %+v, %v; want it back", c.in, got.String(), again, err)
		}
	}
	bad := map[string]string{
		"":                         "empty",
		"oci-archive:":             "names no path",
		"oci:":                     "names no path",
		"http://example.com/x":     "unknown transport",
		"UPPER/case:tag":           "could not parse reference",
		"localhost:5000/x:bad tag": "",
		"ghcr.io/o/r@sha256:abc":   "",
	}
	for in, msg := range bad {
		_, err := ParseSource(in)
		if err == nil {
			t.Errorf("ParseSource(%q) succeeded, want an error", in)
			continue
		}
		if !errors.Is(err, ErrBadReference) || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSource(%q) = %v, want ErrBadReference mentioning %q", in, err, msg)
		}
	}
}

func TestPullAndUnpackFromRegistry(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	ref := reg.push(t, "tests/fixture:v1", img)
	cache := t.TempDir()
	ctx := context.Background()

	src, err := ParseSource(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := Open(ctx, src, reg.trusted(PullOptions{CacheDir: cache}))
	if err != nil {
		t.Fatal(err)
	}
	roots := rootsDir(t)
	var calls int
	var last, lastTotal int64
	rf, err := Unpack(ctx, pulled, roots, func(done, total int64) {
		if done < last || done > total {
			t.Errorf("progress went from %d to %d of %d", last, done, total)
		}
		calls++
		last, lastTotal = done, total
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls == 0 || last != lastTotal {
		t.Errorf("progress ended at %d of %d after %d calls, want done == total", last, lastTotal, calls)
	}
	id, _ := img.ConfigName()
	if rf.Digest != id || rf.Dir != filepath.Join(roots, id.Hex) {
		t.Errorf("rootfs %s at %s, want %s at %s", rf.Digest, rf.Dir, id, filepath.Join(roots, id.Hex))
	}
	checkTree(t, rf.Dir, wantTree)
	if got := dirEntries(t, roots); !reflect.DeepEqual(got, []string{id.Hex}) {
		t.Errorf("rootfs directory holds %v, want only %s", got, id.Hex)
	}
	want := ImageConfig{
		Entrypoint:   []string{"/bin/tool"},
		Cmd:          []string{"python3", "-m", "http.server"},
		Env:          []string{"PATH=/usr/bin:/bin", "FOO=bar"},
		WorkingDir:   "/data",
		User:         "1000:1000",
		ExposedPorts: []int{53, 8000},
	}
	if !reflect.DeepEqual(rf.Config, want) {
		t.Errorf("config = %+v, want %+v", rf.Config, want)
	}
	if n := reg.layerGets(t, img); n != 3 {
		t.Errorf("first pull fetched layers %d times, want 3", n)
	}

	// Hard links share an inode; times survive.
	a, _ := os.Stat(filepath.Join(rf.Dir, "hl/orig"))
	b, _ := os.Stat(filepath.Join(rf.Dir, "hl/link"))
	if !os.SameFile(a, b) {
		t.Error("hl/link is not a hard link to hl/orig")
	}
	for _, p := range []string{"etc/passwd", "ro", "data"} {
		st, err := os.Stat(filepath.Join(rf.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		if !st.ModTime().Equal(testMtime) {
			t.Errorf("%s mtime %v, want %v", p, st.ModTime(), testMtime)
		}
	}

	// A second pull of the same image, into a fresh rootfs directory so
	// every layer is read again, comes entirely from the cache.
	pulled2, err := Open(ctx, src, reg.trusted(PullOptions{CacheDir: cache}))
	if err != nil {
		t.Fatal(err)
	}
	rf2, err := Unpack(ctx, pulled2, rootsDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, rf2.Dir, wantTree)
	if n := reg.layerGets(t, img); n != 3 {
		t.Errorf("second pull fetched layers again: %d layer GETs in total, want 3", n)
	}

	// Fetch of a fully cached image downloads nothing.
	if err := Fetch(ctx, pulled2, nil); err != nil {
		t.Fatal(err)
	}
	if n := reg.layerGets(t, img); n != 3 {
		t.Errorf("Fetch of a cached image fetched layers: %d layer GETs in total, want 3", n)
	}

	// Unpacking into the same directory reuses the tree as it is.
	marker := filepath.Join(rf.Dir, "etc", "marker")
	os.WriteFile(marker, nil, 0o644)
	rf3, err := Unpack(ctx, pulled2, roots, nil)
	if err != nil || rf3.Dir != rf.Dir {
		t.Fatalf("re-unpack: %v, %s", err, rf3.Dir)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("re-unpack rebuilt the rootfs instead of reusing it")
	}
}

func TestUnpackOwnership(t *testing.T) {
	if !isRoot() {
		t.Skip("ownership needs root")
	}
	img := testImage(t)
	rf, err := Unpack(context.Background(), img, rootsDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string][2]uint32{"data": {1000, 1000}, "data/a.txt": {1000, 1000}, "bin/tool": {0, 0}} {
		st, err := os.Lstat(filepath.Join(rf.Dir, p))
		if err != nil {
			t.Fatal(err)
		}
		s := st.Sys().(*syscall.Stat_t)
		if s.Uid != want[0] || s.Gid != want[1] {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, s.Uid, s.Gid, want[0], want[1])
		}
	}
	// chown clears setuid; it must have been applied after.
	st, _ := os.Stat(filepath.Join(rf.Dir, "bin/tool"))
	if st.Mode()&os.ModeSetuid == 0 {
		t.Error("bin/tool lost its setuid bit")
	}
}

// writeLocalForms writes img in each local source form and returns the
// references.
func writeLocalForms(t *testing.T, img v1.Image) map[string]string {
	t.Helper()
	dir := t.TempDir()
	out := map[string]string{}

	// An OCI layout holding two images; the fixture is tagged v1.
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	other := imageOf(t, []v1.Layer{gzipLayer(t, tarOf(t, file("other", 0o644, "o")))}, v1.Config{})
	if err := lp.AppendImage(other, layout.WithAnnotations(map[string]string{refNameAnnotation: "other"})); err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{refNameAnnotation: "v1"})); err != nil {
		t.Fatal(err)
	}
	out["oci-dir"] = "oci:" + string(lp) + ":v1"
	tagged := filepath.Join(dir, "tagged.oci.tar")
	tarDir(t, string(lp), tagged)
	out["oci-archive-tagged"] = "oci-archive:" + tagged + ":v1"

	// A single-image layout, also packed as an oci-archive.
	single, err := layout.Write(filepath.Join(dir, "single"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := single.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	out["oci-dir-untagged"] = "oci:" + string(single)
	archive := filepath.Join(dir, "image.oci.tar")
	tarDir(t, string(single), archive)
	out["oci-archive"] = "oci-archive:" + archive

	// docker save output.
	tag, _ := name.NewTag("example.com/fixture:v1")
	da := filepath.Join(dir, "image.docker.tar")
	if err := tarball.WriteToFile(da, tag, img); err != nil {
		t.Fatal(err)
	}
	out["docker-archive"] = "docker-archive:" + da
	return out
}

// tarDir packs a directory the way `tar -C dir -cf out .` would.
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = "./" + filepath.ToSlash(rel)
		if fi.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLocalSourceForms(t *testing.T) {
	img := testImage(t)
	id, _ := img.ConfigName()
	ctx := context.Background()
	for form, ref := range writeLocalForms(t, img) {
		t.Run(form, func(t *testing.T) {
			src, err := ParseSource(ref)
			if err != nil {
				t.Fatal(err)
			}
			opened, err := Open(ctx, src, PullOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rf, err := Unpack(ctx, opened, rootsDir(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			if rf.Digest != id {
				t.Errorf("image ID %s, want %s (the same image in any form shares a rootfs)", rf.Digest, id)
			}
			checkTree(t, rf.Dir, wantTree)
			if rf.Config.WorkingDir != "/data" || len(rf.Config.Env) != 2 {
				t.Errorf("config = %+v", rf.Config)
			}
		})
	}
}

func TestLocalSourceErrors(t *testing.T) {
	img := testImage(t)
	forms := writeLocalForms(t, img)
	layoutDir := strings.TrimSuffix(strings.TrimPrefix(forms["oci-dir"], "oci:"), ":v1")
	notTar := filepath.Join(t.TempDir(), "not.tar")
	os.WriteFile(notTar, []byte("hello, this is not a tar archive at all"), 0o644)
	cases := []struct {
		ref  string
		is   error
		text string
	}{
		{"oci:" + layoutDir + ":nope", ErrNotFound, `no image tagged "nope" (tags: other, v1)`},
		{"oci:" + layoutDir, ErrNotFound, "holds 2 images; name one with oci:DIR:TAG"},
		{"oci:/does/not/exist", ErrNotFound, "/does/not/exist does not exist"},
		{"oci-archive:" + layoutDir, ErrNotFound, "is a directory, not an archive"},
		{"oci-archive:" + notTar, nil, "not a readable tar archive"},
		{"docker-archive:" + strings.TrimPrefix(forms["oci-archive"], "oci-archive:"), ErrNotFound, "not a docker-save archive"},
		{"docker-archive:/no/such.tar", ErrNotFound, "does not exist"},
	}
	for _, c := range cases {
		src, err := ParseSource(c.ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(context.Background(), src, PullOptions{})
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("Open(%s) = %v, want an error like %q", c.ref, err, c.text)
		}
	}
}

func TestRegistryErrors(t *testing.T) {
	reg := newTestRegistry(t)
	ctx := context.Background()
	open := func(ref string, o PullOptions) error {
		src, err := ParseSource(ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Open(ctx, src, o)
		return err
	}

	err := open(reg.host()+"/no/such:image", reg.trusted(PullOptions{}))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "image not found") {
		t.Errorf("missing image: %v, want image not found", err)
	}

	addr := closedAddr(t)
	err = open(addr+"/x:latest", PullOptions{})
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "registry unreachable at "+addr) {
		t.Errorf("closed port: %v, want registry unreachable at %s", err, addr)
	}

	ref := reg.push(t, "private/img:v1", testImage(t))
	reg.mu.Lock()
	reg.user, reg.pass = "alice", "s3cret"
	reg.mu.Unlock()
	err = open(ref, reg.trusted(PullOptions{}))
	if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "unauthorized") {
		t.Errorf("anonymous pull of a private image: %v, want unauthorized", err)
	}
	err = open(ref, reg.trusted(PullOptions{Username: "alice", Password: "wrong"}))
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("wrong password: %v, want unauthorized", err)
	}
	if err := open(ref, reg.trusted(PullOptions{Username: "alice", Password: "s3cret"})); err != nil {
		t.Errorf("pull with credentials: %v", err)
	}
}

func TestCorruptLayerFromRegistry(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	ref := reg.push(t, "tests/corrupt:v1", img)
	ls, _ := img.Layers()
	d, _ := ls[1].Digest()
	reg.mu.Lock()
	reg.corrupt[d.String()] = true
	reg.mu.Unlock()

	src, _ := ParseSource(ref)
	cache := t.TempDir()
	pulled, err := Open(context.Background(), src, reg.trusted(PullOptions{CacheDir: cache}))
	if err != nil {
		t.Fatal(err)
	}
	roots := rootsDir(t)
	_, err = Unpack(context.Background(), pulled, roots, nil)
	if err == nil {
		t.Fatal("unpacking a corrupt layer succeeded")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), d.String()) {
		t.Errorf("Unpack = %v, want ErrCorrupt naming the layer %s", err, d)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a failed unpack, want nothing", got)
	}
	if _, err := os.Stat(filepath.Join(cache, "blobs", "sha256", d.Hex)); !os.IsNotExist(err) {
		t.Errorf("corrupt layer entered the cache (stat: %v)", err)
	}
	if got := dirEntries(t, filepath.Join(cache, "blobs", "sha256")); len(got) != 1 {
		t.Errorf("cache holds %v, want just the one good layer read before the bad one", got)
	}
}

func TestCorruptLayerInLayout(t *testing.T) {
	img := testImage(t)
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	d, _ := ls[2].Digest()
	blob := filepath.Join(dir, "blobs", "sha256", d.Hex)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x01
	os.WriteFile(blob, b, 0o644)

	opened, err := Open(context.Background(), Source{Kind: KindOCILayout, Path: dir}, PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := rootsDir(t)
	_, err = Unpack(context.Background(), opened, roots, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), d.String()) {
		t.Fatalf("Unpack = %v, want ErrCorrupt naming %s", err, d)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a failed unpack", got)
	}
}

func TestDiffIDMismatch(t *testing.T) {
	// A config that promises different layer content than the layer has:
	// the compressed blob is intact, so only the diffID check can catch it.
	good := testImage(t)
	cf, _ := good.ConfigFile()
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	bad, err := mutate.ConfigFile(good, cf)
	if err != nil {
		t.Fatal(err)
	}
	roots := rootsDir(t)
	_, err = Unpack(context.Background(), bad, roots, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "layer 1 of 3") {
		t.Fatalf("Unpack = %v, want ErrCorrupt for layer 1", err)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a failed unpack", got)
	}
}

func TestPathTraversalRejected(t *testing.T) {
	outside := t.TempDir()
	cases := map[string][]ent{
		"dotdot":   {file("../../../../../../"+outside+"/pwned", 0o644, "x")},
		"nested":   {dir("a/", 0o755), file("a/../../pwned", 0o644, "x")},
		"hardlink": {hardlink("passwd", "../../../../etc/passwd")},
	}
	for n, ents := range cases {
		t.Run(n, func(t *testing.T) {
			img := imageOf(t, []v1.Layer{gzipLayer(t, tarOf(t, ents...))}, v1.Config{})
			roots := rootsDir(t)
			_, err := Unpack(context.Background(), img, roots, nil)
			if !errors.Is(err, ErrUnsafeLayer) || !strings.Contains(err.Error(), "outside the root filesystem") {
				t.Fatalf("Unpack = %v, want ErrUnsafeLayer", err)
			}
			if got := dirEntries(t, roots); len(got) != 0 {
				t.Errorf("rootfs directory holds %v after a rejected layer", got)
			}
			if got := dirEntries(t, outside); len(got) != 0 {
				t.Errorf("layer wrote %v outside the rootfs", got)
			}
		})
	}
}

func TestSymlinksStayInside(t *testing.T) {
	// Symlinks that point out of the tree are fine to create (they are
	// resolved inside the sandbox), but later entries written through them
	// must land inside the rootfs.
	outside := t.TempDir()
	l1 := tarOf(t, symlink("up", "../../../../../.."+outside), symlink("abs", outside), symlink("loop", "loop"))
	l2 := tarOf(t, file("up/a", 0o644, "a"), file("abs/b", 0o644, "b"))
	img := imageOf(t, []v1.Layer{gzipLayer(t, l1), gzipLayer(t, l2)}, v1.Config{})
	rf, err := Unpack(context.Background(), img, rootsDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, outside); len(got) != 0 {
		t.Errorf("layer wrote %v outside the rootfs", got)
	}
	want := []string{
		"abs l " + outside,
		strings.TrimPrefix(outside, "/") + "/a f 0644 a",
		strings.TrimPrefix(outside, "/") + "/b f 0644 b",
		"loop l loop",
		"up l ../../../../../.." + outside,
	}
	sort.Strings(want)
	got := listTree(t, rf.Dir, false)
	// Parent directories created on the way are listed too; keep files
	// and links only.
	var kept []string
	for _, l := range got {
		if !strings.Contains(l, " d ") {
			kept = append(kept, l)
		}
	}
	diffLines(t, kept, want)

	// A file written through a self-referencing link is an error, not a hang.
	img2 := imageOf(t, []v1.Layer{gzipLayer(t, l1), gzipLayer(t, tarOf(t, file("loop/x", 0o644, "x")))}, v1.Config{})
	if _, err := Unpack(context.Background(), img2, rootsDir(t), nil); err == nil {
		t.Error("writing through a symlink loop succeeded")
	}
}

func TestUnpackCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	roots := rootsDir(t)
	_, err := Unpack(ctx, testImage(t), roots, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Unpack = %v, want context.Canceled", err)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a cancelled unpack", got)
	}
}

func TestSweep(t *testing.T) {
	roots := rootsDir(t)
	os.MkdirAll(filepath.Join(roots, ".tmp-abc-1", "x"), 0o755)
	os.MkdirAll(filepath.Join(roots, "abcdef"), 0o755)
	if err := Sweep(roots); err != nil {
		t.Fatal(err)
	}
	if got := dirEntries(t, roots); !reflect.DeepEqual(got, []string{"abcdef"}) {
		t.Errorf("after Sweep: %v, want [abcdef]", got)
	}
}

func TestMultiPlatformIndex(t *testing.T) {
	amd := imageOf(t, []v1.Layer{gzipLayer(t, tarOf(t, file("arch", 0o644, "amd64")))}, v1.Config{})
	arm := imageOf(t, []v1.Layer{gzipLayer(t, tarOf(t, file("arch", 0o644, "arm64")))}, v1.Config{})
	armCfg, _ := arm.ConfigFile()
	armCfg = armCfg.DeepCopy()
	armCfg.Architecture = "arm64"
	arm, _ = mutate.ConfigFile(arm, armCfg)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	reg := newTestRegistry(t)
	ref, err := name.ParseReference(reg.host() + "/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(t.TempDir(), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{refNameAnnotation: "v1"})); err != nil {
		t.Fatal(err)
	}
	for _, src := range []Source{{Kind: KindRegistry, Ref: ref.Name()}, {Kind: KindOCILayout, Path: string(lp), Tag: "v1"}} {
		img, err := Open(context.Background(), src, reg.trusted(PullOptions{}))
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		rf, err := Unpack(context.Background(), img, rootsDir(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(rf.Dir, "arch")); string(b) != "amd64" {
			t.Errorf("%s: unpacked the %q image, want amd64", src, b)
		}
		_, err = Open(context.Background(), src, reg.trusted(PullOptions{Platform: v1.Platform{OS: "linux", Architecture: "s390x"}}))
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "s390x") {
			t.Errorf("%s for s390x: %v, want image not found naming the platform", src, err)
		}
	}

	// A plain (single-platform) image for another architecture.
	armRef := reg.push(t, "armonly:v1", arm)
	_, err = Open(context.Background(), Source{Kind: KindRegistry, Ref: armRef}, reg.trusted(PullOptions{}))
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "built for linux/arm64, not linux/amd64") {
		t.Errorf("arm64-only image: %v, want an error naming both platforms", err)
	}
}

func TestFetchThenUnpack(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	ref := reg.push(t, "tests/fetch:v1", img)
	ctx := context.Background()
	pulled, err := Open(ctx, Source{Kind: KindRegistry, Ref: ref}, reg.trusted(PullOptions{CacheDir: t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	var last, total int64
	if err := Fetch(ctx, pulled, func(d, t int64) { last, total = d, t }); err != nil {
		t.Fatal(err)
	}
	if n := reg.layerGets(t, img); n != 3 || last != total || total == 0 {
		t.Errorf("Fetch: %d layer GETs (want 3), progress %d of %d", n, last, total)
	}
	rf, err := Unpack(ctx, pulled, rootsDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, rf.Dir, wantTree)
	if n := reg.layerGets(t, img); n != 3 {
		t.Errorf("Unpack after Fetch downloaded again: %d layer GETs, want 3", n)
	}
}

func TestDamagedCacheEntry(t *testing.T) {
	reg := newTestRegistry(t)
	img := testImage(t)
	ref := reg.push(t, "tests/cache:v1", img)
	ctx := context.Background()
	cache := t.TempDir()
	open := func() v1.Image {
		pulled, err := Open(ctx, Source{Kind: KindRegistry, Ref: ref}, reg.trusted(PullOptions{CacheDir: cache}))
		if err != nil {
			t.Fatal(err)
		}
		return pulled
	}
	if err := Fetch(ctx, open(), nil); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	d, _ := ls[0].Digest()
	blob := filepath.Join(cache, "blobs", "sha256", d.Hex)
	b, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x55
	os.WriteFile(blob, b, 0o600)

	roots := rootsDir(t)
	_, err = Unpack(ctx, open(), roots, nil)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "removed it from the cache") {
		t.Fatalf("Unpack from a damaged cache = %v, want ErrCorrupt saying the entry was dropped", err)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a failed unpack", got)
	}
	// The next attempt downloads the layer again and succeeds.
	rf, err := Unpack(ctx, open(), roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, rf.Dir, wantTree)
	if n := reg.layerGets(t, img); n != 4 {
		t.Errorf("%d layer GETs, want 4 (three, then the damaged one again)", n)
	}
}
