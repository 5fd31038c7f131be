package node_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/node/nodefake"
)

// created lists the containers waiting in state Created.
func created(n *nodefake.Node) []string {
	var out []string
	for _, id := range n.Runtime.Containers() {
		if c := n.Runtime.Container(id); c != nil && c.State() == nodefake.Created {
			out = append(out, id)
		}
	}
	return out
}

// snapshotted creates a sandbox of the template and snapshots it as
// "a-snap": restores from the snapshot ask for the template's kind.
func snapshotted(t *testing.T, n *nodefake.Node) *cube.Sandbox {
	t.Helper()
	a := fakeCreate(t, n, cube.CreateRequest{})
	if _, err := n.CreateSnapshot(fctx(t), a.ID, "a-snap"); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFakePreparedContainersServeColdRestores(t *testing.T) {
	n := newFake(t, nodefake.Options{PreparedPerKey: 2})
	a := snapshotted(t, n)
	// Nothing is prepared before a kind of restore is asked for: the
	// first create restored cold, and asked for the template's kind.
	eventually(t, "two containers are prepared", func() bool { return len(created(n)) == 2 && n.Prepared() == 2 })
	waiting := created(n)
	// They are made in the background, below requests' priority.
	for _, id := range waiting {
		if !n.Runtime.Container(id).Background() {
			t.Fatalf("prepared container %s runs at a request's priority", id)
		}
	}

	// A create from the snapshot (same rootfs, agent and limits) restores
	// into one of them: its container is a prepared one, now running at a
	// request's priority, and the pool is made up again.
	b := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	bC, bHost := served(t, n, b.ID)
	if !slices.Contains(waiting, bC) {
		t.Fatalf("b runs in %s, not in a prepared container of %v", bC, waiting)
	}
	if st := n.Runtime.Container(bC).State(); st != nodefake.Running {
		t.Fatalf("b's container is %s", st)
	}
	if n.Runtime.Container(bC).Background() {
		t.Fatalf("b's container %s still runs at background priority", bC)
	}
	inits := n.Agents.Inits()
	if in := inits[len(inits)-1]; in.Host != bHost || in.Token != b.EnvdAccessToken || in.OldToken != a.EnvdAccessToken {
		t.Fatalf("init of b = %+v (a's token %s)", in, a.EnvdAccessToken)
	}
	eventually(t, "the prepared pool is made up again", func() bool { return len(created(n)) == 2 })

	// Other limits are another kind: that create restores cold.
	waiting = created(n)
	c := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap", MemoryMB: 4096})
	if cC, _ := served(t, n, c.ID); slices.Contains(waiting, cC) {
		t.Fatalf("a sandbox with other limits took prepared container %s", cC)
	}

	// Closing discards the prepared containers and their slots; the
	// sandboxes keep running.
	eventually(t, "both kinds are prepared", func() bool { return len(created(n)) == 4 })
	n.Close()
	if left := created(n); len(left) != 0 {
		t.Fatalf("prepared containers left after Close: %v", left)
	}
	for _, id := range []string{a.ID, b.ID, c.ID} {
		if _, err := n.GetSandbox(fctx(t), id); err != nil {
			t.Fatalf("sandbox %s after Close: %v", id, err)
		}
	}
}

func TestFakePreparedRestoreFailureFallsBackCold(t *testing.T) {
	n := newFake(t, nodefake.Options{PreparedPerKey: 1})
	snapshotted(t, n)
	eventually(t, "a container is prepared", func() bool { return len(created(n)) == 1 })
	spare := created(n)[0]
	// The prepared container is lost behind the node's back: the restore
	// into it fails, and the create restores cold instead of failing.
	n.Runtime.Lose(spare)
	b := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	if bC, _ := served(t, n, b.ID); bC == spare || !strings.HasPrefix(bC, b.ID) {
		t.Fatalf("b runs in %s, not in a container restored cold for it", bC)
	}
	// Its slot went back to the pool: only the sandboxes' and the new
	// prepared container's slots are held.
	eventually(t, "a new container is prepared", func() bool { return len(created(n)) == 1 })
	if held := n.Slots.Held(); len(held) != 3 {
		t.Fatalf("slots held = %v, want a's, b's and one prepared", held)
	}

	// A kind that cannot be prepared is dropped, not retried forever.
	n.Runtime.Fail(nodefake.OpPrepare, errors.New("no"))
	waiting := created(n)
	c := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	if cC, _ := served(t, n, c.ID); !slices.Contains(waiting, cC) {
		t.Fatalf("c runs in %s, not in the prepared container %v", cC, waiting)
	}
	eventually(t, "nothing is prepared", func() bool { return len(created(n)) == 0 })
}

func TestFakePreparedContainersGiveWaySlotsToSandboxes(t *testing.T) {
	// Four slots: a sandbox, its snapshot's two prepared containers and
	// one free. Creates still get slots: prepared containers give theirs
	// up before a create fails for want of one.
	n := newFake(t, nodefake.Options{PreparedPerKey: 2, Slots: 4})
	snapshotted(t, n)
	eventually(t, "two containers are prepared", func() bool { return len(created(n)) == 2 })
	var ids []string
	for range 3 {
		ids = append(ids, fakeCreate(t, n, cube.CreateRequest{Template: "a-snap", MemoryMB: 1024}).ID)
	}
	if len(n.Slots.Held()) != 4 || len(created(n)) != 0 {
		t.Fatalf("slots %v, prepared %v: want all four slots with sandboxes", n.Slots.Held(), created(n))
	}
	_, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "a-snap", MemoryMB: 1024, Timeout: 60e9})
	wantKind(t, "create with every slot taken by sandboxes", err, cube.Capacity)
}

func TestFakeWarmPoolDeepensWithDemand(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1, Slots: 32})
	eventually(t, "the pool is filled", func() bool { return n.Warm("tiny") == 1 })
	// Restores stop working: the pool cannot keep up, as under a burst.
	// The create that empties the pool and each one that then finds it
	// empty deepen it by one, up to four times its size.
	n.Runtime.Fail(nodefake.OpRestore, errors.New("busy"))
	fakeCreate(t, n, cube.CreateRequest{})
	for range 5 {
		if _, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: 60e9}); err == nil {
			t.Fatal("a create succeeded with the pool empty and restores failing")
		}
	}
	n.Runtime.Fail(nodefake.OpRestore, nil)
	eventually(t, "the pool has grown to four", func() bool { return n.Warm("tiny") == 4 })
	time.Sleep(50 * time.Millisecond)
	if got := n.Warm("tiny"); got != 4 {
		t.Fatalf("the pool grew past four times its size: %d", got)
	}

	// Without creates that need them, the extra sandboxes go again, and
	// their containers and slots with them.
	defer node.SetPoolShrinkAfter(10 * time.Millisecond)()
	eventually(t, "the pool has shrunk back to its size", func() bool { return n.Warm("tiny") == 1 })
	if got := len(n.Runtime.Containers()); got != 2 {
		t.Fatalf("containers after the pool shrank: %v (want the sandbox and one warm)", n.Runtime.Containers())
	}
}

func TestFakeWarmPoolGivesWaySlotsToBuildsAndSandboxes(t *testing.T) {
	// Two slots, both held by the warm pool: a template build and then a
	// sandbox of another template still get one.
	n := newFake(t, nodefake.Options{PoolSize: 2, Slots: 2})
	eventually(t, "the pool is filled", func() bool { return n.Warm("tiny") == 2 })
	n.AddTemplate(t, "other")
	s := fakeCreate(t, n, cube.CreateRequest{Template: "other", MemoryMB: 1024})
	if _, err := n.GetSandbox(fctx(t), s.ID); err != nil {
		t.Fatal(err)
	}
	if got := n.Warm("tiny"); got > 1 {
		t.Fatalf("the pool kept %d sandboxes with one slot left for it", got)
	}
}

func TestFakeDeletingATemplateDiscardsItsPreparedContainers(t *testing.T) {
	n := newFake(t, nodefake.Options{PreparedPerKey: 2})
	a := fakeCreate(t, n, cube.CreateRequest{})
	eventually(t, "two containers are prepared", func() bool { return len(created(n)) == 2 })
	deleteTheTemplate(t, n, a.ID)
	wantHeld(t, n, nil, nil)
}

// deleteTheTemplate kills sandbox id, deletes the template "tiny" and
// checks that no prepared container of it is left.
func deleteTheTemplate(t *testing.T, n *nodefake.Node, id string) {
	t.Helper()
	if err := n.KillSandbox(fctx(t), id); err != nil {
		t.Fatal(err)
	}
	if err := n.DeleteTemplate(fctx(t), "", "tiny"); err != nil {
		t.Fatal(err)
	}
	if left := created(n); len(left) != 0 {
		t.Fatalf("prepared containers of a deleted template: %v", left)
	}
}

func TestFakeDeletingASnapshotKeepsThePreparedContainersOfItsKind(t *testing.T) {
	n := newFake(t, nodefake.Options{PreparedPerKey: 1})
	a := fakeCreate(t, n, cube.CreateRequest{})
	// Round after round, a sandbox snapshots, rolls back to the snapshot
	// and deletes it. The container prepared for the kind outlives each
	// snapshot, so every rollback after the first restores into one.
	for round := range 3 {
		snap, err := n.CreateSnapshot(fctx(t), a.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "a container is prepared", func() bool { return len(created(n)) >= 1 })
		waiting := created(n)
		if _, err := n.RollbackSandbox(fctx(t), a.ID, snap.ID); err != nil {
			t.Fatalf("round %d: rollback: %v", round, err)
		}
		c, _ := served(t, n, a.ID)
		if !slices.Contains(waiting, c) {
			t.Fatalf("round %d: the rollback runs in %s, not in the prepared container %v", round, c, waiting)
		}
		if err := n.DeleteTemplate(fctx(t), "", snap.ID); err != nil {
			t.Fatal(err)
		}
	}
	// Deleting the template still discards them.
	eventually(t, "a container is prepared", func() bool { return len(created(n)) >= 1 })
	deleteTheTemplate(t, n, a.ID)
}

func TestFakePreparedContainersDeepenWithDemand(t *testing.T) {
	n := newFake(t, nodefake.Options{PreparedPerKey: 1, Slots: 32})
	snapshotted(t, n)
	eventually(t, "a container is prepared", func() bool { return len(created(n)) == 1 })
	// A burst: prepares cannot keep up. The first create takes the one
	// waiting; each of the next finds none and deepens the kind, up to four
	// times PreparedPerKey.
	release := n.Runtime.HoldPrepares()
	defer release()
	for range 5 {
		fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	}
	release()
	eventually(t, "four containers are prepared", func() bool { return len(created(n)) == 4 })
	time.Sleep(50 * time.Millisecond)
	if got := len(created(n)); got != 4 {
		t.Fatalf("%d containers prepared, more than four times PreparedPerKey", got)
	}

	// Without restores that miss, the extra ones go again, slots and all.
	defer node.SetPoolShrinkAfter(10 * time.Millisecond)()
	time.Sleep(50 * time.Millisecond)
	fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	eventually(t, "the kind is back to one prepared container", func() bool { return len(created(n)) == 1 })
	if held := n.Slots.Held(); len(held) != 7+1 {
		t.Fatalf("slots held = %v, want the seven sandboxes' and one prepared", held)
	}
}
