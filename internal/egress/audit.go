package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
// never holds a body, a query string or a header value, and its fields
// are bounded (MaxEventBytes).
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

// Bounds of an Event's fields, which the sandbox chooses (a Host header,
// a path, an SNI), so that every event is a short line whatever it sends:
// a Host of 64 KiB, repeated in a reason, would otherwise make a 130 KB
// line of the sandbox's log, and a queue of events half a gigabyte. A
// longer field is cut and ends with the truncated mark; a list of header
// names ends with how many were left out. Owner comes from the node and
// is kept whole.
const (
	maxEventName    = 256 // a DNS name has at most 253 bytes
	maxEventPath    = 1 << 10
	maxEventMethod  = 32
	maxEventRule    = 256     // a rules key is a name too
	maxEventHeaders = 1 << 10 // the header names a rule set, together
	maxEventReason  = 1 << 10
	// MaxEventBytes bounds Event.String of every event the Filter hands
	// to Config.Audit, and so the line it makes in a log and what a queue
	// of events holds (apart from each Event's own few words).
	MaxEventBytes = 4 << 10
)

// truncated ends a field that was cut.
const truncated = "…(truncated)"

// bounded is e with every field the sandbox chooses cut to its bound.
// Every string is a copy: a short path or method may be a slice of a
// request line of 64 KiB, which a queued event would otherwise keep.
func (e Event) bounded() Event {
	e.Owner = strings.Clone(e.Owner)
	e.Name = clip(e.Name, maxEventName)
	e.Method = clip(e.Method, maxEventMethod)
	e.Path = clip(e.Path, maxEventPath)
	e.Rule = clip(e.Rule, maxEventRule)
	e.Headers = clipNames(e.Headers, maxEventHeaders)
	e.Reason = clip(e.Reason, maxEventReason)
	return e
}

// clip copies s, cut to at most n bytes (the truncated mark included) on
// a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return strings.Clone(s)
	}
	cut := n - len(truncated)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncated
}

// clipNames copies names, each cut as a host name is, keeping as many as
// fit in n bytes joined by commas; the last then says how many were left
// out.
func clipNames(names []string, n int) []string {
	if names == nil {
		return nil
	}
	out := make([]string, 0, min(len(names), 64))
	used := 0
	// Room kept for the count of those left out, if any are.
	room := len(",…(+ more)") + len(fmt.Sprint(len(names)))
	for i, name := range names {
		name = clip(name, maxEventName)
		need := used + len(name)
		if i > 0 {
			need++ // the comma before it
		}
		if i < len(names)-1 && need+room > n || need > n {
			out = append(out, fmt.Sprintf("…(+%d more)", len(names)-i))
			break
		}
		out = append(out, name)
		used = need
	}
	return out
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
	e = e.bounded()
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

// Events is a bounded queue of audit events between the Filter and what
// logs them. It is made before both, so that each is given it at
// construction: the node that logs the events holds the Filter too, and
// neither has to be reached through the other. Add never blocks, so a
// sandbox making requests in a loop never slows the Filter down; what does
// not fit is counted and dropped.
type Events struct {
	ch      chan Event
	dropped atomic.Int64
}

// DefaultEvents is the size of a queue made with size 0: events are at
// most MaxEventBytes, so a full queue holds some 16 MiB.
const DefaultEvents = 4096

// NewEvents makes a queue of size events (0: DefaultEvents).
func NewEvents(size int) *Events {
	if size <= 0 {
		size = DefaultEvents
	}
	return &Events{ch: make(chan Event, size)}
}

// Add queues e, or counts it dropped when the queue is full.
func (q *Events) Add(e Event) {
	select {
	case q.ch <- e:
	default:
		q.dropped.Add(1)
	}
}

// C delivers the queued events, oldest first.
func (q *Events) C() <-chan Event { return q.ch }

// Dropped returns how many events did not fit since it was last asked.
func (q *Events) Dropped() int64 { return q.dropped.Swap(0) }
