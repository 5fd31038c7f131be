package template

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/store"
)

// entry is one member of a test layer.
type entry struct {
	name     string
	typ      byte // tar.TypeReg when zero
	body     string
	linkname string
	mode     int64
}

func layerOf(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.linkname, Mode: e.mode, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
			if h.Typeflag == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a small image exercising what unpacking must get right:
// several layers, a whiteout, an opaque directory, a hard link and a
// symlink, plus ENV, WORKDIR, USER, ENTRYPOINT and CMD.
func testImage(t testing.TB, extra ...v1.Layer) v1.Image {
	t.Helper()
	l1 := layerOf(t,
		entry{name: "etc/", typ: tar.TypeDir},
		entry{name: "etc/greeting", body: "hello\n"},
		entry{name: "etc/gone", body: "to be removed\n"},
		entry{name: "opaque/", typ: tar.TypeDir},
		entry{name: "opaque/old", body: "old\n"},
		entry{name: "srv/", typ: tar.TypeDir},
		entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
	)
	l2 := layerOf(t,
		entry{name: "etc/.wh.gone", body: ""},
		entry{name: "opaque/", typ: tar.TypeDir},
		entry{name: "opaque/.wh..wh..opq", body: ""},
		entry{name: "opaque/new", body: "new\n"},
		entry{name: "srv/data", body: "payload\n"},
		entry{name: "srv/hard", typ: tar.TypeLink, linkname: "srv/data"},
		entry{name: "srv/soft", typ: tar.TypeSymlink, linkname: "data"},
	)
	img, err := mutate.AppendLayers(empty.Image, append([]v1.Layer{l1, l2}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return configured(t, img, func(cf *v1.ConfigFile) {
		cf.OS, cf.Architecture = "linux", "amd64"
		cf.Config.Env = []string{"PATH=/usr/bin:/bin", "GREETING=from-image", "KEEP=1"}
		cf.Config.Entrypoint = []string{"/srv/app"}
		cf.Config.Cmd = []string{"--serve"}
		cf.Config.WorkingDir = "/srv"
		cf.Config.User = "1000:1000"
		cf.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	})
}

// configured is img with its config file changed by change.
func configured(t testing.TB, img v1.Image, change func(*v1.ConfigFile)) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	change(cf)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// writeLayout writes img as an OCI layout directory in the builder's
// import directory and returns it.
func (f *fixture) writeLayout(t testing.TB, img v1.Image) string {
	t.Helper()
	dir, err := os.MkdirTemp(f.b.importDir, "layout-")
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeSnap stands in for the node: it runs the probe against addr and
// writes a checkpoint directory the way the node does, or fails.
type fakeSnap struct {
	dataDir string
	addr    netip.Addr
	// block makes the build wait until it is cancelled.
	block bool
	// failAfterProbe is returned after the probe succeeded.
	failAfterProbe error
	// onProbing runs while the job is in PROBING.
	onProbing func(tpl *store.Template)

	mu    sync.Mutex
	calls []store.Template
}

func (f *fakeSnap) BuildSnapshot(ctx context.Context, tpl *store.Template, probe func(context.Context, netip.Addr) error, phase func(node.Phase)) error {
	f.mu.Lock()
	f.calls = append(f.calls, *tpl)
	f.mu.Unlock()
	phase(node.PhaseBooting)
	dir := filepath.Join(f.dataDir, "templates", tpl.ID)
	// runsc leaves state here as it goes; a failed build must not.
	if err := os.MkdirAll(filepath.Join(dir, "checkpoint.tmp"), 0o700); err != nil {
		return err
	}
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	phase(node.PhaseProbing)
	if f.onProbing != nil {
		f.onProbing(tpl)
	}
	if err := probe(ctx, f.addr); err != nil {
		return err
	}
	if f.failAfterProbe != nil {
		return f.failAfterProbe
	}
	phase(node.PhaseSnapshotting)
	os.RemoveAll(filepath.Join(dir, "checkpoint.tmp"))
	cp := filepath.Join(dir, "checkpoint")
	if err := os.MkdirAll(cp, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cp, "pages"), []byte("memory"), 0o600); err != nil {
		return err
	}
	tpl.Checkpoint, tpl.SizeBytes, tpl.Envd = cp, 6, "/envd"
	return nil
}

// fixture is a Builder over a temp data dir, a fake node and a probe
// target whose answer the test chooses.
type fixture struct {
	b       *Builder
	st      *store.Store
	dataDir string
	snap    *fakeSnap
	probe   *httptest.Server
	port    int

	mu     sync.Mutex
	status int // what the probe target answers
	hits   int
}

func newFixture(t *testing.T, mutate ...func(*Config)) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fixture{st: st, dataDir: dir, status: http.StatusNoContent}
	f.probe = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.hits++
		if r.URL.Path != "/health" && r.URL.Path != "/ready" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(f.status)
	}))
	t.Cleanup(f.probe.Close)
	ap := netip.MustParseAddrPort(strings.TrimPrefix(f.probe.URL, "http://"))
	f.port = int(ap.Port())
	f.snap = &fakeSnap{dataDir: dir, addr: ap.Addr()}
	cfg := Config{DataDir: dir, Store: st, Snapshotter: f.snap, ProbeTimeout: 2 * time.Second}
	for _, m := range mutate {
		m(&cfg)
	}
	f.b, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.b.Close)
	if err := f.b.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) setStatus(code int) {
	f.mu.Lock()
	f.status = code
	f.mu.Unlock()
}

// build starts a build with the probe aimed at the fixture's target.
func (f *fixture) build(t *testing.T, req cube.BuildRequest) *cube.BuildJob {
	t.Helper()
	if req.ProbePort == 0 {
		req.ProbePort = f.port
	}
	job, err := f.b.BuildTemplate(context.Background(), req)
	if err != nil {
		t.Fatalf("BuildTemplate: %v", err)
	}
	return job
}

// wait polls a job until it is READY or FAILED. The bound only keeps a
// broken build from hanging the suite.
func (f *fixture) wait(t *testing.T, jobID string) *cube.BuildJob {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		j, err := f.b.BuildJob(context.Background(), "", jobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Phase == "READY" || j.Phase == "FAILED" {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", jobID, j.Phase)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) template(t *testing.T, id string) *store.Template {
	t.Helper()
	tpl, err := f.st.Templates().Get(context.Background(), id)
	if err != nil {
		t.Fatalf("template %s: %v", id, err)
	}
	return tpl
}

func portStr(p int) string { return strconv.Itoa(p) }
