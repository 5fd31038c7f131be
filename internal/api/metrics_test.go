package api

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPublicMetricsNameNoTemplates: the warm pools' series are labelled by
// template (a snapshot is one too) for the console and keyed scrapes; a
// scrape without the key gets them summed, with no template or snapshot
// ID in sight.
func TestPublicMetricsNameNoTemplates(t *testing.T) {
	reg := prometheus.NewRegistry()
	warm := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cube_warm_pool_sandboxes", Help: "h"}, []string{"template"})
	misses := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cube_warm_pool_misses_total", Help: "h"}, []string{"template"})
	phases := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cube_test_seconds", Help: "h", Buckets: []float64{1, 2}}, []string{"op", "snapshot"})
	reg.MustRegister(warm, misses, phases)
	warm.WithLabelValues("tpl0secret0000000001").Set(2)
	warm.WithLabelValues("snap0secret000000002").Set(3)
	misses.WithLabelValues("tpl0secret0000000001").Add(4)
	phases.WithLabelValues("restore", "snap0secret000000002").Observe(0.5)
	phases.WithLabelValues("restore", "snap0secret000000003").Observe(1.5)
	e := newEnv(t, func(c *envConfig) { c.Registry = reg })

	r := e.do("GET", "/metrics", nil, "X-API-Key", "")
	if r.status != 200 {
		t.Fatalf("metrics status %d", r.status)
	}
	public := string(r.body)
	if strings.Contains(public, "secret") || strings.Contains(public, "template=") || strings.Contains(public, "snapshot=") {
		t.Errorf("public /metrics names templates or snapshots:\n%s", public)
	}
	for _, want := range []string{
		"cube_warm_pool_sandboxes 5\n",
		"cube_warm_pool_misses_total 4\n",
		`cube_test_seconds_bucket{op="restore",le="1"} 1` + "\n",
		`cube_test_seconds_bucket{op="restore",le="2"} 2` + "\n",
		`cube_test_seconds_count{op="restore"} 2` + "\n",
		`cube_test_seconds_sum{op="restore"} 2` + "\n",
		`cube_sandboxes{state="running"}`,
	} {
		if !strings.Contains(public, want) {
			t.Errorf("public /metrics lacks %q:\n%s", want, public)
		}
	}

	keyed := string(e.do("GET", "/metrics", nil).body)
	if !strings.Contains(keyed, `cube_warm_pool_sandboxes{template="snap0secret000000002"} 3`) {
		t.Errorf("a keyed scrape lost the per-template series:\n%s", keyed)
	}
}
