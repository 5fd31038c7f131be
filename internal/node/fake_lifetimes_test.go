package node_test

import (
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

// usageRows is every usage row of a sandbox.
func usageRows(t *testing.T, n *nodefake.Node, sandboxID string) []store.UsageRecord {
	t.Helper()
	all, err := n.Store.ListUsage(fctx(t), store.UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.UsageRecord
	for _, r := range all {
		if r.Sandbox == sandboxID {
			out = append(out, r)
		}
	}
	return out
}

// publicTiny lets every team start sandboxes of the fake's template.
func publicTiny(t *testing.T, n *nodefake.Node) {
	t.Helper()
	if err := n.Store.Templates().Update(fctx(t), "tiny", func(tpl *store.Template) error { tpl.Public = true; return nil }); err != nil {
		t.Fatal(err)
	}
}

func total(rows []store.UsageRecord) time.Duration {
	var d time.Duration
	for _, r := range rows {
		d += r.End.Sub(r.Start)
	}
	return d
}

// TestFakeLifetimeIsKeptAsStretches: create → pause → resume → kill leaves
// two stretches, one per time the sandbox ran, whose total is the running
// time measured around the calls; while it runs its record says since
// when, while paused it does not.
func TestFakeLifetimeIsKeptAsStretches(t *testing.T) {
	n := newFake(t, nodefake.Options{NodeID: "node-a"})
	publicTiny(t, n)
	const run = 300 * time.Millisecond

	before := time.Now()
	sb := fakeCreate(t, n, cube.CreateRequest{Team: "team-a", CPUCount: 2, MemoryMB: 768})
	created := time.Now()
	if rec := record(t, n, sb.ID); rec.RunningSince.Before(before) || rec.RunningSince.After(created) {
		t.Fatalf("runningSince %v, not within the create (%v .. %v)", rec.RunningSince, before, created)
	}
	time.Sleep(run)
	pausing := time.Now()
	if err := n.PauseSandbox(fctx(t), sb.ID, true); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	if rec := record(t, n, sb.ID); !rec.RunningSince.IsZero() {
		t.Fatalf("paused sandbox still running since %v", rec.RunningSince)
	}
	if rows := usageRows(t, n, sb.ID); len(rows) != 1 {
		t.Fatalf("after pause: %+v", rows)
	}
	time.Sleep(run) // paused: not counted
	resuming := time.Now()
	if _, resumed, err := n.ConnectSandbox(fctx(t), sb.ID, cube.ConnectRequest{Timeout: time.Minute}); err != nil || !resumed {
		t.Fatalf("resume: %v %v", resumed, err)
	}
	resumed := time.Now()
	if rec := record(t, n, sb.ID); rec.RunningSince.Before(resuming) || rec.RunningSince.After(resumed) {
		t.Fatalf("runningSince %v, not within the resume (%v .. %v)", rec.RunningSince, resuming, resumed)
	}
	time.Sleep(run)
	killing := time.Now()
	if err := n.KillSandbox(fctx(t), sb.ID); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()

	rows := usageRows(t, n, sb.ID)
	if len(rows) != 2 {
		t.Fatalf("rows: %+v", rows)
	}
	for _, r := range rows {
		if r.Team != "team-a" || r.Node != "node-a" || r.VCPUs != 2 || r.MemoryMB != 768 {
			t.Errorf("row %+v", r)
		}
	}
	if rows[0].End.Before(pausing) || rows[0].End.After(paused) || rows[1].Start.Before(resuming) || rows[1].End.After(killed) {
		t.Errorf("stretches %+v do not fall on the calls", rows)
	}
	// The running time, measured from outside the calls: at least from
	// the end of each start to the start of each stop, at most from the
	// start of each start to the end of each stop.
	least := pausing.Sub(created) + killing.Sub(resumed)
	most := paused.Sub(before) + killed.Sub(resuming)
	got := total(rows)
	if got < least-time.Second || got > most+time.Second || got < 2*run {
		t.Errorf("stretches total %v; running time measured %v .. %v", got, least, most)
	}
}

// TestFakeLifetimeEndsWithEveryStop: a sandbox the reaper kills ends its
// stretch; a fork child starts its own; a rollback and a restart that
// re-adopts the sandbox run on in theirs; one the reconciler finds lost
// ends its own.
func TestFakeLifetimeEndsWithEveryStop(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	publicTiny(t, n)

	// The reaper.
	short := fakeCreate(t, n, cube.CreateRequest{Team: "t", Timeout: 200 * time.Millisecond})
	eventually(t, "the reaper kills the expired sandbox", func() bool { return len(usageRows(t, n, short.ID)) == 1 })
	if d := total(usageRows(t, n, short.ID)); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("reaped sandbox ran %v", d)
	}

	// A fork child starts its own stretch, the parent's goes on.
	parent := fakeCreate(t, n, cube.CreateRequest{Team: "t"})
	parentSince := record(t, n, parent.ID).RunningSince
	time.Sleep(20 * time.Millisecond)
	kids, err := n.ForkSandbox(fctx(t), parent.ID, cube.ForkRequest{Count: 1})
	if err != nil || len(kids) != 1 || kids[0].Err != nil {
		t.Fatalf("fork: %+v %v", kids, err)
	}
	kid := record(t, n, kids[0].Sandbox.ID)
	if !kid.RunningSince.After(parentSince) {
		t.Errorf("fork child running since %v, its parent since %v", kid.RunningSince, parentSince)
	}
	if got := record(t, n, parent.ID).RunningSince; !got.Equal(parentSince) {
		t.Errorf("parent's stretch restarted by the fork: %v, was %v", got, parentSince)
	}

	// A rollback replaces the container; the sandbox runs on.
	snap, err := n.CreateSnapshot(fctx(t), parent.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.RollbackSandbox(fctx(t), parent.ID, snap.ID); err != nil {
		t.Fatal(err)
	}
	if got := record(t, n, parent.ID).RunningSince; !got.Equal(parentSince) {
		t.Errorf("rollback restarted the stretch: %v, was %v", got, parentSince)
	}

	// Lost while the server was down.
	lostC, _ := served(t, n, kid.ID)
	n.Runtime.Lose(lostC)
	n = n.Restart(t)
	rows := usageRows(t, n, kid.ID)
	if len(rows) != 1 || !rows[0].Start.Equal(kid.RunningSince) {
		t.Fatalf("lost sandbox: %+v", rows)
	}
	if rows := usageRows(t, n, parent.ID); len(rows) != 0 {
		t.Fatalf("re-adopted sandbox stopped: %+v", rows)
	}
	if got := record(t, n, parent.ID).RunningSince; !got.Equal(parentSince) {
		t.Errorf("re-adopted sandbox running since %v, was %v", got, parentSince)
	}
}
