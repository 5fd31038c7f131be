package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Decision is what the Filter did with a request or connection.
type Decision string

const (
	Allowed     Decision = "allowed"     // passed on unchanged (TLS end to end)
	Denied      Decision = "denied"      // refused by the policy
	Transformed Decision = "transformed" // a rule changed its headers
	Failed      Decision = "failed"      // allowed, but the destination could not be reached or verified
)

// Event is one audit record: a web connection the Filter judged, or one
// HTTP request it read (plain HTTP, or HTTPS to a host with rules). It
// never holds a body, a query string or a header value.
type Event struct {
	Time     time.Time
	Owner    string // Policy.Owner: the sandbox
	Decision Decision
	// Name is the SNI or Host; Dest the address connected to (or the one
	// the sandbox dialled, when denied).
	Name string
	Dest netip.AddrPort
	// Method, Path (without the query) and Status are set for requests.
	Method string
	Path   string
	Status int
	// Rule is the rules key that matched, and Headers the names it set.
	Rule    string
	Headers []string
	// BytesOut went to the destination, BytesIn came back.
	BytesOut, BytesIn int64
	Reason            string
}

// String is the event as one log line.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "egress %s", e.Decision)
	if e.Method != "" {
		fmt.Fprintf(&b, " %s %s%s", e.Method, e.Name, e.Path)
		if e.Status != 0 {
			fmt.Fprintf(&b, " -> %d", e.Status)
		}
	} else if e.Name != "" {
		fmt.Fprintf(&b, " %s", e.Name)
	}
	if e.Dest.IsValid() {
		fmt.Fprintf(&b, " (%s)", e.Dest)
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, " rule %s", e.Rule)
		if len(e.Headers) > 0 {
			fmt.Fprintf(&b, " set %s", strings.Join(e.Headers, ","))
		}
	}
	if e.BytesOut+e.BytesIn > 0 {
		fmt.Fprintf(&b, " out %dB in %dB", e.BytesOut, e.BytesIn)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
	}
	return b.String()
}

// metrics counts the Filter's decisions for Prometheus, by kind and
// decision only: per-sandbox or per-host labels would grow without bound.
type metrics struct {
	requests *prometheus.CounterVec
	bytes    *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cube_egress_requests_total",
			Help: "Web connections (kind tls or http) and intercepted HTTP requests (kind request) the egress filter judged, by decision.",
		}, []string{"kind", "decision"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cube_egress_bytes_total",
			Help: "Bytes through the egress filter, by direction (out to the destination, in from it).",
		}, []string{"direction"}),
	}
}

// Collectors are the Filter's Prometheus metrics, for the server's
// registry.
func (f *Filter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{f.metrics.requests, f.metrics.bytes}
}

// record counts e and hands it to the configured audit sink.
func (f *Filter) record(kind string, e Event) {
	e.Time = time.Now()
	f.metrics.requests.WithLabelValues(kind, string(e.Decision)).Inc()
	if e.BytesOut > 0 {
		f.metrics.bytes.WithLabelValues("out").Add(float64(e.BytesOut))
	}
	if e.BytesIn > 0 {
		f.metrics.bytes.WithLabelValues("in").Add(float64(e.BytesIn))
	}
	if f.cfg.Audit != nil {
		f.cfg.Audit(e)
	}
}
