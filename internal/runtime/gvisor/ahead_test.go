package gvisor

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
)

// A prepared container's restore is started with it: runsc sets up what
// the image does not decide and waits, and the restore hands it the
// image. Unused, the container is killed with it; one whose waiting runsc
// ended (a server that died closes its stdin) stays created, and its
// restore goes through the CLI.
func TestRestoreStartedAhead(t *testing.T) {
	f := newFixture(t)
	c := ctx(t)
	bg := runtime.Background(c)
	a, tok, img := f.checkpointed(t, c, "aha", true)

	// Prepared for a pool: the waiting runsc runs at idle priority until
	// a request takes the container.
	p, err := f.rt.Prepare(bg, img, f.spec("ahb"))
	if err != nil {
		t.Fatal(err)
	}
	ahead := p.(*prepared).ahead
	if ahead == nil {
		t.Fatal("Prepare started no restore ahead")
	}
	if ahead.exited() {
		t.Fatalf("the restore started ahead ended before its image came: %v", ahead.err)
	}
	pid := strconv.Itoa(ahead.cmd.Process.Pid)
	if f.rt.threads != nil {
		if got, _ := schedOf(t, pid); got != unix.SCHED_IDLE {
			t.Fatalf("a restore started ahead in the background is scheduled with policy %d, want SCHED_IDLE", got)
		}
		if err := ahead.promote(); err != nil {
			t.Fatal(err)
		}
		for _, tid := range threadsOf(t, pid) {
			if got, _ := schedOf(t, tid); got != unix.SCHED_NORMAL {
				t.Fatalf("thread %s of a promoted restore is scheduled with policy %d", tid, got)
			}
		}
	}
	b, err := p.Restore(c, img)
	if err != nil {
		t.Fatal(err)
	}
	if got := token(t, b); got != tok {
		t.Fatalf("restored token %s, want %s", got, tok)
	}
	if !ahead.exited() || ahead.err != nil {
		t.Fatalf("the restore did not go through the runsc started ahead (exited %v: %v)", ahead.exited(), ahead.err)
	}
	if s := f.state(t, c, "ahb"); !strings.Contains(s, `"running"`) {
		t.Fatalf("restored container's state: %s", s)
	}
	if err := b.Kill(c); err != nil {
		t.Fatal(err)
	}

	// Unused: Kill ends the waiting runsc with the container.
	q, err := f.rt.Prepare(c, img, f.spec("ahc"))
	if err != nil {
		t.Fatal(err)
	}
	qa := q.(*prepared).ahead
	if err := q.Kill(c); err != nil {
		t.Fatal(err)
	}
	if !qa.exited() || qa.err != nil {
		t.Fatalf("Kill left the waiting runsc (exited %v: %v)", qa.exited(), qa.err)
	}
	for _, proc := range runscProcesses(f.rt.cfg.Root) {
		if proc.id == "ahc" {
			t.Fatalf("process %d of the killed container is left", proc.pid)
		}
	}

	// Its stdin closed, the waiting runsc leaves the container created,
	// and the restore takes the CLI; so does one whose runsc was killed.
	for _, end := range []struct {
		id  string
		end func(*awaiting)
	}{
		{"ahd", (*awaiting).cancel},
		{"ahe", func(w *awaiting) { w.cmd.Process.Kill(); <-w.done }},
	} {
		r, err := f.rt.Prepare(c, img, f.spec(end.id))
		if err != nil {
			t.Fatal(err)
		}
		end.end(r.(*prepared).ahead)
		if s := f.state(t, c, end.id); !strings.Contains(s, `"created"`) {
			t.Fatalf("a prepared container whose restore ended without an image: %s", s)
		}
		d, err := r.Restore(c, img)
		if err != nil {
			t.Fatal(err)
		}
		if got := token(t, d); got != tok {
			t.Fatalf("restored token %s, want %s", got, tok)
		}
		d.Kill(c)
	}
	a.Kill(c)
}

// threadsOf lists the threads of process pid.
func threadsOf(t *testing.T, pid string) []string {
	t.Helper()
	ents, err := filepath.Glob(filepath.Join("/proc", pid, "task", "*"))
	if err != nil || len(ents) == 0 {
		t.Fatalf("threads of %s: %v", pid, err)
	}
	for i, e := range ents {
		ents[i] = filepath.Base(e)
	}
	return ents
}
