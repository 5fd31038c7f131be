package hoststat

import (
	"os"
	"path/filepath"
	"testing"
)

func fakeProc(t *testing.T) string {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "stat"), []byte("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 50 0 50 350 50 0 0 0 0 0\ncpu1 50 0 50 350 50 0 0 0 0 0\nintr 1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "meminfo"), []byte("MemTotal:       2048 kB\nMemFree:         512 kB\nMemAvailable:   1024 kB\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpuinfo"), []byte("processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\n"), 0o644)
	return dir
}

func TestReadParsesProcfs(t *testing.T) {
	s := Read(fakeProc(t))
	if s.CPUs != 2 || s.CPUTotalSeconds != 10 || s.CPUBusySeconds != 2 || s.MemTotalBytes != 2048<<10 || s.MemAvailableBytes != 1024<<10 {
		t.Fatalf("sample %+v", s)
	}
	if m := ReadMachine(fakeProc(t)); m.CPUModel != "Example CPU @ 2.0GHz" || m.Arch == "" {
		t.Fatalf("machine %+v", m)
	}
	if got := BusyPercent(Sample{CPUBusySeconds: 1, CPUTotalSeconds: 10}, Sample{CPUBusySeconds: 4, CPUTotalSeconds: 14}); got != 75 {
		t.Fatalf("busy %v%%, want 75", got)
	}
	if got := BusyPercent(s, s); got != 0 {
		t.Fatalf("no time passed: %v%%", got)
	}
	if d := DiskOf(t.TempDir()); d.TotalBytes == 0 || d.FreeBytes > d.TotalBytes {
		t.Fatalf("disk %+v", d)
	}
	if (Read(filepath.Join(t.TempDir(), "none")) != Sample{}) {
		t.Fatal("a missing procfs reads as something")
	}
}
