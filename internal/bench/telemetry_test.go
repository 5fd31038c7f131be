package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain keeps the measured windows of the fake-server tests from
// waiting for this (possibly busy) host to go quiet.
func TestMain(m *testing.M) {
	defaultSettle.Limit = 0
	os.Exit(m.Run())
}

func TestParseProcStat(t *testing.T) {
	sample := "cpu  100 20 30 5000 40 6 7 8 90 0\ncpu0 50 10 15 2500 20 3 3 4 45 0\nintr 1 2 3\n"
	got, err := parseProcStat([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal = 100+20+30+6+7+8 = 171 jiffies.
	if want := 1710 * time.Millisecond; got != want {
		t.Errorf("busy = %v, want %v", got, want)
	}
	for _, bad := range []string{"intr 1 2\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestSettleWaitsForAQuietWindow(t *testing.T) {
	p := settlePolicy{Window: 250 * time.Millisecond, Limit: 5 * time.Second, Threshold: 0.10}
	busy := []time.Duration{200 * time.Millisecond, 100 * time.Millisecond, 20 * time.Millisecond, 0}
	var calls int
	waited, quiet := p.settle(func(w time.Duration) (time.Duration, error) {
		if w != p.Window {
			t.Errorf("window %v", w)
		}
		calls++
		return busy[calls-1], nil
	})
	// 20 ms < 10 % of 250 ms: the third window is quiet.
	if calls != 3 || waited != 750*time.Millisecond || !quiet {
		t.Errorf("calls %d waited %v quiet %v, want 3, 750ms, true", calls, waited, quiet)
	}

	calls = 0
	waited, quiet = p.settle(func(time.Duration) (time.Duration, error) { calls++; return time.Second, nil })
	if calls != 20 || waited != 5*time.Second || quiet {
		t.Errorf("always busy: calls %d waited %v quiet %v, want 20, 5s, false", calls, waited, quiet)
	}

	waited, quiet = p.settle(func(time.Duration) (time.Duration, error) { return 0, errors.New("no /proc") })
	if waited != p.Window || quiet {
		t.Errorf("sampler error: waited %v quiet %v", waited, quiet)
	}

	if waited, quiet = (settlePolicy{Window: p.Window}).settle(nil); waited != 0 || !quiet {
		t.Errorf("no limit: waited %v quiet %v, want no wait", waited, quiet)
	}
}

func TestCPUWindowSubtractsItsOwnCPU(t *testing.T) {
	w := startCPU()
	if !w.ok {
		t.Skip("no /proc/stat here")
	}
	rep := w.stop(settlePolicy{}, nil, 4)
	if rep == nil || rep.Ops != 4 || rep.PerOpMS < 0 || rep.SettleMS != 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := (cpuWindow{}).stop(settlePolicy{}, nil, 4); got != nil {
		t.Errorf("unopened window reported %+v", got)
	}
	if got := w.stop(settlePolicy{}, nil, 0); got != nil {
		t.Errorf("no operations reported %+v", got)
	}
}

const metricsBefore = `# HELP cube_operation_phase_seconds Time spent in each phase.
# TYPE cube_operation_phase_seconds histogram
cube_operation_phase_seconds_bucket{op="launch",phase="init",le="0.1"} 2
cube_operation_phase_seconds_bucket{op="launch",phase="init",le="+Inf"} 2
cube_operation_phase_seconds_sum{op="launch",phase="init"} 0.05
cube_operation_phase_seconds_count{op="launch",phase="init"} 2
cube_operation_phase_seconds_bucket{op="launch",phase="restore",le="+Inf"} 1
cube_operation_phase_seconds_sum{op="launch",phase="restore"} 0.3
cube_operation_phase_seconds_count{op="launch",phase="restore"} 1
# TYPE cube_warm_pool_misses_total counter
cube_warm_pool_misses_total{template="a"} 3
# TYPE cube_prepared_containers gauge
cube_prepared_containers 1
`

const metricsAfter = `# TYPE cube_operation_phase_seconds histogram
cube_operation_phase_seconds_bucket{op="launch",phase="init",le="+Inf"} 5
cube_operation_phase_seconds_sum{op="launch",phase="init"} 0.11
cube_operation_phase_seconds_count{op="launch",phase="init"} 5
cube_operation_phase_seconds_bucket{op="launch",phase="restore",le="+Inf"} 1
cube_operation_phase_seconds_sum{op="launch",phase="restore"} 0.3
cube_operation_phase_seconds_count{op="launch",phase="restore"} 1
cube_operation_phase_seconds_bucket{op="launch",phase="warm-init",le="+Inf"} 3
cube_operation_phase_seconds_sum{op="launch",phase="warm-init"} 0.15
cube_operation_phase_seconds_count{op="launch",phase="warm-init"} 3
cube_operation_phase_seconds_bucket{op="clone",phase="checkpoint",le="+Inf"} 1
cube_operation_phase_seconds_sum{op="clone",phase="checkpoint"} 0.2
cube_operation_phase_seconds_count{op="clone",phase="checkpoint"} 1
# TYPE cube_warm_pool_misses_total counter
cube_warm_pool_misses_total{template="a"} 4
cube_warm_pool_misses_total{template="b"} 2
`

func TestMetricsDelta(t *testing.T) {
	before, err := parseMetrics(strings.NewReader(metricsBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseMetrics(strings.NewReader(metricsAfter))
	if err != nil {
		t.Fatal(err)
	}
	phases, misses := after.since(before)
	// launch/restore did not run in between; the rest in run order.
	want := []PhaseStat{
		{Op: "clone", Phase: "checkpoint", Count: 1, MeanMS: 200},
		{Op: "launch", Phase: "warm-init", Count: 3, MeanMS: 50},
		{Op: "launch", Phase: "init", Count: 3, MeanMS: 20},
	}
	if len(phases) != len(want) {
		t.Fatalf("phases %+v, want %+v", phases, want)
	}
	for i, p := range phases {
		w := want[i]
		if p.Op != w.Op || p.Phase != w.Phase || p.Count != w.Count || math.Abs(p.MeanMS-w.MeanMS) > 1e-6 {
			t.Errorf("phase %d = %+v, want %+v", i, p, w)
		}
	}
	if misses == nil || *misses != 3 {
		t.Errorf("misses %v, want 3", misses)
	}

	// A server without the metrics: nothing, and no panic.
	bare, err := parseMetrics(strings.NewReader("# TYPE up gauge\nup 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ps, m := after.since(bare); ps != nil || m != nil {
		t.Errorf("against a bare server: %+v %v", ps, m)
	}
}

func TestTelemetryJSONIsOptional(t *testing.T) {
	var old OpReport
	if err := json.Unmarshal([]byte(`{"command":"snapshot","rows":[{"op":"snapshot","count":1,"rounds":2}]}`), &old); err != nil {
		t.Fatal(err)
	}
	if old.CPU != nil || old.Phases != nil || old.WarmPoolMisses != nil {
		t.Errorf("old file grew telemetry: %+v", old.Telemetry)
	}
	zero := 0
	rep := OpReport{Command: "snapshot", Telemetry: Telemetry{
		CPU:    &CPUReport{HostBusyMS: 900, BenchMS: 100, SettleMS: 250, Ops: 4, PerOpMS: 200},
		Phases: []PhaseStat{{Op: "snapshot", Phase: "checkpoint", Count: 4, MeanMS: 30}}, WarmPoolMisses: &zero}}
	data, _ := json.Marshal(rep)
	for _, key := range []string{`"cpu":{"host_busy_ms":900,"bench_ms":100,"settle_ms":250,"ops":4,"per_op_ms":200}`,
		`"phases":[{"op":"snapshot","phase":"checkpoint","count":4,"mean_ms":30}]`, `"warm_pool_misses":0`, `"rows":`} {
		if !bytes.Contains(data, []byte(key)) {
			t.Errorf("JSON %s lacks %s", data, key)
		}
	}
	var b bytes.Buffer
	WriteTelemetry(&b, rep.Telemetry)
	if want := "CPU per op: 200.0 ms (host busy 900 ms over 4 ops, settle 250 ms)\n"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("text %q, want prefix %q", b.String(), want)
	}
}

func TestReportCPUAndWhereTheTimeGoes(t *testing.T) {
	render := func(withTelemetry bool) string {
		dir := t.TempDir()
		write := func(name string, v any) {
			data, _ := json.Marshal(v)
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		create := &CreateReport{Config: CreateConfig{Concurrency: 1, Total: 4}, Summary: Summary{Total: 4, Successful: 4, SuccessRate: 100},
			Create: Summarize([]float64{40, 50}), Raw: make([]Sample, 4)}
		snap := &OpReport{Rows: []OpRow{{Op: "snapshot", Concurrency: 1, Count: 1, Rounds: 2, Wall: Stats{Avg: 30}}}}
		base := &BaselineReport{Ops: map[string]Stats{"run": Summarize([]float64{400}), "checkpoint": Summarize([]float64{80})}}
		if withTelemetry {
			misses := 1
			create.Telemetry = Telemetry{CPU: &CPUReport{HostBusyMS: 1000, Ops: 4, PerOpMS: 250, SettleMS: 500}, WarmPoolMisses: &misses,
				Phases: []PhaseStat{{Op: "launch", Phase: "warm-init", Count: 3, MeanMS: 12.5}, {Op: "launch", Phase: "restore", Count: 1, MeanMS: 200}}}
			// No CPU: count per op falls back to the rows' operations.
			snap.Telemetry = Telemetry{Phases: []PhaseStat{{Op: "snapshot", Phase: "checkpoint", Count: 2, MeanMS: 25}}}
			base.CPU = map[string]Stats{"run": Summarize([]float64{35})}
		}
		write("create-c1.json", create)
		write("snapshot-c1.json", snap)
		write("baseline-c1.json", base)
		var b bytes.Buffer
		if err := WriteReport(&b, ReportOptions{Dir: dir, ChartPath: "bench"}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	with, without := render(true), render(false)
	for _, want := range []string{
		"| 1 | 4 | 100.0 % | 45.0 | 5.0 | 45.0 | 49.0 | 49.5 | 49.9 | 40.0 | 50.0 | — | 0.0 | 250.0 | 400.0 |",
		"**create, c=1** — CPU 250.0 ms/op (host busy 1000 ms over 4 ops, settle 500 ms), warm pool misses 1",
		"| launch | warm-init | 0.75 | 12.5 |\n| launch | restore | 0.25 | 200.0 |",
		"**snapshot, c=1** — CPU —", "| snapshot | checkpoint | 1.00 | 25.0 |",
		"| 1 | 2 | 30.0 | 0.0 | 0.0 | 0.0 | 0.0 | 0.0 | — | 80.0 |",
		"| run | 400.0 | 35.0 |", "| checkpoint | 80.0 | — |",
		"**clone, n=1**: not run.",
	} {
		if !strings.Contains(with, want) {
			t.Errorf("report with telemetry lacks %q", want)
		}
	}
	for _, want := range []string{
		"| 0.0 | — | 400.0 |", "**create, c=1** — CPU —\n\n| op | phase | count per op | mean ms |\n|---|---|---|---|\n| — | — | — | — |",
		"| run | 400.0 | — |", "## 9. Where the time goes",
	} {
		if !strings.Contains(without, want) {
			t.Errorf("report without telemetry lacks %q", want)
		}
	}
	if again := render(true); again != with {
		t.Error("the report is not deterministic")
	}
}
