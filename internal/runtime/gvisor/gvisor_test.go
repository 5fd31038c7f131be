package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/runtime"
	"cube/internal/testenv"
)

// fixture is a runtime with its own runsc root and a tiny rootfs whose
// PID 1 is the holder test workload.
type fixture struct {
	rt     *Runtime
	rootfs string
	agent  string
}

func newFixture(t *testing.T) *fixture {
	testenv.RequireRoot(t)
	runsc := testenv.Bin(t, "runsc")
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"tmp", "etc", "proc", "dev", "sys"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	agent := filepath.Join(dir, "agent")
	os.MkdirAll(agent, 0o755)
	testenv.BuildStatic(t, "./internal/runtime/gvisor/testdata/holder", agent, "holder")
	// The keepers run the cube-console binary the server installs.
	rt, err := New(Config{Runsc: runsc, Root: filepath.Join(dir, "runsc"), Bundles: filepath.Join(dir, "bundles"),
		Keeper: testenv.Bin(t, "cube-console")})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{rt: rt, rootfs: rootfs, agent: agent}
	t.Cleanup(func() {
		ids, _ := rt.List(context.Background())
		for _, id := range ids {
			rt.Remove(context.Background(), id)
		}
		rt.Close()
	})
	return f
}

// with is f's runtime with change made to its configuration, over the
// same runsc root and bundles.
func (f *fixture) with(t *testing.T, change func(*Config)) *fixture {
	t.Helper()
	cfg := f.rt.cfg
	change(&cfg)
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{rt: rt, rootfs: f.rootfs, agent: f.agent}
}

func (f *fixture) spec(id string) runtime.Spec {
	return runtime.Spec{ID: id, Rootfs: f.rootfs, AgentDir: f.agent, WritableMB: 32,
		Args: []string{runtime.AgentMount + "/holder"}, Env: []string{"PATH=/bin"}}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// checkpointed boots sandbox id and checkpoints it (left running, or
// not) into a new image: the sandbox, the token its holder keeps and the
// image.
func (f *fixture) checkpointed(t *testing.T, c context.Context, id string, leaveRunning bool) (runtime.Sandbox, string, string) {
	t.Helper()
	a, err := f.rt.Boot(c, f.spec(id))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	img := filepath.Join(t.TempDir(), "img")
	if err := a.Checkpoint(c, img, leaveRunning); err != nil {
		t.Fatal(err)
	}
	return a, tok, img
}

// state is what runsc state says of container id.
func (f *fixture) state(t *testing.T, c context.Context, id string) string {
	t.Helper()
	out, err := f.rt.runsc(c, id, nil, "state", id)
	if err != nil {
		t.Fatalf("runsc state %s: %v", id, err)
	}
	return string(out)
}

// token asks the holder in a sandbox for the value it keeps in memory.
func token(t *testing.T, sb runtime.Sandbox) string {
	t.Helper()
	var out []byte
	var err error
	// PID 1 may need a moment after boot to open its socket.
	for i := 0; i < 50; i++ {
		out, err = sb.Exec(ctx(t), runtime.AgentMount+"/holder", "get")
		if err == nil && len(out) == 32 {
			return string(out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("holder get in %s: %v: %s", sb.ID(), err, out)
	return ""
}

func TestCheckpointRestoreCarriesMemoryAndFiles(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("cta"))
	if err != nil {
		t.Fatal(err)
	}
	tokA := token(t, a)
	if out, err := a.Exec(c, runtime.AgentMount+"/holder", "write", "/etc/note", "kept"); err != nil {
		t.Fatalf("write: %v %s", err, out)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := a.Checkpoint(c, img, true); err != nil {
		t.Fatal(err)
	}
	// Left running: same memory, still answering.
	if got := token(t, a); got != tokA {
		t.Fatalf("source token changed after checkpoint: %s != %s", got, tokA)
	}
	b, err := f.rt.Restore(c, img, f.spec("ctb"))
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, b); got != tokA {
		t.Fatalf("restored token %s, want %s", got, tokA)
	}
	if out, err := b.Exec(c, runtime.AgentMount+"/holder", "get"); err != nil || string(out) != tokA {
		t.Fatalf("restored sandbox: %v %s", err, out)
	}
	// The file written before the checkpoint is in the restored sandbox,
	// and the shared rootfs on the host was never touched.
	if _, err := os.Stat(filepath.Join(f.rootfs, "etc", "note")); !os.IsNotExist(err) {
		t.Fatalf("write leaked to the host rootfs: %v", err)
	}
	// cat is not in the rootfs; the holder reads it back through a write
	// that must fail because the path is a directory, so use ls-like check:
	if out, err := b.Exec(c, runtime.AgentMount+"/holder", "write", "/etc/note/x", "y"); err == nil {
		t.Fatalf("expected /etc/note to be a file in the restored sandbox, got %s", out)
	} else if !strings.Contains(string(out), "not a directory") {
		t.Fatalf("restored sandbox lacks /etc/note: %s", out)
	}

	ids, err := f.rt.List(c)
	if err != nil || !slices.Contains(ids, "cta") || !slices.Contains(ids, "ctb") {
		t.Fatalf("List = %v, %v", ids, err)
	}
	for _, sb := range []runtime.Sandbox{a, b} {
		if err := sb.Kill(c); err != nil {
			t.Fatal(err)
		}
	}
	ids, _ = f.rt.List(c)
	if len(ids) != 0 {
		t.Fatalf("after kill List = %v", ids)
	}
	// Killing again is not an error.
	if err := a.Kill(c); err != nil {
		t.Fatalf("second kill: %v", err)
	}
}

func TestCheckpointWithoutLeaveRunningStopsSandbox(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	_, tok, img := f.checkpointed(t, c, "ctstop", false)
	if ids, _ := f.rt.List(c); slices.Contains(ids, "ctstop") {
		t.Fatalf("sandbox still listed after checkpoint: %v", ids)
	}
	// The same ID can be restored from its own image.
	b, err := f.rt.Restore(c, img, f.spec("ctstop"))
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, b); got != tok {
		t.Fatalf("token %s, want %s", got, tok)
	}
}

func TestPauseResumeStatsAndAttach(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("ctp"))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	st, err := a.Stats(c)
	if err != nil || st.MemoryBytes == 0 || st.Pids == 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}
	if err := a.Pause(c); err != nil {
		t.Fatal(err)
	}
	// A paused sandbox does not run commands.
	short, cancel := context.WithTimeout(c, time.Second)
	out, err := a.Exec(short, runtime.AgentMount+"/holder", "get")
	cancel()
	if err == nil && string(out) == tok {
		t.Fatal("exec answered while paused")
	}
	if err := a.Resume(c); err != nil {
		t.Fatal(err)
	}
	if got := token(t, a); got != tok {
		t.Fatalf("token after resume %s, want %s", got, tok)
	}
	// A new runtime over the same root re-adopts the running sandbox.
	rt2, _ := New(f.rt.cfg)
	again, err := rt2.Attach(c, "ctp")
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, again); got != tok {
		t.Fatalf("attached token %s", got)
	}
	if _, err := rt2.Attach(c, "missing"); err == nil {
		t.Fatal("attach to a missing sandbox succeeded")
	}
}

func TestWritableLayerIsCapped(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, err := f.rt.Boot(c, f.spec("ctfull"))
	if err != nil {
		t.Fatal(err)
	}
	token(t, a)
	out, err := a.Exec(c, runtime.AgentMount+"/holder", "fill", "/big")
	if err == nil || !strings.Contains(string(out), "no space left on device") {
		t.Fatalf("filling a 32 MB layer: err=%v out=%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(f.rootfs, "big")); !os.IsNotExist(err) {
		t.Fatal("fill reached the host rootfs")
	}
	// The sandbox still serves after its disk filled.
	token(t, a)
}

func TestBootErrors(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	spec := f.spec("ctbad")
	spec.Args = []string{"/does/not/exist"}
	if _, err := f.rt.Boot(c, spec); err == nil {
		t.Fatal("boot with a missing PID 1 succeeded")
	}
	if ids, _ := f.rt.List(c); slices.Contains(ids, "ctbad") {
		t.Fatalf("failed boot left a container: %v", ids)
	}
	if _, err := os.Stat(filepath.Join(f.rt.cfg.Bundles, "ctbad")); !os.IsNotExist(err) {
		t.Fatal("failed boot left its bundle")
	}
	if _, err := f.rt.Restore(c, t.TempDir(), f.spec("ctbad2")); err == nil {
		t.Fatal("restore from an empty image succeeded")
	}
	if _, err := New(Config{Runsc: "/nonexistent/runsc"}); err == nil || !strings.Contains(err.Error(), "make bin/runsc") {
		t.Fatalf("missing runsc: %v", err)
	}
}

func TestMemoryLimitContainsAllocation(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	spec := f.spec("ctmem")
	spec.MemoryMB = 128
	a, err := f.rt.Boot(c, spec)
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	out, err := a.Exec(c, runtime.AgentMount+"/holder", "alloc", "65536")
	if err == nil && strings.Contains(string(out), "allocated") {
		t.Fatalf("a 64 GiB allocation succeeded under a 128 MiB limit: %s", out)
	}
	// PID 1 and its memory survive the allocation that failed.
	if got := token(t, a); got != tok {
		t.Fatalf("token after OOM %s", got)
	}
	small, err := a.Exec(c, runtime.AgentMount+"/holder", "alloc", "16")
	if err != nil || !strings.Contains(string(small), "allocated 16") {
		t.Fatalf("small allocation after OOM: %v %s", err, small)
	}
}

// A checkpoint restores with the spec it was taken with, even when the
// spec Cube would write now differs (an upgrade changed a limit).
func TestRestoreUsesCheckpointedSpec(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	_, tok, img := f.checkpointed(t, c, "ctspec", true)
	changed := f.spec("ctspec2")
	changed.Env = append(changed.Env, "NEW=1")
	changed.MemoryMB = 256
	b, err := f.rt.Restore(c, img, changed)
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, b); got != tok {
		t.Fatalf("token %s, want %s", got, tok)
	}
}

func TestRestoreIntoPreparedContainer(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	a, tokA, img := f.checkpointed(t, c, "pra", true)
	// Containers of one spec share a key whatever their IDs; other
	// limits make another key.
	k1, err := f.rt.PrepareKey(img, f.spec("x"))
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := f.rt.PrepareKey(img, f.spec("y"))
	other := f.spec("x")
	other.MemoryMB = 512
	k3, _ := f.rt.PrepareKey(img, other)
	if k1 == "" || k1 != k2 || k1 == k3 {
		t.Fatalf("keys: same spec %q / %q, other limits %q", k1, k2, k3)
	}

	p, err := f.rt.Prepare(c, img, f.spec("prb"))
	if err != nil {
		t.Fatal(err)
	}
	if s := f.state(t, c, "prb"); !strings.Contains(s, `"created"`) {
		t.Fatalf("prepared container state: %s", s)
	}
	b, err := p.Restore(c, img)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID() != "prb" {
		t.Fatalf("restored into %s, want prb", b.ID())
	}
	if got := token(t, b); got != tokA {
		t.Fatalf("restored token %s, want %s", got, tokA)
	}
	if err := b.Kill(c); err != nil {
		t.Fatal(err)
	}

	// A restore that fails, before runsc (no image) or in it (a damaged
	// image), leaves nothing: no container, no bundle.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "checkpoint.img"), []byte("not a checkpoint"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, image := range []string{t.TempDir(), bad} {
		cid := fmt.Sprintf("prc%d", i)
		q, err := f.rt.Prepare(c, img, f.spec(cid))
		if err != nil {
			t.Fatal(err)
		}
		_, err = q.Restore(c, image)
		if err == nil {
			t.Fatalf("restore of %s into a prepared container succeeded", image)
		}
		t.Logf("restore of a bad image: %v", err)
		ids, _ := f.rt.List(c)
		if slices.Contains(ids, cid) {
			t.Fatalf("a failed restore left its container: %v", ids)
		}
		if _, err := os.Stat(filepath.Join(f.rt.cfg.Bundles, cid)); !os.IsNotExist(err) {
			t.Fatalf("a failed restore left its bundle: %v", err)
		}
	}

	// An unused prepared container is discarded by Kill.
	d, err := f.rt.Prepare(c, img, f.spec("prd"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Kill(c); err != nil {
		t.Fatal(err)
	}
	ids, _ := f.rt.List(c)
	if slices.Contains(ids, "prd") {
		t.Fatalf("Kill left the prepared container: %v", ids)
	}
	a.Kill(c)
}

// A container whose sandbox and gofer run but whose state runsc lost (a
// create or restore that a crash of the server cut short) is listed, so
// the reconciler sees it, and Remove ends its processes.
func TestStrayContainerIsListedAndRemoved(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	sb, err := f.rt.Boot(c, f.spec("ctstray"))
	if err != nil {
		t.Fatal(err)
	}
	token(t, sb)
	if len(rootProcesses(f.rt.cfg.Root)) == 0 {
		t.Fatal("no sandbox processes found for the root")
	}
	if len(cgroupDirs(cgroupRoot, "ctstray")) == 0 {
		t.Fatal("runsc made no cgroup for the container")
	}
	// What a cut-short create leaves: processes and the lock runsc takes
	// first, no state runsc reads.
	state := f.rt.stateFile("ctstray")
	if _, err := state.Stat(); err != nil {
		t.Fatalf("no runsc state for the container: %v", err)
	}
	states, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, "*ctstray*.state"))
	for _, s := range states {
		os.Remove(s)
	}
	ids, err := f.rt.List(c)
	if err != nil || !slices.Contains(ids, "ctstray") {
		t.Fatalf("List = %v, %v; want the stray container listed", ids, err)
	}
	if err := f.rt.Remove(c, "ctstray"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if left := rootProcesses(f.rt.cfg.Root); len(left) > 0 {
		t.Fatalf("processes left after Remove: %v", left)
	}
	if ids, _ := f.rt.List(c); slices.Contains(ids, "ctstray") {
		t.Fatalf("still listed after Remove: %v", ids)
	}
	if left := cgroupDirs(cgroupRoot, "ctstray"); len(left) > 0 {
		t.Fatalf("cgroups left after Remove: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, "*ctstray*")); len(left) > 0 {
		t.Fatalf("runsc files left after Remove: %v", left)
	}
}

// A create killed after runsc took the container's lock and before it
// saved the state, whose processes are gone too, leaves the lock file
// alone: List names the container so the reconciler removes it, and
// Remove takes the lock away.
func TestLockLeftByACutShortCreateIsListedAndRemoved(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	lock := filepath.Join(f.rt.cfg.Root, "ctunsaved_sandbox:ctunsaved.lock")
	// A lock of a container that is not its sandbox's root is not one of
	// Cube's.
	other := filepath.Join(f.rt.cfg.Root, "ctchild_sandbox:ctparent.lock")
	for _, p := range []string{lock, other} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := f.rt.List(c)
	if err != nil || !slices.Contains(ids, "ctunsaved") {
		t.Fatalf("List = %v, %v; want the container with only a lock listed", ids, err)
	}
	if slices.Contains(ids, "ctchild") || slices.Contains(ids, "ctparent") {
		t.Fatalf("List = %v; a lock of a container that is not its sandbox's root is not Cube's", ids)
	}
	if err := f.rt.Remove(c, "ctunsaved"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Fatalf("lock file after Remove: %v; want it gone", err)
	}
	if ids, _ := f.rt.List(c); slices.Contains(ids, "ctunsaved") {
		t.Fatalf("still listed after Remove: %v", ids)
	}
}

// A start waits for the runsc commands a crashed server left running
// before it lists containers: killing them with the server instead cut a
// pause short while runsc rewrote the container's state file, which lost
// a running sandbox.
func TestListWaitsForAPreviousRunsCommands(t *testing.T) {
	f := newFixture(t)
	script := filepath.Join(t.TempDir(), "runsc")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nsleep 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rs := Runsc{Path: script, Root: f.rt.cfg.Root}
	args := append([]string{script}, append(rs.Flags(nil), "pause", "ctorphan")...)
	// Started through a shell that exits at once, so its parent is not
	// this process: a command of a server that is gone.
	launcher := exec.Command("/bin/sh", append([]string{"-c", `"$@" >/dev/null 2>&1 &`, "sh"}, args...)...)
	if err := launcher.Run(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(orphanCommands(f.rt.cfg.Root)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the previous run's command is not seen under the state root")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if _, err := f.rt.List(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if left := orphanCommands(f.rt.cfg.Root); len(left) > 0 {
		t.Fatalf("List returned while the previous run's command %v still ran (after %s)", left, time.Since(start))
	}
	// The server's own commands are not waited for.
	own := exec.Command(script, append(rs.Flags(nil), "pause", "ctown")...)
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	defer own.Wait()
	time.Sleep(100 * time.Millisecond)
	if left := orphanCommands(f.rt.cfg.Root); len(left) > 0 {
		t.Fatalf("a command of this process counted as a previous run's: %v", left)
	}
}

// A state file runsc began and never finished (a create killed with the
// server) does not keep its container listed for ever: Remove ends the
// processes and the state runsc cannot read.
func TestHalfWrittenStateIsRemoved(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	sb, err := f.rt.Boot(c, f.spec("cthalf"))
	if err != nil {
		t.Fatal(err)
	}
	token(t, sb)
	states, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, "cthalf_sandbox:*.state"))
	if len(states) != 1 {
		t.Fatalf("runsc state files: %v", states)
	}
	if len(cgroupDirs(cgroupRoot, "cthalf")) == 0 {
		t.Fatal("runsc made no cgroup for the container")
	}
	if err := os.Truncate(states[0], 0); err != nil {
		t.Fatal(err)
	}
	if ids, err := f.rt.List(c); err != nil || !slices.Contains(ids, "cthalf") {
		t.Fatalf("List = %v, %v; want the container listed", ids, err)
	}
	if err := f.rt.Remove(c, "cthalf"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if ids, _ := f.rt.List(c); slices.Contains(ids, "cthalf") {
		t.Fatalf("still listed after Remove: %v", ids)
	}
	if left := rootProcesses(f.rt.cfg.Root); len(left) > 0 {
		t.Fatalf("processes left: %v", left)
	}
	if left := cgroupDirs(cgroupRoot, "cthalf"); len(left) > 0 {
		t.Fatalf("cgroups left after Remove: %v", left)
	}
}

// Attach reads a state file that another command is rewriting (runsc
// truncates it, then writes it, and readers take no lock) once it is
// whole again, instead of giving the sandbox up.
func TestAttachWaitsOutAStateBeingRewritten(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	sb, err := f.rt.Boot(c, f.spec("cttorn"))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, sb)
	states, _ := filepath.Glob(filepath.Join(f.rt.cfg.Root, "cttorn_sandbox:*.state"))
	if len(states) != 1 {
		t.Fatalf("runsc state files: %v", states)
	}
	whole, err := os.ReadFile(states[0])
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(states[0], nil, 0o640)
	go func() {
		time.Sleep(300 * time.Millisecond)
		os.WriteFile(states[0], whole, 0o640)
	}()
	again, err := f.rt.Attach(c, "cttorn")
	if err != nil {
		t.Fatalf("attach while the state was rewritten: %v", err)
	}
	if got := token(t, again); got != tok {
		t.Fatalf("attached token %s, want %s", got, tok)
	}
}
