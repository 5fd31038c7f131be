package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func open(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func TestSandboxRoundTripAndReopen(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	sb := &Sandbox{ID: "abc", TemplateID: "base", State: Creating, Slot: 3,
		EndAt: time.Now().Add(time.Minute).UTC().Truncate(time.Second), Metadata: map[string]string{"k": "v"}}
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.State = Running
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Sandboxes().Get(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Running || got.Slot != 3 || got.Metadata["k"] != "v" || !got.EndAt.Equal(sb.EndAt) {
		t.Fatalf("got %+v", got)
	}
	if _, err := s2.Sandboxes().Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing record: %v", err)
	}
}

func TestListFiltersByStateInOrder(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	for _, x := range []struct {
		id string
		st SandboxState
	}{{"a", Running}, {"b", Paused}, {"c", Running}} {
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: x.id, State: x.st}); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := s.Sandboxes().List(ctx)
	if len(all) != 3 || all[0].ID != "a" || all[2].ID != "c" {
		t.Fatalf("all = %v", ids(all))
	}
	running, _ := s.Sandboxes().List(ctx, string(Running))
	if len(running) != 2 || running[0].ID != "a" || running[1].ID != "c" {
		t.Fatalf("running = %v", ids(running))
	}
	if err := s.Sandboxes().Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	running, _ = s.Sandboxes().List(ctx, string(Running))
	if len(running) != 1 {
		t.Fatalf("after delete: %v", ids(running))
	}
}

func TestEvents(t *testing.T) {
	ctx := context.Background()
	s, _ := open(t)
	for _, m := range []string{"created", "paused", "resumed"} {
		if err := s.AddEvent(ctx, "sb1", "info", m); err != nil {
			t.Fatal(err)
		}
	}
	s.AddEvent(ctx, "other", "info", "x")
	ev, err := s.Events(ctx, "sb1", 0, 2)
	if err != nil || len(ev) != 2 || ev[0].Message != "created" || ev[1].Message != "paused" {
		t.Fatalf("events = %+v, %v", ev, err)
	}
	ev, _ = s.Events(ctx, "sb1", ev[1].Seq, 10)
	if len(ev) != 1 || ev[0].Message != "resumed" {
		t.Fatalf("after cursor: %+v", ev)
	}
	s.DeleteEvents(ctx, "sb1")
	if ev, _ := s.Events(ctx, "sb1", 0, 10); len(ev) != 0 {
		t.Fatalf("not deleted: %+v", ev)
	}
}

func ids(l []*Sandbox) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.ID)
	}
	return out
}

// TestCommitsAreSynced: each commit reaches the disk before Put returns
// (synchronous=FULL in WAL mode), since the node acts on a record as soon
// as it is written.
func TestCommitsAreSynced(t *testing.T) {
	s, _ := open(t)
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
}

// TestInFlightWriteOutRoundTrips: the fields that name a write-out in
// flight survive a reopen, as the reconciler needs them after a crash.
func TestInFlightWriteOutRoundTrips(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	sb := &Sandbox{ID: "p", State: Paused, Slot: 2, ContainerID: "p-1",
		PauseImageTarget: "/data/sandboxes/p/pause", PauseChecksum: "abc"}
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	got, err := s2.Sandboxes().Get(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.PauseImageTarget != sb.PauseImageTarget || got.PauseChecksum != "abc" || got.PauseImage != "" {
		t.Fatalf("after reopen: %+v", got)
	}
}
