package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// telemetry is what the node exports to Prometheus: how its pools do and
// where its operations spend their time. The phases are what cube-bench
// reads back to show where the time of an operation goes.
type telemetry struct {
	poolMisses *prometheus.CounterVec
	phases     *prometheus.HistogramVec
}

func newTelemetry() *telemetry {
	return &telemetry{
		poolMisses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cube_warm_pool_misses_total",
			Help: "Creates that found the template's warm pool empty and restored cold.",
		}, []string{"template"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cube_operation_phase_seconds",
			Help:    "Time spent in each phase of a node operation (op: create, snapshot, restore, ...; phase: a step of it).",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10},
		}, []string{"op", "phase"}),
	}
}

// phase records that phase of op took since start, and returns now, the
// start of the next phase.
func (t *telemetry) phase(op, phase string, start time.Time) time.Time {
	now := time.Now()
	t.phases.WithLabelValues(op, phase).Observe(now.Sub(start).Seconds())
	return now
}

var (
	warmDesc     = prometheus.NewDesc("cube_warm_pool_sandboxes", "Warm sandboxes ready, by template.", []string{"template"}, nil)
	warmWantDesc = prometheus.NewDesc("cube_warm_pool_target", "Warm sandboxes the pool aims to hold now (grows with demand), by template.", []string{"template"}, nil)
	preparedDesc = prometheus.NewDesc("cube_prepared_containers", "Containers made ahead of cold restores, waiting.", nil, nil)
)

// Collectors are the node's Prometheus metrics, for the server to
// register.
func (n *Node) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.tel.poolMisses, n.tel.phases, poolCollector{n}}
}

// SandboxCollector reads each running sandbox's CPU and memory, in series
// labelled by sandbox ID. The API serves them only with a key: a sandbox's
// ID is enough to reach its public ports.
func (n *Node) SandboxCollector() prometheus.Collector { return &usageCollector{n: n} }

// poolCollector reads the pools' depths and the node's capacity at scrape
// time.
type poolCollector struct{ n *Node }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- warmDesc
	ch <- warmWantDesc
	ch <- preparedDesc
	ch <- capacityDesc
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.n
	ch <- prometheus.MustNewConstMetric(capacityDesc, prometheus.GaugeValue, float64(n.cfg.MaxSandboxes))
	now := time.Now()
	p := n.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	for tpl, list := range p.warm {
		ch <- prometheus.MustNewConstMetric(warmDesc, prometheus.GaugeValue, float64(len(list)), tpl)
		ch <- prometheus.MustNewConstMetric(warmWantDesc, prometheus.GaugeValue, float64(p.poolTarget(tpl, now)), tpl)
	}
	prepared := 0
	for _, list := range p.prepared {
		prepared += len(list)
	}
	ch <- prometheus.MustNewConstMetric(preparedDesc, prometheus.GaugeValue, float64(prepared))
}
