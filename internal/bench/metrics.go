package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names the server exports on GET /metrics.
const (
	metricPhases     = "cube_operation_phase_seconds"
	metricPoolMisses = "cube_warm_pool_misses_total"
)

// PhaseStat is one phase of a server operation over a measured window:
// how many times it ran and its mean duration. It says where a latency
// goes (say, a create that restored a warm sandbox vs one that booted).
type PhaseStat struct {
	Op     string  `json:"op"`
	Phase  string  `json:"phase"`
	Count  int     `json:"count"`
	MeanMS float64 `json:"mean_ms"`
}

// phaseOrder lists each operation's phases in the order they run, so
// tables read top to bottom; phases not listed follow alphabetically.
var phaseOrder = map[string][]string{
	"launch":   {"warm-init", "restore", "init"},
	"restore":  {"verify", "into-prepared", "cold"},
	"prepare":  {"create"},
	"snapshot": {"checkpoint", "checksum", "fsync", "publish", "record"},
	"clone":    {"checkpoint"},
	// A pause freezes and records at once; its write-out to disk
	// (checkpoint, checksum, fsync) comes after --pause-write-delay.
	"pause":            {"freeze", "record", "checkpoint", "checksum", "fsync"},
	"resume":           {"thaw", "record"},
	"resume-from-disk": {"launch", "record"},
}

type opPhase struct{ op, phase string }

type histTotals struct {
	count uint64
	sum   float64 // seconds
}

// metricsSnapshot is the part of /metrics a benchmark compares before and
// after its measured rounds.
type metricsSnapshot struct {
	phases map[opPhase]histTotals // nil: the server exports no phases
	misses *float64               // nil: no warm-pool counter
}

// parseMetrics reads a Prometheus text exposition.
func parseMetrics(r io.Reader) (*metricsSnapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	s := &metricsSnapshot{}
	if f := fams[metricPhases]; f != nil && f.GetType() == dto.MetricType_HISTOGRAM {
		s.phases = map[opPhase]histTotals{}
		for _, m := range f.GetMetric() {
			k := opPhase{label(m, "op"), label(m, "phase")}
			h := m.GetHistogram()
			s.phases[k] = histTotals{count: h.GetSampleCount(), sum: h.GetSampleSum()}
		}
	}
	if f := fams[metricPoolMisses]; f != nil && f.GetType() == dto.MetricType_COUNTER {
		var total float64
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
		s.misses = &total
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// since returns what happened between before and s: each phase that ran
// (in phaseOrder) with its count and mean, and the warm-pool misses. A
// series absent before counts from zero (its labels appeared in between).
func (s *metricsSnapshot) since(before *metricsSnapshot) ([]PhaseStat, *int) {
	var out []PhaseStat
	if s.phases != nil && before.phases != nil {
		for k, a := range s.phases {
			b := before.phases[k]
			if a.count <= b.count {
				continue
			}
			n := a.count - b.count
			out = append(out, PhaseStat{Op: k.op, Phase: k.phase, Count: int(n), MeanMS: round3((a.sum - b.sum) * 1000 / float64(n))})
		}
		sortPhases(out)
	}
	var misses *int
	if s.misses != nil && before.misses != nil {
		d := int(*s.misses - *before.misses + 0.5)
		misses = &d
	}
	return out, misses
}

func sortPhases(ps []PhaseStat) {
	rank := func(p PhaseStat) int {
		for i, ph := range phaseOrder[p.Op] {
			if ph == p.Phase {
				return i
			}
		}
		return len(phaseOrder[p.Op])
	}
	sort.Slice(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.Op != b.Op {
			return a.Op < b.Op
		}
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		return a.Phase < b.Phase
	})
}

// scrapeMetrics reads the server's /metrics; nil when it cannot (an older
// server, a proxy in between): the benchmark then reports no phases.
func (c *Client) scrapeMetrics() *metricsSnapshot {
	if c.base == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.base, "/")+"/metrics", nil)
	if err != nil {
		return nil
	}
	resp, err := c.api.HTTP.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	s, err := parseMetrics(resp.Body)
	if err != nil || (s.phases == nil && s.misses == nil) {
		return nil
	}
	return s
}

// writePhases prints a window's phases under the CPU line.
func writePhases(w io.Writer, t Telemetry) {
	if len(t.Phases) > 0 {
		fmt.Fprintf(w, "%-10s %-14s %6s %9s\n", "op", "phase", "count", "mean_ms")
		for _, p := range t.Phases {
			fmt.Fprintf(w, "%-10s %-14s %6d %9.1f\n", p.Op, p.Phase, p.Count, p.MeanMS)
		}
	}
	if t.WarmPoolMisses != nil {
		fmt.Fprintf(w, "warm pool misses: %d\n", *t.WarmPoolMisses)
	}
}

// WriteTelemetry prints the CPU line and the phases of a run.
func WriteTelemetry(w io.Writer, t Telemetry) {
	fmt.Fprintln(w, cpuLine(t.CPU))
	writePhases(w, t)
}
