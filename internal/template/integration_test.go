package template

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/id"
	"cube/internal/netslot"
	"cube/internal/node"
	"cube/internal/runtime/gvisor"
	"cube/internal/store"
	"cube/internal/testenv"
)

// appImage is testImage plus what booting needs (passwd, group, the
// kernel's mount points) and a static start command, run as user app.
func appImage(t *testing.T) v1.Image {
	t.Helper()
	bin := testenv.BuildStatic(t, "./internal/template/testdata/app", t.TempDir(), "app")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sys := layerOf(t,
		entry{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nuser:x:1001:1001::/home/user:/bin/sh\n"},
		entry{name: "etc/group", body: "root:x:0:\napp:x:1000:\nuser:x:1001:\n"},
		entry{name: "proc/", typ: tar.TypeDir}, entry{name: "dev/", typ: tar.TypeDir}, entry{name: "sys/", typ: tar.TypeDir},
		entry{name: "root/", typ: tar.TypeDir, mode: 0o700}, entry{name: "home/", typ: tar.TypeDir},
		entry{name: "srv/app", body: string(data), mode: 0o755},
	)
	return configured(t, testImage(t, sys), func(cf *v1.ConfigFile) { cf.Config.User = "app" })
}

type realNode struct {
	n   *node.Node
	rt  *gvisor.Runtime
	b   *Builder
	dir string
}

func newRealNode(t *testing.T) *realNode {
	testenv.RequireRoot(t)
	runsc := testenv.Bin(t, "runsc")
	envd := testenv.Bin(t, "cube-envd")
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gvisor.New(gvisor.Config{Runsc: runsc, Root: filepath.Join(dir, "runsc"), Bundles: filepath.Join(dir, "bundles")})
	if err != nil {
		t.Fatal(err)
	}
	cidr := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 230+rand.IntN(10), rand.IntN(256)))
	slots, err := netslot.NewPool(netslot.Config{Prefix: "ct" + id.New("", 4), Size: 4, HostCIDR: cidr, Warm: -1})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.Default()
	}
	n, err := node.New(node.Config{DataDir: dir, Envd: envd, Runtime: rt, Slots: slots, Store: st, Logger: logger, EnvdVersion: "0.6.4", MaxSandboxes: 4})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{DataDir: dir, Store: st, Snapshotter: n, Logger: logger, ProbeTimeout: 20 * time.Second,
		InsecureRegistries: []string{"127.0.0.1"}}) // the test registries speak plain HTTP
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Start()
	t.Cleanup(func() {
		b.Close()
		n.Close()
		ids, _ := rt.List(context.Background())
		for _, id := range ids {
			rt.Remove(context.Background(), id)
		}
		slots.Close()
		rt.Close()
		st.Close()
	})
	return &realNode{n: n, rt: rt, b: b, dir: dir}
}

func (r *realNode) build(t *testing.T, req cube.BuildRequest) *cube.BuildJob {
	t.Helper()
	job, err := r.b.BuildTemplate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{b: r.b}
	return f.wait(t, job.ID)
}

// envdGet reads a file of a sandbox through envd's /files.
func (r *realNode) envdGet(t *testing.T, sb *cube.Sandbox, path string) (int, string) {
	t.Helper()
	target, err := r.n.Resolve(context.Background(), sb.ID, protocol.EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+target.Addr+"/files?path="+path, nil)
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	req.Header.Set("Authorization", "Basic cm9vdDo=") // as root
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestBuildOnGVisor builds a template from an in-process registry through
// a real node, starts a sandbox from it and checks the image's files,
// environment, user, directory and command inside.
func TestBuildOnGVisor(t *testing.T) {
	r := newRealNode(t)
	host := pushed(t, appImage(t), func(h http.Handler) http.Handler { return h })

	j := r.build(t, cube.BuildRequest{Image: host + "/demo/app:v1", TemplateID: "app", Aliases: []string{"app-alias"},
		ProbePort: 8080, ProbePath: "/ready", Env: map[string]string{"EXTRA": "added"}, DiskSizeMB: 64, MemoryMB: 256, CPUCount: 1})
	if j.Phase != "READY" || j.Progress != 100 {
		t.Fatalf("build: %+v", j)
	}
	tpl, err := r.n.Template(context.Background(), "app")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(tpl.Checkpoint); err != nil || !st.IsDir() || tpl.SizeBytes == 0 {
		t.Fatalf("checkpoint %s: %v (size %d)", tpl.Checkpoint, err, tpl.SizeBytes)
	}

	sb, err := r.n.CreateSandbox(context.Background(), cube.CreateRequest{Template: "app-alias", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer r.n.KillSandbox(context.Background(), sb.ID)

	// The start command ran before the snapshot, as the image says.
	code, state := r.envdGet(t, sb, "/tmp/app-state")
	if code != 200 {
		t.Fatalf("app state: %d %s", code, state)
	}
	for _, want := range []string{"uid=1000\n", "cwd=/srv\n", "args=--serve\n", "GREETING=from-image\n", "EXTRA=added\n"} {
		if !strings.Contains(state, want) {
			t.Errorf("app state %q lacks %q", state, want)
		}
	}
	// Layers, whiteouts, opaque directories and links.
	for path, want := range map[string]string{"/etc/greeting": "hello\n", "/opaque/new": "new\n", "/srv/hard": "payload\n", "/srv/soft": "payload\n"} {
		if code, body := r.envdGet(t, sb, path); code != 200 || body != want {
			t.Errorf("%s: %d %q, want %q", path, code, body, want)
		}
	}
	for _, path := range []string{"/etc/gone", "/opaque/old"} {
		if code, body := r.envdGet(t, sb, path); code != 404 {
			t.Errorf("%s should be gone: %d %q", path, code, body)
		}
	}
}

// TestBuildFailuresOnGVisor checks that each failure ends FAILED with a
// reason and leaves no checkpoint or container behind.
func TestBuildFailuresOnGVisor(t *testing.T) {
	r := newRealNode(t)
	host := pushed(t, appImage(t), func(h http.Handler) http.Handler { return h })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()

	for _, c := range []struct {
		name string
		req  cube.BuildRequest
		want []string
	}{
		{"failing probe", cube.BuildRequest{Image: host + "/demo/app:v1", ProbePort: 8080, ProbePath: "/nope"}, []string{"probe", "404 Not Found", "--probe-path"}},
		{"nothing on the probe port", cube.BuildRequest{Image: host + "/demo/app:v1", ProbePort: 9999}, []string{"probe", ":9999/health", "refused"}},
		{"missing image", cube.BuildRequest{Image: host + "/demo/app:nope"}, []string{"image not found", "check the repository name and tag"}},
		{"unreachable registry", cube.BuildRequest{Image: closed + "/demo/app:v1"}, []string{"registry unreachable", closed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.req.DiskSizeMB, c.req.MemoryMB, c.req.CPUCount = 64, 256, 1
			j := r.build(t, c.req)
			if j.Phase != "FAILED" {
				t.Fatalf("job = %+v", j)
			}
			for _, w := range c.want {
				if !strings.Contains(j.Error, w) {
					t.Errorf("reason %q does not mention %q", j.Error, w)
				}
			}
			if _, err := os.Stat(filepath.Join(r.dir, "templates", j.TemplateID)); !os.IsNotExist(err) {
				t.Errorf("template directory left behind: %v", err)
			}
			if ids, _ := r.rt.List(context.Background()); len(ids) != 0 {
				t.Errorf("containers left behind: %v", ids)
			}
			if _, err := r.n.CreateSandbox(context.Background(), cube.CreateRequest{Template: j.TemplateID, Timeout: time.Minute}); cube.KindOf(err) != cube.Conflict {
				t.Errorf("sandbox from a failed template: %v", err)
			}
		})
	}
}
