package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Published holds the CubeSandbox report's numbers (16-core AMD EPYC 9K65
// KVM guest with a PVM kernel, 2 vCPU / 2 GiB sandboxes). Keys are the
// concurrency (or clone count, or dirty MB).
var Published = struct {
	CreateAvg                    map[int]float64
	CreateMin, CreateP95         float64
	CreateP99C20                 float64
	DensityMB                    float64
	SnapshotWall, SnapshotPer    map[int]float64
	DirtyBase, DirtyPer100       float64
	DirtyAt1024                  float64
	DirtyCreateLo, DirtyCreateHi float64
	CFSWall, CFSPer              map[int]float64
	RollbackWall, RollbackPer    map[int]float64
	CloneWall, ClonePer          map[int]float64
	CloneConc                    map[int]int
	PauseWall, PausePer          map[int]float64
	ResumeWall, ResumePer        map[int]float64
}{
	CreateAvg: map[int]float64{1: 67, 10: 171, 20: 365},
	CreateMin: 55.9, CreateP95: 78.2, CreateP99C20: 674,
	DensityMB:    30,
	SnapshotWall: map[int]float64{1: 41, 5: 58, 10: 114},
	SnapshotPer:  map[int]float64{1: 41, 5: 11.6, 10: 11.4},
	DirtyBase:    42, DirtyPer100: 22, DirtyAt1024: 258,
	DirtyCreateLo: 54, DirtyCreateHi: 83,
	CFSWall:      map[int]float64{1: 67, 10: 388, 20: 701},
	CFSPer:       map[int]float64{1: 67, 10: 38.8, 20: 35.1},
	RollbackWall: map[int]float64{1: 90, 5: 326, 10: 821},
	RollbackPer:  map[int]float64{1: 90, 5: 65, 10: 82},
	CloneWall:    map[int]float64{1: 271, 10: 542, 20: 790},
	ClonePer:     map[int]float64{1: 271, 10: 54, 20: 40},
	CloneConc:    map[int]int{1: 1, 10: 5, 20: 10},
	PauseWall:    map[int]float64{1: 371, 10: 1586},
	PausePer:     map[int]float64{1: 371, 10: 158.6},
	ResumeWall:   map[int]float64{1: 19, 10: 27},
	ResumePer:    map[int]float64{1: 19, 10: 2.7},
}

// resultSet is everything scripts/bench.sh left in the results directory.
type resultSet struct {
	dir       string
	create    map[int]*CreateReport
	baseline  map[int]*BaselineReport // raw runsc at concurrency c, idle
	baseDirty map[int]*BaselineReport // raw runsc at c=1 with d MB
	density   *DensityReport
	snapshot  map[int]*OpReport
	dirty     map[int]*OpReport
	cfs       map[int]*OpReport
	rollback  map[int]*OpReport
	clone     map[int]*OpReport
	pause     map[int]*OpReport
	failures  map[string]string // result name → error text
}

var numbered = regexp.MustCompile(`^([a-z-]+)-([a-z])(\d+)\.(json|err)$`)

func loadResults(dir string) (*resultSet, error) {
	rs := &resultSet{dir: dir,
		create: map[int]*CreateReport{}, baseline: map[int]*BaselineReport{}, baseDirty: map[int]*BaselineReport{},
		snapshot: map[int]*OpReport{}, dirty: map[int]*OpReport{}, cfs: map[int]*OpReport{},
		rollback: map[int]*OpReport{}, clone: map[int]*OpReport{}, pause: map[int]*OpReport{},
		failures: map[string]string{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		name := e.Name()
		path := filepath.Join(dir, name)
		if strings.HasSuffix(name, ".err") {
			b, _ := os.ReadFile(path)
			rs.failures[strings.TrimSuffix(name, ".err")] = strings.TrimSpace(string(b))
			continue
		}
		if name == "density.json" {
			rs.density = &DensityReport{}
			if err := readJSON(path, rs.density); err != nil {
				return nil, err
			}
			continue
		}
		m := numbered.FindStringSubmatch(name)
		if m == nil || m[4] != "json" {
			continue
		}
		n, _ := strconv.Atoi(m[3])
		var target any
		switch m[1] + "-" + m[2] {
		case "create-c":
			target = newEntry(rs.create, n)
		case "baseline-c":
			target = newEntry(rs.baseline, n)
		case "baseline-d":
			target = newEntry(rs.baseDirty, n)
		case "snapshot-c":
			target = newEntry(rs.snapshot, n)
		case "dirty-d":
			target = newEntry(rs.dirty, n)
		case "cfs-c":
			target = newEntry(rs.cfs, n)
		case "rollback-c":
			target = newEntry(rs.rollback, n)
		case "clone-n":
			target = newEntry(rs.clone, n)
		case "pause-resume-c":
			target = newEntry(rs.pause, n)
		default:
			continue
		}
		if err := readJSON(path, target); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// newEntry puts a fresh report at m[n] and returns it for decoding, so each
// kind of result file names only the map it fills.
func newEntry[T any](m map[int]*T, n int) *T {
	r := new(T)
	m[n] = r
	return r
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func sortedKeys[V any](m map[int]V) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

func row(op *OpReport, name string) *OpRow {
	if op == nil {
		return nil
	}
	for i := range op.Rows {
		if op.Rows[i].Op == name {
			return &op.Rows[i]
		}
	}
	return nil
}

// f1 formats a number of milliseconds (or MB) for a table; NaN is "—".
func f1(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func pub(m map[int]float64, k int) string {
	if v, ok := m[k]; ok {
		return f1(v)
	}
	return "—"
}

func baseOp(b *BaselineReport, op string) float64 {
	if b == nil {
		return math.NaN()
	}
	if s, ok := b.Ops[op]; ok && s.Count > 0 {
		return s.Avg
	}
	return math.NaN()
}

// verdict compares a measured value with an upper bound.
func verdict(v, limit float64, unit string) string {
	if math.IsNaN(v) {
		return "not measured"
	}
	f := f1
	if limit < 1 {
		f = func(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }
	}
	if v <= limit {
		return fmt.Sprintf("✅ %s %s ≤ %s", f(v), unit, f(limit))
	}
	return fmt.Sprintf("❌ %s %s > %s (over by %s, %.1f×)", f(v), unit, f(limit), f(v-limit), v/limit)
}

// Machine describes the host the benchmarks ran on.
type Machine struct {
	CPU, Kernel, OS, Runsc string
	Cores                  int
	MemGiB                 float64
	KVM                    bool
}

// DescribeMachine reads the host's description from /proc and uname.
func DescribeMachine(runsc string) Machine {
	m := Machine{Cores: runtime.NumCPU()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if mi, err := ReadMemInfo(); err == nil {
		m.MemGiB = float64(mi.Total) / (1 << 20)
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	_, err := os.Stat("/dev/kvm")
	m.KVM = err == nil
	if runsc != "" {
		if out, err := exec.Command(runsc, "--version").Output(); err == nil {
			m.Runsc = strings.SplitN(strings.TrimSpace(string(out)), "\n", 2)[0]
		}
	}
	return m
}

// ReportOptions configures WriteReport.
type ReportOptions struct {
	// Dir holds the JSON results, commands.txt, notes.md; charts go there.
	Dir string
	// ChartPath is how the Markdown refers to Dir (relative to the page).
	ChartPath string
	Machine   Machine
	Now       time.Time
	Commit    string
}

// WriteReport writes docs/BENCHMARKS.md from the results directory and
// draws its charts into the same directory.
func WriteReport(w io.Writer, o ReportOptions) error {
	rs, err := loadResults(o.Dir)
	if err != nil {
		return err
	}
	p := &page{w: w, rs: rs, o: o}
	p.header()
	p.targets()
	p.commands()
	p.createSection()
	p.densitySection()
	p.snapshotSection()
	p.dirtySection()
	p.cfsSection()
	p.rollbackSection()
	p.cloneSection()
	p.pauseSection()
	p.notes()
	return p.err
}

type page struct {
	w   io.Writer
	rs  *resultSet
	o   ReportOptions
	err error
}

func (p *page) f(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

func (p *page) failure(prefix string) {
	var names []string
	for n := range p.rs.failures {
		if strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p.f("\n> **%s did not run:** %s\n", n, oneLine(p.rs.failures[n]))
	}
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		// The last line of a command's output is its error.
		s = s[i+1:]
	}
	return strings.ReplaceAll(s, "|", "\\|")
}

func (p *page) chart(name string, ch Chart) {
	if ch.Validate() != nil {
		return
	}
	path := filepath.Join(p.o.Dir, name)
	f, err := os.Create(path)
	if err != nil {
		p.err = err
		return
	}
	if err := ch.WritePNG(f); err != nil {
		f.Close()
		p.err = err
		return
	}
	if err := f.Close(); err != nil {
		p.err = err
		return
	}
	p.f("\n![%s](%s)\n", ch.Title, filepath.ToSlash(filepath.Join(p.o.ChartPath, name)))
}

func (p *page) header() {
	m := p.o.Machine
	p.f("# Benchmarks\n\n")
	p.f("Generated by `make bench` (`scripts/bench.sh`) on %s", p.o.Now.UTC().Format("2006-01-02 15:04 UTC"))
	if p.o.Commit != "" {
		p.f(" at commit `%s`", p.o.Commit)
	}
	p.f(". Do not edit by hand: the numbers come from the JSON files in `%s`, and the\n", p.o.ChartPath)
	p.f("analysis comes from `%s/notes.md`. Every number of a table comes from the same run as its raw\n", p.o.ChartPath)
	p.f("gVisor baseline. Times are milliseconds; *wall* is the time of a whole batch of\n")
	p.f("concurrent operations (first request sent → last answer received), *per* is wall ÷ batch size.\n\n")
	p.f("## Machine\n\n| | |\n|---|---|\n")
	p.f("| CPU | %s |\n| cores (nproc) | %d |\n| memory | %.1f GiB |\n| kernel | %s |\n| OS | %s |\n| KVM | %s |\n",
		orDash(m.CPU), m.Cores, m.MemGiB, orDash(m.Kernel), orDash(m.OS), map[bool]string{true: "available (unused: gVisor systrap)", false: "none (gVisor systrap)"}[m.KVM])
	if m.Runsc != "" {
		p.f("| runsc | %s |\n", m.Runsc)
	}
	p.f("\nCubeSandbox's published numbers (the *published* columns) come from a Tencent Cloud\n")
	p.f("SA9.4XLARGE32: 16-core AMD EPYC 9K65, 32 GiB, a KVM guest with a PVM kernel, 2 vCPU / 2 GiB\n")
	p.f("sandboxes. This machine has %d cores and Cube does not use KVM here (gVisor systrap), so the\n", m.Cores)
	p.f("comparison is deliberately unfavourable.\n\n")
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func (p *page) commands() {
	data, err := os.ReadFile(filepath.Join(p.o.Dir, "commands.txt"))
	if err != nil {
		return
	}
	p.f("## Commands\n\nExactly what `scripts/bench.sh` ran, in order (counts are scaled down from the\n")
	p.f("report's where noted there, so the whole run fits a 2-core machine):\n\n```sh\n%s\n```\n\n", strings.TrimSpace(string(data)))
}

func (p *page) notes() {
	data, err := os.ReadFile(filepath.Join(p.o.Dir, "notes.md"))
	if err != nil {
		return
	}
	p.f("\n## Notes\n\n%s\n", strings.TrimSpace(string(data)))
}

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

func (p *page) createSection() {
	rs := p.rs
	p.f("## 1. Create from a template (report §3.2)\n\n")
	p.f("`POST /sandboxes` round trip (the server answers when the sandbox's agent answers), then\n")
	p.f("`DELETE`. Raw runsc: `runsc run` of the same rootfs until a python3 workload prints, at the\n")
	p.f("same concurrency.\n\n")
	p.f("| c | n | success | avg | std | P50 | P90 | P95 | P99 | min | max | delete avg | throughput /s | raw runsc run avg | raw P50 | published avg |\n")
	p.f("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range sortedKeys(rs.create) {
		r := rs.create[c]
		s := r.Create
		b := rs.baseline[c]
		bp50 := math.NaN()
		if b != nil {
			if st, ok := b.Ops["run"]; ok {
				bp50 = st.P50
			}
		}
		del := "—"
		if r.Delete.Count > 0 {
			del = f1(r.Delete.Avg)
		}
		p.f("| %d | %d | %.1f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s |\n",
			c, r.Summary.Total, r.Summary.SuccessRate, f1(s.Avg), f1(s.Std), f1(s.P50), f1(s.P90), f1(s.P95), f1(s.P99),
			f1(s.Min), f1(s.Max), del, r.Summary.ThroughputQPS, f1(baseOp(b, "run")), f1(bp50), pub(Published.CreateAvg, c))
	}
	p.f("\nPublished detail: c=1 min %.1f, P95 %.1f; c=20 P99 %.0f.\n", Published.CreateMin, Published.CreateP95, Published.CreateP99C20)
	p.failure("create-")
	var cube, raw Series
	cube.Name, raw.Name = "Cube create avg", "raw runsc run avg"
	for _, c := range sortedKeys(rs.create) {
		if rs.create[c].Create.Count > 0 {
			cube.X = append(cube.X, float64(c))
			cube.Y = append(cube.Y, rs.create[c].Create.Avg)
		}
		if v := baseOp(rs.baseline[c], "run"); !math.IsNaN(v) {
			raw.X = append(raw.X, float64(c))
			raw.Y = append(raw.Y, v)
		}
	}
	pubS := publishedSeries("CubeSandbox published avg", Published.CreateAvg)
	p.chart("create-concurrency.png", Chart{Title: "Create latency vs concurrency", XLabel: "concurrency", YLabel: "avg latency (ms)", Series: nonEmptySeries(cube, raw, pubS)})
	p.f("\n")
}

// publishedSeries is the dashed line of a published table, in key order;
// every chart draws the report's numbers the same way.
func publishedSeries(name string, m map[int]float64) Series {
	s := Series{Name: name, Dashed: true}
	for _, k := range sortedKeys(m) {
		s.X = append(s.X, float64(k))
		s.Y = append(s.Y, m[k])
	}
	return s
}

func nonEmptySeries(ss ...Series) []Series {
	var out []Series
	for _, s := range ss {
		if len(s.X) > 0 {
			out = append(out, s)
		}
	}
	return out
}

func (p *page) densitySection() {
	p.f("## 2. Density: host memory per idle sandbox (report §3.3)\n\n")
	p.f("Host memory before and after starting idle sandboxes in batches (create-only), divided by\n")
	p.f("the number of sandboxes. *used* is MemTotal − MemAvailable (what `free` shows as used);\n")
	p.f("*PSS* sums the proportional set size of the server's runsc processes.\n\n")
	d := p.rs.density
	if d != nil {
		p.f("| sandboxes | used MB | per sandbox MB (used) | per sandbox MB (runsc PSS) | runsc processes |\n|---|---|---|---|---|\n")
		p.f("| 0 | %s | — | — | %d |\n", f1(d.Baseline.UsedMB), d.Baseline.RunscProcs)
		for _, pt := range d.Points {
			p.f("| %d | %s | %s | %s | %d |\n", pt.Sandboxes, f1(pt.UsedMB), f1(pt.PerSandboxMB), f1(pt.PerSandboxPSSMB), pt.RunscProcs)
		}
		p.f("\n")
	}
	var base *BaselineReport
	for _, c := range sortedKeys(p.rs.baseline) {
		if b := p.rs.baseline[c]; b.Density != nil {
			base = b
		}
	}
	if base != nil {
		bd := base.Density
		p.f("Raw runsc, %d idle python3 containers: %s MB per container (used), %s MB (runsc PSS).\n", bd.Sandboxes, f1(bd.PerSandboxMB), f1(bd.PerSandboxPSSMB))
	}
	p.f("Published: ≈%.0f MB per idle 2 GiB sandbox. Target: ≤ 15 MiB.\n", Published.DensityMB)
	p.failure("density")
	p.f("\n")
}

// baseCol is a raw-runsc column of an operation table: its heading and
// its value at a concurrency.
type baseCol struct {
	name string
	at   func(c int) float64
}

func (p *page) opTable(reports map[int]*OpReport, op string, bases []baseCol, pubWall, pubPer map[int]float64) {
	p.f("| c | rounds | wall avg | wall min | wall P95 | wall max | per avg | each avg |")
	for _, b := range bases {
		p.f(" %s |", b.name)
	}
	p.f(" published wall | published per |\n|---|---|---|---|---|---|---|---|%s---|---|\n", strings.Repeat("---|", len(bases)))
	for _, c := range sortedKeys(reports) {
		r := row(reports[c], op)
		if r == nil {
			continue
		}
		p.f("| %d | %d | %s | %s | %s | %s | %s | %s |", c, r.Rounds, f1(r.Wall.Avg), f1(r.Wall.Min), f1(r.Wall.P95), f1(r.Wall.Max),
			f1(r.PerAvg), f1(r.Each.Avg))
		for _, b := range bases {
			p.f(" %s |", f1(b.at(c)))
		}
		p.f(" %s | %s |\n", pub(pubWall, c), pub(pubPer, c))
	}
}

func (p *page) raw(name string, ops ...string) []baseCol {
	return []baseCol{{name, func(c int) float64 { return p.baseAt(c, ops...) }}}
}

func (p *page) baseAt(c int, ops ...string) float64 {
	b := p.rs.baseline[c]
	if b == nil {
		return math.NaN()
	}
	sum := 0.0
	for _, op := range ops {
		sum += baseOp(b, op)
	}
	return sum
}

func (p *page) snapshotSection() {
	p.f("## 3. Snapshot vs concurrency (report §4.1)\n\n")
	p.f("`POST /sandboxes/{id}/snapshots` on c running sandboxes at once, one request each.\n")
	p.f("Raw runsc: `runsc checkpoint --leave-running --compression=none`, each one's time at the same concurrency.\n\n")
	p.opTable(p.rs.snapshot, "snapshot", p.raw("raw runsc checkpoint", "checkpoint"), Published.SnapshotWall, Published.SnapshotPer)
	p.failure("snapshot-")
	p.perChart("snapshot-concurrency.png", Chart{Title: "Snapshot: per-operation cost vs concurrency", XLabel: "concurrency", YLabel: "wall / batch size (ms)"},
		"op", p.rs.snapshot, "snapshot", Published.SnapshotPer)
	p.f("\n")
}

// perChart draws Cube's amortised cost of op (PerAvg, by the reports' key:
// concurrency or clone count) against the published one, as "Cube per
// <unit>"; ch holds the titles, and nothing is drawn when Cube has no row.
func (p *page) perChart(name string, ch Chart, unit string, reports map[int]*OpReport, op string, published map[int]float64) {
	cube := Series{Name: "Cube per " + unit}
	for _, c := range sortedKeys(reports) {
		if r := row(reports[c], op); r != nil {
			cube.X = append(cube.X, float64(c))
			cube.Y = append(cube.Y, r.PerAvg)
		}
	}
	if len(cube.X) == 0 {
		return
	}
	ch.Series = nonEmptySeries(cube, publishedSeries("CubeSandbox published per "+unit, published))
	p.chart(name, ch)
}

func (p *page) dirtySection() {
	rs := p.rs
	p.f("## 4. Snapshot vs dirty memory (report §4.2)\n\n")
	p.f("D MB written in the sandbox's Python kernel (every page non-zero, rewritten before each\n")
	p.f("snapshot), then a snapshot and a create from it, one at a time. Raw runsc: a python3\n")
	p.f("workload holding D MB, checkpointed and restored.\n\n")
	p.f("| dirty MB | rounds | snapshot avg | snapshot min | snapshot P95 | snapshot max | image MB | create-from-snapshot avg | raw runsc checkpoint | raw image MB | raw runsc restore | published snapshot | published create |\n")
	p.f("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	// Every size either side measured: the raw baseline still has its
	// numbers where the service failed, and the other way round.
	sizes := map[int]bool{}
	for d := range rs.dirty {
		sizes[d] = true
	}
	for d := range rs.baseDirty {
		sizes[d] = true
	}
	for _, d := range sortedKeys(sizes) {
		s, c := row(rs.dirty[d], "snapshot"), row(rs.dirty[d], "create-from-snapshot")
		if s == nil || c == nil {
			none := math.NaN()
			s = &OpRow{Wall: Stats{Avg: none, Min: none, P95: none, Max: none}, ImageMB: none}
			c = &OpRow{Wall: Stats{Avg: none}}
		}
		b := rs.baseDirty[d]
		img := math.NaN()
		if b != nil {
			img = b.ImageMB
		}
		pubSnap := "~" + f1(Published.DirtyBase+Published.DirtyPer100*float64(d)/100)
		if d == 1024 {
			pubSnap = f1(Published.DirtyAt1024)
		}
		p.f("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s–%s |\n", d, s.Rounds, f1(s.Wall.Avg), f1(s.Wall.Min), f1(s.Wall.P95), f1(s.Wall.Max),
			f1(s.ImageMB), f1(c.Wall.Avg), f1(baseOp(b, "checkpoint")), f1(img), f1(baseOp(b, "restore")), pubSnap, f1(Published.DirtyCreateLo), f1(Published.DirtyCreateHi))
	}
	p.f("\nPublished: ≈%.0f ms at the sandbox's own 8.3 MB, +%.0f ms per 100 MB, %.0f ms at 1024 MB (values marked ~ are that fit);\n", Published.DirtyBase, Published.DirtyPer100, Published.DirtyAt1024)
	p.f("creating from the snapshot stays at %.0f–%.0f ms whatever the size. Cube's fitted growth: %s ms per 100 MB.\n", Published.DirtyCreateLo, Published.DirtyCreateHi, f1(p.dirtySlope()))
	p.failure("dirty-")
	p.failure("baseline-d")
	var snap, create, rawCk, rawRs, pubS Series
	snap.Name, create.Name, rawCk.Name, rawRs.Name, pubS.Name = "Cube snapshot", "Cube create from snapshot", "raw runsc checkpoint", "raw runsc restore", "CubeSandbox published snapshot"
	pubS.Dashed = true
	for _, d := range sortedKeys(rs.dirty) {
		if s := row(rs.dirty[d], "snapshot"); s != nil {
			snap.X, snap.Y = append(snap.X, float64(d)), append(snap.Y, s.Wall.Avg)
		}
		if c := row(rs.dirty[d], "create-from-snapshot"); c != nil {
			create.X, create.Y = append(create.X, float64(d)), append(create.Y, c.Wall.Avg)
		}
	}
	for _, d := range sortedKeys(rs.baseDirty) {
		if v := baseOp(rs.baseDirty[d], "checkpoint"); !math.IsNaN(v) {
			rawCk.X, rawCk.Y = append(rawCk.X, float64(d)), append(rawCk.Y, v)
		}
		if v := baseOp(rs.baseDirty[d], "restore"); !math.IsNaN(v) {
			rawRs.X, rawRs.Y = append(rawRs.X, float64(d)), append(rawRs.Y, v)
		}
	}
	pubS.X = []float64{0, 1024}
	pubS.Y = []float64{Published.DirtyBase, Published.DirtyAt1024}
	if len(snap.X) > 0 || len(rawCk.X) > 0 {
		p.chart("dirty-memory.png", Chart{Title: "Snapshot and restore vs dirty memory", XLabel: "dirty memory (MB)", YLabel: "latency (ms)", Series: nonEmptySeries(snap, create, rawCk, rawRs, pubS)})
	}
	p.f("\n")
}

func (p *page) cfsSection() {
	p.f("## 5. Create from a snapshot (report §4.3)\n\n")
	p.f("One snapshot of a running sandbox, then c `POST /sandboxes {templateID: snapshotID}` at once.\n")
	p.f("Raw runsc: `runsc restore` into a new container, each one's time at the same concurrency.\n\n")
	p.opTable(p.rs.cfs, "create-from-snapshot", p.raw("raw runsc restore", "restore"), Published.CFSWall, Published.CFSPer)
	p.failure("cfs-")
	p.perChart("cfs-concurrency.png", Chart{Title: "Create from snapshot: per-sandbox cost vs concurrency", XLabel: "concurrency", YLabel: "wall / batch size (ms)"},
		"op", p.rs.cfs, "create-from-snapshot", Published.CFSPer)
	p.f("\n")
}

func (p *page) rollbackSection() {
	p.f("## 6. Rollback (report §4.4)\n\n")
	p.f("Each of c sandboxes snapshots itself, then all roll back to their own snapshot at once.\n")
	p.f("*rollback* times the rollback requests alone; *snapshot+rollback* is the report's flow.\n")
	p.f("Raw runsc: checkpoint + restore, each one's time at the same concurrency.\n\n")
	p.f("**rollback**\n\n")
	p.opTable(p.rs.rollback, "rollback", p.raw("raw runsc restore", "restore"), nil, nil)
	p.f("\n**snapshot + rollback**\n\n")
	p.opTable(p.rs.rollback, "snapshot+rollback", p.raw("raw runsc checkpoint + restore", "checkpoint", "restore"), Published.RollbackWall, Published.RollbackPer)
	p.failure("rollback-")
	p.f("\n")
}

func (p *page) cloneSection() {
	rs := p.rs
	p.f("## 7. Clone (report §4.5)\n\n")
	p.f("`POST /sandboxes/{id}/clone {count: n, concurrency: c}` from one running sandbox (fork when\n")
	p.f("the server has no clone route); wall is that request. Raw runsc estimate: one checkpoint plus\n")
	p.f("n restores at concurrency c.\n\n")
	p.f("| n | c | rounds | wall avg | wall min | wall P95 | wall max | per clone | raw runsc estimate | published wall | published per |\n")
	p.f("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range sortedKeys(rs.clone) {
		r := row(rs.clone[n], "clone")
		if r == nil {
			continue
		}
		c := r.Concurrency
		est := math.NaN()
		if b := rs.baseline[c]; b != nil {
			est = baseOp(b, "checkpoint") + math.Ceil(float64(n)/float64(c))*baseOp(b, "restore")
		}
		p.f("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, c, r.Rounds, f1(r.Wall.Avg), f1(r.Wall.Min), f1(r.Wall.P95), f1(r.Wall.Max),
			f1(r.PerAvg), f1(est), pub(Published.CloneWall, n), pub(Published.ClonePer, n))
	}
	p.failure("clone-")
	p.perChart("clone-count.png", Chart{Title: "Clone: per-clone cost vs clone count", XLabel: "clones per request", YLabel: "wall / n (ms)"},
		"clone", rs.clone, "clone", Published.ClonePer)
	p.f("\n")
}

func (p *page) pauseSection() {
	p.f("## 8. Pause / resume (report §4.6)\n\n")
	p.f("c sandboxes paused at once (`POST /sandboxes/{id}/pause`), then resumed at once\n")
	p.f("(`POST /sandboxes/{id}/connect`). The service's pause freezes the sandbox at once and writes\n")
	p.f("it to disk (freeing its memory and slot) only after `--pause-write-delay` (10 s); a resume\n")
	p.f("before that thaws it in memory, which is what this table measures. Raw runsc `pause`/`resume`\n")
	p.f("(freeze/thaw) are the like-for-like baseline; raw `checkpoint` and `restore` show what a\n")
	p.f("pause written to disk and its resume cost.\n\n")
	p.f("**pause**\n\n")
	p.opTable(p.rs.pause, "pause", append(p.raw("raw runsc pause (freeze)", "pause"), p.raw("raw runsc checkpoint", "checkpoint")...), Published.PauseWall, Published.PausePer)
	p.f("\n**resume**\n\n")
	p.opTable(p.rs.pause, "resume", append(p.raw("raw runsc resume (thaw)", "resume"), p.raw("raw runsc restore", "restore")...), Published.ResumeWall, Published.ResumePer)
	p.failure("pause-resume-")
	p.f("\n")
}
