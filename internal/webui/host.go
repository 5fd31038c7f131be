package webui

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Cube runs on.
const clockTicks = 100

// hostReader reads the machine's CPU and memory from a procfs.
type hostReader struct{ proc string }

func (r hostReader) read() Host {
	var h Host
	if f, err := os.Open(filepath.Join(r.proc, "stat")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			switch {
			case len(fields) > 4 && fields[0] == "cpu":
				var total, idle float64
				for i, v := range fields[1:] {
					n, _ := strconv.ParseFloat(v, 64)
					total += n
					if i == 3 || i == 4 { // idle, iowait
						idle += n
					}
				}
				h.CPUTotalSeconds, h.CPUBusySeconds = total/clockTicks, (total-idle)/clockTicks
			case len(fields) > 0 && strings.HasPrefix(fields[0], "cpu"):
				h.CPUs++
			}
		}
		f.Close()
	}
	if f, err := os.Open(filepath.Join(r.proc, "meminfo")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			kb, _ := strconv.ParseUint(fields[1], 10, 64)
			switch fields[0] {
			case "MemTotal:":
				h.MemTotalBytes = kb << 10
			case "MemAvailable:":
				h.MemAvailBytes = kb << 10
			}
		}
		f.Close()
	}
	return h
}
