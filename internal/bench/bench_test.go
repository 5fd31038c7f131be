package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"cube/internal/client"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSummarizeKnownInputs(t *testing.T) {
	// 1..10 shuffled: numpy gives mean 5.5, std 2.8722813232690143,
	// percentiles 5.5, 9.1, 9.55, 9.91.
	xs := []float64{7, 3, 10, 1, 5, 9, 2, 8, 4, 6}
	s := Summarize(xs)
	want := Stats{Count: 10, Min: 1, Max: 10, Avg: 5.5, Std: 2.8722813232690143, P50: 5.5, P90: 9.1, P95: 9.55, P99: 9.91}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"min", s.Min, want.Min}, {"max", s.Max, want.Max}, {"avg", s.Avg, want.Avg}, {"std", s.Std, want.Std},
		{"p50", s.P50, want.P50}, {"p90", s.P90, want.P90}, {"p95", s.P95, want.P95}, {"p99", s.P99, want.P99}} {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if s.Count != 10 {
		t.Errorf("count = %d", s.Count)
	}
	if xs[0] != 7 {
		t.Error("Summarize sorted its input in place")
	}
	if one := Summarize([]float64{42}); one.P99 != 42 || one.Std != 0 || one.Min != 42 {
		t.Errorf("single value: %+v", one)
	}
	if empty := Summarize(nil); empty != (Stats{}) {
		t.Errorf("empty input: %+v", empty)
	}
	if m := Median([]float64{3, 1, 2, 100}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
}

func TestHistogramBinsEveryValue(t *testing.T) {
	xs := []float64{10, 11, 12, 20, 20, 30, 50}
	h := Histogram(xs, 4, 20)
	lines := strings.Split(strings.TrimRight(h, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 bins, got %d:\n%s", len(lines), h)
	}
	total := 0
	for _, l := range lines {
		f := strings.Fields(l)
		var n int
		if err := json.Unmarshal([]byte(f[len(f)-1]), &n); err != nil {
			t.Fatalf("line %q has no count", l)
		}
		total += n
	}
	if total != len(xs) {
		t.Errorf("histogram counts %d values, want %d", total, len(xs))
	}
	if !strings.Contains(lines[0], strings.Repeat("█", 20)) {
		t.Errorf("fullest bin is not full width: %q", lines[0])
	}
	if h := Histogram([]float64{5, 5, 5}, 10, 10); strings.Count(h, "\n") != 1 {
		t.Errorf("equal values should make one bin:\n%s", h)
	}
}

func TestRunCreateDeleteAgainstFakeAPI(t *testing.T) {
	f, srv := newFakeAPI(t)
	c := fakeClient(t, srv, fakeKey)
	var calls int
	rep, err := RunCreate(context.Background(), c, CreateConfig{Template: "base", Concurrency: 4, Total: 20, Warmup: 2, Mode: ModeCreateDelete, Timeout: 60},
		func(done, failed int) { calls++ })
	if err != nil {
		t.Fatal(err)
	}
	live, _, creates, deletes, maxFlight := f.counts()
	if creates != 22 || deletes != 22 || live != 0 {
		t.Errorf("server saw %d creates, %d deletes, %d left; want 22, 22, 0", creates, deletes, live)
	}
	if maxFlight > 4 {
		t.Errorf("%d requests in flight at once with -c 4", maxFlight)
	}
	s := rep.Summary
	if s.Total != 20 || s.Successful != 20 || s.Failed != 0 || s.SuccessRate != 100 {
		t.Errorf("summary %+v", s)
	}
	if rep.Create.Count != 20 || rep.Delete.Count != 20 || calls != 20 {
		t.Errorf("create %d, delete %d samples, %d progress calls", rep.Create.Count, rep.Delete.Count, calls)
	}
	var seqs []int
	for _, r := range rep.Raw {
		seqs = append(seqs, r.Seq)
		if r.SandboxID == "" || r.Error != "" {
			t.Errorf("raw sample %+v", r)
		}
	}
	sort.Ints(seqs)
	for i, s := range seqs {
		if s != i+1 {
			t.Fatalf("raw seq numbers %v, want 1..20", seqs)
		}
	}
}

func TestCreateReportJSONShape(t *testing.T) {
	_, srv := newFakeAPI(t)
	rep, err := RunCreate(context.Background(), fakeClient(t, srv, fakeKey), CreateConfig{Template: "base", Concurrency: 2, Total: 3, Mode: ModeCreateDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"config", "summary", "create", "delete", "raw"} {
		if _, ok := doc[k]; !ok {
			t.Errorf("JSON report has no %q", k)
		}
	}
	for _, part := range []string{"create", "delete"} {
		var st map[string]float64
		if err := json.Unmarshal(doc[part], &st); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"count", "min", "max", "avg", "std", "p50", "p90", "p95", "p99"} {
			if _, ok := st[k]; !ok {
				t.Errorf("%s has no %q", part, k)
			}
		}
	}
	var raw []map[string]any
	json.Unmarshal(doc["raw"], &raw)
	if len(raw) != 3 || raw[0]["create_ms"] == nil || raw[0]["sandbox_id"] == nil {
		t.Errorf("raw = %v", raw)
	}
	var sum map[string]any
	json.Unmarshal(doc["summary"], &sum)
	for _, k := range []string{"total", "successful", "failed", "success_rate", "total_time_s", "throughput_qps"} {
		if _, ok := sum[k]; !ok {
			t.Errorf("summary has no %q", k)
		}
	}
}

func TestCreateOnlyKeepsSandboxes(t *testing.T) {
	f, srv := newFakeAPI(t)
	rep, err := RunCreate(context.Background(), fakeClient(t, srv, fakeKey), CreateConfig{Template: "base", Concurrency: 3, Total: 5, Warmup: 1, Mode: ModeCreateOnly}, nil)
	if err != nil {
		t.Fatal(err)
	}
	live, _, _, _, _ := f.counts()
	if live != 5 || len(rep.Kept) != 5 || rep.Delete.Count != 0 {
		t.Errorf("%d live, %d kept, %d deletes; want 5, 5, 0 (warm-up deleted)", live, len(rep.Kept), rep.Delete.Count)
	}
	var out bytes.Buffer
	WriteCreateText(&out, rep)
	if strings.Contains(out.String(), "\ndelete ") || !strings.Contains(out.String(), "5 sandboxes left running") {
		t.Errorf("create-only text:\n%s", out.String())
	}
}

func TestCreateErrorsSayWhatIsWrong(t *testing.T) {
	_, srv := newFakeAPI(t)
	// A refused key fails the warm-up with a hint about the key.
	_, err := RunCreate(context.Background(), fakeClient(t, srv, "e2b_wrong"), CreateConfig{Template: "base", Concurrency: 1, Total: 1, Warmup: 1, Mode: ModeCreateDelete}, nil)
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "API key") || !strings.Contains(err.Error(), "warm-up") {
		t.Errorf("401 error = %v", err)
	}
	// Without warm-up every iteration fails and the report counts them.
	rep, err := RunCreate(context.Background(), fakeClient(t, srv, fakeKey), CreateConfig{Template: "nosuch", Concurrency: 2, Total: 4, Mode: ModeCreateDelete}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Failed != 4 || rep.Summary.SuccessRate != 0 || rep.Create.Count != 0 {
		t.Errorf("summary %+v", rep.Summary)
	}
	errs := rep.Summary.TopErrors(3)
	if len(errs) != 1 || !strings.Contains(errs[0], "4×") || !strings.Contains(errs[0], "template nosuch not found") {
		t.Errorf("errors = %v", errs)
	}
	var out bytes.Buffer
	WriteCreateText(&out, rep)
	if !strings.Contains(out.String(), "template nosuch not found") {
		t.Errorf("text report hides the error:\n%s", out.String())
	}
}

func TestAPIErrorMessages(t *testing.T) {
	for _, c := range []struct {
		err  error
		want []string
		uns  bool
	}{
		{explain(&client.APIError{Method: "POST", Path: "/sandboxes", Status: 401, Message: "invalid API key"}), []string{"401 Unauthorized", "E2B_API_KEY", "invalid API key"}, false},
		{explain(&client.APIError{Method: "POST", Path: "/sandboxes/x/snapshots", Status: 501, Message: "snapshots are not supported"}), []string{"501", "does not implement", "snapshots are not supported"}, true},
		{explain(&client.APIError{Method: "POST", Path: "/sandboxes/x/clone", Status: 404, Message: "404 page not found", Raw: true}), []string{"no such route"}, true},
		{explain(&client.APIError{Method: "DELETE", Path: "/sandboxes/x", Status: 404, Message: "sandbox x not found"}), []string{"404 Not Found", "sandbox x not found"}, false},
	} {
		msg := c.err.Error()
		for _, w := range c.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%q does not mention %q", msg, w)
			}
		}
		if client.Unsupported(c.err) != c.uns {
			t.Errorf("Unsupported(%q) = %v", msg, !c.uns)
		}
	}
}

func TestSnapshotOn501ServerReportsItAndCleansUp(t *testing.T) {
	f, srv := newFakeAPI(t)
	f.noSnapshots = true
	_, err := RunSnapshot(context.Background(), fakeClient(t, srv, fakeKey), OpConfig{Template: "base", Concurrency: 3, Rounds: 2}, nil)
	if err == nil || !client.Unsupported(err) || !strings.Contains(err.Error(), "does not implement") {
		t.Fatalf("err = %v", err)
	}
	if live, _, creates, _, _ := f.counts(); live != 0 || creates != 3 {
		t.Errorf("%d sandboxes left of %d created", live, creates)
	}
}

func TestSnapshotFamilyRowsAgainstFakeAPI(t *testing.T) {
	f, srv := newFakeAPI(t)
	c := fakeClient(t, srv, fakeKey)
	ctx := context.Background()
	check := func(name string, rep *OpReport, err error, ops []string, count, rounds int) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rep.Rows) != len(ops) {
			t.Fatalf("%s: rows %+v", name, rep.Rows)
		}
		for i, r := range rep.Rows {
			if r.Op != ops[i] || r.Count != count || r.Rounds != rounds || len(r.Walls) != rounds || r.Wall.Count != rounds {
				t.Errorf("%s row %d: %+v", name, i, r)
			}
			if !near(r.PerAvg, r.Wall.Avg/float64(count)) {
				t.Errorf("%s: per_avg %v is not wall_avg/%d", name, r.PerAvg, count)
			}
		}
		if live, snaps, _, _, _ := f.counts(); live != 0 || snaps != 0 {
			t.Errorf("%s left %d sandboxes and %d snapshots", name, live, snaps)
		}
	}
	rep, err := RunSnapshot(ctx, c, OpConfig{Template: "base", Concurrency: 3, Rounds: 2, Warmup: 1}, nil)
	check("snapshot", rep, err, []string{"snapshot"}, 3, 2)
	if rep.Rows[0].Each.Count != 6 || rep.Rows[0].ImageMB != 8 {
		t.Errorf("snapshot each %d, image %v MB", rep.Rows[0].Each.Count, rep.Rows[0].ImageMB)
	}
	rep, err = RunCreateFromSnapshot(ctx, c, OpConfig{Template: "base", Concurrency: 4, Rounds: 2, Warmup: 1}, nil)
	check("create-from-snapshot", rep, err, []string{"create-from-snapshot"}, 4, 2)
	rep, err = RunRollback(ctx, c, OpConfig{Template: "base", Concurrency: 2, Rounds: 3}, nil)
	check("rollback", rep, err, []string{"rollback", "snapshot+rollback"}, 2, 3)
	if rep.Rows[1].Wall.Avg < rep.Rows[0].Wall.Avg {
		t.Error("snapshot+rollback is shorter than rollback alone")
	}
	// Reset: one snapshot per sandbox, rolled back to in every round,
	// warm-up included.
	f.mu.Lock()
	f.rollbacks = nil
	f.mu.Unlock()
	rep, err = RunRollback(ctx, c, OpConfig{Template: "base", Concurrency: 2, Rounds: 3, Warmup: 1, Reset: true}, nil)
	check("rollback --reset", rep, err, []string{"reset"}, 2, 3)
	f.mu.Lock()
	rolled := slices.Clone(f.rollbacks)
	f.mu.Unlock()
	slices.Sort(rolled)
	if len(rolled) != 8 || len(slices.Compact(slices.Clone(rolled))) != 2 {
		t.Errorf("reset rolled back to %v; want each of two snapshots four times", rolled)
	}
	rep, err = RunPauseResume(ctx, c, OpConfig{Template: "base", Concurrency: 3, Rounds: 2, Warmup: 1}, nil)
	check("pause-resume", rep, err, []string{"pause", "resume"}, 3, 2)
	rep, err = RunClone(ctx, c, OpConfig{Template: "base", Concurrency: 2, Count: 5, Rounds: 2}, nil)
	check("clone", rep, err, []string{"clone"}, 5, 2)

	// A server without the clone route gets fork instead.
	f.noClone = true
	rep, err = RunClone(ctx, c, OpConfig{Template: "base", Concurrency: 1, Count: 2, Rounds: 1}, nil)
	check("clone via fork", rep, err, []string{"clone"}, 2, 1)

	rep, err = RunDirty(ctx, c, OpConfig{Template: "base", DirtyMB: 64, Rounds: 2, Warmup: 1}, nil)
	check("dirty", rep, err, []string{"snapshot", "create-from-snapshot"}, 1, 2)
	f.mu.Lock()
	code := strings.Join(f.executed, "\n---\n")
	f.mu.Unlock()
	if !strings.Contains(code, "(64 << 20)") || strings.Count(code, "4096") != 2 {
		t.Errorf("dirty should allocate once and rewrite the pages before the later snapshots:\n%s", code)
	}
}

func TestOpTableFormat(t *testing.T) {
	rows := []OpRow{{Op: "snapshot", Concurrency: 5, Count: 5, Rounds: 3, Wall: Stats{Avg: 58, Min: 50, P95: 70, Max: 71}, PerAvg: 11.6}}
	var b bytes.Buffer
	WriteOpTable(&b, rows, true)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("table:\n%s", b.String())
	}
	if got := strings.Fields(lines[0]); strings.Join(got[len(got)-5:], " ") != "wall_avg wall_min wall_p95 wall_max per_avg" {
		t.Errorf("header %q", lines[0])
	}
	if got := strings.Fields(lines[1]); strings.Join(got, " ") != "snapshot 5 5 3 0 58.0 50.0 70.0 71.0 11.6" {
		t.Errorf("row %q", lines[1])
	}
	b.Reset()
	WriteOpTable(&b, rows, false)
	if strings.Contains(b.String(), "wall_avg") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("--no-header output:\n%s", b.String())
	}
}

func TestCreateTextTable(t *testing.T) {
	rep := &CreateReport{Config: CreateConfig{Mode: ModeCreateDelete, Template: "base", Concurrency: 1, Total: 2},
		Summary: Summary{Total: 2, Successful: 2, SuccessRate: 100, TotalTimeS: 1, ThroughputQPS: 2},
		Create:  Summarize([]float64{50, 70}), Delete: Summarize([]float64{10, 12}),
		Raw: []Sample{{Seq: 1, SandboxID: "a", CreateMS: 50}, {Seq: 2, SandboxID: "b", CreateMS: 70}}}
	var b bytes.Buffer
	WriteCreateText(&b, rep)
	out := b.String()
	for _, want := range []string{"success 2/2 (100.0%)", "throughput 2.00 sandboxes/s", "histogram"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	var header, create string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ms ") {
			header = l
		}
		if strings.HasPrefix(l, "create ") && create == "" {
			create = l
		}
	}
	if strings.Join(strings.Fields(header), " ") != "ms count min avg std P50 P90 P95 P99 max" {
		t.Errorf("header %q", header)
	}
	if strings.Join(strings.Fields(create), " ") != "create 2 50.0 60.0 10.0 60.0 68.0 69.0 69.8 70.0" {
		t.Errorf("create row %q", create)
	}
}

func TestChartPNG(t *testing.T) {
	ch := Chart{Title: "Create latency vs concurrency", XLabel: "concurrency", YLabel: "ms", Width: 640, Height: 400,
		Series: []Series{{Name: "cube", X: []float64{1, 10, 20}, Y: []float64{45, 160, 330}}, {Name: "published", X: []float64{1, 10, 20}, Y: []float64{67, 171, 365}, Dashed: true}}}
	var b bytes.Buffer
	if err := ch.WritePNG(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatal("not a PNG signature")
	}
	img, err := png.Decode(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz.X != 640 || sz.Y != 400 {
		t.Errorf("size %v, want 640×400", sz)
	}
	// The first series' colour is somewhere on the picture.
	found := false
	for y := 0; y < 400 && !found; y++ {
		for x := 0; x < 640; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 == 31 && g>>8 == 119 && bl>>8 == 180 {
				found = true
				break
			}
		}
	}
	if !found {
		t.Error("the first series is not drawn")
	}
	bad := Chart{Series: []Series{{Name: "x", X: []float64{1, 2}, Y: []float64{1}}}}
	if err := bad.WritePNG(&b); err == nil {
		t.Error("mismatched series accepted")
	}
	if err := (Chart{}).WritePNG(&b); err == nil {
		t.Error("empty chart accepted")
	}
	if _, err := ParseSeries("cube:1=2,x=3"); err == nil {
		t.Error("non-numeric point accepted")
	}
	s, err := ParseSeries("cube: 1=45, 10=160")
	if err != nil || s.Name != "cube" || len(s.X) != 2 || s.Y[1] != 160 {
		t.Errorf("ParseSeries = %+v, %v", s, err)
	}
}

func TestParseMemInfo(t *testing.T) {
	in := "MemTotal:        8000000 kB\nMemFree:         1000000 kB\nMemAvailable:    5000000 kB\nBuffers:          100000 kB\nCached:          3000000 kB\nShmem:            200000 kB\nSReclaimable:     400000 kB\n"
	m, err := ParseMemInfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.Used() != 3000000 || m.UsedClassic() != 3500000 || m.Shmem != 200000 {
		t.Errorf("used %d, classic %d, shmem %d", m.Used(), m.UsedClassic(), m.Shmem)
	}
	if _, err := ParseMemInfo(strings.NewReader("MemFree: 1 kB\n")); err == nil {
		t.Error("meminfo without MemTotal accepted")
	}
	if _, err := ParseMemInfo(strings.NewReader("MemTotal: lots kB\n")); err == nil {
		t.Error("non-numeric meminfo accepted")
	}
}

func TestMountsUnderWorkDir(t *testing.T) {
	mi := `22 1 8:1 / / rw - ext4 /dev/sda1 rw
90 22 0:4 net:[4026532] /tmp/cb\040x/root/null-netns rw - nsfs nsfs rw
91 22 0:50 / /tmp/cb\040x rw - tmpfs tmpfs rw
92 22 0:51 / /tmp/cb\040xy rw - tmpfs tmpfs rw
`
	got := parseMountsUnder(mi, "/tmp/cb x")
	if strings.Join(got, "|") != "/tmp/cb x/root/null-netns|/tmp/cb x" {
		t.Errorf("mounts = %q (want deepest first, no sibling prefix match)", got)
	}
}

func TestBaselineRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		cfg  BaselineConfig
		want string
	}{
		{BaselineConfig{Concurrency: 1, Total: 1}, "no rootfs"},
		{BaselineConfig{Rootfs: filepath.Join(dir, "none"), Concurrency: 1, Total: 1, Runsc: "/bin/true"}, "not a directory"},
		{BaselineConfig{Rootfs: dir, Concurrency: 1, Total: 1, Runsc: filepath.Join(dir, "runsc")}, "runsc not found"},
		{BaselineConfig{Rootfs: dir, Concurrency: 0, Total: 1}, "concurrency"},
	} {
		_, err := RunBaseline(context.Background(), c.cfg, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
}

func TestCLIRunsAgainstFakeAPI(t *testing.T) {
	f, srv := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"-c", "2", "-n", "6", "-w", "1", "-t", "base", "-o", out, "--api-url", srv.URL, "--api-key", fakeKey, "-q"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var rep CreateReport
	if err := readJSON(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Successful != 6 || rep.Config.Concurrency != 2 || rep.Config.Warmup != 1 {
		t.Errorf("report %+v", rep.Summary)
	}
	if !strings.Contains(stdout.String(), "success 6/6") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	if live, _, _, _, _ := f.counts(); live != 0 {
		t.Errorf("%d sandboxes left", live)
	}

	// The environment supplies what the flags do not.
	t.Setenv(EnvAPIURL, srv.URL)
	t.Setenv(EnvAPIKey, fakeKey)
	t.Setenv(EnvTemplate, "base")
	stdout.Reset()
	cmd = NewCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"snapshot", "-c", "2", "-n", "1", "--no-header", "-q"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "wall_avg") || !strings.HasPrefix(stdout.String(), "snapshot") {
		t.Errorf("snapshot --no-header:\n%s", stdout.String())
	}

	for _, args := range [][]string{{"-m", "bogus"}, {"-c", "0"}, {"density", "-b", "1,x"}, {"chart", "--series", "a:1=1"}} {
		cmd = NewCommand(&stdout, &stderr)
		cmd.SetArgs(append(args, "-q"))
		if err := cmd.Execute(); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

func TestReportFromResults(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) {
		data, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []int{1, 10} {
		write("create-c"+itoa(c)+".json", &CreateReport{Config: CreateConfig{Concurrency: c, Total: 10}, Summary: Summary{Total: 10, Successful: 10, SuccessRate: 100},
			Create: Summarize([]float64{40, 50, 60}), Delete: Summarize([]float64{5})})
		write("baseline-c"+itoa(c)+".json", &BaselineReport{Ops: map[string]Stats{"run": Summarize([]float64{400}), "checkpoint": Summarize([]float64{80}), "restore": Summarize([]float64{300})}})
	}
	for _, d := range []int{0, 100} {
		write("dirty-d"+itoa(d)+".json", &OpReport{Rows: []OpRow{{Op: "snapshot", Count: 1, Wall: Stats{Avg: 30 + float64(d)/10}}, {Op: "create-from-snapshot", Count: 1, Wall: Stats{Avg: 50}}}})
	}
	write("baseline-d500.json", &BaselineReport{Config: BaselineConfig{DirtyMB: 500}, ImageMB: 503.7, Ops: map[string]Stats{"checkpoint": Summarize([]float64{265})}})
	os.WriteFile(filepath.Join(dir, "rollback-c1.err"), []byte("progress…\nPOST /sandboxes/x/rollback: 501 Not Implemented: the server does not implement this operation yet\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "commands.txt"), []byte("cube-bench -c 1 -n 20 -w 3\n"), 0o644)
	var b bytes.Buffer
	err := WriteReport(&b, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{CPU: "Test CPU", Cores: 2, MemGiB: 8}})
	if err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| CPU | Test CPU |", "cube-bench -c 1 -n 20 -w 3",
		"| create c=1 P50 ≤ 60 ms | 50.0 | ✅", "0.12×", // 50 / 400
		"| snapshot growth ≤ 22 ms per 100 MB dirty | 10.0 |",
		"rollback-c1 did not run:** POST /sandboxes/x/rollback: 501",
		"| 1 | 10 | 100.0 % | 50.0 |", "![Create latency vs concurrency](bench/create-concurrency.png)",
		"| snapshot (idle) ≤ 40 ms | 30.0 | ✅",
		"| 500 | 0 | — | — | — | — | — | — | 265.0 | 503.7 |", // raw numbers where the service has none
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, png := range []string{"create-concurrency.png", "dirty-memory.png"} {
		data, err := os.ReadFile(filepath.Join(dir, png))
		if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
			t.Errorf("%s: %v", png, err)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
