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
	dir        string
	create     map[int]*CreateReport
	baseline   map[int]*BaselineReport // raw runsc at concurrency c, idle
	baseDirty  map[int]*BaselineReport // raw runsc at c=1 with d MB
	density    *DensityReport
	densityAt  map[int]*DensityReport // density-nN: N idle sandboxes
	snapshot   map[int]*OpReport
	dirty      map[int]*OpReport
	cfs        map[int]*OpReport
	rollback   map[int]*OpReport
	reset      map[int]*OpReport
	clone      map[int]*OpReport
	pause      map[int]*OpReport
	pauseDisk  map[int]*OpReport // pause-resume --from-disk
	pauseFiles map[int]*OpReport // pause-resume --files-only
	failures   map[string]string // result name → error text
}

var numbered = regexp.MustCompile(`^([a-z-]+)-([a-z])(\d+)\.(json|err)$`)

func loadResults(dir string) (*resultSet, error) {
	rs := &resultSet{dir: dir,
		create: map[int]*CreateReport{}, baseline: map[int]*BaselineReport{}, baseDirty: map[int]*BaselineReport{},
		densityAt: map[int]*DensityReport{},
		snapshot:  map[int]*OpReport{}, dirty: map[int]*OpReport{}, cfs: map[int]*OpReport{},
		rollback: map[int]*OpReport{}, reset: map[int]*OpReport{}, clone: map[int]*OpReport{}, pause: map[int]*OpReport{},
		pauseDisk: map[int]*OpReport{}, pauseFiles: map[int]*OpReport{}, failures: map[string]string{}}
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
		case "rollback-reset-c":
			target = newEntry(rs.reset, n)
		case "clone-n":
			target = newEntry(rs.clone, n)
		case "pause-resume-c":
			target = newEntry(rs.pause, n)
		case "pause-resume-disk-c":
			target = newEntry(rs.pauseDisk, n)
		case "pause-resume-files-c":
			target = newEntry(rs.pauseFiles, n)
		case "density-n":
			target = newEntry(rs.densityAt, n)
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

// verdictAtLeast compares a measured value with a lower bound, worded
// like verdict.
func verdictAtLeast(v, limit float64, unit string) string {
	if math.IsNaN(v) {
		return "not measured"
	}
	if v >= limit {
		return fmt.Sprintf("✅ %s %s ≥ %s", f1(v), unit, f1(limit))
	}
	return fmt.Sprintf("❌ %s %s < %s (short by %s, %.1f×)", f1(v), unit, f1(limit), f1(limit-v), v/limit)
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
	p.speedTargets()
	p.sharedMemoryTargets()
	p.commands()
	p.createSection()
	p.densitySection()
	p.snapshotSection()
	p.dirtySection()
	p.cfsSection()
	p.rollbackSection()
	p.cloneSection()
	p.pauseSection()
	p.timeSection()
	p.clusterSection()
	p.teamsSection()
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

// runStamp is the date and commit of the run whose numbers a page shows:
// the first line of commands.txt, as scripts/bench.sh writes it.
var runStamp = regexp.MustCompile(`^# (\d{4}-\d\d-\d\d \d\d:\d\d UTC), .*commit (\S+)`)

func (p *page) header() {
	m := p.o.Machine
	p.f("# Benchmarks\n\n")
	when, commit := p.o.Now.UTC().Format("2006-01-02 15:04 UTC"), p.o.Commit
	// A page written again (scripts/bench-cluster.sh adds its section)
	// still dates the numbers by the run that made them.
	if b, err := os.ReadFile(filepath.Join(p.o.Dir, "commands.txt")); err == nil {
		if m := runStamp.FindStringSubmatch(string(b)); m != nil {
			when, commit = m[1], m[2]
		}
	}
	p.f("Generated by `make bench` (`scripts/bench.sh`) from its run of %s", when)
	if commit != "" {
		p.f(" at commit `%s`", commit)
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
