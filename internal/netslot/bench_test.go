package netslot

import (
	"context"
	"os"
	"testing"
)

// BenchmarkBuild measures arming a slot from nothing (Acquire with no
// pre-armed slot waiting) plus its teardown.
func BenchmarkBuild(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("network slots need root")
	}
	p := newBenchPool(b, -1)
	for b.Loop() {
		s, err := p.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Release(s); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkRelease measures cleaning a used slot for reuse.
func BenchmarkRelease(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("network slots need root")
	}
	p := newBenchPool(b, 1)
	for b.Loop() {
		b.StopTimer()
		s, err := p.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := p.Release(s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireWarm measures Acquire when a cleaned slot is waiting.
func BenchmarkAcquireWarm(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("network slots need root")
	}
	p := newBenchPool(b, 1)
	for b.Loop() {
		s, err := p.Acquire(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Release(s); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func newBenchPool(b *testing.B, warm int) *Pool {
	return newTestPool(b, Config{Size: 4, Warm: warm, NoDNS: true})
}
