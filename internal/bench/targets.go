// How the measured numbers compare with the CubeSandbox targets.

package bench

import (
	"fmt"
	"math"
)

// measured is what both targets tables read from the results; NaN where
// the result file is missing.
type measured struct {
	createP50, createAvg, createP95 float64 // create c=1
	createCPU                       float64 // CPU ms per create+delete at c=1
	snapshot, slope                 float64 // idle snapshot; ms per 100 MB dirty
	cfs, rollback                   float64 // c=1
	clone1, clonePer10              float64 // n=1 wall; n=10 per clone
	pause, resume, resumeDisk       float64 // c=1
	density                         float64 // MiB per idle sandbox
	density50, density50PSS         float64 // MiB per idle sandbox of 50: used, runsc PSS
	snapRollback                    float64 // snapshot + rollback, c=1
}

func (p *page) measure() measured {
	rs := p.rs
	nan := math.NaN()
	m := measured{createP50: nan, createAvg: nan, createP95: nan, createCPU: nan, snapshot: nan, cfs: nan, rollback: nan,
		clone1: nan, clonePer10: nan, pause: nan, resume: nan, resumeDisk: nan, density: nan,
		density50: nan, density50PSS: nan, snapRollback: nan}
	if r := rs.create[1]; r != nil && r.Create.Count > 0 {
		m.createP50, m.createAvg, m.createP95 = r.Create.P50, r.Create.Avg, r.Create.P95
	}
	if r := rs.create[1]; r != nil && r.CPU != nil {
		m.createCPU = r.CPU.PerOpMS
	}
	if r := row(rs.snapshot[1], "snapshot"); r != nil {
		m.snapshot = r.Wall.Avg
	} else if r := row(rs.dirty[0], "snapshot"); r != nil {
		m.snapshot = r.Wall.Avg
	}
	m.slope = p.dirtySlope()
	if r := row(rs.cfs[1], "create-from-snapshot"); r != nil {
		m.cfs = r.Wall.Avg
	}
	if r := row(rs.rollback[1], "rollback"); r != nil {
		m.rollback = r.Wall.Avg
	}
	if r := row(rs.clone[1], "clone"); r != nil {
		m.clone1 = r.Wall.Avg
	}
	if r := row(rs.clone[10], "clone"); r != nil {
		m.clonePer10 = r.PerAvg
	}
	if r := row(rs.pause[1], "pause"); r != nil {
		m.pause = r.Wall.Avg
	}
	if r := row(rs.pause[1], opResume); r != nil {
		m.resume = r.Wall.Avg
	}
	if r := row(rs.pauseDisk[1], opResumeFromDisk); r != nil {
		m.resumeDisk = r.Wall.Avg
	}
	if d := rs.density; d != nil && len(d.Points) > 0 {
		m.density = d.Points[len(d.Points)-1].PerSandboxMB
	}
	if d := rs.densityAt[50]; d != nil && len(d.Points) > 0 {
		last := d.Points[len(d.Points)-1]
		m.density50, m.density50PSS = last.PerSandboxMB, last.PerSandboxPSSMB
	}
	if r := row(rs.rollback[1], "snapshot+rollback"); r != nil {
		m.snapRollback = r.Wall.Avg
	}
	return m
}

func (p *page) targets() {
	rs := p.rs
	m := p.measure()
	p.f("## Targets (issue 8)\n\n| target | measured | verdict |\n|---|---|---|\n")
	nan := math.NaN()
	get := func(c map[int]*CreateReport, k int, f func(*CreateReport) float64) float64 {
		if r := c[k]; r != nil && r.Create.Count > 0 {
			return f(r)
		}
		return nan
	}
	p50 := m.createP50
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
	p.f("| snapshot (idle) ≤ 40 ms | %s | %s |\n", f1(m.snapshot), verdict(m.snapshot, 40, "ms"))
	p.f("| snapshot growth ≤ 22 ms per 100 MB dirty | %s | %s |\n", f1(m.slope), verdict(m.slope, 22, "ms/100 MB"))
	p.f("| create-from-snapshot c=1 ≤ 67 ms | %s | %s |\n", f1(m.cfs), verdict(m.cfs, 67, "ms"))
	p.f("| rollback ≤ 90 ms | %s | %s |\n", f1(m.rollback), verdict(m.rollback, 90, "ms"))
	if r := row(rs.rollback[1], "snapshot+rollback"); r != nil {
		p.f("| snapshot + rollback (the report's flow) ≤ 90 ms | %s | %s |\n", f1(r.Wall.Avg), verdict(r.Wall.Avg, 90, "ms"))
	}
	p.f("| clone n=1 ≤ 200 ms | %s | %s |\n", f1(m.clone1), verdict(m.clone1, 200, "ms"))
	p.f("| clone n=10 c=5 ≤ 54 ms per clone | %s | %s |\n", f1(m.clonePer10), verdict(m.clonePer10, 54, "ms"))
	p.f("| pause ≤ 100 ms | %s | %s |\n", f1(m.pause), verdict(m.pause, 100, "ms"))
	p.f("| resume ≤ 20 ms | %s | %s |\n", f1(m.resume), verdict(m.resume, 20, "ms"))
	p.f("| ≤ 15 MiB host memory per idle sandbox | %s | %s |\n\n", f1(m.density), verdict(m.density, 15, "MiB"))
}

// Wave 2 of the speed work: the CPU of a create+delete cycle at c=1
// measured before it, which the wave is to halve, and CubeSandbox's
// sustained creates per core.
const (
	wave2CreateCPUBefore = 324.5
	cubeCreatesPerCore   = 3.6
)

// speedTargets is the table of the speed work's second wave.
func (p *page) speedTargets() {
	rs := p.rs
	m := p.measure()
	p.f("## Targets (speed, wave 2)\n\n| target | measured | verdict |\n|---|---|---|\n")
	p.f("| create c=1 n=20 sequential avg ≤ 40 ms | %s | %s |\n", f1(m.createAvg), verdict(m.createAvg, 40, "ms"))
	p.f("| create c=1 n=20 sequential P95 ≤ 80 ms | %s | %s |\n", f1(m.createP95), verdict(m.createP95, 80, "ms"))
	perCore, cell := math.NaN(), "—"
	if r := rs.create[10]; r != nil && r.Summary.Total > 0 && p.o.Machine.Cores > 0 {
		perCore = r.Summary.ThroughputQPS / float64(p.o.Machine.Cores)
		cell = fmt.Sprintf("%s (%.1f /s on %d cores, n=%d)", f1(perCore), r.Summary.ThroughputQPS, p.o.Machine.Cores, r.Summary.Total)
	}
	p.f("| sustained creates per core at c=10 n=200 ≥ 7 /s (CubeSandbox ≈ %.1f) | %s | %s |\n", cubeCreatesPerCore, cell, verdictAtLeast(perCore, 7, "/s per core"))
	cell = "—"
	if !math.IsNaN(m.createCPU) {
		cell = fmt.Sprintf("%s (%.2f× of %s)", f1(m.createCPU), m.createCPU/wave2CreateCPUBefore, f1(wave2CreateCPUBefore))
	}
	p.f("| CPU per create+delete cycle (create c=1) halved from %s ms | %s | %s |\n", f1(wave2CreateCPUBefore), cell, verdict(m.createCPU, 162.3, "ms"))
	p.f("| snapshot (idle) ≤ 40 ms | %s | %s |\n", f1(m.snapshot), verdict(m.snapshot, 40, "ms"))
	p.f("| snapshot growth ≤ 22 ms per 100 MB dirty | %s | %s |\n", f1(m.slope), verdict(m.slope, 22, "ms/100 MB"))
	p.f("| create-from-snapshot c=1 ≤ 67 ms | %s | %s |\n", f1(m.cfs), verdict(m.cfs, 67, "ms"))
	p.f("| rollback c=1 ≤ 90 ms | %s | %s |\n", f1(m.rollback), verdict(m.rollback, 90, "ms"))
	p.f("| clone n=1 ≤ 200 ms | %s | %s |\n", f1(m.clone1), verdict(m.clone1, 200, "ms"))
	p.f("| clone n=10 c=5 ≤ 54 ms per clone | %s | %s |\n", f1(m.clonePer10), verdict(m.clonePer10, 54, "ms"))
	p.f("| resume (in memory) c=1 ≤ 20 ms | %s | %s |\n", f1(m.resume), verdict(m.resume, 20, "ms"))
	p.f("| resume from disk c=1 ≤ 100 ms | %s | %s |\n", f1(m.resumeDisk), verdict(m.resumeDisk, 100, "ms"))
	p.f("| host memory per idle sandbox ≤ 30 MiB (first step) | %s | %s |\n", f1(m.density), verdict(m.density, 30, "MiB"))
	p.f("| host memory per idle sandbox ≤ 15 MiB (second step) | %s | %s |\n\n", f1(m.density), verdict(m.density, 15, "MiB"))
}

// wave3 is one row of the shared-memory wave's table: where Cube stood
// before it (make bench on main, 2 cores, systrap), CubeSandbox's published
// number, and the goal.
type wave3 struct {
	name, before, cube string
	goal               float64
	unit               string
	value              func(measured) float64
}

// wave3Rows are the rows of issue 28's table, in its order.
var wave3Rows = []wave3{
	{"memory per idle sandbox (20 sandboxes, used)", "67.4 MiB (75 PSS)", "30 (PVM) / 25 (bare metal)", 20, "MiB", func(m measured) float64 { return m.density }},
	{"memory per idle sandbox (50 sandboxes, used)", "—", "25 (bare metal, 1000 sandboxes)", 20, "MiB", func(m measured) float64 { return m.density50 }},
	{"memory per idle sandbox (50 sandboxes, runsc PSS)", "—", "—", 20, "MiB", func(m measured) float64 { return m.density50PSS }},
	{"snapshot of an idle sandbox", "180 ms", "41–50 ms", 40, "ms", func(m measured) float64 { return m.snapshot }},
	{"snapshot growth per 100 MB dirtied", "178 ms", "22–40 ms", 22, "ms", func(m measured) float64 { return m.slope }},
	{"create from a snapshot, c=1", "165 ms", "60–85 ms", 60, "ms", func(m measured) float64 { return m.cfs }},
	{"rollback, c=1", "302 ms", "82 ms", 80, "ms", func(m measured) float64 { return m.rollback }},
	{"snapshot + rollback, c=1", "513 ms", "90 ms", 120, "ms", func(m measured) float64 { return m.snapRollback }},
	{"clone n=1", "281 ms", "220–271 ms", 150, "ms", func(m measured) float64 { return m.clone1 }},
	{"clone n=10 c=5, per clone", "121 ms", "54 ms", 40, "ms", func(m measured) float64 { return m.clonePer10 }},
	{"resume of a pause written to disk", "234 ms", "42 ms", 60, "ms", func(m measured) float64 { return m.resumeDisk }},
	{"create c=1 P95", "87 ms", "57–78 ms", 60, "ms", func(m measured) float64 { return m.createP95 }},
	{"host CPU per create+delete", "293 ms", "—", 120, "ms", func(m measured) float64 { return m.createCPU }},
	{"create c=1 average (keep)", "41 ms", "—", 41, "ms", func(m measured) float64 { return m.createAvg }},
	{"pause (keep)", "2.6 ms", "—", 100, "ms", func(m measured) float64 { return m.pause }},
	{"resume in memory (keep)", "2.3 ms", "—", 20, "ms", func(m measured) float64 { return m.resume }},
}

// sharedMemoryTargets is the table of the speed work's third wave:
// sandboxes share their template's memory copy-on-write.
func (p *page) sharedMemoryTargets() {
	m := p.measure()
	p.f("## Targets (speed, wave 3: shared template memory)\n\n")
	p.f("*before* is `make bench` on main before sandboxes shared their template's memory.\n\n")
	p.f("| row | before | CubeSandbox | measured | verdict |\n|---|---|---|---|---|\n")
	for _, r := range wave3Rows {
		v := r.value(m)
		p.f("| %s | %s | %s | %s | %s |\n", r.name, r.before, r.cube, f1(v), verdict(v, r.goal, r.unit))
	}
	p.f("\n")
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
