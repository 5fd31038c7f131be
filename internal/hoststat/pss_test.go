package hoststat

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRunscPSSCountsOnlyMatchingRunsc(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, cmdline, smaps string) {
		d := filepath.Join(proc, pid)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "cmdline"), []byte(cmdline), 0o644)
		if smaps != "" {
			os.WriteFile(filepath.Join(d, "smaps_rollup"), []byte(smaps), 0o644)
		}
	}
	mk("10", "runsc-sandbox\x00--root=/data/runsc\x00boot\x00", "Rss: 9000 kB\nPss:  1500 kB\n")
	mk("11", "runsc-gofer\x00--root=/data/runsc\x00gofer\x00", "Pss: 500 kB\n")
	mk("12", "runsc-sandbox\x00--root=/other/runsc\x00", "Pss: 7000 kB\n")
	mk("13", "/usr/bin/python3\x00--root=/data/runsc\x00", "Pss: 9999 kB\n")
	mk("14", "runsc\x00--root=/data/runsc\x00", "") // exited: no smaps
	mk("self", "runsc\x00", "Pss: 1 kB\n")
	kib, n, err := RunscPSS(proc, "/data/runsc")
	if err != nil || kib != 2000 || n != 2 {
		t.Errorf("RunscPSS = %d KiB over %d processes, %v; want 2000 over 2", kib, n, err)
	}
}
