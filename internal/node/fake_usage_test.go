package node_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
)

// TestFakeUsageSeriesFollowSandboxes: each running sandbox has its CPU and
// memory series, and they end when it is paused or killed, so per-sandbox
// labels never pile up in the registry.
func TestFakeUsageSeriesFollowSandboxes(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.Collectors()...)
	reg.MustRegister(n.SandboxCollector())
	series := func() map[string]bool {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, mf := range mfs {
			if mf.GetName() != "cube_sandbox_cpu_seconds_total" && mf.GetName() != "cube_sandbox_memory_bytes" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = true
			}
		}
		return out
	}

	a := fakeCreate(t, n, cube.CreateRequest{})
	b := fakeCreate(t, n, cube.CreateRequest{})
	got := series()
	for _, id := range []string{a.ID, b.ID} {
		if !got["cube_sandbox_cpu_seconds_total/"+id] || !got["cube_sandbox_memory_bytes/"+id] {
			t.Fatalf("series %v: want CPU and memory of %s", got, id)
		}
	}
	if len(got) != 4 {
		t.Fatalf("series %v: want only the two sandboxes'", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	capacity := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "cube_sandbox_capacity" {
			capacity = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if capacity != 100 {
		t.Errorf("cube_sandbox_capacity %v, want 100 (the default)", capacity)
	}

	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := n.KillSandbox(fctx(t), b.ID); err != nil {
		t.Fatal(err)
	}
	if got := series(); len(got) != 0 {
		t.Fatalf("series %v after pausing one sandbox and killing the other: want none", got)
	}
}
