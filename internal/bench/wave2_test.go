package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// quickPauseWait makes --from-disk give up (and stop waiting after the
// image) fast, for the length of a test.
func quickPauseWait(t *testing.T, limit time.Duration) {
	old := pauseImageWait
	pauseImageWait.Poll, pauseImageWait.Limit, pauseImageWait.Grace = 10*time.Millisecond, limit, 0
	t.Cleanup(func() { pauseImageWait = old })
}

func TestPauseResumeFromDiskWaitsForThePauseImage(t *testing.T) {
	quickPauseWait(t, 5*time.Second)
	f, srv := newFakeAPI(t)
	dataDir := t.TempDir()
	var mu sync.Mutex
	var pauses, resumedFromImage, resumedEarly int
	var writers sync.WaitGroup
	// The "server" writes each paused sandbox to disk 100 ms after the
	// pause, and drops the image when it resumes.
	f.onPause = func(id string) {
		mu.Lock()
		pauses++
		mu.Unlock()
		writers.Add(1)
		go func() {
			defer writers.Done()
			time.Sleep(100 * time.Millisecond)
			img := pauseImage(dataDir, id)
			os.MkdirAll(filepath.Dir(img), 0o755)
			os.WriteFile(img, []byte("image"), 0o600)
		}()
	}
	f.onConnect = func(id string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := os.Stat(pauseImage(dataDir, id)); err == nil {
			resumedFromImage++
		} else {
			resumedEarly++
		}
		os.RemoveAll(filepath.Dir(pauseImage(dataDir, id)))
	}
	out := filepath.Join(t.TempDir(), "pause-resume-disk-c2.json")
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"pause-resume", "--from-disk", "--data-dir", dataDir, "-c", "2", "-n", "2", "-w", "1", "-t", "base",
		"--api-url", srv.URL, "--api-key", fakeKey, "-o", out, "-q"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	writers.Wait()
	var rep OpReport
	if err := readJSON(out, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Config.FromDisk || rep.Config.DataDir != dataDir {
		t.Errorf("config %+v", rep.Config)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].Op != "pause" || rep.Rows[1].Op != "resume (from disk)" || rep.Rows[1].Rounds != 2 || rep.Rows[1].Count != 2 {
		t.Errorf("rows %+v", rep.Rows)
	}
	if !strings.Contains(stdout.String(), "resume (from disk)") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if pauses != 6 || resumedFromImage != 6 || resumedEarly != 0 {
		t.Errorf("%d pauses, %d resumes from an image, %d before it was written; want 6, 6, 0", pauses, resumedFromImage, resumedEarly)
	}
	if live, _, _, _, _ := f.counts(); live != 0 {
		t.Errorf("%d sandboxes left", live)
	}
}

func TestPauseResumeFromDiskFailsWithoutTheImage(t *testing.T) {
	quickPauseWait(t, 200*time.Millisecond)
	for _, tc := range []struct {
		name  string
		write func(dataDir, id string)
	}{
		{"never written", func(string, string) {}},
		// An image older than the pause is a previous round's.
		{"stale", func(dataDir, id string) {
			img := pauseImage(dataDir, id)
			os.MkdirAll(filepath.Dir(img), 0o755)
			os.WriteFile(img, []byte("old"), 0o600)
			old := time.Now().Add(-time.Hour)
			os.Chtimes(img, old, old)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, srv := newFakeAPI(t)
			dataDir := t.TempDir()
			f.onPause = func(id string) { tc.write(dataDir, id) }
			_, err := RunPauseResume(context.Background(), fakeClient(t, srv, fakeKey),
				OpConfig{Template: "base", Concurrency: 1, Rounds: 1, FromDisk: true, DataDir: dataDir}, nil)
			if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "checkpoint.img") || !strings.Contains(err.Error(), dataDir) {
				t.Fatalf("err = %v, want one naming --data-dir and the image path", err)
			}
			f.mu.Lock()
			paused := len(f.paused)
			f.mu.Unlock()
			if live, _, _, _, _ := f.counts(); live != 0 || paused != 0 {
				t.Errorf("%d sandboxes left, %d paused", live, paused)
			}
		})
	}
	if _, err := RunPauseResume(context.Background(), nil, OpConfig{Template: "base", Concurrency: 1, Rounds: 1, FromDisk: true}, nil); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Errorf("--from-disk without a data directory: err = %v", err)
	}
}

func TestReportSpeedTargets(t *testing.T) {
	render := func(withData bool) string {
		dir := t.TempDir()
		write := func(name string, v any) {
			data, _ := json.Marshal(v)
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if withData {
			c1 := &CreateReport{Config: CreateConfig{Concurrency: 1, Total: 20}, Summary: Summary{Total: 20, Successful: 20, SuccessRate: 100},
				Create: Stats{Count: 20, Avg: 38.5, P50: 37, P95: 90}}
			c1.CPU = &CPUReport{Ops: 20, PerOpMS: 150}
			write("create-c1.json", c1)
			write("create-c10.json", &CreateReport{Config: CreateConfig{Concurrency: 10, Total: 200}, Summary: Summary{Total: 200, Successful: 200, SuccessRate: 100, ThroughputQPS: 30},
				Create: Stats{Count: 200, Avg: 120}})
			write("snapshot-c1.json", &OpReport{Rows: []OpRow{{Op: "snapshot", Count: 1, Rounds: 5, Wall: Stats{Avg: 35}}}})
			for _, d := range []int{0, 100} {
				write("dirty-d"+itoa(d)+".json", &OpReport{Rows: []OpRow{{Op: "snapshot", Count: 1, Wall: Stats{Avg: 30 + float64(d)/4}}, {Op: "create-from-snapshot", Count: 1, Wall: Stats{Avg: 50}}}})
			}
			write("cfs-c1.json", &OpReport{Rows: []OpRow{{Op: "create-from-snapshot", Count: 1, Rounds: 3, Wall: Stats{Avg: 60}}}})
			write("rollback-c1.json", &OpReport{Rows: []OpRow{{Op: "rollback", Count: 1, Rounds: 5, Wall: Stats{Avg: 95}}, {Op: "snapshot+rollback", Count: 1, Rounds: 5, Wall: Stats{Avg: 130}}}})
			write("clone-n1.json", &OpReport{Rows: []OpRow{{Op: "clone", Count: 1, Rounds: 5, Wall: Stats{Avg: 180}}}})
			write("clone-n10.json", &OpReport{Rows: []OpRow{{Op: "clone", Concurrency: 5, Count: 10, Rounds: 3, Wall: Stats{Avg: 500}, PerAvg: 50}}})
			write("pause-resume-c1.json", &OpReport{Rows: []OpRow{{Op: "pause", Count: 1, Rounds: 5, Wall: Stats{Avg: 40}}, {Op: "resume", Count: 1, Rounds: 5, Wall: Stats{Avg: 18}}}})
			disk := &OpReport{Config: OpConfig{FromDisk: true}, Rows: []OpRow{{Op: "pause", Concurrency: 1, Count: 1, Rounds: 3, Wall: Stats{Avg: 41}},
				{Op: "resume (from disk)", Concurrency: 1, Count: 1, Rounds: 3, Wall: Stats{Avg: 140, Min: 120, P95: 160, Max: 161}, PerAvg: 140, Each: Stats{Avg: 139}}}}
			disk.Telemetry = Telemetry{CPU: &CPUReport{HostBusyMS: 1500, Ops: 3, PerOpMS: 500, SettleMS: 250},
				Phases: []PhaseStat{{Op: "pause", Phase: "checkpoint", Count: 3, MeanMS: 300}, {Op: "restore", Phase: "into-prepared", Count: 3, MeanMS: 90}}}
			write("pause-resume-disk-c1.json", disk)
			write("density.json", &DensityReport{Points: []DensityPoint{{Sandboxes: 10, PerSandboxMB: 20}}})
		}
		var b bytes.Buffer
		if err := WriteReport(&b, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{Cores: 4}}); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	with, without := render(true), render(false)
	// The wave-2 table, after issue 8's.
	section := func(md string) string {
		i := strings.Index(md, "## Targets (speed, wave 2)")
		if i < 0 || i < strings.Index(md, "## Targets (issue 8)") {
			t.Fatalf("no wave-2 table after issue 8's:\n%s", md)
		}
		md = md[i:]
		return md[:strings.Index(md, "\n\n## ")]
	}
	got := section(with)
	for _, want := range []string{
		"| create c=1 n=20 sequential avg ≤ 40 ms | 38.5 | ✅ 38.5 ms ≤ 40.0 |",
		"| create c=1 n=20 sequential P95 ≤ 80 ms | 90.0 | ❌ 90.0 ms > 80.0 (over by 10.0, 1.1×) |",
		"| sustained creates per core at c=10 n=200 ≥ 7 /s (CubeSandbox ≈ 3.6) | 7.5 (30.0 /s on 4 cores, n=200) | ✅ 7.5 /s per core ≥ 7.0 |",
		"| CPU per create+delete cycle (create c=1) halved from 324.5 ms | 150.0 (0.46× of 324.5) | ✅ 150.0 ms ≤ 162.3 |",
		"| snapshot (idle) ≤ 40 ms | 35.0 | ✅",
		"| snapshot growth ≤ 22 ms per 100 MB dirty | 25.0 | ❌ 25.0 ms/100 MB > 22.0",
		"| create-from-snapshot c=1 ≤ 67 ms | 60.0 | ✅",
		"| rollback c=1 ≤ 90 ms | 95.0 | ❌",
		"| clone n=1 ≤ 200 ms | 180.0 | ✅",
		"| clone n=10 c=5 ≤ 54 ms per clone | 50.0 | ✅",
		"| resume (in memory) c=1 ≤ 20 ms | 18.0 | ✅",
		"| resume from disk c=1 ≤ 100 ms | 140.0 | ❌ 140.0 ms > 100.0 (over by 40.0, 1.4×) |",
		"| host memory per idle sandbox ≤ 30 MiB (first step) | 20.0 | ✅ 20.0 MiB ≤ 30.0 |",
		"| host memory per idle sandbox ≤ 15 MiB (second step) | 20.0 | ❌ 20.0 MiB > 15.0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("wave-2 table lacks %q:\n%s", want, got)
		}
	}
	for _, want := range []string{
		// The pause/resume section's resume table gets the from-disk row.
		"| 1 | 5 | 18.0 |", "| 1, from disk | 3 | 140.0 | 120.0 | 160.0 | 161.0 | 140.0 | 139.0 | 500.0 | — | — | — | — |",
		"**pause + resume from disk, c=1** — CPU 500.0 ms/op (host busy 1500 ms over 3 ops, settle 250 ms)",
		"| pause | checkpoint | 1.00 | 300.0 |\n| restore | into-prepared | 1.00 | 90.0 |",
		// Issue 8's table is still there.
		"| resume ≤ 20 ms | 18.0 | ✅", "| ≤ 15 MiB host memory per idle sandbox | 20.0 | ❌",
	} {
		if !strings.Contains(with, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	got = section(without)
	if n := strings.Count(got, "| — | not measured |"); n != 14 {
		t.Errorf("%d of 14 wave-2 rows say not measured without results:\n%s", n, got)
	}
	if !strings.Contains(without, "**pause + resume from disk, c=1**: not run.") {
		t.Error("the time section lacks the from-disk family")
	}
}

func TestVerdictAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{7, "✅ 7.0 /s ≥ 7.0"}, {3.5, "❌ 3.5 /s < 7.0 (short by 3.5, 0.5×)"}} {
		if got := verdictAtLeast(c.v, 7, "/s"); got != c.want {
			t.Errorf("verdictAtLeast(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := verdictAtLeast(math.NaN(), 7, "/s"); got != "not measured" {
		t.Errorf("NaN: %q", got)
	}
}

func TestPauseAndResumePhasesInRunOrder(t *testing.T) {
	ps := []PhaseStat{
		{Op: "resume-from-disk", Phase: "record"}, {Op: "pause", Phase: "fsync"}, {Op: "restore", Phase: "into-prepared"},
		{Op: "pause", Phase: "record"}, {Op: "resume-from-disk", Phase: "launch"}, {Op: "pause", Phase: "checkpoint"},
		{Op: "pause", Phase: "freeze"}, {Op: "restore", Phase: "verify"},
	}
	sortPhases(ps)
	var got []string
	for _, p := range ps {
		got = append(got, p.Op+"/"+p.Phase)
	}
	want := "pause/freeze pause/record pause/checkpoint pause/fsync restore/verify restore/into-prepared resume-from-disk/launch resume-from-disk/record"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
}
