package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"cube/internal/cube"
)

// usageCall is what a usage route asked the backend.
type usageCall struct {
	op, team, metric string
	start, end       time.Time
	step             time.Duration
}

// usageBackend is the fake node with usage: it records what it is asked
// and answers the same whatever the team.
type usageBackend struct {
	*fakeBackend
	mu    *sync.Mutex
	calls *[]usageCall
}

func newUsageBackend() usageBackend {
	return usageBackend{fakeBackend: newFake(), mu: &sync.Mutex{}, calls: &[]usageCall{}}
}

func (b usageBackend) record(c usageCall) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*b.calls = append(*b.calls, c)
}

func (b usageBackend) last(t *testing.T) usageCall {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(*b.calls) == 0 {
		t.Fatal("the backend was not asked")
	}
	return (*b.calls)[len(*b.calls)-1]
}

func (b usageBackend) asked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(*b.calls)
}

var usageT0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func (b usageBackend) TeamUsage(_ context.Context, team string, start, end time.Time) (cube.UsageTotals, error) {
	b.record(usageCall{op: "usage", team: team, start: start, end: end})
	return cube.UsageTotals{Start: start, End: end, SandboxSeconds: 90.5, VCPUSeconds: 181, MemoryMiBSeconds: 46336,
		SandboxesStarted: 3, RunningNow: 1, SnapshotBytes: 1000, VolumeBytes: 300}, nil
}

func (b usageBackend) TeamMetrics(_ context.Context, team string, start, end time.Time, step time.Duration) ([]cube.TeamMetric, error) {
	b.record(usageCall{op: "metrics", team: team, start: start, end: end, step: step})
	return []cube.TeamMetric{
		{Timestamp: usageT0, ConcurrentSandboxes: 2, SandboxStartRate: 0.25},
		{Timestamp: usageT0.Add(step), ConcurrentSandboxes: 1},
	}, nil
}

func (b usageBackend) MaxTeamMetric(_ context.Context, team string, start, end time.Time, metric string) (cube.MaxTeamMetric, error) {
	b.record(usageCall{op: "max", team: team, start: start, end: end, metric: metric})
	return cube.MaxTeamMetric{Timestamp: usageT0.Add(10 * time.Second), Value: 2}, nil
}

var _ cube.Usage = usageBackend{}

const usageTeamB, usageKeyB = "team-b", "e2b_teamb0123456789abcdef0123456789abcdef0"

func newUsageEnv(t *testing.T) (*testEnv, usageBackend) {
	b := newUsageBackend()
	e := newEnvWith(t, b.fakeBackend, b, func(c *envConfig) {
		teams := adminKeys(testKey)
		teams.addTeam(usageTeamB, usageKeyB)
		c.Teams = teams
	})
	return e, b
}

// keysOf is the JSON object's keys, sorted.
func keysOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestTeamMetricsShape: GET /teams/{teamID}/metrics answers E2B's
// TeamMetric array, for the interval asked in Unix seconds and with E2B's
// step for it.
func TestTeamMetricsShape(t *testing.T) {
	e, b := newUsageEnv(t)
	start, end := usageT0.Unix(), usageT0.Add(30*time.Minute).Unix()
	r := e.do("GET", "/teams/"+cube.FirstTeam+"/metrics?start="+strconv.FormatInt(start, 10)+"&end="+strconv.FormatInt(end, 10), nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw) != 2 {
		t.Fatalf("%s: %v", r.body, err)
	}
	if got := keysOf(t, raw[0]); !slices.Equal(got, []string{"concurrentSandboxes", "sandboxStartRate", "timestamp", "timestampUnix"}) {
		t.Errorf("fields %v", got)
	}
	var ms []struct {
		Timestamp           time.Time
		TimestampUnix       int64
		ConcurrentSandboxes int
		SandboxStartRate    float64
	}
	json.Unmarshal(r.body, &ms)
	if !ms[0].Timestamp.Equal(usageT0) || ms[0].TimestampUnix != usageT0.Unix() || ms[0].ConcurrentSandboxes != 2 || ms[0].SandboxStartRate != 0.25 {
		t.Errorf("first step %+v", ms[0])
	}
	if ms[1].TimestampUnix != usageT0.Unix()+5 {
		t.Errorf("second step %+v", ms[1])
	}
	c := b.last(t)
	if c.op != "metrics" || c.team != cube.FirstTeam || c.start.Unix() != start || c.end.Unix() != end || c.step != 5*time.Second {
		t.Errorf("asked %+v", c)
	}
}

// TestTeamMetricsDefaultsAndSteps: without start and end the interval is
// the last 7 days; the step grows with the interval, and past E2B's
// table so that a series stays under 1000 steps.
func TestTeamMetricsDefaultsAndSteps(t *testing.T) {
	e, b := newUsageEnv(t)
	before := time.Now()
	if r := e.do("GET", "/teams/"+cube.FirstTeam+"/metrics", nil); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	c := b.last(t)
	if c.end.Before(before.Add(-time.Second)) || c.end.After(time.Now()) || c.end.Sub(c.start) != 7*24*time.Hour || c.step != 15*time.Minute {
		t.Errorf("default interval %+v", c)
	}
	// Only end: the week before it.
	if r := e.do("GET", "/teams/"+cube.FirstTeam+"/metrics?end="+strconv.FormatInt(usageT0.Unix(), 10), nil); r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if c := b.last(t); !c.end.Equal(usageT0) || !c.start.Equal(usageT0.Add(-7*24*time.Hour)) {
		t.Errorf("interval before end %+v", c)
	}
	for _, s := range []struct {
		span time.Duration
		step time.Duration
	}{
		{0, 5 * time.Second},
		{59 * time.Minute, 5 * time.Second},
		{time.Hour, 30 * time.Second},
		{6 * time.Hour, time.Minute},
		{12 * time.Hour, 2 * time.Minute},
		{24 * time.Hour, 5 * time.Minute},
		{7 * 24 * time.Hour, 15 * time.Minute},
		{30 * 24 * time.Hour, 45 * time.Minute},
	} {
		start, end := usageT0.Add(-s.span).Unix(), usageT0.Unix()
		if r := e.do("GET", "/teams/"+cube.FirstTeam+"/metrics?start="+strconv.FormatInt(start, 10)+"&end="+strconv.FormatInt(end, 10), nil); r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if c := b.last(t); c.step != s.step {
			t.Errorf("over %v: step %v, want %v", s.span, c.step, s.step)
		}
		if steps := s.span / s.step; steps >= maxSeriesSteps {
			t.Errorf("over %v: %d steps", s.span, steps)
		}
	}
}

// TestTeamMetricsRefuseBadParameters: 400 for what E2B refuses (and
// what its types refuse), without asking the backend.
func TestTeamMetricsRefuseBadParameters(t *testing.T) {
	e, b := newUsageEnv(t)
	base := "/teams/" + cube.FirstTeam
	for _, c := range []struct{ path, says string }{
		{base + "/metrics?start=yesterday", "start"},
		{base + "/metrics?start=-5", "start"},
		{base + "/metrics?end=1.5", "end"},
		{base + "/metrics?start=200&end=100", "start time cannot be after end time"},
		{base + "/metrics?start=99999999999", "start"},
		{base + "/usage?start=200&end=100", "start time cannot be after end time"},
		{base + "/metrics/max?start=200&end=100&metric=concurrent_sandboxes", "start time cannot be after end time"},
		{base + "/metrics/max", "metric"},
		{base + "/metrics/max?metric=cpu", "invalid metric"},
	} {
		e.do("GET", c.path, nil).wantError(t, http.StatusBadRequest, c.says)
	}
	if n := b.asked(); n != 0 {
		t.Errorf("the backend was asked %d times", n)
	}
}

func TestTeamMetricsMaxShape(t *testing.T) {
	e, b := newUsageEnv(t)
	for _, metric := range []string{cube.MetricConcurrentSandboxes, cube.MetricSandboxStartRate} {
		r := e.do("GET", "/teams/"+cube.FirstTeam+"/metrics/max?start=100&end=200&metric="+metric, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if got := keysOf(t, r.body); !slices.Equal(got, []string{"timestamp", "timestampUnix", "value"}) {
			t.Errorf("fields %v", got)
		}
		var m struct {
			Timestamp     time.Time
			TimestampUnix int64
			Value         float64
		}
		json.Unmarshal(r.body, &m)
		if !m.Timestamp.Equal(usageT0.Add(10*time.Second)) || m.TimestampUnix != usageT0.Unix()+10 || m.Value != 2 {
			t.Errorf("%s: %+v", metric, m)
		}
		if c := b.last(t); c.op != "max" || c.metric != metric || c.start.Unix() != 100 || c.end.Unix() != 200 {
			t.Errorf("asked %+v", c)
		}
	}
}

func TestTeamUsageShape(t *testing.T) {
	e, b := newUsageEnv(t)
	r := e.do("GET", "/teams/"+cube.FirstTeam+"/usage?start=100&end=200", nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	want := []string{"end", "memoryMiBSeconds", "runningSandboxes", "sandboxSeconds", "sandboxesStarted", "snapshotBytes", "start", "teamID", "vcpuSeconds", "volumeBytes"}
	if got := keysOf(t, r.body); !slices.Equal(got, want) {
		t.Errorf("fields %v", got)
	}
	var u map[string]any
	json.Unmarshal(r.body, &u)
	if u["teamID"] != cube.FirstTeam || u["sandboxSeconds"] != 90.5 || u["vcpuSeconds"] != 181.0 || u["sandboxesStarted"] != 3.0 ||
		u["runningSandboxes"] != 1.0 || u["snapshotBytes"] != 1000.0 || u["volumeBytes"] != 300.0 || u["start"] != "1970-01-01T00:01:40Z" {
		t.Errorf("usage %v", u)
	}
	if c := b.last(t); c.op != "usage" || c.team != cube.FirstTeam || c.start.Unix() != 100 || c.end.Unix() != 200 {
		t.Errorf("asked %+v", c)
	}
}

// TestUsageRoutesKeepTeamsApart: a team's key reads its own team's usage
// and nothing of another team's (404, as every route naming a team); the
// admin key reads any team's, and an unknown team is 404.
func TestUsageRoutesKeepTeamsApart(t *testing.T) {
	e, b := newUsageEnv(t)
	asB := []string{"X-API-Key", usageKeyB}
	for _, route := range []string{"/metrics", "/metrics/max?metric=concurrent_sandboxes", "/usage"} {
		e.do("GET", "/teams/"+cube.FirstTeam+route, nil, asB...).wantError(t, http.StatusNotFound, "not found")
		if r := e.do("GET", "/teams/"+usageTeamB+route, nil, asB...); r.status != http.StatusOK {
			t.Fatalf("team b's own %s: %d %s", route, r.status, r.body)
		}
		if c := b.last(t); c.team != usageTeamB {
			t.Errorf("%s asked for %q", route, c.team)
		}
		if r := e.do("GET", "/teams/"+usageTeamB+route, nil); r.status != http.StatusOK {
			t.Fatalf("admin on team b's %s: %d %s", route, r.status, r.body)
		}
		if c := b.last(t); c.team != usageTeamB {
			t.Errorf("admin's %s asked for %q", route, c.team)
		}
		e.do("GET", "/teams/no-such-team"+route, nil).wantError(t, http.StatusNotFound, "no-such-team")
	}
	if n := b.asked(); n != 6 {
		t.Errorf("the backend was asked %d times, want 6", n)
	}
}

// TestUsageRoutesAnswer501WithoutUsage: a backend that keeps no usage.
func TestUsageRoutesAnswer501WithoutUsage(t *testing.T) {
	e := newEnv(t)
	for _, route := range []string{"/metrics", "/metrics/max?metric=sandbox_start_rate", "/usage"} {
		e.do("GET", "/teams/"+cube.FirstTeam+route, nil).wantError(t, http.StatusNotImplemented, "not supported")
	}
}
