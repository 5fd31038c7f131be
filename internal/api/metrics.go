package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"cube/internal/cube"
)

type metrics struct {
	requests *prometheus.CounterVec
	errors   *prometheus.CounterVec
	create   *prometheus.HistogramVec
	ops      *prometheus.HistogramVec
	// handler serves everyone; keyed serves requests with an API key,
	// and adds the per-sandbox series.
	handler, keyed http.Handler
}

func newMetrics(reg *prometheus.Registry, perSandbox prometheus.Gatherer, b cube.Backend) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cube_http_requests_total",
			Help: "HTTP requests by route (method and pattern, proxy or unmatched) and status code.",
		}, []string{"route", "code"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cube_http_errors_total",
			Help: "HTTP answers with status 400 or above, by route and status code.",
		}, []string{"route", "code"}),
		create: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cube_sandbox_create_duration_seconds",
			Help:    "Time to answer a sandbox creation, by result (ok or error).",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"result"}),
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cube_sandbox_operation_duration_seconds",
			Help:    "Time to answer a successful sandbox lifecycle operation (op: pause, resume, connect, snapshot, clone, fork, rollback, kill).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"op"}),
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		keyed:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if perSandbox != nil {
		m.keyed = promhttp.HandlerFor(prometheus.Gatherers{reg, perSandbox}, promhttp.HandlerOpts{})
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.create, m.ops, &stateCollector{b: b}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// operations names the routes whose answer time is a lifecycle
// operation's, as cube_sandbox_operation_duration_seconds labels them.
var operations = map[string]string{
	"POST /sandboxes/{sandboxID}/pause":      "pause",
	"POST /sandboxes/{sandboxID}/resume":     "resume",
	"POST /sandboxes/{sandboxID}/connect":    "connect",
	"POST /v2/sandboxes/{sandboxID}/connect": "connect",
	"POST /sandboxes/{sandboxID}/snapshots":  "snapshot",
	"POST /sandboxes/{sandboxID}/clone":      "clone",
	"POST /sandboxes/{sandboxID}/fork":       "fork",
	"POST /sandboxes/{sandboxID}/rollback":   "rollback",
	"DELETE /sandboxes/{sandboxID}":          "kill",
}

func (m *metrics) request(route string, status int, d time.Duration) {
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(route, code).Inc()
	if status >= 400 {
		m.errors.WithLabelValues(route, code).Inc()
	} else if op, ok := operations[route]; ok {
		m.ops.WithLabelValues(op).Observe(d.Seconds())
	}
}

func (m *metrics) created(d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.create.WithLabelValues(result).Observe(d.Seconds())
}

var sandboxesDesc = prometheus.NewDesc("cube_sandboxes", "Sandboxes by state.", []string{"state"}, nil)

// stateCollector asks the backend for its counts at scrape time, so the
// gauge can never drift from what the node holds.
type stateCollector struct{ b cube.Backend }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.b.CountSandboxes(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sandboxesDesc, err)
		return
	}
	for _, st := range []cube.SandboxState{cube.StateRunning, cube.StatePaused} {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	for st, n := range counts {
		if st != cube.StateRunning && st != cube.StatePaused {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), string(st))
		}
	}
}

// promMetrics serves the Prometheus metrics: to anyone, without the
// per-sandbox series; to a request with an API key, with them.
func (s *Server) promMetrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorized(r); ok {
		s.metrics.keyed.ServeHTTP(w, r)
		return
	}
	s.metrics.handler.ServeHTTP(w, r)
}
