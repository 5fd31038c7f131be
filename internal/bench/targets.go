// How the measured numbers compare with the CubeSandbox targets.

package bench

import "math"

func (p *page) targets() {
	rs := p.rs
	p.f("## Targets (issue 8)\n\n| target | measured | verdict |\n|---|---|---|\n")
	nan := math.NaN()
	get := func(c map[int]*CreateReport, k int, f func(*CreateReport) float64) float64 {
		if r := c[k]; r != nil && r.Create.Count > 0 {
			return f(r)
		}
		return nan
	}
	p50 := get(rs.create, 1, func(r *CreateReport) float64 { return r.Create.P50 })
	p.f("| create c=1 P50 ≤ 60 ms | %s | %s |\n", f1(p50), verdict(p50, 60, "ms"))
	if b := rs.baseline[1]; b != nil && !math.IsNaN(p50) {
		run := baseOp(b, "run")
		if s, ok := b.Ops["run"]; ok {
			run = s.P50
		}
		p.f("| create c=1 P50 ≤ 0.25 × raw runsc run (P50 %s) | %.2f× | %s |\n", f1(run), p50/run, verdict(p50/run, 0.25, "×"))
	}
	for _, c := range []struct {
		c     int
		limit float64
	}{{10, 171}, {20, 365}} {
		avg := get(rs.create, c.c, func(r *CreateReport) float64 { return r.Create.Avg })
		p.f("| create c=%d avg ≤ %.0f ms | %s | %s |\n", c.c, c.limit, f1(avg), verdict(avg, c.limit, "ms"))
		if r := rs.create[c.c]; r != nil {
			ok := "✅"
			if r.Summary.SuccessRate < 100 {
				ok = "❌"
			}
			p.f("| create c=%d success 100 %% | %.1f %% (%d/%d) | %s |\n", c.c, r.Summary.SuccessRate, r.Summary.Successful, r.Summary.Total, ok)
		}
	}
	snap := nan
	if r := row(rs.snapshot[1], "snapshot"); r != nil {
		snap = r.Wall.Avg
	} else if r := row(rs.dirty[0], "snapshot"); r != nil {
		snap = r.Wall.Avg
	}
	p.f("| snapshot (idle) ≤ 40 ms | %s | %s |\n", f1(snap), verdict(snap, 40, "ms"))
	slope := p.dirtySlope()
	p.f("| snapshot growth ≤ 22 ms per 100 MB dirty | %s | %s |\n", f1(slope), verdict(slope, 22, "ms/100 MB"))
	cfs := nan
	if r := row(rs.cfs[1], "create-from-snapshot"); r != nil {
		cfs = r.Wall.Avg
	}
	p.f("| create-from-snapshot c=1 ≤ 67 ms | %s | %s |\n", f1(cfs), verdict(cfs, 67, "ms"))
	rb := nan
	if r := row(rs.rollback[1], "rollback"); r != nil {
		rb = r.Wall.Avg
	}
	p.f("| rollback ≤ 90 ms | %s | %s |\n", f1(rb), verdict(rb, 90, "ms"))
	if r := row(rs.rollback[1], "snapshot+rollback"); r != nil {
		p.f("| snapshot + rollback (the report's flow) ≤ 90 ms | %s | %s |\n", f1(r.Wall.Avg), verdict(r.Wall.Avg, 90, "ms"))
	}
	c1, c10 := nan, nan
	if r := row(rs.clone[1], "clone"); r != nil {
		c1 = r.Wall.Avg
	}
	if r := row(rs.clone[10], "clone"); r != nil {
		c10 = r.PerAvg
	}
	p.f("| clone n=1 ≤ 200 ms | %s | %s |\n", f1(c1), verdict(c1, 200, "ms"))
	p.f("| clone n=10 c=5 ≤ 54 ms per clone | %s | %s |\n", f1(c10), verdict(c10, 54, "ms"))
	pa, re := nan, nan
	if r := row(rs.pause[1], "pause"); r != nil {
		pa = r.Wall.Avg
	}
	if r := row(rs.pause[1], "resume"); r != nil {
		re = r.Wall.Avg
	}
	p.f("| pause ≤ 100 ms | %s | %s |\n", f1(pa), verdict(pa, 100, "ms"))
	p.f("| resume ≤ 20 ms | %s | %s |\n", f1(re), verdict(re, 20, "ms"))
	dens := nan
	if d := rs.density; d != nil && len(d.Points) > 0 {
		dens = d.Points[len(d.Points)-1].PerSandboxMB
	}
	p.f("| ≤ 15 MiB host memory per idle sandbox | %s | %s |\n\n", f1(dens), verdict(dens, 15, "MiB"))
}

// dirtySlope fits snapshot time against dirty MB (least squares) and
// returns ms per 100 MB.
func (p *page) dirtySlope() float64 {
	var xs, ys []float64
	for _, d := range sortedKeys(p.rs.dirty) {
		if r := row(p.rs.dirty[d], "snapshot"); r != nil {
			xs = append(xs, float64(d))
			ys = append(ys, r.Wall.Avg)
		}
	}
	return slope(xs, ys) * 100
}

// slope is the least-squares slope of ys over xs (NaN with fewer than two
// distinct xs).
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	if len(xs) < 2 {
		return math.NaN()
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / den
}
