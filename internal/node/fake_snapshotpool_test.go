package node_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node"
	"cube/internal/node/nodefake"
)

// pooledOf lists the containers restored from image that serve none of
// the sandboxes given: the pool's.
func pooledOf(t *testing.T, n *nodefake.Node, image string, sandboxes ...*cube.Sandbox) []string {
	t.Helper()
	var serving []string
	for _, sb := range sandboxes {
		c, _ := served(t, n, sb.ID)
		serving = append(serving, c)
	}
	var out []string
	for _, c := range n.Runtime.Containers() {
		if n.Runtime.Container(c).Image() == image && !slices.Contains(serving, c) {
			out = append(out, c)
		}
	}
	return out
}

// createAsync creates a sandbox of "tiny" on its own goroutine; the
// sandbox arrives on the channel, nil if the create failed (reported).
func createAsync(t *testing.T, n *nodefake.Node) <-chan *cube.Sandbox {
	done := make(chan *cube.Sandbox, 1)
	go func() {
		sb, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
		if err != nil {
			t.Error(err)
		}
		done <- sb
	}()
	return done
}

func TestFakeSnapshotInDemandServesCreatesWarm(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1})
	eventually(t, "the template's pool is filled", func() bool { return n.Warm("tiny") == 1 })
	a := fakeCreate(t, n, cube.CreateRequest{})
	snap, err := n.CreateSnapshot(fctx(t), a.ID, "a-snap")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := n.Template(fctx(t), snap.ID)
	if err != nil {
		t.Fatal(err)
	}

	// A snapshot created from once keeps nothing warm.
	b := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	eventually(t, "the template's pool is refilled (taking a's sandbox deepened it to two)", func() bool { return n.Warm("tiny") == 2 })
	time.Sleep(100 * time.Millisecond)
	if w := pooledOf(t, n, tpl.Checkpoint, b); len(w) != 0 || n.Warm(snap.ID) != 0 {
		t.Fatalf("one create from the snapshot left warm sandboxes of it: %v", w)
	}

	// A second create soon after puts it in demand: one sandbox is
	// restored ahead, at background priority, and paused.
	c := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	eventually(t, "the snapshot's pool is filled", func() bool { return n.Warm(snap.ID) == 1 })
	warm := pooledOf(t, n, tpl.Checkpoint, b, c)
	if len(warm) != 1 {
		t.Fatalf("warm sandboxes of the snapshot: %v", warm)
	}
	pooled := n.Runtime.Container(warm[0])
	if pooled.State() != nodefake.Paused || !pooled.Background() {
		t.Fatalf("the snapshot's warm sandbox is %s (background %t), want paused in the background", pooled.State(), pooled.Background())
	}
	// Creates asked for it, so it was keyed ahead: given a token of its
	// own over the snapshot's, with nothing of a sandbox's yet.
	keys := keyings(n, a.EnvdAccessToken, b, c)
	if len(keys) != 1 {
		t.Fatalf("the pooled sandbox was keyed %d times: %+v", len(keys), n.Agents.Inits())
	}

	// The next create takes it: running, at a request's priority, with
	// the token it was keyed with, its /init authorised by that token.
	d := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	dC, _ := served(t, n, d.ID)
	if dC != warm[0] {
		t.Fatalf("created in %s, not the warm %s", dC, warm[0])
	}
	if got := n.Runtime.Container(dC); got.State() != nodefake.Running || got.Background() {
		t.Fatalf("the handed-out sandbox is %s (background %t)", got.State(), got.Background())
	}
	if d.EnvdAccessToken != keys[0] || !slices.ContainsFunc(n.Agents.Inits(), func(in nodefake.InitCall) bool {
		return in.Token == keys[0] && in.OldToken == keys[0] && in.Err == nil
	}) {
		t.Fatalf("d's token %q, keyed %q; inits %+v", d.EnvdAccessToken, keys[0], n.Agents.Inits())
	}

	// A warm sandbox that cannot be resumed is replaced by a fresh restore.
	eventually(t, "the snapshot's pool is refilled", func() bool { return n.Warm(snap.ID) >= 1 })
	spares := pooledOf(t, n, tpl.Checkpoint, b, c, d)
	n.Runtime.Fail(nodefake.OpResume, errors.New("cannot resume"))
	e := fakeCreate(t, n, cube.CreateRequest{Template: "a-snap"})
	n.Runtime.Fail(nodefake.OpResume, nil)
	eC, _ := served(t, n, e.ID)
	restored := slices.ContainsFunc(n.Runtime.Restores(), func(r nodefake.Restore) bool { return r.Spec.ID == eC })
	if slices.Contains(spares, eC) || !restored || n.Runtime.Container(eC).State() != nodefake.Running {
		t.Fatalf("create after a failed resume served by %s (%s), restored afresh %t; the pool had %v", eC, n.Runtime.Container(eC).State(), restored, spares)
	}

	// Deleting the snapshot discards its warm sandboxes; the sandboxes
	// made from it keep running.
	eventually(t, "the snapshot's pool is refilled", func() bool { return n.Warm(snap.ID) >= 1 })
	if err := n.DeleteTemplate(fctx(t), "", "a-snap"); err != nil {
		t.Fatal(err)
	}
	if w := pooledOf(t, n, tpl.Checkpoint, b, c, d, e); len(w) != 0 {
		t.Fatalf("warm sandboxes of a deleted snapshot: %v", w)
	}
	for _, sb := range []*cube.Sandbox{b, c, d, e} {
		if _, err := n.GetSandbox(fctx(t), sb.ID); err != nil {
			t.Fatalf("sandbox %s from the deleted snapshot: %v", sb.ID, err)
		}
	}
}

func TestFakeSnapshotPoolLapsesWithoutDemand(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1})
	a := fakeCreate(t, n, cube.CreateRequest{})
	snap, err := n.CreateSnapshot(fctx(t), a.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	var made []*cube.Sandbox
	for range 2 {
		made = append(made, fakeCreate(t, n, cube.CreateRequest{Template: snap.ID}))
	}
	eventually(t, "the snapshot's pool is filled", func() bool { return n.Warm(snap.ID) == 1 })

	// Without creates, its sandbox goes, container and slot.
	defer node.SetPoolShrinkAfter(10 * time.Millisecond)()
	tpl, err := n.Template(fctx(t), snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the snapshot's pool is gone", func() bool { return len(pooledOf(t, n, tpl.Checkpoint, made...)) == 0 })
	if got, want := len(n.Slots.Held()), 4; got != want {
		t.Fatalf("slots held after the pool lapsed: %v (want %d: three sandboxes, the template's warm one)", n.Slots.Held(), want)
	}
}

func TestFakePoolWaitsForTheCreateRestoringItsImage(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1})
	eventually(t, "the pool is filled", func() bool { return n.Warm("tiny") == 1 })
	// Empty the pool, and keep it empty, then let restores through again.
	n.Runtime.Fail(nodefake.OpRestore, errors.New("no restores now"))
	fakeCreate(t, n, cube.CreateRequest{})
	time.Sleep(50 * time.Millisecond)
	n.Runtime.Fail(nodefake.OpRestore, nil)

	// A create that finds the pool empty restores its image on demand;
	// meanwhile the pool is not refilled from the same image.
	release := n.Runtime.HoldRestores()
	t.Cleanup(release)
	done := createAsync(t, n)
	eventually(t, "the create restores", func() bool { return n.Runtime.Restoring() >= 1 })
	for range 20 {
		if got := n.Runtime.Restoring(); got != 1 {
			t.Fatalf("%d restores at once while a create restored the template on demand; want only the create's", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	release()
	if sb := <-done; sb == nil {
		t.FailNow()
	}
	// Once it is done, the pool fills again.
	eventually(t, "the pool is refilled", func() bool { return n.Warm("tiny") >= 1 })
}

func TestFakeCreateWaitsForARefillUnderWay(t *testing.T) {
	defer node.SetFillWait(time.Minute)()
	n := newFake(t, nodefake.Options{PoolSize: 1})
	eventually(t, "the pool is filled", func() bool { return n.Warm("tiny") == 1 })
	// Empty the pool and hold its next refill mid-restore.
	n.Runtime.Fail(nodefake.OpRestore, errors.New("no restores now"))
	fakeCreate(t, n, cube.CreateRequest{})
	release := n.Runtime.HoldRestores()
	t.Cleanup(release)
	n.Runtime.Fail(nodefake.OpRestore, nil)
	// Taking the last sandbox deepened the pool to two: both refill
	// workers restore.
	eventually(t, "two refills restore", func() bool { return n.Runtime.Restoring() == 2 })
	before := len(n.Runtime.Restores())

	// A create now waits for that refill instead of restoring on demand.
	done := createAsync(t, n)
	time.Sleep(50 * time.Millisecond)
	if got := n.Runtime.Restoring(); got != 2 {
		t.Fatalf("%d restores under way after a create found the pool empty with its refills under way; want the refills' two", got)
	}
	release()
	b := <-done
	if b == nil {
		t.FailNow()
	}
	bC, _ := served(t, n, b.ID)
	r := n.Runtime.Restores()
	if len(r) < before+2 || (r[before].Spec.ID != bC && r[before+1].Spec.ID != bC) {
		t.Fatalf("the create runs in %s, not in a refill's container: restores since %+v", bC, r[before:])
	}
}

func TestFakeTeamSnapshotPoolsAreBounded(t *testing.T) {
	// PoolSize 1: one team's snapshots hold at most four warm sandboxes.
	n := newFake(t, nodefake.Options{PoolSize: 1, Slots: 32})
	a := fakeCreate(t, n, cube.CreateRequest{})
	var snaps []string
	for range 5 {
		snap, err := n.CreateSnapshot(fctx(t), a.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, snap.ID)
		for range 2 {
			fakeCreate(t, n, cube.CreateRequest{Template: snap.ID})
		}
	}
	pooled := func() int {
		sum := 0
		for _, id := range snaps {
			sum += n.Warm(id)
		}
		return sum
	}
	eventually(t, "the team's snapshots hold four warm sandboxes", func() bool { return pooled() == 4 })
	time.Sleep(100 * time.Millisecond)
	if got := pooled(); got != 4 {
		t.Fatalf("five snapshots in demand of one team hold %d warm sandboxes; want four", got)
	}
}

// keyings lists the tokens the pool keyed warm sandboxes of a snapshot
// with: the /inits authorised by the snapshot's token (snapToken) that
// handed none of the sandboxes made its own token.
func keyings(n *nodefake.Node, snapToken string, made ...*cube.Sandbox) []string {
	var keys []string
	for _, in := range n.Agents.Inits() {
		if in.OldToken != snapToken || in.Token == snapToken || in.Err != nil || len(in.EnvVars) != 0 {
			continue
		}
		if !slices.ContainsFunc(made, func(sb *cube.Sandbox) bool { return sb.EnvdAccessToken == in.Token }) {
			keys = append(keys, in.Token)
		}
	}
	return keys
}

func TestFakeSnapshotPoolKeysAheadForCreatesOnly(t *testing.T) {
	n := newFake(t, nodefake.Options{PoolSize: 1, Slots: 32})
	a := fakeCreate(t, n, cube.CreateRequest{})
	snapshot := func() string {
		t.Helper()
		s, err := n.CreateSnapshot(fctx(t), a.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	rollback := func(snap string) {
		t.Helper()
		if _, err := n.RollbackSandbox(fctx(t), a.ID, snap); err != nil {
			t.Fatal(err)
		}
		if got, err := n.GetSandbox(fctx(t), a.ID); err != nil || got.EnvdAccessToken != a.EnvdAccessToken {
			t.Fatalf("a after a rollback: %+v, %v; want its token kept", got, err)
		}
	}

	// Rollbacks ask for r: its warm sandboxes keep the snapshot's token
	// (a's), and a rollback's /init hands a's own over it.
	r := snapshot()
	rollback(r)
	rollback(r)
	eventually(t, "r's pool is filled", func() bool { return n.Warm(r) >= 1 })
	before := len(n.Agents.Inits())
	rollback(r)
	eventually(t, "r's pool is refilled", func() bool { return n.Warm(r) >= 1 })
	if keys := keyings(n, a.EnvdAccessToken); len(keys) != 0 {
		t.Fatalf("a pool in demand by rollbacks keyed its sandboxes: %q", keys)
	}
	if !slices.ContainsFunc(n.Agents.Inits()[before:], func(in nodefake.InitCall) bool {
		return in.Token == a.EnvdAccessToken && in.OldToken == a.EnvdAccessToken && in.Err == nil
	}) {
		t.Fatalf("the rollback from r's pool made /inits %+v; want a's token over itself", n.Agents.Inits()[before:])
	}

	// Creates ask for c: its warm sandboxes are keyed. A rollback that
	// takes one hands the sandbox's own token over the key.
	c := snapshot()
	x := fakeCreate(t, n, cube.CreateRequest{Template: c})
	y := fakeCreate(t, n, cube.CreateRequest{Template: c})
	eventually(t, "c's pool is filled", func() bool { return n.Warm(c) >= 1 })
	keys := keyings(n, a.EnvdAccessToken, x, y)
	if len(keys) == 0 {
		t.Fatalf("a pool in demand by creates did not key its sandboxes: %+v", n.Agents.Inits())
	}
	rollback(c)
	if !slices.ContainsFunc(n.Agents.Inits(), func(in nodefake.InitCall) bool {
		return in.Token == a.EnvdAccessToken && slices.Contains(keys, in.OldToken) && in.Err == nil
	}) {
		t.Fatalf("no /init handed a's token over a key (%q): %+v", keys, n.Agents.Inits())
	}
}
