package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// statsHeader and statsRow lay out the latency table of the create
// benchmark; the column order is the original tool's.
const statsHeader = "%-10s %6s %9s %9s %9s %9s %9s %9s %9s %9s\n"

func writeStatsTable(w io.Writer, rows ...struct {
	name string
	s    Stats
}) {
	fmt.Fprintf(w, statsHeader, "ms", "count", "min", "avg", "std", "P50", "P90", "P95", "P99", "max")
	for _, r := range rows {
		if r.s.Count == 0 {
			fmt.Fprintf(w, "%-10s %6d %9s %9s %9s %9s %9s %9s %9s %9s\n", r.name, 0, "-", "-", "-", "-", "-", "-", "-", "-")
			continue
		}
		fmt.Fprintf(w, "%-10s %6d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", r.name, r.s.Count,
			r.s.Min, r.s.Avg, r.s.Std, r.s.P50, r.s.P90, r.s.P95, r.s.P99, r.s.Max)
	}
}

// WriteCreateText prints a create run the way an operator reads it: the
// outcome, the latency table, the first errors and a histogram.
func WriteCreateText(w io.Writer, rep *CreateReport) {
	cfg := rep.Config
	fmt.Fprintf(w, "cube-bench %s  template=%s  concurrency=%d  total=%d  warmup=%d\n",
		cfg.Mode, cfg.Template, cfg.Concurrency, cfg.Total, cfg.Warmup)
	s := rep.Summary
	fmt.Fprintf(w, "success %d/%d (%.1f%%)  failed %d  time %.2f s  throughput %.2f sandboxes/s\n",
		s.Successful, s.Total, s.SuccessRate, s.Failed, s.TotalTimeS, s.ThroughputQPS)
	if s.Partial {
		fmt.Fprintln(w, "interrupted: not every iteration ran")
	}
	fmt.Fprintln(w)
	rows := []struct {
		name string
		s    Stats
	}{{"create", rep.Create}}
	if cfg.Mode == ModeCreateDelete {
		rows = append(rows, struct {
			name string
			s    Stats
		}{"delete", rep.Delete})
	}
	writeStatsTable(w, rows...)
	if errs := s.TopErrors(5); len(errs) > 0 {
		fmt.Fprintln(w, "\nerrors:")
		for _, e := range errs {
			fmt.Fprintln(w, "  "+e)
		}
	}
	var creates []float64
	for _, r := range rep.Raw {
		if r.SandboxID != "" {
			creates = append(creates, r.CreateMS)
		}
	}
	if len(creates) > 0 {
		fmt.Fprintln(w, "\ncreate latency histogram (ms)")
		fmt.Fprint(w, Histogram(creates, 10, 40))
	}
	if len(rep.Kept) > 0 {
		fmt.Fprintf(w, "\n%d sandboxes left running (create-only)\n", len(rep.Kept))
	}
	fmt.Fprintln(w)
	WriteTelemetry(w, rep.Telemetry)
}

// Histogram draws xs as text: bins of equal width between min and max,
// each a bar scaled so the fullest bin is width characters long.
func Histogram(xs []float64, bins, width int) string {
	if len(xs) == 0 || bins < 1 || width < 1 {
		return ""
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo = math.Min(lo, x)
		hi = math.Max(hi, x)
	}
	if hi == lo {
		bins = 1
	}
	step := (hi - lo) / float64(bins)
	counts := make([]int, bins)
	for _, x := range xs {
		i := bins - 1
		if step > 0 {
			i = int((x - lo) / step)
		}
		if i >= bins {
			i = bins - 1
		}
		counts[i]++
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	var b strings.Builder
	for i, n := range counts {
		from := lo + float64(i)*step
		to := from + step
		if bins == 1 {
			to = hi
		}
		bar := int(math.Round(float64(n) / float64(most) * float64(width)))
		if n > 0 && bar == 0 {
			bar = 1
		}
		fmt.Fprintf(&b, "%9.1f – %9.1f | %-*s %d\n", from, to, width, strings.Repeat("█", bar), n)
	}
	return b.String()
}

func splitLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		out = append(out, strings.TrimSpace(l))
	}
	return out
}
