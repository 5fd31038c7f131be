package node_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
)

func TestFakeSnapshotsAndRollback(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	a := fakeCreate(t, n, cube.CreateRequest{})
	aC, _ := served(t, n, a.ID)
	snap, err := n.CreateSnapshot(fctx(t), a.ID, "a-snap")
	if err != nil {
		t.Fatal(err)
	}
	// The sandbox keeps running in its container.
	if c, _ := served(t, n, a.ID); c != aC || n.Runtime.Container(aC).State() != nodefake.Running {
		t.Fatalf("after the snapshot a is served by %s (%s), want %s running", c, n.Runtime.Container(c).State(), aC)
	}
	list, _, err := n.ListSnapshots(fctx(t), cube.SnapshotFilter{SandboxID: a.ID}, cube.Page{Limit: 100})
	if err != nil || len(list) != 1 || list[0].ID != snap.ID || !slices.Equal(list[0].Names, []string{"a-snap"}) || list[0].SizeBytes == 0 {
		t.Fatalf("snapshots of a = %+v, %v", list, err)
	}
	_, err = n.CreateSnapshot(fctx(t), a.ID, "a-snap")
	wantKind(t, "snapshot with a name taken", err, cube.Conflict)
	_, err = n.CreateSnapshot(fctx(t), a.ID, "Not A Name")
	wantKind(t, "snapshot with a bad name", err, cube.Invalid)

	// A sandbox created from the snapshot starts from its image, with an
	// agent that held a's token until /init.
	b := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	bC, _ := served(t, n, b.ID)
	snapTpl, err := n.Template(fctx(t), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := n.Runtime.Restores(); r[len(r)-1].Spec.ID != bC || r[len(r)-1].Image != snapTpl.Checkpoint {
		t.Fatalf("b restored by %+v, want from %s", r[len(r)-1], snapTpl.Checkpoint)
	}
	inits := n.Agents.Inits()
	if in := inits[len(inits)-1]; in.Token != b.EnvdAccessToken || in.OldToken != a.EnvdAccessToken {
		t.Fatalf("init of b = %+v", in)
	}

	// Rollback replaces a's container; a keeps its id and token.
	rb, err := n.RollbackSandbox(fctx(t), a.ID, "a-snap")
	if err != nil || rb.Status != "completed" {
		t.Fatalf("rollback = %+v, %v", rb, err)
	}
	now, _ := served(t, n, a.ID)
	if now == aC {
		t.Fatalf("after rollback a is still served by %s", aC)
	}
	if got, _ := n.GetSandbox(fctx(t), a.ID); got.EnvdAccessToken != a.EnvdAccessToken {
		t.Fatalf("rollback changed a's token")
	}
	// The replaced container goes after the answer, and its slot with it.
	eventually(t, "the replaced container and its slot are gone", func() bool {
		return n.Runtime.Container(aC) == nil && len(n.Slots.Held()) == 2
	})
	_, err = n.RollbackSandbox(fctx(t), b.ID, "a-snap")
	wantKind(t, "rollback to another sandbox's snapshot", err, cube.Forbidden)
	_, err = n.RollbackSandbox(fctx(t), a.ID, "nope")
	wantKind(t, "rollback to an unknown snapshot", err, cube.NotFound)

	// Neither works on a paused sandbox.
	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	_, err = n.CreateSnapshot(fctx(t), a.ID, "")
	wantKind(t, "snapshot of a paused sandbox", err, cube.Conflict)
	_, err = n.RollbackSandbox(fctx(t), a.ID, "a-snap")
	wantKind(t, "rollback of a paused sandbox", err, cube.Conflict)

	// A damaged image is reported as such, and nothing is started from it.
	f, err := os.OpenFile(filepath.Join(snapTpl.Checkpoint, "checkpoint.img"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("garbage")
	f.Close()
	held := n.Runtime.Containers()
	_, err = n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "a-snap", Timeout: time.Minute})
	wantKind(t, "create from a damaged snapshot", err, cube.Damaged)
	if got := n.Runtime.Containers(); !slices.Equal(got, held) {
		t.Fatalf("containers %v after a refused create, had %v", got, held)
	}

	if err := n.DeleteTemplate(fctx(t), "", "a-snap"); err != nil {
		t.Fatal(err)
	}
	if list, _, _ := n.ListSnapshots(fctx(t), cube.SnapshotFilter{}, cube.Page{Limit: 100}); len(list) != 0 {
		t.Fatalf("snapshots after delete: %+v", list)
	}
	if _, err := os.Stat(snapTpl.Checkpoint); !os.IsNotExist(err) {
		t.Fatalf("snapshot image after delete: %v", err)
	}
}

func TestFakeSnapshotOnFullDisk(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	a := fakeCreate(t, n, cube.CreateRequest{})
	n.Runtime.Fail(nodefake.OpCheckpoint, syscall.ENOSPC)
	_, err := n.CreateSnapshot(fctx(t), a.ID, "full")
	wantKind(t, "snapshot on a full disk", err, cube.DiskFull)
	if list, _, _ := n.ListSnapshots(fctx(t), cube.SnapshotFilter{}, cube.Page{Limit: 100}); len(list) != 0 {
		t.Fatalf("snapshots after a failed one: %+v", list)
	}
	if _, err := n.Template(fctx(t), "full"); cube.KindOf(err) != cube.NotFound {
		t.Fatalf("the failed snapshot's record stays: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(n.DataDir, "snapshots")); len(left) != 0 {
		t.Fatalf("the failed snapshot left files: %v", left)
	}
	wantState(t, n, a.ID, cube.StateRunning)
}

// A snapshot is refused before anything is written while the data
// directory has less than the reserve free, which pauses to disk need.
func TestFakeSnapshotKeepsTheDiskReserve(t *testing.T) {
	n := newFake(t, nodefake.Options{DiskReserveMB: 1 << 40})
	a := fakeCreate(t, n, cube.CreateRequest{})
	_, err := n.CreateSnapshot(fctx(t), a.ID, "reserve")
	wantKind(t, "snapshot below the disk reserve", err, cube.DiskFull)
	if err == nil || !strings.Contains(err.Error(), "kept free") {
		t.Fatalf("the error does not say why: %v", err)
	}
	if list, _, _ := n.ListSnapshots(fctx(t), cube.SnapshotFilter{}, cube.Page{Limit: 100}); len(list) != 0 {
		t.Fatalf("snapshots after a refused one: %+v", list)
	}
	if left, _ := os.ReadDir(filepath.Join(n.DataDir, "snapshots")); len(left) != 0 {
		t.Fatalf("the refused snapshot left files: %v", left)
	}
	wantState(t, n, a.ID, cube.StateRunning)
}

func TestFakeForkChildrenStartFromOneImage(t *testing.T) {
	n := newFake(t, nodefake.Options{MaxSandboxes: 3})
	a := fakeCreate(t, n, cube.CreateRequest{})
	aC, _ := served(t, n, a.ID)
	// One at a time, so which child meets the limit is certain.
	res, err := n.ForkSandbox(fctx(t), a.ID, cube.ForkRequest{Count: 3, Concurrency: 1, Timeout: time.Minute})
	if err != nil || len(res) != 3 {
		t.Fatalf("fork = %+v, %v", res, err)
	}
	images := map[string]bool{}
	for i, r := range res[:2] {
		if r.Err != nil || r.Sandbox.ID == a.ID || r.Sandbox.EnvdAccessToken == a.EnvdAccessToken {
			t.Fatalf("child %d = %+v, %v", i, r.Sandbox, r.Err)
		}
		c, _ := served(t, n, r.Sandbox.ID)
		images[n.Runtime.Container(c).Image()] = true
	}
	wantKind(t, "the child past the sandbox limit", res[2].Err, cube.Capacity)
	if len(images) != 1 {
		t.Fatalf("children restored from %v, want one image", images)
	}
	for img := range images {
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Fatalf("the fork image %s outlives the fork: %v", img, err)
		}
	}
	if c, _ := served(t, n, a.ID); c != aC {
		t.Fatalf("the parent moved to %s", c)
	}
	if len(n.Runtime.Containers()) != 3 || len(n.Slots.Held()) != 3 {
		t.Fatalf("after the fork: %v, slots %v", n.Runtime.Containers(), n.Slots.Held())
	}
}
