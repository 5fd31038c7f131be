package store

import (
	"context"
	"testing"
	"time"
)

// testUsage: rows come back as written, filtered by team and by overlap
// with an interval, and add up per team in the order teams first
// appeared; the sandbox record keeps RunningSince.
func testUsage(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rows := []UsageRecord{
		{Team: "b", Sandbox: "s1", Node: "n1", Start: t0, End: t0.Add(10 * time.Second), VCPUs: 2, MemoryMB: 512},
		{Team: "a", Sandbox: "s2", Node: "n1", Start: t0.Add(5 * time.Second), End: t0.Add(65 * time.Second), VCPUs: 1, MemoryMB: 256},
		{Team: "b", Sandbox: "s1", Node: "n2", Start: t0.Add(20 * time.Second), End: t0.Add(30*time.Second + 500*time.Microsecond), VCPUs: 2, MemoryMB: 512},
		// An end before its start is written as a stretch of nothing.
		{Team: "a", Sandbox: "s3", Node: "n2", Start: t0.Add(time.Hour), End: t0, VCPUs: 1, MemoryMB: 1},
	}
	if err := s.AppendUsage(ctx, rows[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendUsage(ctx, rows[2:]...); err != nil {
		t.Fatal(err)
	}
	s = reopen()

	all, err := s.ListUsage(ctx, UsageFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("rows: %+v", all)
	}
	for i, r := range all {
		want := rows[i]
		if i == 3 {
			want.End = want.Start
		}
		want.Seq = r.Seq
		if r != want {
			t.Errorf("row %d: %+v, want %+v", i, r, want)
		}
		if i > 0 && r.Seq <= all[i-1].Seq {
			t.Errorf("rows out of order: %+v", all)
		}
	}
	b1, err := s.ListUsage(ctx, UsageFilter{Team: "b", From: t0.Add(15 * time.Second), To: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(b1) != 1 || b1[0].Node != "n2" {
		t.Errorf("team b from 15s: %+v", b1)
	}
	a1, err := s.ListUsage(ctx, UsageFilter{Team: "a", To: t0.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(a1) != 1 || a1[0].Sandbox != "s2" {
		t.Errorf("team a up to 1m: %+v", a1)
	}

	sums, err := s.SumUsage(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 2 || sums[0].Team != "b" || sums[1].Team != "a" {
		t.Fatalf("sums: %+v", sums)
	}
	if got := sums[0]; got.Rows != 2 || got.Millis != 20000 || got.VCPUMillis != 40000 || got.MemoryMiBMillis != 20000*512 {
		t.Errorf("team b: %+v", got)
	}
	if got := sums[1]; got.Rows != 2 || got.Millis != 60000 || got.VCPUMillis != 60000 || got.MemoryMiBMillis != 60000*256 {
		t.Errorf("team a: %+v", got)
	}
	n2, err := s.SumUsage(ctx, "n2")
	if err != nil {
		t.Fatal(err)
	}
	if len(n2) != 2 || n2[0].Team != "b" || n2[0].Millis != 10000 || n2[1].Millis != 0 {
		t.Errorf("node n2: %+v", n2)
	}

	sb := &Sandbox{ID: "s9", State: Running, RunningSince: t0}
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	got, err := s.Sandboxes().Get(ctx, "s9")
	if err != nil {
		t.Fatal(err)
	}
	if !got.RunningSince.Equal(t0) {
		t.Errorf("runningSince: %v", got.RunningSince)
	}
}
