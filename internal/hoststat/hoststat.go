// Package hoststat reads what the machine has and uses: CPU time and
// memory from procfs, a filesystem's size from statfs. The console and a
// node's heartbeat both show them.
package hoststat

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Cube runs on.
const clockTicks = 100

// Sample is the machine's CPU time (since boot) and memory at one moment.
type Sample struct {
	CPUs              int
	CPUBusySeconds    float64
	CPUTotalSeconds   float64
	MemTotalBytes     uint64
	MemAvailableBytes uint64
}

// Read samples the procfs at proc ("/proc"). What cannot be read stays
// zero.
func Read(proc string) Sample {
	var s Sample
	if f, err := os.Open(filepath.Join(proc, "stat")); err == nil {
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
				s.CPUTotalSeconds, s.CPUBusySeconds = total/clockTicks, (total-idle)/clockTicks
			case len(fields) > 0 && strings.HasPrefix(fields[0], "cpu"):
				s.CPUs++
			}
		}
		f.Close()
	}
	if f, err := os.Open(filepath.Join(proc, "meminfo")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			kb, _ := strconv.ParseUint(fields[1], 10, 64)
			switch fields[0] {
			case "MemTotal:":
				s.MemTotalBytes = kb << 10
			case "MemAvailable:":
				s.MemAvailableBytes = kb << 10
			}
		}
		f.Close()
	}
	return s
}

// BusyPercent is the share of CPU time spent busy between two samples,
// 0 to 100; 0 when no time passed.
func BusyPercent(prev, cur Sample) float64 {
	total := cur.CPUTotalSeconds - prev.CPUTotalSeconds
	if total <= 0 {
		return 0
	}
	return 100 * (cur.CPUBusySeconds - prev.CPUBusySeconds) / total
}

// Disk is the size and free space of the filesystem that holds a path.
type Disk struct {
	TotalBytes uint64
	FreeBytes  uint64
}

// DiskOf reads the filesystem holding dir; zero when it cannot.
func DiskOf(dir string) Disk {
	var st syscall.Statfs_t
	if dir == "" || syscall.Statfs(dir, &st) != nil {
		return Disk{}
	}
	return Disk{TotalBytes: st.Blocks * uint64(st.Bsize), FreeBytes: st.Bavail * uint64(st.Bsize)}
}

// Machine is the processor: its model name and architecture.
type Machine struct {
	CPUModel string
	Arch     string
}

// ReadMachine reads the CPU model name from proc's cpuinfo.
func ReadMachine(proc string) Machine {
	m := Machine{Arch: runtime.GOARCH}
	if f, err := os.Open(filepath.Join(proc, "cpuinfo")); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	return m
}
