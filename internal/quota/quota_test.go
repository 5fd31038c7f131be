package quota

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// fixed is a lookup whose quotas the test sets per team.
type fixed struct {
	mu sync.Mutex
	q  map[string]cube.Quotas
	n  int
}

func (f *fixed) lookup(_ context.Context, team string) (cube.Quotas, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return f.q[team], nil
}

func put(t *testing.T, st *store.Store, id, team string, state store.SandboxState, cpu, mem int) {
	t.Helper()
	if err := st.Sandboxes().Put(context.Background(), &store.Sandbox{ID: id, Team: team, State: state, CPUCount: cpu, MemoryMB: mem}); err != nil {
		t.Fatal(err)
	}
}

func wantQuota(t *testing.T, err error, name string) {
	t.Helper()
	var ce *cube.Error
	if !errors.As(err, &ce) || ce.Kind != cube.Capacity {
		t.Fatalf("err = %v, want a Capacity error naming %s", err, name)
	}
	if !strings.Contains(ce.Message, name) {
		t.Fatalf("message %q does not name quota %s", ce.Message, name)
	}
}

func TestRunningSandboxesCountedPerTeamFromTheStore(t *testing.T) {
	st := openStore(t)
	f := &fixed{q: map[string]cube.Quotas{"a": {RunningSandboxes: 2, VCPUs: 5, MemoryMB: 2048}}}
	c := New(st, f.lookup)
	ctx := context.Background()
	put(t, st, "a1", "a", store.Running, 2, 512)
	put(t, st, "a2", "a", store.Paused, 8, 8192)  // paused: holds no CPU or memory
	put(t, st, "b1", "b", store.Running, 8, 8192) // another team's
	release, err := c.Start(ctx, "a", Sandboxes{1, 2, 512})
	if err != nil {
		t.Fatalf("second running sandbox refused: %v", err)
	}
	// Admitted but not yet recorded: the reservation counts.
	_, err = c.Start(ctx, "a", Sandboxes{1, 1, 256})
	wantQuota(t, err, "runningSandboxes")
	if !strings.Contains(err.Error(), "2 in use") {
		t.Errorf("message %q does not say the current use", err)
	}
	release()
	release() // twice is once
	r2, err := c.Start(ctx, "a", Sandboxes{1, 2, 512})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	r2()
	_, err = c.Start(ctx, "a", Sandboxes{1, 4, 256})
	wantQuota(t, err, "vcpus")
	_, err = c.Start(ctx, "a", Sandboxes{1, 1, 2000})
	wantQuota(t, err, "memoryMB")
	// Team b has no quotas.
	if r, err := c.Start(ctx, "b", Sandboxes{50, 400, 1 << 20}); err != nil {
		t.Fatalf("team without quotas refused: %v", err)
	} else {
		r()
	}
}

func TestTeamsDoNotWaitForEachOther(t *testing.T) {
	st := openStore(t)
	f := &fixed{q: map[string]cube.Quotas{"a": {RunningSandboxes: 1}, "b": {RunningSandboxes: 1}}}
	c := New(st, f.lookup)
	ctx := context.Background()
	ra, err := c.Start(ctx, "a", Sandboxes{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer ra()
	// Team a holds its whole quota in a reservation; team b is admitted.
	rb, err := c.Start(ctx, "b", Sandboxes{Count: 1})
	if err != nil {
		t.Fatalf("team b refused while team a is at its limit: %v", err)
	}
	rb()
}

func TestTimeoutDiskAndBuilds(t *testing.T) {
	st := openStore(t)
	f := &fixed{q: map[string]cube.Quotas{"a": {MaxTimeout: time.Hour, DiskBytes: 10 << 20, Builds: 1}}}
	c := New(st, f.lookup)
	ctx := context.Background()
	if err := c.Timeout(ctx, "a", time.Hour); err != nil {
		t.Fatalf("timeout at the limit refused: %v", err)
	}
	wantQuota(t, c.Timeout(ctx, "a", time.Hour+time.Second), "maxTimeout")
	st.Templates().Put(ctx, &store.Template{ID: "t1", Team: "a", SizeBytes: 4 << 20})
	st.Templates().Put(ctx, &store.Template{ID: "t2", Team: "b", SizeBytes: 100 << 20})
	st.Volumes().Put(ctx, &store.Volume{ID: "v1", Team: "a", SizeBytes: 5 << 20, State: store.VolumeReady})
	if use, err := c.DiskUse(ctx, "a"); err != nil || use != 9<<20 {
		t.Fatalf("disk use = %d, %v; want 9 MiB", use, err)
	}
	if err := c.Disk(ctx, "a", 1<<20); err != nil {
		t.Fatalf("1 MiB more fits: %v", err)
	}
	wantQuota(t, c.Disk(ctx, "a", 1<<20+1), "diskBytes")
	if err := c.Builds(ctx, "a", 0); err != nil {
		t.Fatalf("first build refused: %v", err)
	}
	wantQuota(t, c.Builds(ctx, "a", 1), "builds")
	var none *Checker
	if err := none.Disk(ctx, "a", 1<<40); err != nil {
		t.Fatalf("a nil checker checks nothing: %v", err)
	}
}
