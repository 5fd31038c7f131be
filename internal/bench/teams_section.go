package bench

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Targets of the teams benchmark: what authorisation and quota checks may
// add at the median.
const (
	teamsCreateTarget = 1.0 // ms added to a create
	teamsGetTarget    = 0.2 // ms added to a read
)

// goBench is one line of `go test -bench` output.
type goBench struct {
	Pkg, Name string
	// Procs is GOMAXPROCS, the name's suffix.
	Procs       int
	N           int
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
}

// goBenchFile is teams-go.txt: the commands that made it (lines "# …")
// and their benchmarks.
type goBenchFile struct {
	Commands []string
	Benches  []goBench
}

func readGoBench(path string) (*goBenchFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := &goBenchFile{}
	pkg := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "# "):
			out.Commands = append(out.Commands, strings.TrimPrefix(line, "# "))
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimPrefix(line, "pkg: ")
		case strings.HasPrefix(line, "Benchmark"):
			if b, ok := parseGoBench(line); ok {
				b.Pkg = pkg
				out.Benches = append(out.Benches, b)
			}
		}
	}
	return out, sc.Err()
}

// parseGoBench reads "BenchmarkX/sub-2  2000  261.9 ns/op  176 B/op  3
// allocs/op"; the -GOMAXPROCS suffix is dropped from the name.
func parseGoBench(line string) (goBench, bool) {
	fs := strings.Fields(line)
	if len(fs) < 4 {
		return goBench{}, false
	}
	b := goBench{Name: fs[0]}
	if i := strings.LastIndex(b.Name, "-"); i > 0 {
		if n, err := strconv.Atoi(b.Name[i+1:]); err == nil {
			b.Name, b.Procs = b.Name[:i], n
		}
	}
	var err error
	if b.N, err = strconv.Atoi(fs[1]); err != nil {
		return goBench{}, false
	}
	seen := false
	for i := 2; i+1 < len(fs); i += 2 {
		v, err := strconv.ParseFloat(fs[i], 64)
		if err != nil {
			continue
		}
		switch fs[i+1] {
		case "ns/op":
			b.NsPerOp, seen = v, true
		case "B/op":
			b.BytesPerOp = v
		case "allocs/op":
			b.AllocsPerOp = v
		}
	}
	return b, seen
}

func (g *goBenchFile) find(name string) *goBench {
	if g == nil {
		return nil
	}
	for i := range g.Benches {
		if g.Benches[i].Name == name {
			return &g.Benches[i]
		}
	}
	return nil
}

func (g *goBenchFile) ns(name string) float64 {
	if b := g.find(name); b != nil {
		return b.NsPerOp
	}
	return math.NaN()
}

// goBenchWhat says what each benchmark measures.
var goBenchWhat = map[string]string{
	"BenchmarkAuthenticateCached":        "a key checked again within 500 ms (its digest, a map lookup): nearly every request",
	"BenchmarkAuthenticateUncached":      "a key's first check after 500 ms: its record and its team's read from the store",
	"BenchmarkQuotasCached":              "a team's quotas read again within 500 ms",
	"BenchmarkQuotasUncached":            "a team's quotas' first read after 500 ms (the team's record)",
	"BenchmarkStart/records=100":         "a create's running-sandboxes check, 100 sandbox records in the store",
	"BenchmarkStart/records=1000":        "the same, 1000 records",
	"BenchmarkStart/records=20000":       "the same, 20000 records",
	"BenchmarkStartNoQuotas":             "the same for a team without quotas (the first team): nothing read",
	"BenchmarkStartParallel/one-team":    "8 checks at once of one team (1000 records): they take turns by design",
	"BenchmarkStartParallel/eight-teams": "8 checks at once of 8 teams (1000 records)",
}

// fmtNs formats a duration in nanoseconds for a table.
func fmtNs(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "—"
	case ns < 1e3:
		return fmt.Sprintf("%.0f ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	}
	return fmt.Sprintf("%.2f s", ns/1e9)
}

// teamsSection shows the teams benchmark (teams.json) and the Go
// benchmarks of the key and quota checks (teams-go.txt), when either is
// there.
func (p *page) teamsSection() {
	var rep *TeamsReport
	if r := new(TeamsReport); readJSON(filepath.Join(p.o.Dir, "teams.json"), r) == nil {
		rep = r
	}
	gb, _ := readGoBench(filepath.Join(p.o.Dir, "teams-go.txt"))
	_, failed := p.rs.failures["teams"]
	if rep == nil && gb == nil && !failed {
		return
	}
	n := 10
	if _, err := os.Stat(filepath.Join(p.o.Dir, "cluster", "via.json")); err == nil {
		n = 11 // after the cluster's section
	}
	p.f("## %d. Teams: what authorisation and quota checks cost\n\n", n)
	p.f("Every API request is checked against its key, and a create (resume, fork) of a team with\n")
	p.f("quotas also counts the team's running sandboxes in the store. `cube-bench teams` makes a\n")
	p.f("throwaway team whose quotas are set far above what it uses, and a key for it; each round it\n")
	p.f("creates a sandbox, reads it (`GET /sandboxes/{id}`) and deletes it with the admin key (the\n")
	p.f("first team, which has no quotas: no quota check) and with the team's key (the check runs),\n")
	p.f("alternating which goes first. Both keys are checked, each through its 500 ms cache; the\n")
	p.f("difference at p50 is what a team's checks add, given with its 95 %% confidence interval\n")
	p.f("(bootstrap): how finely this host's noise lets one run tell. Times are milliseconds.\n\n")
	if rep != nil {
		p.teamsRows(rep, gb)
	}
	p.failure("teams")
	if gb != nil {
		p.teamsGoBench(gb)
	}
	p.f("\n")
}

// ciOf is a result's confidence interval; ok false in result files
// written before it was recorded.
func ciOf(v float64, ci [2]float64) ([2]float64, bool) {
	return ci, !(ci[0] == 0 && ci[1] == 0) && !math.IsNaN(v)
}

// verdictCI compares a difference of medians with an upper bound, saying
// when its confidence interval does not settle it.
func verdictCI(v float64, ci [2]float64, limit float64) (text string, pass, resolved bool) {
	text = verdict(v, limit, "ms")
	if math.IsNaN(v) {
		return text, false, false
	}
	pass = v <= limit
	c, ok := ciOf(v, ci)
	if !ok {
		return text, pass, true
	}
	switch {
	case c[1] <= limit:
		return text + ", and so is the whole 95 % CI", true, true
	case c[0] > limit:
		return text + ", and so is the whole 95 % CI", false, true
	}
	return fmt.Sprintf("❔ not resolved: the 95 %% CI (%+.2f … %+.2f ms) spans the %s ms target; this host's noise is larger than the target", c[0], c[1], strconv.FormatFloat(limit, 'f', -1, 64)), pass, false
}

// startFit is the quota check's cost per sandbox record in the store
// (three in four running), from BenchmarkStart's smallest and largest
// stores.
func startFit(gb *goBenchFile) (perRecord float64, ok bool) {
	lo, hi := gb.ns("BenchmarkStart/records=100"), gb.ns("BenchmarkStart/records=20000")
	nHi := 20000.0
	if math.IsNaN(hi) {
		hi, nHi = gb.ns("BenchmarkStart/records=1000"), 1000
	}
	if math.IsNaN(lo) || math.IsNaN(hi) || hi <= lo {
		return 0, false
	}
	return (hi - lo) / (nHi - 100), true
}

func (p *page) teamsRows(rep *TeamsReport, gb *goBenchFile) {
	p.f("```sh\n./bin/cube-bench %s\n```\n\n", rep.Args)
	p.f("%d idle sandboxes of the first team were held meanwhile, so the check's scan of the store had\n", rep.Background)
	p.f("rows to read; %d measured rounds after %d warm-up, %d reads per sandbox.\n\n", rep.Config.Rounds, rep.Config.Warmup, rep.Config.Gets)
	p.f("| op | key | n | p50 | p90 | p95 | avg | min | max |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Rows {
		p.f("| %s | %s | %d | %s | %s | %s | %s | %s | %s |\n", r.Op, teamsLabel(r.Path), r.Count, f2(r.P50), f2(r.P90), f2(r.P95), f2(r.Avg), f2(r.Min), f2(r.Max))
	}
	create, get := rep.AddedCreateP50, rep.AddedGetP50
	if rep.row("create", pathTeam) == nil {
		create = math.NaN()
	}
	if rep.row("get", pathTeam) == nil {
		get = math.NaN()
	}
	measured := func(v float64, ci [2]float64, prec int) string {
		if math.IsNaN(v) {
			return "—"
		}
		if c, ok := ciOf(v, ci); ok {
			return fmt.Sprintf("%+.*f (%+.*f … %+.*f)", prec, v, prec, c[0], prec, c[1])
		}
		return fmt.Sprintf("%+.*f", prec, v)
	}
	cv, cPass, cRes := verdictCI(create, rep.AddedCreateCI, teamsCreateTarget)
	gv, gPass, gRes := verdictCI(get, rep.AddedGetCI, teamsGetTarget)
	p.f("\n| target | measured: p50 (95 %% CI) | verdict |\n|---|---|---|\n")
	p.f("| authorisation and quota checks add ≤ %.0f ms to a create (p50) | %s | %s |\n", teamsCreateTarget, measured(create, rep.AddedCreateCI, 2), cv)
	p.f("| … and ≤ %.1f ms to a read (p50) | %s | %s |\n", teamsGetTarget, measured(get, rep.AddedGetCI, 3), gv)
	serial, sPass := "not measured", false
	d, dci := rep.TogetherMinusAlone, rep.TogetherMinusAloneCI
	if rep.atOnce(caseTogether, "") == nil || rep.atOnce(caseAloneX2, "") == nil {
		d = math.NaN()
	}
	switch _, ok := ciOf(d, dci); {
	case !ok:
	case dci[0] > 0:
		serial = "❌ slower than one team with as many in flight, the whole 95 % CI above 0"
	default:
		serial, sPass = "✅ not slower than one team with as many in flight (the 95 % CI reaches 0 or below)", true
	}
	p.f("| a quota check does not serialise creates across teams: create p50 of two teams at once minus one team's with as many in flight | %s | %s |\n", measured(d, dci, 1), serial)

	word := func(pass, resolved bool) string {
		switch {
		case pass && resolved:
			return "✅"
		case !pass && resolved:
			return "❌"
		}
		return "❔ not resolved by this run:"
	}
	p.f("\n**Verdict:** read %s %+.3f ms (target ≤ %.1f ms); create %s %+.2f ms (target ≤ %.0f ms)",
		word(gPass, gRes), get, teamsGetTarget, word(cPass, cRes), create, teamsCreateTarget)
	if per, ok := startFit(gb); ok && rep.Background > 0 {
		// The run's team creates met its background sandboxes running.
		est := per / 0.75 * float64(rep.Background)
		p.f("; the Go benchmarks below put the check at ≈ %s with the %d running records this run's store held", fmtNs(est), rep.Background)
	}
	if _, ok := ciOf(d, dci); ok {
		p.f("; two teams at once %s (%+.1f ms)", map[bool]string{true: "✅ no slower than one", false: "❌ slower than one"}[sPass], d)
	}
	p.f(".\n")
	if len(rep.AtOnce) > 0 {
		p.f("\nCreates at once (each deleted once it answers), %d passes in alternating order:\n\n", rep.Config.Passes)
		p.f("| case | in flight | n | failed | create p50 | p90 |\n|---|---|---|---|---|---|\n")
		for _, r := range rep.AtOnce {
			p.f("| %s | %d | %d | %d | %s | %s |\n", atOnceLabel(r), r.Teams*r.Concurrency, r.Create.Count, r.Failed, f1(r.Create.P50), f1(r.Create.P90))
		}
	}
}

func (p *page) teamsGoBench(gb *goBenchFile) {
	p.f("\nThe checks alone, as Go benchmarks on a SQLite store in a temporary directory (no server; sandbox\n")
	p.f("records the size of a real one, three in four running, spread over 10 teams):\n\n")
	if len(gb.Commands) > 0 {
		p.f("```sh\n%s\n```\n\n", strings.Join(gb.Commands, "\n"))
	}
	p.f("| benchmark | what it measures | n | time/op | allocs/op |\n|---|---|---|---|---|\n")
	for _, b := range gb.Benches {
		p.f("| `%s` | %s | %d | %s | %.0f |\n", strings.TrimPrefix(b.Name, "Benchmark"), orDash(goBenchWhat[b.Name]), b.N, fmtNs(b.NsPerOp), b.AllocsPerOp)
	}
	if per, ok := startFit(gb); ok {
		lo := gb.ns("BenchmarkStart/records=100")
		at := 100 + (teamsCreateTarget*1e6-lo)/per
		p.f("\nThe running-sandboxes check totals the team's running sandboxes in the database, from an index\n")
		p.f("on the records' team, CPU and memory: %s more per record in the store, so a create of a team with\n", fmtNs(per))
		p.f("quotas would pay more than the %.0f ms target from about %.0f records on (records of every team, as\n", teamsCreateTarget, math.Max(at, 0))
		p.f("these: three in four running).\n")
	}
	one, eight, serial := gb.ns("BenchmarkStartParallel/one-team"), gb.ns("BenchmarkStartParallel/eight-teams"), gb.ns("BenchmarkStart/records=1000")
	if !math.IsNaN(eight) && !math.IsNaN(serial) {
		p.f("Eight teams' checks at once took %s each (wall time ÷ checks) against %s one at a time", fmtNs(eight), fmtNs(serial))
		if !math.IsNaN(one) {
			p.f(" and %s for one team's", fmtNs(one))
		}
		p.f(": %.1f× the throughput of one at a time with GOMAXPROCS %d", serial/eight, gb.find("BenchmarkStartParallel/eight-teams").Procs)
		if serial/eight < 1.3 {
			p.f(". Checks of different teams gain little from running at once here: the quota package's lock\n")
			p.f("is per team, but a SQLite store has one connection, which each check's query holds while it\n")
			p.f("reads (PostgreSQL, a cluster's store, has a pool)")
		}
		p.f(".\n")
	}
}

// f2 formats milliseconds with two decimals; NaN is "—".
func f2(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
