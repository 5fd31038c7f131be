package gvisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
)

// schedOf is the scheduling policy and niceness of thread (or process)
// tid.
func schedOf(t *testing.T, tid string) (policy, nice int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", tid, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name, which is in parentheses: state is
	// the stat file's 3rd field, niceness its 19th, policy its 41st.
	rest := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	nice, err1 := strconv.Atoi(rest[19-3])
	policy, err2 := strconv.Atoi(rest[41-3])
	if err1 != nil || err2 != nil {
		t.Fatalf("stat of %s: %v %v", tid, err1, err2)
	}
	return policy, nice
}

func TestStartWithRunsTheCommandSoScheduled(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := startWith(cmd, backgroundSched); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if p, n := schedOf(t, strconv.Itoa(cmd.Process.Pid)); p != unix.SCHED_IDLE || n != 0 {
		t.Fatalf("command scheduled with policy %d at niceness %d, want SCHED_IDLE (%d) at 0", p, n, unix.SCHED_IDLE)
	}
	// A command started normally afterwards is scheduled normally: the
	// thread that changed its own scheduling is gone with its goroutine.
	plain := exec.Command("sleep", "5")
	if err := plain.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { plain.Process.Kill(); plain.Wait() }()
	if p, _ := schedOf(t, strconv.Itoa(plain.Process.Pid)); p != unix.SCHED_NORMAL {
		t.Fatalf("a command started afterwards is scheduled with policy %d, want SCHED_NORMAL", p)
	}
}

// containerSched is the scheduling policy of every thread of container
// id, or fails if they differ or there are none, and the niceness of
// each thread.
func containerSched(t *testing.T, rt *Runtime, id string) (int, map[string]int) {
	t.Helper()
	data, err := os.ReadFile(rt.threads(id))
	if err != nil {
		t.Fatal(err)
	}
	tids := strings.Fields(string(data))
	if len(tids) == 0 {
		t.Fatalf("container %s has no threads", id)
	}
	want, _ := schedOf(t, tids[0])
	nice := map[string]int{}
	for _, tid := range tids {
		p, n := schedOf(t, tid)
		if p != want {
			t.Fatalf("thread %s of %s is scheduled with policy %d, thread %s with %d", tid, id, p, tids[0], want)
		}
		nice[tid] = n
	}
	return want, nice
}

// policy is containerSched's policy alone.
func policy(t *testing.T, rt *Runtime, id string) int {
	t.Helper()
	p, _ := containerSched(t, rt, id)
	return p
}

// Containers prepared and restored for pools run as SCHED_IDLE until a
// request takes them: then every one of their threads is scheduled
// normally.
func TestBackgroundContainersRunLowUntilPromoted(t *testing.T) {
	f := newFixture(t)
	if f.rt.threads == nil {
		t.Fatal("runsc runs containers in cgroups, but the runtime found no cgroup hierarchy")
	}
	c := ctx(t)
	bg := runtime.Background(c)
	a, err := f.rt.Boot(c, f.spec("nia"))
	if err != nil {
		t.Fatal(err)
	}
	tok := token(t, a)
	if got := policy(t, f.rt, "nia"); got != unix.SCHED_NORMAL {
		t.Fatalf("a sandbox booted for a request is scheduled with policy %d", got)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := a.Checkpoint(c, img, false); err != nil {
		t.Fatal(err)
	}

	// A warm pool's sandbox: prepared and restored in the background,
	// promoted when a create takes it.
	p, err := f.rt.Prepare(bg, img, f.spec("nib"))
	if err != nil {
		t.Fatal(err)
	}
	if got := policy(t, f.rt, "nib"); got != unix.SCHED_IDLE {
		t.Fatalf("a container prepared in the background is scheduled with policy %d, want SCHED_IDLE", got)
	}
	b, err := p.Restore(bg, img)
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, b); got != tok {
		t.Fatalf("restored token %s, want %s", got, tok)
	}
	got, before := containerSched(t, f.rt, "nib")
	if got != unix.SCHED_IDLE {
		t.Fatalf("a sandbox restored in the background is scheduled with policy %d, want SCHED_IDLE", got)
	}
	if err := b.(runtime.Promoter).Promote(); err != nil {
		t.Fatal(err)
	}
	got, after := containerSched(t, f.rt, "nib")
	if got != unix.SCHED_NORMAL {
		t.Fatalf("a promoted sandbox is scheduled with policy %d, want SCHED_NORMAL", got)
	}
	// Promotion keeps each thread's niceness (gVisor runs its stub
	// threads one step nicer than the sentry).
	for tid, n := range before {
		if m, ok := after[tid]; ok && m != n {
			t.Fatalf("promotion changed the niceness of thread %s from %d to %d", tid, n, m)
		}
	}

	// A prepared container a request restores into is promoted first.
	q, err := f.rt.Prepare(bg, img, f.spec("nic"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := q.Restore(c, img)
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, d); got != tok {
		t.Fatalf("restored token %s, want %s", got, tok)
	}
	if got := policy(t, f.rt, "nic"); got != unix.SCHED_NORMAL {
		t.Fatalf("a sandbox restored for a request is scheduled with policy %d, want SCHED_NORMAL", got)
	}
}
