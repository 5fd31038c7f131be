package hoststat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RunscPSS sums the proportional set size (KiB) of every runsc process
// (sandbox, gofer and their systrap stubs all carry runsc's argv[0]) whose
// command line contains match (say, the server's --root), and counts them.
// PSS shares each page among the processes mapping it, so the sum does not
// count the shared binary once per sandbox.
func RunscPSS(procRoot, match string) (kib int64, procs int, err error) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, 0, err
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil || len(cmd) == 0 {
			continue
		}
		argv0, _, _ := bytes.Cut(cmd, []byte{0})
		if !strings.Contains(filepath.Base(string(argv0)), "runsc") || !bytes.Contains(cmd, []byte(match)) {
			continue
		}
		pss, err := readPSS(filepath.Join(procRoot, e.Name(), "smaps_rollup"))
		if err != nil {
			continue // gone, or a kernel without smaps_rollup
		}
		kib += pss
		procs++
	}
	return kib, procs, nil
}

func readPSS(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "Pss:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("%s: no Pss line", path)
}
