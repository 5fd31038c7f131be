package envd

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"cube/internal/envd/protocol"
)

// metricsSampler remembers the previous CPU counters, so CPU use is the
// share since the last request (since boot for the first).
type metricsSampler struct {
	mu         sync.Mutex
	busy, idle uint64
}

func (m *metricsSampler) sample() (protocol.Metrics, error) {
	out := protocol.Metrics{Timestamp: time.Now().Unix(), CPUCount: runtime.NumCPU()}
	busy, idle, err := cpuTimes()
	if err == nil {
		m.mu.Lock()
		db, di := busy-m.busy, idle-m.idle
		m.busy, m.idle = busy, idle
		m.mu.Unlock()
		if db+di > 0 {
			out.CPUUsedPct = float64(int(float64(db)/float64(db+di)*10000)) / 100
		}
	}
	mem, err := meminfo()
	if err != nil {
		return out, err
	}
	out.MemTotal = mem["MemTotal"]
	out.MemCache = mem["Cached"] + mem["Buffers"]
	if avail, ok := mem["MemAvailable"]; ok && avail <= out.MemTotal {
		out.MemUsed = out.MemTotal - avail
	} else if free := mem["MemFree"] + out.MemCache; free <= out.MemTotal {
		out.MemUsed = out.MemTotal - free
	}
	out.MemTotalMiB = out.MemTotal >> 20
	out.MemUsedMiB = out.MemUsed >> 20
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/", &fs); err == nil {
		out.DiskTotal = fs.Blocks * uint64(fs.Bsize)
		out.DiskUsed = (fs.Blocks - fs.Bfree) * uint64(fs.Bsize)
	}
	return out, nil
}

func cpuTimes() (busy, idle uint64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[0] != "cpu" {
			continue
		}
		for i, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i == 3 || i == 4 { // idle, iowait
				idle += n
			} else {
				busy += n
			}
		}
		return busy, idle, nil
	}
	return 0, 0, fmt.Errorf("/proc/stat has no cpu line")
}

// meminfo reads /proc/meminfo in bytes.
func meminfo() (map[string]uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		n, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if len(fields) > 1 && fields[1] == "kB" {
			n <<= 10
		}
		out[name] = n
	}
	return out, sc.Err()
}
