package usage

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cube/internal/cube"
	"cube/internal/store"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const s = time.Second

// fixture is a store with two teams' usage, and a reader whose clock
// stands at t0+10m:
//
//	team a: s1 [-60s, 30s] 1 vCPU 512 MiB, s2 [10s, 70s] 2 vCPUs 1024 MiB,
//	        s1 again [100s, 130s], s7 [130s, 131s] and s8 [132s, 134s]
//	        1 vCPU 100 MiB, s4 running since 9m 2 vCPUs 256 MiB
//	team b: s3 [20s, 40s] 4 vCPUs 2048 MiB, s6 running since 9m30s (a
//	        record without RunningSince: from its start), s5 paused
func fixture(t *testing.T) (*Reader, *store.Store) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	row := func(team, sb string, from, to time.Duration, vcpus, mem int) store.UsageRecord {
		return store.UsageRecord{Team: team, Sandbox: sb, Node: "n1", Start: at(from), End: at(to), VCPUs: vcpus, MemoryMB: mem}
	}
	if err := st.AppendUsage(ctx,
		row("a", "s1", -60*s, 30*s, 1, 512),
		row("b", "s3", 20*s, 40*s, 4, 2048),
		row("a", "s2", 10*s, 70*s, 2, 1024),
		row("a", "s1", 100*s, 130*s, 1, 512),
		row("a", "s7", 130*s, 131*s, 1, 100),
		row("a", "s8", 132*s, 134*s, 1, 100),
	); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []store.Sandbox{
		{ID: "s4", Team: "a", State: store.Running, Node: "n1", StartedAt: at(-time.Hour), RunningSince: at(9 * time.Minute), CPUCount: 2, MemoryMB: 256},
		{ID: "s6", Team: "b", State: store.Running, Node: "n2", StartedAt: at(9*time.Minute + 30*s), CPUCount: 1, MemoryMB: 128},
		{ID: "s5", Team: "b", State: store.Paused, Node: "n1", StartedAt: at(0), CPUCount: 8, MemoryMB: 8192},
	} {
		if err := st.Sandboxes().Put(ctx, &rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, tpl := range []store.Template{
		{ID: "snap-a", Team: "a", Status: store.TemplateReady, SourceSandbox: "s1", SizeBytes: 1000},
		{ID: "snap-a2", Team: "a", Status: store.TemplateDeleting, SourceSandbox: "s1", SizeBytes: 50},
		{ID: "tpl-a", Team: "a", Status: store.TemplateReady, SizeBytes: 5000},
		{ID: "snap-b", Team: "b", Status: store.TemplateReady, SourceSandbox: "s3", SizeBytes: 7},
	} {
		if err := st.Templates().Put(ctx, &tpl); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []store.Volume{
		{ID: "va", Team: "a", State: store.VolumeReady, SizeBytes: 300},
		{ID: "va2", Team: "a", State: store.VolumeDeleting, SizeBytes: 9},
		{ID: "vb", Team: "b", State: store.VolumeReady, SizeBytes: 11},
	} {
		if err := st.Volumes().Put(ctx, &v); err != nil {
			t.Fatal(err)
		}
	}
	r := New(st)
	r.now = func() time.Time { return at(10 * time.Minute) }
	return r, st
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestTeamUsageClipsStretchesToTheInterval(t *testing.T) {
	r, _ := fixture(t)
	ctx := context.Background()
	got, err := r.TeamUsage(ctx, "a", t0, at(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// s1 30s of 90, s2 60s, s1 again 20s of 30; s7, s8 and s4 later.
	if !near(got.SandboxSeconds, 110) || !near(got.VCPUSeconds, 30+120+20) || !near(got.MemoryMiBSeconds, 30*512+60*1024+20*512) {
		t.Errorf("a over [0, 2m]: %+v", got)
	}
	if got.SandboxesStarted != 2 || got.RunningNow != 1 || got.SnapshotBytes != 1000 || got.VolumeBytes != 300 {
		t.Errorf("a over [0, 2m]: %+v", got)
	}
	if !got.Start.Equal(t0) || !got.End.Equal(at(2*time.Minute)) {
		t.Errorf("interval %v .. %v", got.Start, got.End)
	}
}

func TestTeamUsageCountsRunningSandboxesToNow(t *testing.T) {
	r, _ := fixture(t)
	ctx := context.Background()
	got, err := r.TeamUsage(ctx, "a", t0, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The end stops at now; s4 has run 60s of it.
	if !got.End.Equal(at(10 * time.Minute)) {
		t.Errorf("end %v, not now", got.End)
	}
	if !near(got.SandboxSeconds, 30+60+30+1+2+60) || !near(got.VCPUSeconds, 30+120+30+1+2+120) || got.SandboxesStarted != 5 {
		t.Errorf("a to now: %+v", got)
	}
	r.now = func() time.Time { return at(11 * time.Minute) }
	later, err := r.TeamUsage(ctx, "a", t0, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !near(later.SandboxSeconds-got.SandboxSeconds, 60) || !near(later.MemoryMiBSeconds-got.MemoryMiBSeconds, 60*256) {
		t.Errorf("a minute later: %+v, was %+v", later, got)
	}
	// An interval that begins after now holds nothing yet.
	future, err := r.TeamUsage(ctx, "a", at(time.Hour), at(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if future.SandboxSeconds != 0 || future.SandboxesStarted != 0 || future.RunningNow != 1 {
		t.Errorf("future: %+v", future)
	}
}

func TestTeamsAreApart(t *testing.T) {
	r, _ := fixture(t)
	ctx := context.Background()
	b, err := r.TeamUsage(ctx, "b", t0, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// s3 20s at 4 vCPUs; s6 30s from its start; s5 is paused.
	if !near(b.SandboxSeconds, 50) || !near(b.VCPUSeconds, 80+30) || !near(b.MemoryMiBSeconds, 20*2048+30*128) {
		t.Errorf("b: %+v", b)
	}
	if b.SandboxesStarted != 2 || b.RunningNow != 1 || b.SnapshotBytes != 7 || b.VolumeBytes != 11 {
		t.Errorf("b: %+v", b)
	}
	none, err := r.TeamUsage(ctx, "c", time.Time{}, at(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if none != (cube.UsageTotals{Start: time.Time{}, End: at(10 * time.Minute)}) {
		t.Errorf("a team without sandboxes: %+v", none)
	}
	mb, err := r.MaxTeamMetric(ctx, "b", t0, at(time.Hour), cube.MetricConcurrentSandboxes)
	if err != nil {
		t.Fatal(err)
	}
	if mb.Value != 1 || !mb.Timestamp.Equal(at(20*s)) {
		t.Errorf("b's most at once: %+v", mb)
	}
}

func TestSeriesConcurrencyAndStartRate(t *testing.T) {
	r, _ := fixture(t)
	ctx := context.Background()
	got, err := r.TeamMetrics(ctx, "a", t0, at(2*time.Minute+59*s), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []cube.TeamMetric{
		// s1 and s2 overlap from 10s; s2 starts.
		{Timestamp: t0, ConcurrentSandboxes: 2, SandboxStartRate: 1.0 / 60},
		// s2 runs to 70s, s1 from 100s: never two; s1 starts.
		{Timestamp: at(time.Minute), ConcurrentSandboxes: 1, SandboxStartRate: 1.0 / 60},
		// s7 starts as s1 stops: still one; s7 and s8 start.
		{Timestamp: at(2 * time.Minute), ConcurrentSandboxes: 1, SandboxStartRate: 2.0 / 60},
	}
	if len(got) != len(want) {
		t.Fatalf("series: %+v", got)
	}
	for i := range want {
		if !got[i].Timestamp.Equal(want[i].Timestamp) || got[i].ConcurrentSandboxes != want[i].ConcurrentSandboxes || !near(got[i].SandboxStartRate, want[i].SandboxStartRate) {
			t.Errorf("step %d: %+v, want %+v", i, got[i], want[i])
		}
	}

	// Steps are aligned to the epoch, the first one before the start;
	// the series stops at now, where s4 still runs.
	got, err = r.TeamMetrics(ctx, "a", at(8*time.Minute+30*s), at(time.Hour), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].Timestamp.Equal(at(8*time.Minute)) || got[0].ConcurrentSandboxes != 0 ||
		got[1].ConcurrentSandboxes != 1 || !near(got[1].SandboxStartRate, 1.0/60) {
		t.Errorf("series to now: %+v", got)
	}

	for _, c := range []struct {
		start, end time.Time
		step       time.Duration
	}{
		{at(time.Minute), t0, time.Minute},      // start after end
		{t0, at(time.Minute), time.Millisecond}, // step too short
		{time.Unix(0, 0), at(0), time.Second},   // too many steps
	} {
		if _, err := r.TeamMetrics(ctx, "a", c.start, c.end, c.step); cube.KindOf(err) != cube.Invalid {
			t.Errorf("%v .. %v by %v: %v, want Invalid", c.start, c.end, c.step, err)
		}
	}
}

func TestMaxTeamMetric(t *testing.T) {
	r, _ := fixture(t)
	ctx := context.Background()
	conc, err := r.MaxTeamMetric(ctx, "a", t0, at(time.Hour), cube.MetricConcurrentSandboxes)
	if err != nil {
		t.Fatal(err)
	}
	if conc.Value != 2 || !conc.Timestamp.Equal(at(10*s)) {
		t.Errorf("most at once: %+v", conc)
	}
	// s7 and s8 start within one step of 5s.
	rate, err := r.MaxTeamMetric(ctx, "a", t0, at(time.Hour), cube.MetricSandboxStartRate)
	if err != nil {
		t.Fatal(err)
	}
	if !near(rate.Value, 2.0/5) || !rate.Timestamp.Equal(at(130*s)) {
		t.Errorf("highest start rate: %+v", rate)
	}
	// Within [-30s, 5s] only s1 runs, already at the start.
	conc, err = r.MaxTeamMetric(ctx, "a", at(-30*s), at(5*s), cube.MetricConcurrentSandboxes)
	if err != nil {
		t.Fatal(err)
	}
	if conc.Value != 1 || !conc.Timestamp.Equal(at(-30*s)) {
		t.Errorf("most at once in [-30s, 5s]: %+v", conc)
	}
	// Nothing to count: 0 at the start.
	rate, err = r.MaxTeamMetric(ctx, "c", at(3*s), at(time.Hour), cube.MetricSandboxStartRate)
	if err != nil {
		t.Fatal(err)
	}
	if rate.Value != 0 || !rate.Timestamp.Equal(t0) {
		t.Errorf("a team without sandboxes: %+v", rate)
	}
	if _, err := r.MaxTeamMetric(ctx, "a", t0, at(time.Hour), "cpu"); cube.KindOf(err) != cube.Invalid {
		t.Errorf("unknown metric: %v", err)
	}
}

// gather reads the collector's series: name → label → value.
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		out[mf.GetName()] = map[string]float64{}
		for _, m := range mf.GetMetric() {
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[mf.GetName()][m.GetLabel()[0].GetValue()] = v
		}
	}
	return out
}

func TestCollectorNamesAtMostFiftyTeams(t *testing.T) {
	r, st := fixture(t)
	ctx := context.Background()
	// 50 more teams, each with one stretch of 10s at 1 vCPU, 10 MiB.
	for i := range 50 {
		u := store.UsageRecord{Team: fmt.Sprintf("t%02d", i), Sandbox: "x", Node: "n1", Start: t0, End: at(10 * s), VCPUs: 1, MemoryMB: 10}
		if err := st.AppendUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	got := gather(t, r.Collector(""))
	vcpu := got["cube_team_vcpu_seconds_total"]
	if len(vcpu) != MaxTeamLabels+1 {
		t.Fatalf("%d series: %v", len(vcpu), vcpu)
	}
	// a and b ran first; t00..t47 follow; t48, t49 are added up as
	// other. The counters add whole stretches: s1's began before t0.
	if !near(vcpu["b"], 80+30) || !near(vcpu["a"], 90+120+30+1+2+120) || !near(vcpu["t00"], 10) || !near(vcpu[OtherTeams], 20) {
		t.Errorf("vCPU seconds: %v", vcpu)
	}
	if _, named := vcpu["t48"]; named {
		t.Errorf("a 51st team named: %v", vcpu)
	}
	if got["cube_team_sandboxes_running"]["a"] != 1 || got["cube_team_sandboxes_running"]["t00"] != 0 {
		t.Errorf("running: %v", got["cube_team_sandboxes_running"])
	}
	if !near(got["cube_team_memory_mib_seconds_total"]["b"], 20*2048+30*128) {
		t.Errorf("memory: %v", got["cube_team_memory_mib_seconds_total"])
	}

	// One node's: n2 ran only s6.
	n2 := gather(t, r.Collector("n2"))
	if len(n2["cube_team_vcpu_seconds_total"]) != 1 || !near(n2["cube_team_vcpu_seconds_total"]["b"], 30) {
		t.Errorf("node n2: %v", n2)
	}
}

// A stretch that just ended is for a moment in neither the records nor
// the table: the counter holds its value rather than going back.
func TestCollectorCountersNeverGoBack(t *testing.T) {
	r, st := fixture(t)
	ctx := context.Background()
	c := r.Collector("").(*collector)
	before := gather(t, c)["cube_team_vcpu_seconds_total"]["a"]
	rec, err := st.Sandboxes().Get(ctx, "s4")
	if err != nil {
		t.Fatal(err)
	}
	rec.State, rec.RunningSince = store.Paused, time.Time{}
	if err := st.Sandboxes().Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	c.at = time.Time{} // read again
	after := gather(t, c)
	if after["cube_team_vcpu_seconds_total"]["a"] != before || after["cube_team_sandboxes_running"]["a"] != 0 {
		t.Errorf("vCPU seconds %v, was %v; running %v", after["cube_team_vcpu_seconds_total"]["a"], before, after["cube_team_sandboxes_running"]["a"])
	}
}
