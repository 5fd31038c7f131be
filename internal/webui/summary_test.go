package webui

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registry holds the metrics the server exports, with known values.
func registry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	states := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cube_sandboxes"}, []string{"state"})
	states.WithLabelValues("running").Set(3)
	states.WithLabelValues("paused").Set(2)
	capacity := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cube_sandbox_capacity"})
	capacity.Set(64)
	create := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cube_sandbox_create_duration_seconds", Buckets: []float64{0.01, 0.025, 0.05},
	}, []string{"result"})
	for range 10 {
		create.WithLabelValues("ok").Observe(0.02)
	}
	create.WithLabelValues("error").Observe(1)
	ops := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cube_sandbox_operation_duration_seconds", Buckets: []float64{0.01, 0.1},
	}, []string{"op"})
	ops.WithLabelValues("pause").Observe(0.005)
	phases := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cube_operation_phase_seconds", Buckets: []float64{0.1, 1},
	}, []string{"op", "phase"})
	phases.WithLabelValues("restore", "verify").Observe(0.05)
	phases.WithLabelValues("restore", "cold").Observe(0.5)
	phases.WithLabelValues("restore", "into-prepared").Observe(0.05)
	warm := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cube_warm_pool_sandboxes"}, []string{"template"})
	warm.WithLabelValues("base").Set(2)
	misses := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cube_warm_pool_misses_total"}, []string{"template"})
	misses.WithLabelValues("base").Add(4)
	misses.WithLabelValues("other").Add(1)
	reg.MustRegister(states, capacity, create, ops, phases, warm, misses)
	return reg
}

func TestSummaryReadsTheRegistry(t *testing.T) {
	h := New(Config{Gatherer: registry(t), Version: "v-test", DataDir: t.TempDir(), MaxSandboxes: 100})
	h.host = hostReader{proc: "testdata/proc"}
	s, err := h.Summary()
	if err != nil {
		t.Fatal(err)
	}
	if s.Sandboxes["running"] != 3 || s.Sandboxes["paused"] != 2 {
		t.Errorf("sandboxes %v, want running 3, paused 2", s.Sandboxes)
	}
	if s.Capacity != (Capacity{Used: 5, Max: 64}) {
		t.Errorf("capacity %+v, want 5 of 64 (the node's gauge wins over the configured 100)", s.Capacity)
	}
	if s.Creates["ok"] != 10 || s.Creates["error"] != 1 {
		t.Errorf("creates %v, want ok 10, error 1", s.Creates)
	}
	cl := s.CreateLatency
	if cl.Count != 11 || len(cl.Bounds) != 3 || cl.Buckets[1] != 10 || cl.Buckets[2] != 10 {
		t.Errorf("create latency %+v: want both results merged, 10 of 11 at or below 25 ms", cl)
	}
	// The 5.5th of 11 observations lies in (10 ms, 25 ms], which holds 10.
	if want := 0.01 + 0.015*5.5/10; cl.P50 == nil || math.Abs(*cl.P50-want) > 1e-9 {
		t.Errorf("p50 %v, want %v", cl.P50, want)
	}
	// Beyond the highest bound (the 1 s error): the highest bound.
	if cl.P99 == nil || *cl.P99 != 0.05 {
		t.Errorf("p99 %v, want 0.05", cl.P99)
	}
	if p := s.Operations["pause"]; p.Count != 1 || p.P50 == nil || *p.P50 > 0.01 {
		t.Errorf("pause %+v", p)
	}
	if r := s.Operations["restore"]; r.Count != 2 {
		t.Errorf("restore %+v, want the cold and into-prepared phases (2), not verify", r)
	}
	want := []WarmPool{{Template: "base", Ready: 2, Misses: 4}, {Template: "other", Misses: 1}}
	if len(s.WarmPools) != 2 || s.WarmPools[0] != want[0] || s.WarmPools[1] != want[1] {
		t.Errorf("warm pools %+v, want %+v", s.WarmPools, want)
	}
	if s.Host != (Host{CPUs: 2, CPUBusySeconds: 2, CPUTotalSeconds: 10, MemTotalBytes: 2 << 20, MemAvailBytes: 1 << 20}) {
		t.Errorf("host %+v", s.Host)
	}
	if s.DataDir.TotalBytes == 0 || s.DataDir.FreeBytes > s.DataDir.TotalBytes {
		t.Errorf("data dir %+v", s.DataDir)
	}
}

// With nothing observed yet the page still gets every field, and no
// percentile (null, not 0: nothing was measured).
func TestSummaryEmpty(t *testing.T) {
	h := New(Config{Gatherer: prometheus.NewRegistry(), MaxSandboxes: 100})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", SummaryPath, nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	cl := got["createLatency"].(map[string]any)
	if cl["p50"] != nil || cl["count"].(float64) != 0 {
		t.Errorf("createLatency %v, want no percentiles", cl)
	}
	if c := got["capacity"].(map[string]any); c["max"].(float64) != 100 || c["used"].(float64) != 0 {
		t.Errorf("capacity %v", c)
	}
	if sb := got["sandboxes"].(map[string]any); sb["running"].(float64) != 0 {
		t.Errorf("sandboxes %v", sb)
	}
}

func TestAssets(t *testing.T) {
	h := New(Config{})
	for _, tc := range []struct {
		path   string
		status int
		ctype  string
	}{
		{"/console", 200, "text/html; charset=utf-8"},
		{"/console/assets/app.js", 200, "text/javascript; charset=utf-8"},
		{"/console/assets/app.css", 200, "text/css; charset=utf-8"},
		{"/console/assets/benchmarks.md", 200, "text/markdown; charset=utf-8"},
		{"/console/assets/index.html", 404, ""},
		{"/console/assets/nothing.js", 404, ""},
		{"/console/assets/sources.sha256", 404, ""},
		{"/console/assets/../webui.go", 404, ""},
		{"/console/other", 404, ""},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.URL.Path = tc.path
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status {
			t.Errorf("GET %s: %d, want %d", tc.path, rec.Code, tc.status)
			continue
		}
		if tc.status != 200 {
			continue
		}
		if got := rec.Header().Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
	}
	// The page loads only its own bundle.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", IndexPath, nil))
	page := rec.Body.String()
	for _, ref := range []string{`src="/console/assets/app.js"`, `href="/console/assets/app.css"`} {
		if !strings.Contains(page, ref) {
			t.Errorf("index.html does not reference %s", ref)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("index.html refers to another origin")
	}
}

var _ http.Handler = (*Handler)(nil)
