package webui

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"time"

	"cube/internal/hoststat"

	dto "github.com/prometheus/client_model/go"
)

// Summary is what the overview and node pages poll: the values of the
// server's own metrics at one instant. Counters and histograms are
// cumulative since the server started; the page turns two polls into rates
// and windowed percentiles.
type Summary struct {
	Time      int64            `json:"time"` // Unix milliseconds
	Version   string           `json:"version"`
	Runtime   string           `json:"runtime"`
	Sandboxes map[string]int   `json:"sandboxes"` // by state
	Capacity  Capacity         `json:"capacity"`
	WarmPools []WarmPool       `json:"warmPools"`
	Creates   map[string]int64 `json:"creates"` // by result: ok, error
	// CreateLatency is the histogram of sandbox creation answers (all
	// results); Operations holds the other lifecycle operations by name.
	CreateLatency Histogram            `json:"createLatency"`
	Operations    map[string]Histogram `json:"operations"`
	Builds        map[string]Histogram `json:"builds"` // by result
	Host          Host                 `json:"host"`
	DataDir       Disk                 `json:"dataDir"`
}

// Capacity is how many sandboxes exist (running or paused) out of how
// many the node allows.
type Capacity struct {
	Used int `json:"used"`
	Max  int `json:"max"`
}

// WarmPool is one template's pool of sandboxes restored ahead of demand.
type WarmPool struct {
	Template string  `json:"template"`
	Ready    float64 `json:"ready"`
	Target   float64 `json:"target"`
	Misses   float64 `json:"misses"` // creates that found it empty, cumulative
}

// Histogram is a cumulative Prometheus histogram: Buckets[i] counts the
// observations at or below Bounds[i] seconds (the +Inf bucket is Count).
// P50, P95 and P99 are estimated over everything observed so far.
type Histogram struct {
	Count   uint64    `json:"count"`
	Sum     float64   `json:"sum"`
	Bounds  []float64 `json:"bounds"`
	Buckets []uint64  `json:"buckets"`
	P50     *float64  `json:"p50"`
	P95     *float64  `json:"p95"`
	P99     *float64  `json:"p99"`
}

// Host is the machine's CPU time (cumulative seconds) and memory.
type Host struct {
	CPUs            int     `json:"cpus"`
	CPUBusySeconds  float64 `json:"cpuBusySeconds"`
	CPUTotalSeconds float64 `json:"cpuTotalSeconds"`
	MemTotalBytes   uint64  `json:"memTotalBytes"`
	MemAvailBytes   uint64  `json:"memAvailableBytes"`
}

// Disk is the usage of the filesystem that holds a directory.
type Disk struct {
	Path       string `json:"path"`
	TotalBytes uint64 `json:"totalBytes"`
	FreeBytes  uint64 `json:"freeBytes"`
}

// Metric names the summary reads.
const (
	mSandboxes  = "cube_sandboxes"
	mCapacity   = "cube_sandbox_capacity"
	mCreate     = "cube_sandbox_create_duration_seconds"
	mOperation  = "cube_sandbox_operation_duration_seconds"
	mPhase      = "cube_operation_phase_seconds"
	mBuild      = "cube_template_build_duration_seconds"
	mWarmReady  = "cube_warm_pool_sandboxes"
	mWarmTarget = "cube_warm_pool_target"
	mWarmMisses = "cube_warm_pool_misses_total"
	labelState  = "state"
	labelResult = "result"
	labelOp     = "op"
	labelTmpl   = "template"
)

func (h *Handler) serveSummary(w http.ResponseWriter, r *http.Request) {
	s, err := h.Summary()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		// A collector that failed (the store, say) leaves the rest of the
		// registry readable; the page shows what there is.
		slog.Warn("console summary: gather metrics", "err", err)
	}
	_ = json.NewEncoder(w).Encode(s)
}

// Summary reads the registry and the host once.
func (h *Handler) Summary() (*Summary, error) {
	s := &Summary{
		Time: time.Now().UnixMilli(), Version: h.cfg.Version, Runtime: h.cfg.Runtime,
		Sandboxes: map[string]int{"running": 0, "paused": 0}, Creates: map[string]int64{"ok": 0, "error": 0},
		Operations: map[string]Histogram{}, Builds: map[string]Histogram{}, WarmPools: []WarmPool{},
		Capacity: Capacity{Max: h.cfg.MaxSandboxes},
	}
	s.CreateLatency = histogram(nil)
	var gatherErr error
	if h.cfg.Gatherer != nil {
		var families []*dto.MetricFamily
		families, gatherErr = h.cfg.Gatherer.Gather()
		s.read(families)
	}
	for st, n := range s.Sandboxes {
		if st == "running" || st == "paused" {
			s.Capacity.Used += n
		}
	}
	s.Host = h.host.read()
	s.DataDir = diskUsage(h.cfg.DataDir)
	return s, gatherErr
}

func (s *Summary) read(families []*dto.MetricFamily) {
	pools := map[string]*WarmPool{}
	pool := func(m *dto.Metric) *WarmPool {
		t := label(m, labelTmpl)
		if pools[t] == nil {
			pools[t] = &WarmPool{Template: t}
		}
		return pools[t]
	}
	var creates []*dto.Histogram
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case mSandboxes:
				s.Sandboxes[label(m, labelState)] = int(m.GetGauge().GetValue())
			case mCapacity:
				s.Capacity.Max = int(m.GetGauge().GetValue())
			case mCreate:
				creates = append(creates, m.GetHistogram())
				s.Creates[label(m, labelResult)] += int64(m.GetHistogram().GetSampleCount())
			case mOperation:
				s.Operations[label(m, labelOp)] = merge(s.Operations[label(m, labelOp)], m.GetHistogram())
			case mPhase:
				// A restore's phases after the image check: into a
				// prepared container, or cold into a fresh one.
				if label(m, labelOp) == "restore" && label(m, "phase") != "verify" {
					s.Operations["restore"] = merge(s.Operations["restore"], m.GetHistogram())
				}
			case mBuild:
				s.Builds[label(m, labelResult)] = merge(s.Builds[label(m, labelResult)], m.GetHistogram())
			case mWarmReady:
				pool(m).Ready = m.GetGauge().GetValue()
			case mWarmTarget:
				pool(m).Target = m.GetGauge().GetValue()
			case mWarmMisses:
				pool(m).Misses = m.GetCounter().GetValue()
			}
		}
	}
	s.CreateLatency = histogram(creates)
	for _, p := range pools {
		s.WarmPools = append(s.WarmPools, *p)
	}
	sort.Slice(s.WarmPools, func(i, j int) bool { return s.WarmPools[i].Template < s.WarmPools[j].Template })
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// histogram adds up histograms of the same buckets (one per label value).
func histogram(hs []*dto.Histogram) Histogram {
	var out Histogram
	for _, h := range hs {
		out = merge(out, h)
	}
	if out.Bounds == nil {
		out.Bounds, out.Buckets = []float64{}, []uint64{}
	}
	out.P50, out.P95, out.P99 = out.quantile(0.5), out.quantile(0.95), out.quantile(0.99)
	return out
}

func merge(into Histogram, h *dto.Histogram) Histogram {
	if into.Bounds == nil {
		for _, b := range h.GetBucket() {
			if !math.IsInf(b.GetUpperBound(), 1) {
				into.Bounds = append(into.Bounds, b.GetUpperBound())
				into.Buckets = append(into.Buckets, 0)
			}
		}
	}
	into.Count += h.GetSampleCount()
	into.Sum += h.GetSampleSum()
	for i, b := range h.GetBucket() {
		if i < len(into.Buckets) {
			into.Buckets[i] += b.GetCumulativeCount()
		}
	}
	into.P50, into.P95, into.P99 = into.quantile(0.5), into.quantile(0.95), into.quantile(0.99)
	return into
}

// quantile estimates the q-quantile the way Prometheus's
// histogram_quantile does: linearly within the bucket it falls in. Nil
// when nothing was observed; the highest bound when it falls beyond it.
func (h Histogram) quantile(q float64) *float64 {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return nil
	}
	rank := q * float64(h.Count)
	lower, below := 0.0, uint64(0)
	for i, upper := range h.Bounds {
		if float64(h.Buckets[i]) >= rank {
			in := h.Buckets[i] - below
			v := upper
			if in > 0 {
				v = lower + (upper-lower)*(rank-float64(below))/float64(in)
			}
			return &v
		}
		lower, below = upper, h.Buckets[i]
	}
	v := h.Bounds[len(h.Bounds)-1]
	return &v
}

func diskUsage(dir string) Disk {
	d := hoststat.DiskOf(dir)
	return Disk{Path: dir, TotalBytes: d.TotalBytes, FreeBytes: d.FreeBytes}
}
