package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPauseResumeFilesOnlyPausesWithoutMemory(t *testing.T) {
	f, srv := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "pause-resume-files-c1.json")
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"pause-resume", "--files-only", "-c", "1", "-n", "2", "-w", "0", "-t", "base",
		"--api-url", srv.URL, "--api-key", fakeKey, "-o", out, "-q"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	var rep OpReport
	if err := readJSON(out, &rep); err != nil {
		t.Fatal(err)
	}
	if !rep.Config.FilesOnly || len(rep.Rows) != 2 || rep.Rows[0].Op != opPauseFiles || rep.Rows[1].Op != opResumeFiles || rep.Rows[1].Rounds != 2 {
		t.Fatalf("report %+v", rep)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pauseMemory) != 2 {
		t.Fatalf("%d pauses, want 2", len(f.pauseMemory))
	}
	for i, m := range f.pauseMemory {
		if m == nil || *m {
			t.Fatalf("pause %d asked for memory %v, want false", i, m)
		}
	}

	// Rendered as the files-only rows of the pause and resume tables.
	dir := t.TempDir()
	data, _ := os.ReadFile(out)
	os.WriteFile(filepath.Join(dir, "pause-resume-files-c1.json"), data, 0o644)
	var md bytes.Buffer
	if err := WriteReport(&md, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{Cores: 2}}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(md.String(), "| 1, files only | 2 |"); n != 2 {
		t.Fatalf("%d files-only rows in the report, want a pause and a resume row:\n%s", n, md.String())
	}
}

func TestPauseResumeFilesOnlyIsNotFromDisk(t *testing.T) {
	_, srv := newFakeAPI(t)
	var stdout, stderr bytes.Buffer
	cmd := NewCommand(&stdout, &stderr)
	cmd.SetArgs([]string{"pause-resume", "--files-only", "--from-disk", "--data-dir", t.TempDir(), "-c", "1", "-n", "1", "-t", "base",
		"--api-url", srv.URL, "--api-key", fakeKey, "-q"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Fatalf("err = %v", err)
	}
}
