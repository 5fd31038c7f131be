package oci

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ent describes one tar member of a test layer.
type ent struct {
	name     string
	typ      byte
	mode     int64
	uid, gid int
	body     string // file content, or link target
}

var testMtime = time.Date(2023, 5, 6, 7, 8, 9, 0, time.UTC)

func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: testMtime}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeSymlink, tar.TypeLink:
			h.Linkname = e.body
		case tar.TypeChar:
			h.Devmajor, h.Devminor = 1, 3
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func dir(n string, mode int64) ent { return ent{name: n, typ: tar.TypeDir, mode: mode} }
func file(n string, mode int64, b string) ent {
	return ent{name: n, typ: tar.TypeReg, mode: mode, body: b}
}
func symlink(n, target string) ent {
	return ent{name: n, typ: tar.TypeSymlink, mode: 0o777, body: target}
}
func hardlink(n, target string) ent {
	return ent{name: n, typ: tar.TypeLink, mode: 0o644, body: target}
}
func owned(e ent, uid, gid int) ent { e.uid, e.gid = uid, gid; return e }

func gzipLayer(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func zstdLayer(t *testing.T, b []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func imageOf(t *testing.T, layers []v1.Layer, cfg v1.Config) v1.Image {
	t.Helper()
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = cfg
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// testImage is the fixture most tests pull: three layers (gzip, zstd and
// uncompressed) with a whiteout, an opaque directory, a hard link, symlinks
// (one absolute, which must stay inside the rootfs), setuid, sticky and
// read-only directories, owners, a device node and a FIFO.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	l1 := tarOf(t,
		dir("etc/", 0o755),
		file("etc/passwd", 0o644, "root:x:0:0::/root:/bin/sh\n"),
		dir("bin/", 0o755),
		file("bin/tool", 0o4755, "#!/bin/sh\n"),
		file("bin/grp", 0o2711, "g"),
		owned(dir("data/", 0o750), 1000, 1000),
		owned(file("data/a.txt", 0o640, "old"), 1000, 1000),
		file("data/keep", 0o644, "keep"),
		dir("opq/", 0o755),
		file("opq/old1", 0o644, "1"),
		dir("opq/sub/", 0o755),
		file("opq/sub/old2", 0o644, "2"),
		file("gone.txt", 0o644, "bye"),
		dir("hl/", 0o755),
		file("hl/orig", 0o600, "hard"),
		hardlink("hl/link", "hl/orig"),
		dir("usr/", 0o755),
		dir("usr/lib/", 0o755),
		file("usr/lib/libx.so", 0o755, "x"),
		symlink("lib", "usr/lib"),
		dir("sticky/", 0o1777),
		dir("ro/", 0o555),
		file("ro/file", 0o444, "r"),
		symlink("abs", "/etc"),
	)
	l2 := tarOf(t,
		file(".wh.gone.txt", 0o644, ""),
		dir("opq/", 0o755),
		file("opq/early", 0o644, "e"),
		file("opq/.wh..wh..opq", 0o644, ""),
		file("opq/new", 0o644, "n"),
		file("lib/libnew.so", 0o755, "new"),
		ent{name: "dev/null", typ: tar.TypeChar, mode: 0o666},
		ent{name: "fifo", typ: tar.TypeFifo, mode: 0o644},
		file("ro/extra", 0o444, "x"),
	)
	l3 := tarOf(t,
		owned(file("data/a.txt", 0o600, "new"), 1000, 1000),
		file("abs/evil", 0o644, "contained"),
	)
	return imageOf(t, []v1.Layer{gzipLayer(t, l1), zstdLayer(t, l2), static.NewLayer(l3, types.OCIUncompressedLayer)}, v1.Config{
		Env:          []string{"PATH=/usr/bin:/bin", "FOO=bar"},
		Cmd:          []string{"python3", "-m", "http.server"},
		Entrypoint:   []string{"/bin/tool"},
		WorkingDir:   "/data",
		User:         "1000:1000",
		ExposedPorts: map[string]struct{}{"8000/tcp": {}, "53/udp": {}},
	})
}

// wantTree is testImage's unpacked tree as listTree prints it.
var wantTree = []string{
	"abs l /etc",
	"bin d 0755",
	"bin/grp f 2711 g",
	"bin/tool f 4755 #!/bin/sh\n",
	"data d 0750 1000:1000",
	"data/a.txt f 0600 1000:1000 new",
	"data/keep f 0644 keep",
	"etc d 0755",
	"etc/evil f 0644 contained",
	"etc/passwd f 0644 root:x:0:0::/root:/bin/sh\n",
	"hl d 0755",
	"hl/link f 0600 hard",
	"hl/orig f 0600 hard",
	"lib l usr/lib",
	"opq d 0755",
	"opq/early f 0644 e",
	"opq/new f 0644 n",
	"ro d 0555",
	"ro/extra f 0444 x",
	"ro/file f 0444 r",
	"sticky d 1777",
	"usr d 0755",
	"usr/lib d 0755",
	"usr/lib/libnew.so f 0755 new",
	"usr/lib/libx.so f 0755 x",
}

// listTree prints every entry under root as "path kind mode [uid:gid]
// content"; owners other than root are shown only when withOwner is set.
func listTree(t *testing.T, root string, withOwner bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := rel
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out = append(out, line+" l "+target)
			return nil
		case fi.IsDir():
			line += " d"
		case fi.Mode().IsRegular():
			line += " f"
		default:
			line += " ?"
		}
		line += fmt.Sprintf(" %04o", st.Mode&0o7777)
		if withOwner && (st.Uid != 0 || st.Gid != 0) {
			line += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// stripOwners removes the uid:gid column so the tree can be compared when
// not running as root.
func stripOwners(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		f := strings.SplitN(l, " ", 5)
		if len(f) >= 4 && ownerRE.MatchString(f[3]) && f[1] != "l" {
			f = append(f[:3], f[4:]...)
		}
		out[i] = strings.Join(f, " ")
	}
	return out
}

var ownerRE = regexp.MustCompile(`^[0-9]+:[0-9]+$`)

func diffLines(t *testing.T, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	t.Errorf("tree differs.\ngot:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
}

func isRoot() bool { return os.Geteuid() == 0 }

// checkTree compares the unpacked tree with want, owners included when the
// test can see them (running as root).
func checkTree(t *testing.T, root string, want []string) {
	t.Helper()
	if isRoot() {
		diffLines(t, listTree(t, root, true), want)
	} else {
		diffLines(t, listTree(t, root, false), stripOwners(want))
	}
}

// testRegistry is an in-process registry that records layer blob requests
// and can corrupt chosen blobs or demand credentials.
type testRegistry struct {
	srv     *httptest.Server
	mu      sync.Mutex
	gets    map[string]int
	corrupt map[string]bool
	user    string
	pass    string
}

func newTestRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{gets: map[string]int{}, corrupt: map[string]bool{}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		user, pass := r.user, r.pass
		r.mu.Unlock()
		if user != "" && req.Method == http.MethodGet {
			u, p, ok := req.BasicAuth()
			if !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		i := strings.Index(req.URL.Path, "/blobs/sha256:")
		if req.Method != http.MethodGet || i < 0 {
			h.ServeHTTP(w, req)
			return
		}
		digest := req.URL.Path[i+len("/blobs/"):]
		r.mu.Lock()
		r.gets[digest]++
		bad := r.corrupt[digest]
		r.mu.Unlock()
		if !bad {
			h.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b := rec.Body.Bytes()
		if len(b) > 20 {
			b[len(b)/2] ^= 0xff
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(b)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *testRegistry) host() string { return strings.TrimPrefix(r.srv.URL, "http://") }

// trusted adds the registry to o's insecure registries: it speaks plain
// HTTP.
func (r *testRegistry) trusted(o PullOptions) PullOptions {
	o.InsecureRegistries = append(o.InsecureRegistries, r.host())
	return o
}

func (r *testRegistry) push(t *testing.T, repoTag string, img v1.Image) string {
	t.Helper()
	ref := r.host() + "/" + repoTag
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	clear(r.gets)
	r.mu.Unlock()
	return ref
}

// layerGets counts GETs of img's layer blobs since the last push.
func (r *testRegistry) layerGets(t *testing.T, img v1.Image) int {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range ls {
		d, _ := l.Digest()
		n += r.gets[d.String()]
	}
	return n
}

// closedAddr returns an address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// dirEntries lists the names in dir (none if it does not exist).
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var n []string
	for _, e := range ents {
		n = append(n, e.Name())
	}
	return n
}

// rootsDir is a temp directory for unpacked trees. Images hold read-only
// directories, which a non-root test could not delete, so it makes every
// directory writable again before the temp directory is removed.
func rootsDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	t.Cleanup(func() {
		filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	return d
}
