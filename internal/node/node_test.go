package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/id"
	"cube/internal/nodetest"
)

type fixture struct{ *nodetest.Node }

func newFixture(t *testing.T) *fixture {
	n := nodetest.New(t, nodetest.Options{MaxSandboxes: 6})
	n.TinyTemplate(t, "tiny", "tiny-alias")
	return &fixture{n}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func (f *fixture) create(t *testing.T, tpl string, timeout time.Duration) *cube.Sandbox {
	t.Helper()
	sb, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: tpl, Timeout: timeout, EnvVars: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// envd sends a request to a sandbox's envd through the node's routing.
func (f *fixture) envd(t *testing.T, sb *cube.Sandbox, method, path string, body []byte, token string) (int, string) {
	t.Helper()
	target, err := f.Resolve(ctx(t), sb.ID, protocol.EnvdPort)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, "http://"+target.Addr+path, bytes.NewReader(body))
	req.Header.Set("X-Access-Token", token)
	req.Header.Set("Authorization", "Basic cm9vdDo=") // root:
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := nodetest.NoKeepAlive.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSandboxLifecycle(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny-alias", time.Minute)
	b := f.create(t, "tiny", time.Minute)
	if a.TemplateID != "tiny" || a.Alias != "tiny-alias" || a.EnvdAccessToken == "" || a.EnvdAccessToken == b.EnvdAccessToken {
		t.Fatalf("sandbox a = %+v", a)
	}
	if !id.ValidSandbox(a.ID) {
		t.Fatalf("sandbox id %q is not a DNS label", a.ID)
	}
	// Each sandbox has its own files and its own token.
	if code, body := f.envd(t, a, "POST", "/files?path=/tmp/note", []byte("from a"), a.EnvdAccessToken); code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	if code, body := f.envd(t, a, "GET", "/files?path=/tmp/note", nil, a.EnvdAccessToken); code != 200 || body != "from a" {
		t.Fatalf("download from a: %d %q", code, body)
	}
	if code, _ := f.envd(t, b, "GET", "/files?path=/tmp/note", nil, b.EnvdAccessToken); code != 404 {
		t.Fatalf("b sees a's file: %d", code)
	}
	if code, _ := f.envd(t, b, "GET", "/files?path=/tmp/note", nil, a.EnvdAccessToken); code != 401 {
		t.Fatalf("b accepted a's token: %d", code)
	}
	// The sandbox's env vars reached envd.
	if code, body := f.envd(t, a, "GET", "/envs", nil, a.EnvdAccessToken); code != 200 || !strings.Contains(body, `"GREETING":"hi"`) {
		t.Fatalf("envs: %d %s", code, body)
	}

	list, err := f.ListSandboxes(ctx(t), cube.ListFilter{})
	if err != nil || len(list) != 2 {
		t.Fatalf("list = %v, %v", list, err)
	}
	m, err := f.SandboxMetrics(ctx(t), a.ID, time.Time{}, time.Time{})
	if err != nil || len(m) != 1 || m[0].MemUsed == 0 || m[0].MemTotal != 512<<20 || m[0].DiskTotal == 0 {
		t.Fatalf("metrics = %+v, %v", m, err)
	}

	// Kill, twice.
	if err := f.KillSandbox(ctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.KillSandbox(ctx(t), a.ID); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("second kill: %v", err)
	}
	if _, err := f.GetSandbox(ctx(t), a.ID); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("get after kill: %v", err)
	}
	// The freed slot is reused, clean, by the next sandbox.
	c := f.create(t, "tiny", time.Minute)
	if code, _ := f.envd(t, c, "GET", "/files?path=/tmp/note", nil, c.EnvdAccessToken); code != 404 {
		t.Fatalf("new sandbox sees a killed sandbox's file: %d", code)
	}
	if _, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: "nope", Timeout: time.Minute}); cube.KindOf(err) != cube.NotFound || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown template: %v", err)
	}
}

func TestTimeoutEndsSandbox(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "tiny", time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := f.GetSandbox(ctx(t), sb.ID); cube.KindOf(err) == cube.NotFound {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, err := f.GetSandbox(ctx(t), sb.ID); cube.KindOf(err) != cube.NotFound {
		t.Fatal("sandbox outlived its timeout")
	}
	// The sandbox reads as gone once its end is recorded; its container
	// goes right after.
	var ids []string
	for time.Now().Before(deadline) {
		if ids, _ = f.Runtime.List(ctx(t)); len(ids) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("containers left after timeout: %v", ids)
}

func TestPauseAndResumeKeepFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"in memory", time.Hour}, {"from disk", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			n := nodetest.New(t, nodetest.Options{PauseWriteDelay: tc.delay})
			n.TinyTemplate(t, "tiny")
			f := &fixture{n}
			sb := f.create(t, "tiny", time.Minute)
			tok := f.holderToken(t, sb)
			f.write(t, sb, "/tmp/kept", "still here")
			if err := f.PauseSandbox(ctx(t), sb.ID, true); err != nil {
				t.Fatal(err)
			}
			if err := f.PauseSandbox(ctx(t), sb.ID, true); cube.KindOf(err) != cube.Conflict {
				t.Fatalf("second pause: %v", err)
			}
			got, _ := f.GetSandbox(ctx(t), sb.ID)
			if got.State != cube.StatePaused {
				t.Fatalf("state %s", got.State)
			}
			if _, err := f.CreateSnapshot(ctx(t), sb.ID, ""); cube.KindOf(err) != cube.Conflict {
				t.Fatalf("snapshot of a paused sandbox: %v", err)
			}
			if tc.delay == 0 {
				// Written out: no container, no slot.
				for i := 0; i < 200; i++ {
					if ids, _ := f.Runtime.List(ctx(t)); len(ids) == 0 {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if ids, _ := f.Runtime.List(ctx(t)); len(ids) != 0 {
					t.Fatalf("written-out sandbox still holds a container: %v", ids)
				}
			}
			again, resumed, err := f.ConnectSandbox(ctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute})
			if err != nil || !resumed || again.State != cube.StateRunning {
				t.Fatalf("connect: %+v %v %v", again, resumed, err)
			}
			if got := f.read(t, sb, "/tmp/kept"); got != "still here" {
				t.Fatalf("after resume: %q", got)
			}
			if got := f.holderToken(t, sb); got != tok {
				t.Fatalf("memory after resume: %s, want %s", got, tok)
			}
			if _, resumed, _ := f.ConnectSandbox(ctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute}); resumed {
				t.Fatal("connect to a running sandbox reported a resume")
			}
		})
	}
}

func TestCapacityLimit(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 6; i++ {
		f.create(t, "tiny", time.Minute)
	}
	_, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
	if cube.KindOf(err) != cube.Capacity {
		t.Fatalf("seventh sandbox: %v", err)
	}
}

// holderToken reads the in-memory token of the start command of a sandbox
// made from the tiny template.
func (f *fixture) holderToken(t *testing.T, sb *cube.Sandbox) string {
	t.Helper()
	target, err := f.Resolve(ctx(t), sb.ID, nodetest.HolderPort)
	if err != nil {
		t.Fatal(err)
	}
	var last error
	for i := 0; i < 100; i++ {
		resp, err := nodetest.NoKeepAlive.Get("http://" + target.Addr + "/")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && len(b) == 32 {
				return string(b)
			}
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("holder in %s: %v", sb.ID, last)
	return ""
}

func (f *fixture) read(t *testing.T, sb *cube.Sandbox, path string) string {
	t.Helper()
	code, body := f.envd(t, sb, "GET", "/files?path="+path, nil, sb.EnvdAccessToken)
	if code != 200 {
		t.Fatalf("read %s in %s: %d %s", path, sb.ID, code, body)
	}
	return body
}

func (f *fixture) write(t *testing.T, sb *cube.Sandbox, path, data string) {
	t.Helper()
	if code, body := f.envd(t, sb, "POST", "/files?path="+path, []byte(data), sb.EnvdAccessToken); code != 200 {
		t.Fatalf("write %s in %s: %d %s", path, sb.ID, code, body)
	}
}

func TestSnapshotCreateFromSnapshotAndRollback(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", time.Minute)
	tokA := f.holderToken(t, a)
	f.write(t, a, "/tmp/state", "v1")

	snap, err := f.CreateSnapshot(ctx(t), a.ID, "first")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(snap.ID, "snap-") || snap.SandboxID != a.ID || snap.SizeBytes == 0 || len(snap.Names) != 1 {
		t.Fatalf("snapshot = %+v", snap)
	}
	// The source keeps running with the same memory.
	if got := f.holderToken(t, a); got != tokA {
		t.Fatalf("source memory changed: %s", got)
	}
	f.write(t, a, "/tmp/state", "v2")

	// A new sandbox from the snapshot (by name) has its memory and files,
	// but its own identity.
	b := f.create(t, "first", time.Minute)
	if b.ID == a.ID || b.EnvdAccessToken == a.EnvdAccessToken {
		t.Fatalf("child shares identity: %+v", b)
	}
	if got := f.holderToken(t, b); got != tokA {
		t.Fatalf("child memory token %s, want %s", got, tokA)
	}
	if got := f.read(t, b, "/tmp/state"); got != "v1" {
		t.Fatalf("child file %q", got)
	}
	if code, _ := f.envd(t, b, "GET", "/files?path=/tmp/state", nil, a.EnvdAccessToken); code != 401 {
		t.Fatalf("child accepts the parent's token: %d", code)
	}

	// Rollback in place: same id and token, files and memory of the snapshot.
	rb, err := f.RollbackSandbox(ctx(t), a.ID, snap.ID)
	if err != nil || rb.OperationID == "" {
		t.Fatalf("rollback: %+v %v", rb, err)
	}
	if got := f.read(t, a, "/tmp/state"); got != "v1" {
		t.Fatalf("after rollback file %q", got)
	}
	if got := f.holderToken(t, a); got != tokA {
		t.Fatalf("after rollback token %s", got)
	}
	// Only to its own snapshots.
	other, _ := f.CreateSnapshot(ctx(t), b.ID, "")
	if _, err := f.RollbackSandbox(ctx(t), a.ID, other.ID); cube.KindOf(err) != cube.Forbidden {
		t.Fatalf("rollback to another sandbox's snapshot: %v", err)
	}

	list, _, err := f.ListSnapshots(ctx(t), cube.SnapshotFilter{SandboxID: a.ID}, cube.Page{Limit: 100})
	if err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("list snapshots of a = %+v, %v", list, err)
	}
	// Deleting the snapshot never breaks sandboxes made from it.
	if err := f.DeleteTemplate(ctx(t), "", snap.ID); err != nil {
		t.Fatal(err)
	}
	if got := f.read(t, b, "/tmp/state"); got != "v1" {
		t.Fatalf("child after snapshot delete: %q", got)
	}
	if _, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: snap.ID, Timeout: time.Minute}); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("create from deleted snapshot: %v", err)
	}
}

func TestForkChildrenDiverge(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", time.Minute)
	tokA := f.holderToken(t, a)
	f.write(t, a, "/tmp/state", "parent")
	res, err := f.ForkSandbox(ctx(t), a.ID, cube.ForkRequest{Count: 3, Timeout: time.Minute})
	if err != nil || len(res) != 3 {
		t.Fatalf("fork: %v %v", res, err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("child %d: %v", i, r.Err)
		}
		if got := f.holderToken(t, r.Sandbox); got != tokA {
			t.Fatalf("child %d token %s", i, got)
		}
		f.write(t, r.Sandbox, "/tmp/state", fmt.Sprintf("child%d", i))
	}
	for i, r := range res {
		if got := f.read(t, r.Sandbox, "/tmp/state"); got != fmt.Sprintf("child%d", i) {
			t.Fatalf("child %d sees %q", i, got)
		}
	}
	if got := f.read(t, a, "/tmp/state"); got != "parent" {
		t.Fatalf("parent sees %q", got)
	}
}

func TestDamagedSnapshotIsDetected(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, "tiny", time.Minute)
	snap, err := f.CreateSnapshot(ctx(t), a.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	tpl, _ := f.Store.Templates().Get(ctx(t), snap.ID)
	img := filepath.Join(tpl.Checkpoint, "checkpoint.img")
	data, _ := os.ReadFile(img)
	data[len(data)/2] ^= 0xff
	os.WriteFile(img, data, 0o600)
	before, _ := f.Runtime.List(ctx(t))
	_, err = f.CreateSandbox(ctx(t), cube.CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if cube.KindOf(err) != cube.Damaged || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("create from damaged snapshot: %v", err)
	}
	after, _ := f.Runtime.List(ctx(t))
	if len(after) != len(before) {
		t.Fatalf("failed create left containers: %v -> %v", before, after)
	}
	// The source is untouched.
	f.holderToken(t, a)
}

func TestWarmPoolHandsOutAndRefills(t *testing.T) {
	n := nodetest.New(t, nodetest.Options{PoolSize: 2})
	n.TinyTemplate(t, "tiny")
	f := &fixture{n}
	waitWarm := func(want int) {
		t.Helper()
		for i := 0; i < 600 && n.Warm("tiny") < want; i++ {
			time.Sleep(50 * time.Millisecond)
		}
		if got := n.Warm("tiny"); got < want {
			t.Fatalf("warm pool holds %d, want %d", got, want)
		}
	}
	waitWarm(2)
	a := f.create(t, "tiny", time.Minute)
	b := f.create(t, "tiny", time.Minute)
	// Warm sandboxes are whole sandboxes: own token, env, files.
	f.write(t, a, "/tmp/x", "a")
	if code, _ := f.envd(t, b, "GET", "/files?path=/tmp/x", nil, b.EnvdAccessToken); code != 404 {
		t.Fatalf("b sees a's file: %d", code)
	}
	if code, body := f.envd(t, a, "GET", "/envs", nil, a.EnvdAccessToken); code != 200 || !strings.Contains(body, "GREETING") {
		t.Fatalf("envs of a warm sandbox: %d %s", code, body)
	}
	f.holderToken(t, a)
	waitWarm(2)
	// Deleting the template drains its pool.
	if err := n.DeleteTemplate(ctx(t), "", "tiny"); err != nil {
		t.Fatal(err)
	}
	if got := n.Warm("tiny"); got != 0 {
		t.Fatalf("pool of a deleted template holds %d", got)
	}
	ids, _ := n.Runtime.List(ctx(t))
	if len(ids) != 2 {
		t.Fatalf("containers after drain: %v (want the two sandboxes)", ids)
	}
}

func TestDeadSandboxIsRemoved(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "tiny", time.Minute)
	rec, _ := f.Store.Sandboxes().Get(ctx(t), sb.ID)
	// The container dies behind the node's back.
	if err := f.Runtime.Remove(ctx(t), rec.ContainerID); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := f.GetSandbox(ctx(t), sb.ID); cube.KindOf(err) == cube.NotFound {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("a sandbox whose container died is still listed")
}

func TestPerSandboxLimits(t *testing.T) {
	f := newFixture(t)
	sb, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute, MemoryMB: 256, CPUCount: 1})
	if err != nil {
		t.Fatal(err)
	}
	if sb.MemoryMB != 256 || sb.CPUCount != 1 {
		t.Fatalf("limits reported %d MB / %d CPU", sb.MemoryMB, sb.CPUCount)
	}
	rec, _ := f.Store.Sandboxes().Get(ctx(t), sb.ID)
	// The host cgroup of the sandbox carries the smaller limit.
	data, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory/cube", rec.ContainerID, "memory.limit_in_bytes"))
	if err != nil { // cgroup v2
		data, err = os.ReadFile(filepath.Join("/sys/fs/cgroup/cube", rec.ContainerID, "memory.max"))
	}
	if err != nil {
		t.Fatalf("the sandbox's memory cgroup: %v", err)
	}
	var limit int64
	fmt.Sscan(string(data), &limit)
	if limit <= 0 || limit >= 512<<20+512<<18+256<<20 {
		t.Fatalf("cgroup memory limit %d is not below the template's", limit)
	}
	f.holderToken(t, sb)
}

// A full disk during a snapshot answers 507 and the sandbox keeps running.
func TestSnapshotOnFullDisk(t *testing.T) {
	f := newFixture(t)
	sb := f.create(t, "tiny", time.Minute)
	tok := f.holderToken(t, sb)
	snaps := filepath.Join(f.DataDir, "snapshots")
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", snaps).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", "-l", snaps).Run()
	_, err := f.CreateSnapshot(ctx(t), sb.ID, "")
	if cube.KindOf(err) != cube.DiskFull {
		t.Fatalf("snapshot on a full disk: %v", err)
	}
	if got := f.holderToken(t, sb); got != tok {
		t.Fatalf("sandbox after the failed snapshot: %s", got)
	}
	if entries, _ := os.ReadDir(snaps); len(entries) != 0 {
		t.Fatalf("failed snapshot left %d entries", len(entries))
	}
	if list, _, _ := f.ListSnapshots(ctx(t), cube.SnapshotFilter{}, cube.Page{Limit: 100}); len(list) != 0 {
		t.Fatalf("failed snapshot listed: %+v", list)
	}
}
