package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReportSharedMemoryTargets(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, v any) {
		data, _ := json.Marshal(v)
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("density.json", &DensityReport{Points: []DensityPoint{{Sandboxes: 20, PerSandboxMB: 18.5}}})
	write("density-n50.json", &DensityReport{Config: DensityConfig{Batches: []int{25, 25}},
		Points: []DensityPoint{{Sandboxes: 25, PerSandboxMB: 24, PerSandboxPSSMB: 26, RunscProcs: 75}, {Sandboxes: 50, PerSandboxMB: 21.5, PerSandboxPSSMB: 22.25, RunscProcs: 150}}})
	write("snapshot-c1.json", &OpReport{Rows: []OpRow{{Op: "snapshot", Count: 1, Rounds: 5, Wall: Stats{Avg: 120}}}})
	write("rollback-c1.json", &OpReport{Rows: []OpRow{{Op: "rollback", Count: 1, Rounds: 5, Wall: Stats{Avg: 70}}, {Op: "snapshot+rollback", Count: 1, Rounds: 5, Wall: Stats{Avg: 190}}}})
	var b bytes.Buffer
	if err := WriteReport(&b, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{Cores: 2}}); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	i := strings.Index(md, "## Targets (speed, wave 3: shared template memory)")
	if i < 0 || i < strings.Index(md, "## Targets (speed, wave 2)") {
		t.Fatalf("no wave-3 table after wave 2's:\n%s", md)
	}
	table := md[i:]
	table = table[:strings.Index(table, "\n\n## ")]
	for _, want := range []string{
		"| memory per idle sandbox (20 sandboxes, used) | 67.4 MiB (75 PSS) | 30 (PVM) / 25 (bare metal) | 18.5 | ✅ 18.5 MiB ≤ 20.0 |",
		"| memory per idle sandbox (50 sandboxes, used) | — | 25 (bare metal, 1000 sandboxes) | 21.5 | ❌ 21.5 MiB > 20.0",
		"| memory per idle sandbox (50 sandboxes, runsc PSS) | — | — | 22.2 | ❌",
		"| snapshot of an idle sandbox | 180 ms | 41–50 ms | 120.0 | ❌ 120.0 ms > 40.0",
		"| rollback, c=1 | 302 ms | 82 ms | 70.0 | ✅ 70.0 ms ≤ 80.0 |",
		"| snapshot + rollback, c=1 | 513 ms | 90 ms | 190.0 | ❌",
		"| clone n=1 | 281 ms | 220–271 ms | — | not measured |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("wave-3 table lacks %q:\n%s", want, table)
		}
	}
	if n := strings.Count(table, "\n| ") - 1; n != len(wave3Rows) { // less the heading
		t.Errorf("%d rows, want %d:\n%s", n, len(wave3Rows), table)
	}
	// The density section shows the fifty.
	if !strings.Contains(md, "50 idle sandboxes, in batches of [25 25]:") || !strings.Contains(md, "| 50 | 0.0 | 21.5 | 22.2 | 150 |") {
		t.Errorf("density section lacks the 50-sandbox table:\n%s", md)
	}
}
