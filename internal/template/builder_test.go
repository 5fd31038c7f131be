package template

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"cube/internal/cube"
	"cube/internal/store"
)

func TestBuildFromLayoutReady(t *testing.T) {
	f := newFixture(t)
	var during *store.Job
	f.snap.onProbing = func(tpl *store.Template) {
		during, _ = f.st.Jobs().Get(context.Background(), tpl.BuildJob)
	}
	dir := f.writeLayout(t, testImage(t))
	job := f.build(t, cube.BuildRequest{Image: "oci:" + dir, TemplateID: "web", Aliases: []string{"w1", "w2"}, CPUCount: 1, MemoryMB: 256, DiskSizeMB: 2048})
	if job.TemplateID != "web" || job.Phase != "PULLING" || job.ID == "" {
		t.Fatalf("started job = %+v", job)
	}
	done := f.wait(t, job.ID)
	if done.Phase != "READY" || done.Progress != 100 || done.Error != "" {
		t.Fatalf("job = %+v", done)
	}
	if during == nil || during.Phase != store.PhaseProbing || during.Progress < 70 || during.Progress >= 100 {
		t.Errorf("job while probing = %+v", during)
	}

	tpl := f.template(t, "web")
	if tpl.Status != store.TemplateReady || tpl.BuildJob != job.ID || !slices.Equal(tpl.Aliases, []string{"w1", "w2"}) {
		t.Errorf("template = %+v", tpl)
	}
	if !slices.Equal(tpl.StartCmd, []string{"/srv/app", "--serve"}) {
		t.Errorf("start command = %q, want the image's ENTRYPOINT and CMD", tpl.StartCmd)
	}
	if !slices.Equal(tpl.Env, []string{"PATH=/usr/bin:/bin", "GREETING=from-image", "KEEP=1"}) {
		t.Errorf("env = %q", tpl.Env)
	}
	if tpl.Cwd != "/srv" || tpl.User != "1000:1000" || !slices.Equal(tpl.ExposedPorts, []int{8080}) {
		t.Errorf("cwd %q user %q ports %v", tpl.Cwd, tpl.User, tpl.ExposedPorts)
	}
	if tpl.CPUCount != 1 || tpl.MemoryMB != 256 || tpl.DiskSizeMB != 2048 || tpl.ProbePath != "/health" {
		t.Errorf("resources = %d CPU %d MB disk %d MB probe %q", tpl.CPUCount, tpl.MemoryMB, tpl.DiskSizeMB, tpl.ProbePath)
	}
	if tpl.Checkpoint == "" || tpl.SizeBytes == 0 || !strings.HasPrefix(tpl.ImageDigest, "sha256:") {
		t.Errorf("checkpoint %q size %d digest %q", tpl.Checkpoint, tpl.SizeBytes, tpl.ImageDigest)
	}
	// The rootfs the node booted is the unpacked image.
	if tpl.Rootfs != filepath.Join(f.dataDir, "rootfs", strings.TrimPrefix(tpl.ImageDigest, "sha256:")) {
		t.Errorf("rootfs %s is not content-addressed by %s", tpl.Rootfs, tpl.ImageDigest)
	}
	for p, want := range map[string]string{"etc/greeting": "hello\n", "opaque/new": "new\n", "srv/hard": "payload\n", "srv/soft": "payload\n"} {
		if b, err := os.ReadFile(filepath.Join(tpl.Rootfs, p)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v", p, b, err)
		}
	}
	for _, p := range []string{"etc/gone", "opaque/old"} {
		if _, err := os.Lstat(filepath.Join(tpl.Rootfs, p)); !os.IsNotExist(err) {
			t.Errorf("%s should have been removed by a whiteout: %v", p, err)
		}
	}

	details, err := f.b.TemplateDetails(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := details["web"]
	if d.Status != "ready" || d.Image != "oci:"+dir || d.JobID != job.ID || d.SizeBytes != 6 || d.ImageDigest != tpl.ImageDigest {
		t.Errorf("details = %+v", d)
	}
}

func TestOverridesAndDefaults(t *testing.T) {
	f := newFixture(t)
	dir := f.writeLayout(t, testImage(t))
	job := f.build(t, cube.BuildRequest{Image: "oci:" + dir, Cmd: []string{"/bin/sh", "-c"}, Env: map[string]string{"GREETING": "over", "NEW": "x", "A": "1"},
		Cwd: "/tmp", User: "root", ExposedPorts: []int{49983, 49999}, ProbePath: "/ready"})
	if !id16(job.TemplateID) {
		t.Errorf("generated template ID %q", job.TemplateID)
	}
	if j := f.wait(t, job.ID); j.Phase != "READY" {
		t.Fatalf("job = %+v", j)
	}
	tpl := f.template(t, job.TemplateID)
	if !slices.Equal(tpl.StartCmd, []string{"/bin/sh", "-c"}) {
		t.Errorf("--cmd must replace ENTRYPOINT and CMD: %q", tpl.StartCmd)
	}
	if !slices.Equal(tpl.Env, []string{"PATH=/usr/bin:/bin", "GREETING=over", "KEEP=1", "A=1", "NEW=x"}) {
		t.Errorf("env = %q", tpl.Env)
	}
	if tpl.Cwd != "/tmp" || tpl.User != "root" || !slices.Equal(tpl.ExposedPorts, []int{49983, 49999}) || tpl.ProbePath != "/ready" {
		t.Errorf("cwd %q user %q ports %v probe %q", tpl.Cwd, tpl.User, tpl.ExposedPorts, tpl.ProbePath)
	}
	if tpl.CPUCount != DefaultCPUCount || tpl.MemoryMB != DefaultMemoryMB || tpl.DiskSizeMB != DefaultDiskSizeMB {
		t.Errorf("defaults: %d CPU %d MB disk %d MB", tpl.CPUCount, tpl.MemoryMB, tpl.DiskSizeMB)
	}

	// --arg alone keeps the ENTRYPOINT and replaces CMD.
	job = f.build(t, cube.BuildRequest{Image: "oci:" + dir, Args: []string{"--port", "9"}})
	f.wait(t, job.ID)
	if got := f.template(t, job.TemplateID).StartCmd; !slices.Equal(got, []string{"/srv/app", "--port", "9"}) {
		t.Errorf("--arg: start command %q", got)
	}
}

func id16(s string) bool {
	return len(s) == 20 && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
}

// failedBuild checks what every failure must leave: a FAILED job and a
// failed template carrying a reason that mentions want, and no checkpoint
// or template directory.
func failedBuild(t *testing.T, f *fixture, req cube.BuildRequest, want ...string) *cube.BuildJob {
	t.Helper()
	job := f.build(t, req)
	j := f.wait(t, job.ID)
	if j.Phase != "FAILED" {
		t.Fatalf("job = %+v, want FAILED", j)
	}
	for _, w := range want {
		if !strings.Contains(j.Error, w) {
			t.Errorf("reason %q does not mention %q", j.Error, w)
		}
	}
	tpl := f.template(t, j.TemplateID)
	if tpl.Status != store.TemplateFailed || tpl.Error != j.Error || tpl.Checkpoint != "" {
		t.Errorf("template = %+v", tpl)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "templates", j.TemplateID)); !os.IsNotExist(err) {
		t.Errorf("template directory left behind: %v", err)
	}
	return j
}

func TestProbeNeverAnswers(t *testing.T) {
	f := newFixture(t)
	f.setStatus(http.StatusServiceUnavailable)
	dir := f.writeLayout(t, testImage(t))
	failedBuild(t, f, cube.BuildRequest{Image: "oci:" + dir, TemplateID: "sick"}, "probe", "/health", "503 Service Unavailable", "--probe")
	if f.hits < 2 {
		t.Errorf("probe tried %d times, want retries", f.hits)
	}
}

func TestProbeNothingListening(t *testing.T) {
	f := newFixture(t)
	dir := f.writeLayout(t, testImage(t))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	failedBuild(t, f, cube.BuildRequest{Image: "oci:" + dir, ProbePort: port}, "probe", "refused", "port "+portStr(port))
}

func TestSnapshotFailureLeavesNothing(t *testing.T) {
	f := newFixture(t)
	f.snap.failAfterProbe = errors.New("snapshot: disk on fire")
	dir := f.writeLayout(t, testImage(t))
	failedBuild(t, f, cube.BuildRequest{Image: "oci:" + dir, TemplateID: "burnt"}, "disk on fire")
}

func TestMissingLocalImage(t *testing.T) {
	f := newFixture(t)
	missing := filepath.Join(f.b.importDir, "nope.tar")
	failedBuild(t, f, cube.BuildRequest{Image: "oci-archive:" + missing}, "image not found", missing)
	if len(f.snap.calls) != 0 {
		t.Error("the node was asked to boot an image that was never read")
	}
}

func TestCorruptLayer(t *testing.T) {
	f := newFixture(t)
	img := testImage(t)
	dir := f.writeLayout(t, img)
	layers, _ := img.Layers()
	d, _ := layers[1].Digest()
	blob := filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
	data, err := os.ReadFile(blob)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	failedBuild(t, f, cube.BuildRequest{Image: "oci:" + dir}, "corrupt")
	ents, _ := os.ReadDir(filepath.Join(f.dataDir, "rootfs"))
	if len(ents) != 0 {
		t.Errorf("rootfs/ holds %d entries after a corrupt unpack", len(ents))
	}
}

// pushed serves img as demo/app:v1 from an in-process registry, behind
// a handler wrapper.
func pushed(t *testing.T, img v1.Image, wrap func(http.Handler) http.Handler) (host string) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(wrap(reg))
	t.Cleanup(srv.Close)
	host = strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host+"/demo/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	return host
}

func TestRegistryFailures(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.InsecureRegistries = []string{"127.0.0.1"} }) // the test registries speak plain HTTP
	var locked atomic.Bool
	host := pushed(t, testImage(t), func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if locked.Load() {
				if u, p, ok := r.BasicAuth(); !ok || u != "alice" || p != "secret" {
					w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	t.Run("ready", func(t *testing.T) {
		j := f.wait(t, f.build(t, cube.BuildRequest{Image: host + "/demo/app:v1"}).ID)
		if j.Phase != "READY" {
			t.Fatalf("job = %+v", j)
		}
		// Layers went through the blob cache.
		ents, _ := os.ReadDir(filepath.Join(f.dataDir, "images", "blobs", "sha256"))
		if len(ents) < 2 {
			t.Errorf("blob cache holds %d blobs", len(ents))
		}
	})
	t.Run("missing tag", func(t *testing.T) {
		failedBuild(t, f, cube.BuildRequest{Image: host + "/demo/app:nope"}, "image not found", "check the repository name and tag")
	})
	t.Run("unauthorized", func(t *testing.T) {
		locked.Store(true)
		defer locked.Store(false)
		failedBuild(t, f, cube.BuildRequest{Image: host + "/demo/app:v1"}, "unauthorized", "--registry-username")
		j := f.wait(t, f.build(t, cube.BuildRequest{Image: host + "/demo/app:v1", RegistryUsername: "alice", RegistryPassword: "secret"}).ID)
		if j.Phase != "READY" {
			t.Errorf("with credentials: %+v", j)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		failedBuild(t, f, cube.BuildRequest{Image: addr + "/demo/app:v1"}, "registry unreachable", addr)
	})
}

func TestBadReferenceIs400(t *testing.T) {
	f := newFixture(t)
	for _, ref := range []string{"", "ftp://x/y", "oci-archive:", "UPPER/Case:tag"} {
		_, err := f.b.BuildTemplate(context.Background(), cube.BuildRequest{Image: ref})
		if cube.KindOf(err) != cube.Invalid {
			t.Errorf("%q: %v, want Invalid", ref, err)
		}
	}
	jobs, _ := f.st.Jobs().List(context.Background())
	if len(jobs) != 0 {
		t.Errorf("%d jobs recorded for rejected requests", len(jobs))
	}
}

func TestNamesAreUnique(t *testing.T) {
	f := newFixture(t)
	dir := f.writeLayout(t, testImage(t))
	img := "oci:" + dir
	if j := f.wait(t, f.build(t, cube.BuildRequest{Image: img, TemplateID: "one", Aliases: []string{"base"}}).ID); j.Phase != "READY" {
		t.Fatal(j)
	}
	conflict := func(req cube.BuildRequest, want string) {
		t.Helper()
		req.ProbePort = f.port
		_, err := f.b.BuildTemplate(context.Background(), req)
		if cube.KindOf(err) != cube.Conflict || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want Conflict mentioning %q", req, err, want)
		}
	}
	conflict(cube.BuildRequest{Image: img, TemplateID: "one"}, "already exists")
	conflict(cube.BuildRequest{Image: img, TemplateID: "two", Aliases: []string{"base"}}, `alias "base" is taken by template one`)
	conflict(cube.BuildRequest{Image: img, TemplateID: "base"}, "is an alias of template one")
	conflict(cube.BuildRequest{Image: img, TemplateID: "three", Aliases: []string{"one"}}, `alias "one" is taken`)

	// A failed template gives its ID and aliases to the next build.
	f.setStatus(http.StatusInternalServerError)
	failed := failedBuild(t, f, cube.BuildRequest{Image: img, TemplateID: "flaky", Aliases: []string{"nightly"}}, "probe")
	f.setStatus(http.StatusOK)
	j := f.wait(t, f.build(t, cube.BuildRequest{Image: img, TemplateID: "other", Aliases: []string{"nightly"}}).ID)
	if j.Phase != "READY" {
		t.Fatal(j)
	}
	if a := f.template(t, "flaky").Aliases; len(a) != 0 {
		t.Errorf("failed template kept aliases %v", a)
	}
	j = f.wait(t, f.build(t, cube.BuildRequest{Image: img, TemplateID: "flaky"}).ID)
	if j.Phase != "READY" || j.ID == failed.ID {
		t.Fatalf("rebuild of a failed template: %+v", j)
	}
	if tpl := f.template(t, "flaky"); tpl.Status != store.TemplateReady || tpl.BuildJob != j.ID || tpl.Error != "" {
		t.Errorf("rebuilt template = %+v", tpl)
	}
	// The failed job stays as history.
	if old, _ := f.b.BuildJob(context.Background(), "", failed.ID); old == nil || old.Phase != "FAILED" {
		t.Errorf("old job = %+v", old)
	}
	if _, err := f.b.BuildJob(context.Background(), "", "nosuchjob"); cube.KindOf(err) != cube.NotFound {
		t.Errorf("unknown job: %v", err)
	}
}

func TestShutdownFailsRunningBuild(t *testing.T) {
	f := newFixture(t)
	f.snap.block = true
	dir := f.writeLayout(t, testImage(t))
	job := f.build(t, cube.BuildRequest{Image: "oci:" + dir, TemplateID: "cut"})
	for {
		j, _ := f.b.BuildJob(context.Background(), "", job.ID)
		if j.Phase == "BOOTING" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.b.Close()
	j, _ := f.b.BuildJob(context.Background(), "", job.ID)
	if j.Phase != "FAILED" || j.Error != ShutdownReason {
		t.Errorf("job = %+v", j)
	}
	if _, err := os.Stat(filepath.Join(f.dataDir, "templates", "cut")); !os.IsNotExist(err) {
		t.Errorf("template directory left: %v", err)
	}
	if _, err := f.b.BuildTemplate(context.Background(), cube.BuildRequest{Image: "oci:" + dir}); cube.KindOf(err) != cube.Unavailable {
		t.Errorf("build after Close: %v", err)
	}
}

func TestRecoverMarksInterruptedBuilds(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	st.Jobs().Put(ctx, &store.Job{ID: "j1", TemplateID: "half", Phase: store.PhaseProbing, Progress: 80, CreatedAt: now, UpdatedAt: now})
	st.Jobs().Put(ctx, &store.Job{ID: "j2", TemplateID: "done", Phase: store.PhaseReady, Progress: 100, CreatedAt: now, UpdatedAt: now})
	st.Templates().Put(ctx, &store.Template{ID: "half", Status: store.TemplateBuilding, BuildJob: "j1", Aliases: []string{"h"}})
	st.Templates().Put(ctx, &store.Template{ID: "done", Status: store.TemplateReady, BuildJob: "j2", Checkpoint: filepath.Join(dir, "templates", "done", "checkpoint")})
	// Stopped after the template was stored ready and before its job was.
	st.Jobs().Put(ctx, &store.Job{ID: "j3", TemplateID: "late", Phase: store.PhaseSnapshotting, Progress: 90, CreatedAt: now, UpdatedAt: now})
	st.Templates().Put(ctx, &store.Template{ID: "late", Status: store.TemplateReady, BuildJob: "j3"})
	for _, p := range []string{"templates/half/checkpoint.tmp", "templates/done/checkpoint", "rootfs/.tmp-abc-1/etc"} {
		os.MkdirAll(filepath.Join(dir, p), 0o755)
	}

	b, err := New(Config{DataDir: dir, Store: st, Snapshotter: &fakeSnap{dataDir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	j1, _ := b.BuildJob(ctx, "", "j1")
	if j1.Phase != "FAILED" || j1.Error != RestartReason || j1.Progress != 80 {
		t.Errorf("interrupted job = %+v", j1)
	}
	if j2, _ := b.BuildJob(ctx, "", "j2"); j2.Phase != "READY" {
		t.Errorf("finished job changed: %+v", j2)
	}
	if j3, _ := b.BuildJob(ctx, "", "j3"); j3.Phase != "READY" || j3.Error != "" {
		t.Errorf("job of a template stored ready = %+v, want READY", j3)
	}
	if late, _ := st.Templates().Get(ctx, "late"); late.Status != store.TemplateReady {
		t.Errorf("ready template of an unfinished job changed: %+v", late)
	}
	half, _ := st.Templates().Get(ctx, "half")
	if half.Status != store.TemplateFailed || half.Error != RestartReason {
		t.Errorf("interrupted template = %+v", half)
	}
	if done, _ := st.Templates().Get(ctx, "done"); done.Status != store.TemplateReady {
		t.Errorf("ready template changed: %+v", done)
	}
	for p, gone := range map[string]bool{"templates/half": true, "rootfs/.tmp-abc-1": true, "templates/done/checkpoint": false} {
		_, err := os.Stat(filepath.Join(dir, p))
		if gone != os.IsNotExist(err) {
			t.Errorf("%s: exists=%v after Recover", p, err == nil)
		}
	}
}

func TestProbeRetriesUntil2xx(t *testing.T) {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		if n < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	if err := Probe(int(ap.Port()), "/health", time.Minute)(context.Background(), ap.Addr()); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("probe asked %d times, want 3", n)
	}
	// A cancelled build stops probing at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Probe(1, "/", time.Minute)(ctx, netip.MustParseAddr("127.0.0.1")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled probe: %v", err)
	}
}
