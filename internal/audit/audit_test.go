package audit

import (
	"context"
	"path/filepath"
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

func TestEntriesAreWrittenListedAndPaged(t *testing.T) {
	st := openStore(t)
	l := New(st, "node-a", Retention{}, nil)
	for i := range 5 {
		team := "a"
		if i%2 == 1 {
			team = "b"
		}
		l.Record(cube.AuditEntry{Team: team, KeyID: "k-" + team, KeyName: "ci", Method: "DELETE",
			Route: "DELETE /sandboxes/{sandboxID}", Target: "sb" + string(rune('0'+i)), Status: 204})
	}
	l.Close() // writes what is queued
	ctx := context.Background()
	a, err := l.ListAudit(ctx, cube.AuditFilter{Team: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 3 || a[0].Target != "sb4" || a[2].Target != "sb0" {
		t.Fatalf("team a's entries, newest first = %+v", a)
	}
	for _, e := range a {
		if e.Team != "a" || e.Node != "node-a" || e.KeyName != "ci" || e.Status != 204 || e.Time.IsZero() {
			t.Errorf("entry %+v", e)
		}
	}
	page, err := l.ListAudit(ctx, cube.AuditFilter{Limit: 2})
	if err != nil || len(page) != 2 {
		t.Fatalf("first page: %v %v", page, err)
	}
	rest, err := l.ListAudit(ctx, cube.AuditFilter{Limit: 10, Before: page[1].Seq})
	if err != nil || len(rest) != 3 || rest[0].Seq >= page[1].Seq {
		t.Fatalf("next page after seq %d: %+v %v", page[1].Seq, rest, err)
	}
	one, _ := l.ListAudit(ctx, cube.AuditFilter{Target: "sb3"})
	if len(one) != 1 || one[0].Team != "b" {
		t.Errorf("by target: %+v", one)
	}
}

func TestRetentionTrimsByAgeAndRows(t *testing.T) {
	st := openStore(t)
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour)
	var recs []store.AuditRecord
	for i := range 10 {
		ts := time.Now()
		if i < 3 {
			ts = old
		}
		recs = append(recs, store.AuditRecord{Time: ts, Team: "a", Method: "POST", Route: "POST /sandboxes", Status: 201})
	}
	if err := st.AppendAudit(ctx, recs); err != nil {
		t.Fatal(err)
	}
	// Starting trims at once: the 3 old ones by age, then all but 5 by rows.
	l := New(st, "n", Retention{MaxAge: 24 * time.Hour, MaxRows: 5}, nil)
	l.Close()
	left, err := st.ListAudit(ctx, store.AuditFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 5 {
		t.Fatalf("%d entries left, want 5", len(left))
	}
}

func TestAFullQueueDropsRatherThanBlocks(t *testing.T) {
	st := openStore(t)
	st.Close() // every write fails: the writer cannot drain faster than this fills
	l := New(st, "n", Retention{}, nil)
	done := make(chan struct{})
	go func() {
		for range 3 * queueLen {
			l.Record(cube.AuditEntry{Team: "a", Method: "POST"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked on a full queue")
	}
	l.Close()
}
