package nodefake

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cube/internal/netslot"
	"cube/internal/runtime"
)

func TestSlotsLikeAPool(t *testing.T) {
	ctx := context.Background()
	p := NewSlots(2)
	a, _ := p.Acquire(ctx)
	b, _ := p.Acquire(ctx)
	if a.Index != 0 || b.Index != 1 || a.HostAddr == b.HostAddr {
		t.Fatalf("acquired %v and %v", a, b)
	}
	if _, err := p.Acquire(ctx); !errors.Is(err, netslot.ErrExhausted) {
		t.Fatalf("acquire of a full pool: %v", err)
	}
	if err := p.Release(a); err != nil || p.Release(a) == nil {
		t.Fatalf("release, twice: %v", err)
	}
	// After a crash slot 1 is a leftover: not handed out, adoptable once.
	p.Crash()
	if s, err := p.Acquire(ctx); err != nil || s.Index != 0 {
		t.Fatalf("acquire after crash = %v, %v", s, err)
	}
	if _, err := p.Adopt(1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Adopt(1); err == nil {
		t.Fatal("adopted a slot twice")
	}
	p.Crash()
	removed, err := p.Reconcile(map[int]bool{1: true})
	if err != nil || !slices.Equal(removed, []string{"fake-h0"}) || !slices.Equal(p.Leftovers(), []int{1}) {
		t.Fatalf("reconcile removed %v (%v); leftovers %v", removed, err, p.Leftovers())
	}
}

func TestRuntimeRestoresOnlyCheckpoints(t *testing.T) {
	ctx := context.Background()
	r := NewRuntime()
	sb, err := r.Boot(ctx, runtime.Spec{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if _, err := r.Restore(ctx, img, runtime.Spec{ID: "b"}); err == nil {
		t.Fatal("restored from no image")
	}
	if err := sb.Checkpoint(ctx, img, false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil || len(r.Containers()) != 0 {
		t.Fatalf("checkpoint without leaveRunning: %v, containers %v", err, r.Containers())
	}
	r.Fail(OpRestore, errors.New("no"))
	if _, err := r.Restore(ctx, img, runtime.Spec{ID: "b"}); err == nil {
		t.Fatal("an injected failure did not fail")
	}
	r.Fail(OpRestore, nil)
	b, err := r.Restore(ctx, img, runtime.Spec{ID: "b"})
	if err != nil || r.Container("b").Image() != img {
		t.Fatalf("restore = %v", err)
	}
	if err := b.Kill(ctx); err != nil || b.Kill(ctx) != nil || r.Container("b") != nil {
		t.Fatal("kill, twice, did not remove the container")
	}
}
