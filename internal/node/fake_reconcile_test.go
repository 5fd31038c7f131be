package node_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/runtime"
	"cube/internal/store"
)

// record reads a sandbox's record from the store, whatever its state.
func record(t *testing.T, n *nodefake.Node, sandboxID string) *store.Sandbox {
	t.Helper()
	rec, err := n.Store.Sandboxes().Get(fctx(t), sandboxID)
	if err != nil {
		t.Fatalf("record of %s: %v", sandboxID, err)
	}
	return rec
}

func TestFakeReconcileReadoptsLiveSandboxes(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	a := fakeCreate(t, n, cube.CreateRequest{})
	b := fakeCreate(t, n, cube.CreateRequest{})
	aC, aHost := served(t, n, a.ID)
	bC, bHost := served(t, n, b.ID)
	if err := n.PauseSandbox(fctx(t), b.ID, true); err != nil {
		t.Fatal(err)
	}

	n = n.Restart(t)
	// Both are adopted with their containers and slots: a running, b
	// still paused in memory.
	wantHeld(t, n, []string{aC, bC}, []int{slotOf(t, aHost), slotOf(t, bHost)})
	wantState(t, n, a.ID, cube.StateRunning)
	wantState(t, n, b.ID, cube.StatePaused)
	if c, host := served(t, n, a.ID); c != aC || host != aHost {
		t.Fatalf("a is served by %s at %v after the restart", c, host)
	}
	if _, resumed, err := n.ConnectSandbox(fctx(t), b.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("connect b = %v, %v", resumed, err)
	}
	if c, _ := served(t, n, b.ID); c != bC || n.Runtime.Container(bC).State() != nodefake.Running {
		t.Fatalf("b resumed into %s, not its thawed container %s", c, bC)
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := n.KillSandbox(fctx(t), id); err != nil {
			t.Fatal(err)
		}
	}
	wantHeld(t, n, nil, nil)
}

func TestFakeReconcileRemovesWhatNoRecordAccountsFor(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	lost := fakeCreate(t, n, cube.CreateRequest{})
	lostC, _ := served(t, n, lost.ID)
	n.Runtime.Lose(lostC)
	killing := fakeCreate(t, n, cube.CreateRequest{})
	rec := record(t, n, killing.ID)
	rec.State = store.Killing // the kill was under way when the server died
	if err := n.Store.Sandboxes().Put(fctx(t), rec); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Runtime.Boot(fctx(t), runtime.Spec{ID: "stray"}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(n.DataDir+"/sandboxes/gone-long-ago", 0o700)

	n = n.Restart(t)
	for _, id := range []string{lost.ID, killing.ID} {
		_, err := n.GetSandbox(fctx(t), id)
		wantKind(t, "get after reconcile", err, cube.NotFound)
		if _, err := n.Store.Sandboxes().Get(fctx(t), id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("record of %s kept: %v", id, err)
		}
	}
	wantHeld(t, n, nil, nil)
	if _, err := os.Stat(n.DataDir + "/sandboxes/gone-long-ago"); !os.IsNotExist(err) {
		t.Fatalf("orphaned sandbox directory kept: %v", err)
	}
}

// A create in flight when the server died was never handed out: its
// record, container and slot all go.
func TestFakeReconcileRemovesHalfCreatedSandbox(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	entered, release := n.Agents.Hold()
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.CreateSandbox(ctx, cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the create never reached /init")
	}
	if len(n.Runtime.Containers()) != 1 || len(n.Slots.Held()) != 1 {
		t.Fatalf("mid-create: %v, slots %v", n.Runtime.Containers(), n.Slots.Held())
	}

	first := n
	n = n.Restart(t)
	if all, _ := n.Store.Sandboxes().List(fctx(t)); len(all) != 0 {
		t.Fatalf("records after reconcile: %+v", all[0])
	}
	wantHeld(t, n, nil, nil)

	// The dead server's create, were it to go on, fails and takes nothing.
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the interrupted create succeeded")
	}
	wantHeld(t, first, nil, nil)
	if all, _ := n.Store.Sandboxes().List(fctx(t)); len(all) != 0 {
		t.Fatalf("records after the interrupted create ended: %+v", all[0])
	}
}

// A fork child being started when the server died is removed, and only
// it: the parent it was copied from keeps its container and slot.
func TestFakeReconcileKeepsParentOfInterruptedFork(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	parent := fakeCreate(t, n, cube.CreateRequest{})
	pC, pHost := served(t, n, parent.ID)
	entered, release := n.Agents.Hold()
	t.Cleanup(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := n.ForkSandbox(ctx, parent.ID, cube.ForkRequest{Count: 1, Timeout: time.Minute})
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the fork child never reached /init")
	}

	n = n.Restart(t)
	if all, _ := n.Store.Sandboxes().List(fctx(t)); len(all) != 1 || all[0].ID != parent.ID {
		t.Fatalf("records after reconcile: %d, want only the parent", len(all))
	}
	wantState(t, n, parent.ID, cube.StateRunning)
	if c, host := served(t, n, parent.ID); c != pC || host != pHost {
		t.Fatalf("the parent is served by %s at %v after the restart, want %s at %v", c, host, pC, pHost)
	}
	if n.Runtime.Container(pC).State() != nodefake.Running {
		t.Fatalf("the parent's container is %v", n.Runtime.Container(pC).State())
	}
	cancel()
	release()
	<-done
}

// A write-out whose image never got complete is rolled back to the frozen
// container, which is adopted and still resumes in place.
func TestFakeReconcileRollsBackInterruptedWriteOut(t *testing.T) {
	n := newFake(t, nodefake.Options{PauseWriteDelay: -1})
	n.Runtime.Fail(nodefake.OpCheckpoint, errors.New("power cut"))
	a := fakeCreate(t, n, cube.CreateRequest{})
	aC, aHost := served(t, n, a.ID)
	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the write-out starts", func() bool { return record(t, n, a.ID).PauseImageTarget != "" })

	n = n.Restart(t) // waits for the failed write-out to end first
	wantState(t, n, a.ID, cube.StatePaused)
	wantHeld(t, n, []string{aC}, []int{slotOf(t, aHost)})
	if s := n.Runtime.Container(aC).State(); s != nodefake.Paused {
		t.Fatalf("the adopted container is %q", s)
	}
	// Checkpoints still fail, so the sandbox stays in memory and resumes
	// by a thaw.
	if _, resumed, err := n.ConnectSandbox(fctx(t), a.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("connect = %v, %v", resumed, err)
	}
	if c, _ := served(t, n, a.ID); c != aC {
		t.Fatalf("resumed into %s, not the adopted %s", c, aC)
	}
}

// A write-out whose image is complete and matches its recorded checksum
// is finished: the sandbox is paused on disk, whatever still runs is
// surplus, and a resume restores the image.
func TestFakeReconcileFinishesInterruptedWriteOut(t *testing.T) {
	for _, intact := range []bool{true, false} {
		name := map[bool]string{true: "intact", false: "torn"}[intact]
		t.Run(name, func(t *testing.T) {
			n := newFake(t, nodefake.Options{PauseWriteDelay: -1})
			a := fakeCreate(t, n, cube.CreateRequest{})
			running := record(t, n, a.ID)
			if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the write-out is done", func() bool { return record(t, n, a.ID).PauseImage != "" })
			n.Close()

			// Play back the moment after the image got its final name and
			// before the store said so: the record names the image as in
			// flight and the container and slot as the sandbox's. With an
			// intact image the frozen container is still there; with a torn
			// one the host lost it too.
			rec := record(t, n, a.ID)
			image := rec.PauseImage
			rec.Pause, rec.PauseImageTarget, rec.PauseImage = store.PauseWritingOut, image, ""
			rec.ContainerID, rec.Slot, rec.HostAddr = running.ContainerID, running.Slot, running.HostAddr
			if !intact {
				rec.PauseChecksum = "not the image's"
			}
			if err := n.Store.Sandboxes().Put(fctx(t), rec); err != nil {
				t.Fatal(err)
			}
			if intact {
				// The frozen container, written out but not yet retired.
				if _, err := n.Runtime.Boot(fctx(t), runtime.Spec{ID: running.ContainerID}); err != nil {
					t.Fatal(err)
				}
			}
			if s, err := n.Slots.Acquire(fctx(t)); err != nil || s.Index != running.Slot {
				t.Fatalf("slot %v, %v; want %d again", s, err, running.Slot)
			}

			n = n.Restart(t)
			wantHeld(t, n, nil, nil)
			if !intact {
				// Neither an image nor a container: the sandbox is lost.
				_, err := n.GetSandbox(fctx(t), a.ID)
				wantKind(t, "get of a lost sandbox", err, cube.NotFound)
				if _, err := os.Stat(image); !os.IsNotExist(err) {
					t.Fatalf("the torn image stays: %v", err)
				}
				return
			}
			if got := record(t, n, a.ID); got.PauseImage != image || got.PauseImageTarget != "" || got.ContainerID != "" {
				t.Fatalf("record after reconcile: image %q, target %q, container %q", got.PauseImage, got.PauseImageTarget, got.ContainerID)
			}
			wantState(t, n, a.ID, cube.StatePaused)
			if _, resumed, err := n.ConnectSandbox(fctx(t), a.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
				t.Fatalf("connect = %v, %v", resumed, err)
			}
			r := n.Runtime.Restores()
			if c, _ := served(t, n, a.ID); r[len(r)-1].Spec.ID != c || r[len(r)-1].Image != image {
				t.Fatalf("resumed into %s by %+v, want from %s", c, r[len(r)-1], image)
			}
		})
	}
}
