package reap

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReaperCollectsOwnChildrenAndOrphans runs the reaper as envd does
// under another init: a subreaper that waits for everything.
func TestReaperCollectsOwnChildrenAndOrphans(t *testing.T) {
	if err := BecomeSubreaper(); err != nil {
		t.Fatalf("subreaper: %v", err)
	}
	r := New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)

	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	// The shell leaves an orphan behind and exits with 3.
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.2 & echo $!; exit 3")
	cmd.Stdout = out
	child, err := r.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	ws := child.Wait()
	if !ws.Exited() || ws.ExitStatus() != 3 {
		t.Fatalf("status %v, want exit 3", ws)
	}
	b, _ := os.ReadFile(out.Name())
	orphan, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("orphan pid %q", b)
	}
	// The orphan becomes our child when the shell exits; once it ends the
	// reaper must collect it, leaving no zombie.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := syscall.Kill(orphan, 0); err == syscall.ESRCH {
			break
		}
		if time.Now().After(deadline) {
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
			t.Fatalf("orphan %d not reaped: %s", orphan, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.Running(); n != 0 {
		t.Fatalf("%d children still registered", n)
	}
}

func TestNilReaperUsesExec(t *testing.T) {
	var r *Reaper
	child, err := r.Start(exec.Command("/bin/sh", "-c", "kill -TERM $$"))
	if err != nil {
		t.Fatal(err)
	}
	if ws := child.Wait(); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("status %v, want killed by SIGTERM", ws)
	}
}
