package template

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// buildDurations is how long template builds take from request to their
// end, by result (ready or failed). One histogram serves every Builder
// of the process; a server has one.
var buildDurations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "cube_template_build_duration_seconds",
	Help:    "Time from a template build's request to its end, by result (ready or failed).",
	Buckets: []float64{1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800},
}, []string{"result"})

// Collectors are the builder's Prometheus metrics, for the server to
// register.
func (b *Builder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{buildDurations}
}

// buildEnded records a build that was requested at since.
func buildEnded(since time.Time, err error) {
	result := "ready"
	if err != nil {
		result = "failed"
	}
	buildDurations.WithLabelValues(result).Observe(time.Since(since).Seconds())
}
