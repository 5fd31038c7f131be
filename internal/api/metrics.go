package api

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

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
		handler: promhttp.HandlerFor(summed{reg, privateLabels}, promhttp.HandlerOpts{}),
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
// per-sandbox series and with the per-template ones summed (summed); to a
// request with the admin key, all of them (they name every team's
// sandboxes and templates).
func (s *Server) promMetrics(w http.ResponseWriter, r *http.Request) error {
	if c, err := s.authenticate(r); err == nil && c.Admin {
		s.metrics.keyed.ServeHTTP(w, r)
		return nil
	}
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// privateLabels are the labels whose values a scrape without the API key
// does not see: they name templates and snapshots (the warm pools are by
// template, and a snapshot is a template), whose IDs start sandboxes, and
// sandboxes, should a series on the public registry ever carry one.
var privateLabels = []string{"template", "snapshot", "sandbox"}

// summed gathers g with the labels drop summed away: each family that
// carries one keeps a series per combination of its other labels, so the
// public exposition stays bounded and names no template however many
// there are.
type summed struct {
	g    prometheus.Gatherer
	drop []string
}

func (s summed) Gather() ([]*dto.MetricFamily, error) {
	fams, err := s.g.Gather()
	for _, f := range fams {
		f.Metric = sumWithout(f.GetType(), f.Metric, s.drop)
	}
	return fams, err
}

// sumWithout merges the metrics that differ only in the labels drop, into
// new metrics: the gathered ones may share their labels with the
// registry's own. Counters, gauges and untyped values add up; histograms
// add their counts, sums and buckets (one family's buckets are the same);
// summaries keep their count and sum, since quantiles do not add.
func sumWithout(typ dto.MetricType, ms []*dto.Metric, drop []string) []*dto.Metric {
	dropped := func(l *dto.LabelPair) bool { return slices.Contains(drop, l.GetName()) }
	if !slices.ContainsFunc(ms, func(m *dto.Metric) bool { return slices.ContainsFunc(m.Label, dropped) }) {
		return ms
	}
	var out []*dto.Metric
	byKey := map[string]*dto.Metric{}
	for _, m := range ms {
		var labels []*dto.LabelPair
		var key strings.Builder
		for _, l := range m.Label {
			if !dropped(l) {
				labels = append(labels, l)
				key.WriteString(l.GetName() + "\x00" + l.GetValue() + "\x00")
			}
		}
		into := byKey[key.String()]
		if into == nil {
			into = zeroMetric(typ, m, labels)
			byKey[key.String()] = into
			out = append(out, into)
		}
		addMetric(typ, into, m)
	}
	return out
}

// zeroMetric is a metric of typ with labels and nothing counted, shaped
// like m (a histogram's buckets).
func zeroMetric(typ dto.MetricType, m *dto.Metric, labels []*dto.LabelPair) *dto.Metric {
	zero := func() *float64 { return new(float64) }
	out := &dto.Metric{Label: labels}
	switch typ {
	case dto.MetricType_COUNTER:
		out.Counter = &dto.Counter{Value: zero()}
	case dto.MetricType_GAUGE:
		out.Gauge = &dto.Gauge{Value: zero()}
	case dto.MetricType_UNTYPED:
		out.Untyped = &dto.Untyped{Value: zero()}
	case dto.MetricType_SUMMARY:
		out.Summary = &dto.Summary{SampleCount: new(uint64), SampleSum: zero()}
	case dto.MetricType_HISTOGRAM:
		out.Histogram = &dto.Histogram{SampleCount: new(uint64), SampleSum: zero()}
		for _, b := range m.GetHistogram().GetBucket() {
			out.Histogram.Bucket = append(out.Histogram.Bucket, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: new(uint64)})
		}
	}
	return out
}

func addMetric(typ dto.MetricType, into, m *dto.Metric) {
	add := func(a *float64, b float64) { *a += b }
	addU := func(a *uint64, b uint64) { *a += b }
	switch typ {
	case dto.MetricType_COUNTER:
		add(into.Counter.Value, m.GetCounter().GetValue())
	case dto.MetricType_GAUGE:
		add(into.Gauge.Value, m.GetGauge().GetValue())
	case dto.MetricType_UNTYPED:
		add(into.Untyped.Value, m.GetUntyped().GetValue())
	case dto.MetricType_SUMMARY:
		addU(into.Summary.SampleCount, m.GetSummary().GetSampleCount())
		add(into.Summary.SampleSum, m.GetSummary().GetSampleSum())
	case dto.MetricType_HISTOGRAM:
		h, o := into.Histogram, m.GetHistogram()
		addU(h.SampleCount, o.GetSampleCount())
		add(h.SampleSum, o.GetSampleSum())
		for i, b := range h.Bucket {
			if i < len(o.Bucket) && o.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				addU(b.CumulativeCount, o.Bucket[i].GetCumulativeCount())
			}
		}
	}
}
