package node_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/runtime"
)

// filesImage is where a files-only pause of sandboxID keeps its files.
func filesImage(n *nodefake.Node, sandboxID string) string {
	return filepath.Join(n.DataDir, "sandboxes", sandboxID, "pause", runtime.FilesImage)
}

// resumeBootsWithFiles connects to a sandbox paused with its files only
// and checks it came back in a fresh boot (not a restore) of its files
// image, with its own token handed to an agent that had none.
func resumeBootsWithFiles(t *testing.T, n *nodefake.Node, sb *cube.Sandbox, before string) {
	t.Helper()
	image := filesImage(n, sb.ID)
	restores := len(n.Runtime.Restores())
	if _, resumed, err := n.ConnectSandbox(fctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("connect = %v, %v", resumed, err)
	}
	now, host := served(t, n, sb.ID)
	if now == before {
		t.Fatal("resumed into the container that was paused")
	}
	if got := n.Runtime.Container(now).Image(); got != image {
		t.Fatalf("resumed container started from %q, want a boot with the files image %q", got, image)
	}
	if len(n.Runtime.Restores()) != restores {
		t.Fatal("a files-only pause was resumed by restoring a checkpoint")
	}
	inits := n.Agents.Inits()
	if in := inits[len(inits)-1]; in.Host != host || in.Token != sb.EnvdAccessToken || in.OldToken != "" {
		t.Fatalf("init on resume = %+v", in)
	}
	wantState(t, n, sb.ID, cube.StateRunning)
	if _, err := os.Stat(filepath.Dir(image)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the files image outlived the resume: %v", err)
	}
	wantHeld(t, n, []string{now}, []int{slotOf(t, host)})
}

func TestFakeFilesOnlyPauseFreesAtOnceAndBootsAfresh(t *testing.T) {
	// A write-out delay far beyond the test: only a files-only pause
	// writes at once.
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	a := fakeCreate(t, n, cube.CreateRequest{})
	cid, _ := served(t, n, a.ID)
	if err := n.PauseSandbox(fctx(t), a.ID, false); err != nil {
		t.Fatal(err)
	}
	// Already on disk when the pause answers: container and slot freed.
	wantState(t, n, a.ID, cube.StatePaused)
	wantHeld(t, n, nil, nil)
	if _, err := os.Stat(filesImage(n, a.ID)); err != nil {
		t.Fatalf("files image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(filesImage(n, a.ID)), "checkpoint.img")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a files-only pause wrote a memory checkpoint: %v", err)
	}
	// A second pause of a paused sandbox is refused, whatever it keeps.
	wantKind(t, "pause again", n.PauseSandbox(fctx(t), a.ID, false), cube.Conflict)

	resumeBootsWithFiles(t, n, a, cid)
	if err := n.KillSandbox(fctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, n, nil, nil)
}

func TestFakeFilesOnlyPauseThatCannotSaveLeavesTheSandboxRunning(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	a := fakeCreate(t, n, cube.CreateRequest{})
	cid, host := served(t, n, a.ID)
	n.Runtime.Fail(nodefake.OpSaveFiles, errors.New("disk on fire"))
	if err := n.PauseSandbox(fctx(t), a.ID, false); err == nil {
		t.Fatal("pause succeeded although the files could not be saved")
	}
	wantState(t, n, a.ID, cube.StateRunning)
	if c, h := served(t, n, a.ID); c != cid || h != host || n.Runtime.Container(cid).State() != nodefake.Running {
		t.Fatalf("after the failed pause the sandbox is served by %s at %v", c, h)
	}
	wantHeld(t, n, []string{cid}, []int{slotOf(t, host)})

	// Once saving works again, so does the pause.
	n.Runtime.Fail(nodefake.OpSaveFiles, nil)
	if err := n.PauseSandbox(fctx(t), a.ID, false); err != nil {
		t.Fatal(err)
	}
	wantHeld(t, n, nil, nil)
}

func TestFakeAutoPauseWithoutMemoryKeepsFilesOnly(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	a := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Millisecond, AutoPause: true, AutoPauseMemory: false})
	cid, _ := served(t, n, a.ID)
	eventually(t, "the reaper pauses the sandbox to disk", func() bool {
		sb, err := n.GetSandbox(fctx(t), a.ID)
		return err == nil && sb.State == cube.StatePaused && n.Runtime.Container(cid) == nil
	})
	resumeBootsWithFiles(t, n, a, cid)
}

func TestFakeFilesOnlyPauseSurvivesARestart(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	a := fakeCreate(t, n, cube.CreateRequest{})
	cid, _ := served(t, n, a.ID)
	if err := n.PauseSandbox(fctx(t), a.ID, false); err != nil {
		t.Fatal(err)
	}
	n = n.Restart(t)
	wantState(t, n, a.ID, cube.StatePaused)
	wantHeld(t, n, nil, nil)
	resumeBootsWithFiles(t, n, a, cid)
}

func TestFakeTrafficDoesNotWakeAFilesOnlyPause(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	a := fakeCreate(t, n, cube.CreateRequest{AutoResume: true})
	cid, _ := served(t, n, a.ID)
	if err := n.PauseSandbox(fctx(t), a.ID, false); err != nil {
		t.Fatal(err)
	}
	if tgt, err := n.Resolve(fctx(t), a.ID, 8080); err == nil || tgt.Paused {
		t.Fatalf("resolve = %+v, %v; want an error that says to connect", tgt, err)
	} else if !strings.Contains(err.Error(), "connect") {
		t.Fatalf("resolve error %q does not say what to do", err)
	}
	if _, err := n.Resume(fctx(t), a.ID, 8080); err == nil {
		t.Fatal("traffic resumed a sandbox paused without its memory")
	}
	wantState(t, n, a.ID, cube.StatePaused)
	resumeBootsWithFiles(t, n, a, cid)
}

func TestFakeAutoPauseWithoutMemoryFallsBackToMemoryWhenFilesCannotBeSaved(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: time.Hour})
	n.Runtime.Fail(nodefake.OpSaveFiles, errors.New("disk on fire"))
	a := fakeCreate(t, n, cube.CreateRequest{Timeout: time.Millisecond, AutoPause: true})
	cid, _ := served(t, n, a.ID)
	// The files-only attempt freezes the sandbox, fails and thaws it; the
	// fallback then freezes it with its memory: paused, and its container
	// still there, frozen, not killed.
	eventually(t, "the reaper pauses the sandbox with its memory", func() bool {
		sb, err := n.GetSandbox(fctx(t), a.ID)
		c := n.Runtime.Container(cid)
		return err == nil && sb.State == cube.StatePaused && c != nil && c.State() == nodefake.Paused
	})
}
