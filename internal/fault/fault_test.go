package fault

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestPointKillsOnlyWhenArmed runs a child process that arms one point and
// passes another, then the armed one: it must die by SIGKILL at the
// second and not before.
func TestPointKillsOnlyWhenArmed(t *testing.T) {
	if os.Getenv("FAULT_TEST_CHILD") == "1" {
		if err := Arm(PauseAfterRename); err != nil {
			os.Exit(3)
		}
		Point(PauseAfterCheckpoint)
		os.Stdout.WriteString("passed the unarmed point\n")
		Point(PauseAfterRename)
		os.Stdout.WriteString("survived the armed point\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPointKillsOnlyWhenArmed$")
	cmd.Env = append(os.Environ(), "FAULT_TEST_CHILD=1")
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child ended with %v, want death by SIGKILL; output %q", err, out)
	}
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL; output %q", err, out)
	}
	if string(out) != "passed the unarmed point\n" {
		t.Fatalf("child output %q", out)
	}
}

func TestArmRejectsUnknownPoints(t *testing.T) {
	defer Arm("")
	if err := Arm("pause.after-typo"); err == nil {
		t.Fatal("an unknown point was armed")
	}
	if Armed() != "" {
		t.Fatalf("armed %q after a rejected Arm", Armed())
	}
	if err := Arm(BuildAfterReady); err != nil || Armed() != BuildAfterReady {
		t.Fatalf("Arm(%q): %v, armed %q", BuildAfterReady, err, Armed())
	}
	Arm("")
	Point(BuildAfterReady) // disarmed: returns
}

// TestHangStopsTheGoroutine: a point armed by Hang stops the goroutine
// that reaches it, before anything after it (defers included) runs, and
// says so; another point passes.
func TestHangStopsTheGoroutine(t *testing.T) {
	defer Arm("")
	if _, err := Hang("pause.after-typo"); err == nil {
		t.Fatal("an unknown point was armed")
	}
	reached, err := Hang(RollbackAfterRecord)
	if err != nil || Armed() != RollbackAfterRecord {
		t.Fatalf("Hang: %v, armed %q", err, Armed())
	}
	after := make(chan string, 2)
	go func() {
		defer func() { after <- "deferred" }()
		Point(RollbackAfterRestore)
		after <- "passed the unarmed point"
		Point(RollbackAfterRecord)
		after <- "passed the armed point"
	}()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the armed point was not reached")
	}
	if got := <-after; got != "passed the unarmed point" {
		t.Fatalf("first step: %q", got)
	}
	select {
	case got := <-after:
		t.Fatalf("the goroutine went on past the armed point: %q", got)
	case <-time.After(50 * time.Millisecond):
	}
}
