package bench

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// CPUReport is the host CPU a benchmark's measured operations cost: what
// every process on the host burned while they ran (the server, its runsc
// sandboxes, the background work they triggered), less cube-bench's own
// share. Latency alone hides work moved off the request path, such as a
// warm pool refilled after each create; this counts it.
type CPUReport struct {
	// HostBusyMS is the busy time of all cores (user, nice, system, irq,
	// softirq, steal) from the first measured operation to the end of the
	// settle wait.
	HostBusyMS float64 `json:"host_busy_ms"`
	// BenchMS is cube-bench's own user+system time over the same window.
	BenchMS float64 `json:"bench_ms"`
	// SettleMS is how long the window stayed open after the last
	// operation, waiting for the host to go quiet.
	SettleMS float64 `json:"settle_ms"`
	// Unsettled is set when the host was still busy at the end of the
	// settle limit (the other work on the host, or a long refill).
	Unsettled bool `json:"unsettled,omitempty"`
	// PreSettleMS is how long the window waited, before it opened, for
	// the work of the set-up and warm-up (a pool refill) to finish, so
	// that work is not billed to the measured operations.
	PreSettleMS float64 `json:"pre_settle_ms,omitempty"`
	// Ops is the number of measured operations; PerOpMS is
	// (HostBusyMS - BenchMS) / Ops.
	Ops     int     `json:"ops"`
	PerOpMS float64 `json:"per_op_ms"`
}

// Telemetry is what a server benchmark adds beside its latencies: CPU per
// operation and where the server spent the time. Every field is optional
// so result files written before it existed still load; nil means "not
// measured".
type Telemetry struct {
	CPU    *CPUReport  `json:"cpu,omitempty"`
	Phases []PhaseStat `json:"phases,omitempty"`
	// WarmPoolMisses is how many creates over the window found no warm
	// sandbox ready (summed over templates).
	WarmPoolMisses *int `json:"warm_pool_misses,omitempty"`
}

// clkTck is USER_HZ, the unit of /proc/stat. It is 100 on every Linux
// architecture Go supports, and x/sys/unix has no sysconf to ask.
const clkTck = 100

// parseProcStat returns the host's cumulative busy time from the "cpu"
// line of /proc/stat: user+nice+system+irq+softirq+steal. idle and iowait
// are not busy; guest time is already inside user.
func parseProcStat(data []byte) (time.Duration, error) {
	for _, line := range bytes.Split(data, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 9 {
			return 0, fmt.Errorf("/proc/stat: cpu line has %d fields, want at least 8 counters", len(f)-1)
		}
		var busy uint64
		for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
			v, err := strconv.ParseUint(string(f[i]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: cpu field %d: %w", i, err)
			}
			busy += v
		}
		return time.Duration(busy) * time.Second / clkTck, nil
	}
	return 0, errors.New("/proc/stat has no cpu line (not Linux?)")
}

// hostBusy reads the host's cumulative busy time.
func hostBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseProcStat(data)
}

// selfCPU is cube-bench's own user+system time, subtracted from the host's
// so the client's JSON and HTTP work is not billed to the server.
func selfCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return rusageCPU(&ru)
}

func rusageCPU(ru *unix.Rusage) time.Duration {
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// settlePolicy says how long to wait for the host to go quiet after the
// last measured operation: it is quiet when its busy time over one Window
// is below Threshold of one core; it waits at most Limit (0: not at all).
type settlePolicy struct {
	Window, Limit time.Duration
	Threshold     float64
}

// defaultSettle: 10 % of a core over 250 ms, for at most 5 s, long enough
// for a warm-pool refill or a prepared container to finish starting.
var defaultSettle = settlePolicy{Window: 250 * time.Millisecond, Limit: 5 * time.Second, Threshold: 0.10}

// busySampler returns the host busy time over the next window.
type busySampler func(window time.Duration) (time.Duration, error)

// sampleHost is the real busySampler: /proc/stat before and after a sleep.
func sampleHost(window time.Duration) (time.Duration, error) {
	b0, err := hostBusy()
	if err != nil {
		return 0, err
	}
	time.Sleep(window)
	b1, err := hostBusy()
	return b1 - b0, err
}

// settle samples until one window is quiet or the limit is spent, and
// returns the time waited and whether the host went quiet. A sampler
// error ends the wait: better a short window than none.
func (p settlePolicy) settle(sample busySampler) (waited time.Duration, quiet bool) {
	if p.Window <= 0 {
		return 0, true
	}
	for waited < p.Limit {
		busy, err := sample(p.Window)
		waited += p.Window
		if err != nil {
			return waited, false
		}
		if float64(busy) < p.Threshold*float64(p.Window) {
			return waited, true
		}
	}
	return waited, p.Limit <= 0
}

// cpuWindow measures host CPU from start to stop.
type cpuWindow struct {
	host0, self0 time.Duration
	ok           bool
}

func startCPU() cpuWindow {
	h, err := hostBusy()
	return cpuWindow{host0: h, self0: selfCPU(), ok: err == nil}
}

// stop settles the host, closes the window and spreads its CPU over ops;
// nil when /proc/stat cannot be read or nothing was measured.
func (w cpuWindow) stop(p settlePolicy, sample busySampler, ops int) *CPUReport {
	if !w.ok || ops < 1 {
		return nil
	}
	waited, quiet := p.settle(sample)
	h, err := hostBusy()
	if err != nil {
		return nil
	}
	rep := &CPUReport{
		HostBusyMS: ms(h - w.host0),
		BenchMS:    ms(selfCPU() - w.self0),
		SettleMS:   ms(waited),
		Unsettled:  !quiet,
		Ops:        ops,
	}
	rep.PerOpMS = round3(max(0, rep.HostBusyMS-rep.BenchMS) / float64(ops))
	return rep
}

// meter is the measured window of a server benchmark: host CPU and the
// server's /metrics, both read at its start and its end.
type meter struct {
	c         *Client
	cpu       cpuWindow
	metrics   *metricsSnapshot
	started   bool
	preSettle time.Duration
}

// start opens the window; it is called right before the first measured
// operation, after warm-up, and a second call does nothing.
func (m *meter) start() {
	if m == nil || m.started {
		return
	}
	m.started = true
	m.preSettle, _ = m.c.settle.settle(sampleHost)
	m.metrics = m.c.scrapeMetrics()
	m.cpu = startCPU()
}

// stop closes the window after ops measured operations and returns what it
// saw; a window never opened (nothing measured) yields nothing.
func (m *meter) stop(ops int) Telemetry {
	var t Telemetry
	if m == nil || !m.started {
		return t
	}
	t.CPU = m.cpu.stop(m.c.settle, sampleHost, ops)
	if t.CPU != nil {
		t.CPU.PreSettleMS = ms(m.preSettle)
	}
	if m.metrics != nil {
		if after := m.c.scrapeMetrics(); after != nil {
			t.Phases, t.WarmPoolMisses = after.since(m.metrics)
		}
	}
	return t
}

// round3 keeps a derived millisecond figure to the microsecond, as ms
// does for measured ones, so the JSON does not carry float noise.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// cpuLine is the text output's CPU summary.
func cpuLine(c *CPUReport) string {
	if c == nil {
		return "CPU per op: not measured (/proc/stat unreadable or no operation measured)"
	}
	s := fmt.Sprintf("CPU per op: %.1f ms (host busy %.0f ms over %d ops, settle %.0f ms", c.PerOpMS, c.HostBusyMS, c.Ops, c.SettleMS)
	if c.Unsettled {
		s += ", host still busy at the limit"
	}
	return s + ")"
}
