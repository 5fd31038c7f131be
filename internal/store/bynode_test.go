package store

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestByNodeOnSQLite(t *testing.T) { runByNode(t, sqliteBackend()) }

func TestByNodeOnPostgres(t *testing.T) { runByNode(t, postgresBackend(t)) }

func runByNode(t *testing.T, b backend) {
	t.Run("NodeReadsSkipOtherNodes", func(t *testing.T) { testNodeReads(t, b) })
	t.Run("PagesInStartOrder", func(t *testing.T) { testSandboxPages(t, b) })
	t.Run("EndReservation", func(t *testing.T) { testEndReservation(t, b) })
	t.Run("ReplaceNodeOverTheRowRead", func(t *testing.T) { testReplaceNode(t, b) })
	t.Run("TemplatesNamed", func(t *testing.T) { testTemplatesNamed(t, b) })
	t.Run("TemplatePagesNewestFirst", func(t *testing.T) { testTemplatePages(t, b) })
}

// testTemplatePages: snapshots page newest first by creation time, by
// team and status, whatever order they were written in.
func testTemplatePages(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	t0 := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	for i, c := range []struct {
		id, team string
		st       TemplateStatus
		at       int
	}{{"s3", "a", TemplateReady, 3}, {"s1", "a", TemplateReady, 1}, {"s2", "b", TemplateReady, 2}, {"s4", "a", TemplateBuilding, 4}, {"s0", "a", TemplateReady, 0}} {
		tpl := &Template{ID: c.id, Team: c.team, Status: c.st, CreatedAt: t0.Add(time.Duration(c.at) * time.Second), SourceSandbox: fmt.Sprint("sb", i)}
		if err := s.Templates().Put(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	q := PageQuery{Team: "a", States: []string{string(TemplateReady)}}
	var got []string
	for {
		page, last, more, err := s.TemplatePage(ctx, q, 2, func(*Template) bool { return true })
		if err != nil {
			t.Fatal(err)
		}
		for _, tpl := range page {
			got = append(got, tpl.ID)
		}
		if !more {
			break
		}
		q.AfterSeq, q.AfterID = last, page[len(page)-1].ID
	}
	if want := []string{"s3", "s1", "s0"}; !slices.Equal(got, want) {
		t.Fatalf("team a's ready snapshots, newest first = %v, want %v", got, want)
	}
}

// testTemplatesNamed: a name finds the templates with that ID or alias,
// of every team, and nothing that merely contains it.
func testTemplatesNamed(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	for _, tpl := range []*Template{
		{ID: "t1", Team: "a", Aliases: []string{"base", "py"}},
		{ID: "t2", Team: "b", Aliases: []string{"base"}},
		{ID: "t3", Team: "a", Aliases: []string{"base2"}},
		{ID: "base", Team: "c"},
		{ID: "t4", Team: "a"},
	} {
		if err := s.Templates().Put(ctx, tpl); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string][]string{"base": {"t1", "t2", "base"}, "py": {"t1"}, "t4": {"t4"}, "ba": nil} {
		got, err := s.TemplatesNamed(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for _, tpl := range got {
			gotIDs = append(gotIDs, tpl.ID)
		}
		if !slices.Equal(gotIDs, want) {
			t.Errorf("named %q: %v, want %v", name, gotIDs, want)
		}
	}
}

// testReplaceNode: a node record read by changes is written over its row
// once; a second write from the same read finds the row changed and
// writes nothing. SQLite (one node, no placement) never replaces.
func testReplaceNode(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	if err := s.Nodes().Put(ctx, &Node{ID: "n1", Address: "a", Status: "ready"}); err != nil {
		t.Fatal(err)
	}
	ch, err := s.NodeChanges(ctx, Cursor{})
	if err != nil || len(ch.Changed) != 1 {
		t.Fatalf("changes = %+v, %v", ch, err)
	}
	first, second := *ch.Changed[0], *ch.Changed[0]
	first.Address, second.Address = "first", "second"
	ok, err := s.ReplaceNode(ctx, &first)
	if err != nil || ok != (b.name == "postgres") {
		t.Fatalf("first replace = %v, %v", ok, err)
	}
	if ok, err := s.ReplaceNode(ctx, &second); err != nil || ok {
		t.Fatalf("second replace from the same read = %v, %v; want false", ok, err)
	}
	got, err := s.Nodes().Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[bool]string{true: "first", false: "a"}[b.name == "postgres"]; got.Address != want {
		t.Fatalf("address = %q, want %q", got.Address, want)
	}
}

// testEndReservation: ending one reservation of a node marks it alone,
// keeps the rest of the record, and a node or reservation that is gone
// is no error.
func testEndReservation(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	at := time.Date(2026, 12, 5, 3, 30, 0, 123456789, time.UTC)
	rec := &Node{ID: "n1", Address: "http://10.0.0.1:3000", Status: "ready", HeartbeatAt: at,
		Reservations: []Reservation{{ID: "r1", MemoryMB: 256, At: at}, {ID: "r2", MemoryMB: 512, At: at}}}
	if err := s.Nodes().Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	done := at.Add(time.Second)
	if err := s.EndReservation(ctx, "n1", "r2", done); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ node, resv string }{{"n1", "nope"}, {"gone", "r1"}} {
		if err := s.EndReservation(ctx, c.node, c.resv, done); err != nil {
			t.Fatalf("end %s of %s: %v", c.resv, c.node, err)
		}
	}
	got, err := s.Nodes().Get(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Address != rec.Address || !got.HeartbeatAt.Equal(at) || len(got.Reservations) != 2 {
		t.Fatalf("record changed beyond its reservation: %+v", got)
	}
	if r1, r2 := got.Reservations[0], got.Reservations[1]; r1.ID != "r1" || !r1.DoneAt.IsZero() || r2.ID != "r2" || !r2.DoneAt.Equal(done) || r2.MemoryMB != 512 {
		t.Fatalf("reservations = %+v, want r2 alone done at %v", got.Reservations, done)
	}
}

// testNodeReads: a node's reads count and return its records and those
// of no node, never another node's, whatever the states.
func testNodeReads(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	end := time.Date(2030, 1, 2, 3, 4, 5, 600700800, time.UTC)
	put := func(id, node string, st SandboxState, slot, cpu, mem int) {
		t.Helper()
		rec := &Sandbox{ID: id, Node: node, State: st, Slot: slot, CPUCount: cpu, MemoryMB: mem, EndAt: end}
		if err := s.Sandboxes().Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	put("a1", "a", Running, 1, 2, 512)
	put("a2", "a", Running, 2, 1, 256)
	put("a3", "a", Paused, -1, 4, 1024)
	put("a4", "a", Creating, 3, 1, 128)
	put("n1", "", Running, 4, 1, 100) // a single node's record, not yet taken
	put("b1", "b", Running, 1, 8, 8192)
	put("b2", "b", Paused, 2, 8, 8192)

	recs, err := s.NodeSandboxes(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(recs); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"a1", "a2", "a3", "a4", "n1"}) {
		t.Fatalf("node a's records = %v", got)
	}
	running, err := s.NodeSandboxes(ctx, "b", Running, Creating)
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(running); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"b1", "n1"}) {
		t.Fatalf("node b's running = %v", got)
	}
	l, err := s.NodeLoad(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	want := NodeLoad{Count: map[SandboxState]int{Running: 3, Paused: 1, Creating: 1}, Total: 5, CPUs: 4, MemoryMB: 868, HoldingSlots: 4}
	if fmt.Sprint(l) != fmt.Sprint(want) {
		t.Fatalf("load of a = %+v, want %+v", l, want)
	}
	ds, err := s.NodeDeadlines(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ds, func(x, y Deadline) int { return cmpString(x.ID, y.ID) })
	if len(ds) != 2 || ds[0].ID != "b1" || ds[1].ID != "n1" || !ds[0].EndAt.Equal(end) {
		t.Fatalf("deadlines of b = %+v, want b1 and n1 at %v", ds, end)
	}
	if l, err := s.NodeLoad(ctx, "c"); err != nil || l.Total != 1 || l.Count[Running] != 1 {
		t.Fatalf("a node with no records of its own sees the unowned one alone: %+v, %v", l, err)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// testSandboxPages: pages come in start order by (start, ID) either way,
// filtered by team, state and start, and a page starts after the cursor
// even when records were added and removed meanwhile.
func testSandboxPages(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	put := func(id, team string, st SandboxState, at time.Time) {
		t.Helper()
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: id, Team: team, State: st, StartedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	// Written out of order; s02 and s03 start at the same nanosecond.
	for i := 9; i >= 0; i-- {
		at := t0.Add(time.Duration(i) * time.Second)
		if i == 3 {
			at = t0.Add(2 * time.Second)
		}
		put(fmt.Sprintf("s%02d", i), "t1", Running, at)
	}
	put("x01", "t2", Running, t0.Add(1500*time.Millisecond))
	put("k01", "t1", Killing, t0.Add(2500*time.Millisecond))

	all := func(q PageQuery, limit int) []string {
		t.Helper()
		var out []string
		for {
			page, last, more, err := s.SandboxPage(ctx, q, limit, func(*Sandbox) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > limit {
				t.Fatalf("page of %d for limit %d", len(page), limit)
			}
			out = append(out, ids(page)...)
			if !more {
				return out
			}
			q.AfterSeq, q.AfterID = last, page[len(page)-1].ID
		}
	}
	listed := []string{string(Running), string(Paused)}
	asc := all(PageQuery{Team: "t1", States: listed, Asc: true}, 3)
	if want := []string{"s00", "s01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09"}; !slices.Equal(asc, want) {
		t.Fatalf("ascending pages = %v, want %v", asc, want)
	}
	desc := all(PageQuery{Team: "t1", States: listed}, 4)
	if want := []string{"s09", "s08", "s07", "s06", "s05", "s04", "s03", "s02", "s01", "s00"}; !slices.Equal(desc, want) {
		t.Fatalf("descending pages = %v, want %v", desc, want)
	}
	everyone := all(PageQuery{States: listed, Since: t0.Add(time.Second), Asc: true}, 100)
	if want := []string{"s01", "x01", "s02", "s03", "s04", "s05", "s06", "s07", "s08", "s09"}; !slices.Equal(everyone, want) {
		t.Fatalf("every team since 1 s = %v, want %v", everyone, want)
	}

	// A filter the database cannot apply (keep) still fills the page.
	odd := func(rec *Sandbox) bool { return (rec.ID[2]-'0')%2 == 1 }
	page, last, more, err := s.SandboxPage(ctx, PageQuery{Team: "t1", States: listed, Asc: true}, 2, odd)
	if err != nil || !slices.Equal(ids(page), []string{"s01", "s03"}) || !more {
		t.Fatalf("first page of odd ones = %v, more %v, %v", ids(page), more, err)
	}
	// Between two pages one listed record goes and an earlier one comes:
	// the next page neither repeats nor skips what is still there.
	if err := s.Sandboxes().Delete(ctx, "s05"); err != nil {
		t.Fatal(err)
	}
	put("s11", "t1", Running, t0.Add(500*time.Millisecond))
	page, _, more, err = s.SandboxPage(ctx, PageQuery{Team: "t1", States: listed, Asc: true, AfterSeq: last, AfterID: "s03"}, 10, odd)
	if err != nil || !slices.Equal(ids(page), []string{"s07", "s09"}) || more {
		t.Fatalf("next page of odd ones = %v, more %v, %v", ids(page), more, err)
	}
}
