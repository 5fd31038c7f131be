// The sections of the benchmark page after its header: one per table of the
// CubeSandbox report (create, density, snapshot, dirty pages, rollback,
// clone, pause), each beside the raw runsc baseline and the published numbers.

package bench

import (
	"math"
	"strconv"
	"strings"
)

func (p *page) createSection() {
	rs := p.rs
	p.f("## 1. Create from a template (report §3.2)\n\n")
	p.f("`POST /sandboxes` round trip (the server answers when the sandbox's agent answers), then\n")
	p.f("`DELETE`. Raw runsc: `runsc run` of the same rootfs until a python3 workload prints, at the\n")
	p.f("same concurrency. *CPU ms/op* is the host's busy CPU per create+delete, cube-bench's own\n")
	p.f("excluded, background work such as the warm-pool refill included (see §9).\n\n")
	p.f("| c | n | success | avg | std | P50 | P90 | P95 | P99 | min | max | delete avg | throughput /s | CPU ms/op | raw runsc run avg | raw P50 | published avg |\n")
	p.f("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
		p.f("| %d | %d | %.1f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %s | %s |\n",
			c, r.Summary.Total, r.Summary.SuccessRate, f1(s.Avg), f1(s.Std), f1(s.P50), f1(s.P90), f1(s.P95), f1(s.P99),
			f1(s.Min), f1(s.Max), del, r.Summary.ThroughputQPS, cpuCell(r.Telemetry), f1(baseOp(b, "run")), f1(bp50), pub(Published.CreateAvg, c))
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
	if d := p.rs.densityAt[50]; d != nil && len(d.Points) > 0 {
		p.f("%d idle sandboxes, in batches of %v:\n\n", d.Points[len(d.Points)-1].Sandboxes, d.Config.Batches)
		p.f("| sandboxes | used MB | per sandbox MB (used) | per sandbox MB (runsc PSS) | runsc processes |\n|---|---|---|---|---|\n")
		for _, pt := range d.Points {
			p.f("| %d | %s | %s | %s | %d |\n", pt.Sandboxes, f1(pt.UsedMB), f1(pt.PerSandboxMB), f1(pt.PerSandboxPSSMB), pt.RunscProcs)
		}
		p.f("\n")
	}
	p.failure("density-n50")
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
	p.opHeader(bases)
	p.opRows(reports, op, strconv.Itoa, bases, pubWall, pubPer)
}

func (p *page) opHeader(bases []baseCol) {
	p.f("| c | rounds | wall avg | wall min | wall P95 | wall max | per avg | each avg | CPU ms/op |")
	for _, b := range bases {
		p.f(" %s |", b.name)
	}
	p.f(" published wall | published per |\n|---|---|---|---|---|---|---|---|---|%s---|---|\n", strings.Repeat("---|", len(bases)))
}

// opRows prints op's row of each report under opHeader's columns; label
// turns the concurrency into the first cell.
func (p *page) opRows(reports map[int]*OpReport, op string, label func(int) string, bases []baseCol, pubWall, pubPer map[int]float64) {
	for _, c := range sortedKeys(reports) {
		r := row(reports[c], op)
		if r == nil {
			continue
		}
		p.f("| %s | %d | %s | %s | %s | %s | %s | %s | %s |", label(c), r.Rounds, f1(r.Wall.Avg), f1(r.Wall.Min), f1(r.Wall.P95), f1(r.Wall.Max),
			f1(r.PerAvg), f1(r.Each.Avg), cpuCell(reports[c].Telemetry))
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
	p.f("Raw runsc: checkpoint + restore, each one's time at the same concurrency. *CPU ms/op* is\n")
	p.f("per snapshot+rollback, in both tables.\n\n")
	p.f("**rollback**\n\n")
	p.opTable(p.rs.rollback, "rollback", p.raw("raw runsc restore", "restore"), nil, nil)
	p.f("\n**snapshot + rollback**\n\n")
	p.opTable(p.rs.rollback, "snapshot+rollback", p.raw("raw runsc checkpoint + restore", "checkpoint", "restore"), Published.RollbackWall, Published.RollbackPer)
	p.failure("rollback-")
	if len(p.rs.reset) > 0 {
		p.f("\n**reset: rollback to the same snapshot every round** (`rollback --reset`)\n\n")
		p.f("Each sandbox snapshots once; every round rolls it back to that snapshot, as an RL\n")
		p.f("environment starts each episode. Not in the report. A snapshot rolled back to (or created\n")
		p.f("from) twice within a minute gets warm sandboxes of its own, paused until taken.\n\n")
		p.opTable(p.rs.reset, "reset", p.raw("raw runsc restore", "restore"), nil, nil)
	}
	p.f("\n")
}

func (p *page) cloneSection() {
	rs := p.rs
	p.f("## 7. Clone (report §4.5)\n\n")
	p.f("`POST /sandboxes/{id}/clone {count: n, concurrency: c}` from one running sandbox (fork when\n")
	p.f("the server has no clone route); wall is that request. Raw runsc estimate: one checkpoint plus\n")
	p.f("n restores at concurrency c.\n\n")
	p.f("| n | c | rounds | wall avg | wall min | wall P95 | wall max | per clone | CPU ms/clone | raw runsc estimate | published wall | published per |\n")
	p.f("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
		p.f("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", n, c, r.Rounds, f1(r.Wall.Avg), f1(r.Wall.Min), f1(r.Wall.P95), f1(r.Wall.Max),
			f1(r.PerAvg), cpuCell(rs.clone[n].Telemetry), f1(est), pub(Published.CloneWall, n), pub(Published.ClonePer, n))
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
	p.f("before that thaws it in memory, which is what the rows by c measure. The *from disk* row\n")
	p.f("(`pause-resume --from-disk`) resumes only once every pause image is on disk, so the resume\n")
	p.f("restores it (into a prepared container, or cold: see §9). Raw runsc `pause`/`resume`\n")
	p.f("(freeze/thaw) are the like-for-like baseline of the in-memory rows; raw `checkpoint` and\n")
	p.f("`restore` that of a pause written to disk and its resume. *CPU ms/op* is per pause+resume, in\n")
	p.f("both tables (from disk: the write-out included). The *files only* rows (`pause-resume\n")
	p.f("--files-only`) pause without memory (E2B's `keepMemory: false`): the pause saves the writable\n")
	p.f("layer and frees the sandbox, the resume boots the template afresh with it.\n\n")
	p.f("**pause**\n\n")
	pauseBases := append(p.raw("raw runsc pause (freeze)", "pause"), p.raw("raw runsc checkpoint", "checkpoint")...)
	p.opTable(p.rs.pause, "pause", pauseBases, Published.PauseWall, Published.PausePer)
	p.opRows(p.rs.pauseFiles, opPauseFiles, func(c int) string { return strconv.Itoa(c) + ", files only" }, pauseBases, nil, nil)
	p.f("\n**resume**\n\n")
	bases := append(p.raw("raw runsc resume (thaw)", "resume"), p.raw("raw runsc restore", "restore")...)
	p.opHeader(bases)
	p.opRows(p.rs.pause, opResume, strconv.Itoa, bases, Published.ResumeWall, Published.ResumePer)
	p.opRows(p.rs.pauseDisk, opResumeFromDisk, func(c int) string { return strconv.Itoa(c) + ", from disk" }, bases, nil, nil)
	p.opRows(p.rs.pauseFiles, opResumeFiles, func(c int) string { return strconv.Itoa(c) + ", files only" }, bases, nil, nil)
	p.failure("pause-resume-")
	p.f("\n")
}

// cpuCell is a table's CPU ms/op: "—" for a result file without it.
func cpuCell(t Telemetry) string {
	if t.CPU == nil {
		return "—"
	}
	return f1(t.CPU.PerOpMS)
}

// timeFamily is one table of "Where the time goes": a result file's
// phases, spread over its measured operations.
type timeFamily struct {
	title string
	t     *Telemetry // nil: the result file is missing
	ops   int        // measured operations, when the file has no CPU
}

func (p *page) timeSection() {
	rs := p.rs
	p.f("## 9. Where the time goes\n\n")
	p.f("What the server's `/metrics` histogram `cube_operation_phase_seconds` recorded during the\n")
	p.f("measured rounds of one run of each family (warm-up excluded): each phase that ran, how often\n")
	p.f("per benchmark operation, and its mean. A create *launch* takes a warm sandbox when the pool has one\n")
	p.f("(*warm-init*) and otherwise restores one; *prepare* and *restore into-prepared* are the\n")
	p.f("background work that keeps the pool full. *CPU ms/op* is the host's busy CPU (all processes,\n")
	p.f("`/proc/stat`) from the first measured operation until the host is quiet again (below 10 %% of a\n")
	p.f("core, at most 5 s), less cube-bench's own CPU, divided by the operations; the window opens only\n")
	p.f("once the host is quiet after the set-up and warm-up, so their refills are not counted. It counts\n")
	p.f("every process on the host: anything else running at the time inflates it.\n\n")
	fams := []timeFamily{
		createFamily("create, c=1", rs.create[1]),
		opFamily("create from a snapshot, c=1", rs.cfs[1]),
		opFamily("snapshot, c=1", rs.snapshot[1]),
		opFamily("clone, n=1", rs.clone[1]),
		opFamily("pause + resume from disk, c=1", rs.pauseDisk[1]),
	}
	for _, fam := range fams {
		p.timeTable(fam)
	}
	p.baselineCPUTable()
}

// createFamily and opFamily are a run's phases for timeTable; a run that
// is missing leaves them empty.
func createFamily(title string, r *CreateReport) timeFamily {
	if r == nil {
		return timeFamily{title: title}
	}
	return timeFamily{title: title, t: &r.Telemetry, ops: len(r.Raw)}
}

func opFamily(title string, r *OpReport) timeFamily {
	if r == nil {
		return timeFamily{title: title}
	}
	return timeFamily{title: title, t: &r.Telemetry, ops: r.measuredOps()}
}

// timeTable prints one family's phases; "—" where its file predates them.
func (p *page) timeTable(fam timeFamily) {
	p.f("**%s**", fam.title)
	if fam.t == nil {
		p.f(": not run.\n\n")
		return
	}
	ops := fam.ops
	if c := fam.t.CPU; c != nil {
		ops = c.Ops
		p.f(" — CPU %s ms/op (host busy %.0f ms over %d ops, settle %.0f ms)", f1(c.PerOpMS), c.HostBusyMS, c.Ops, c.SettleMS)
	} else {
		p.f(" — CPU —")
	}
	if m := fam.t.WarmPoolMisses; m != nil {
		p.f(", warm pool misses %d", *m)
	}
	p.f("\n\n| op | phase | count per op | mean ms |\n|---|---|---|---|\n")
	if len(fam.t.Phases) == 0 {
		p.f("| — | — | — | — |\n\n")
		return
	}
	for _, ph := range fam.t.Phases {
		per := "—"
		if ops > 0 {
			per = strconv.FormatFloat(float64(ph.Count)/float64(ops), 'f', 2, 64)
		}
		p.f("| %s | %s | %s | %s |\n", ph.Op, ph.Phase, per, f1(ph.MeanMS))
	}
	p.f("\n")
}

// baselineCPUTable prints the raw runsc CLI's CPU per operation at c=1.
func (p *page) baselineCPUTable() {
	b := p.rs.baseline[1]
	if b == nil {
		return
	}
	p.f("**raw runsc, c=1** — the runsc command's own CPU (wait4 rusage of the CLI and the children it\n")
	p.f("waited for; the sandbox process a run or restore leaves behind, which does a checkpoint's and a\n")
	p.f("restore's work, is not among them)\n\n| op | wall avg | CPU ms/op |\n|---|---|---|\n")
	for _, op := range BaselineOps {
		s, ok := b.Ops[op]
		if !ok {
			continue
		}
		cpu := "—"
		if c, ok := b.CPU[op]; ok && c.Count > 0 {
			cpu = f1(c.Avg)
		}
		p.f("| %s | %s | %s |\n", op, f1(s.Avg), cpu)
	}
	p.f("\n")
}
