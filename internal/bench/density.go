package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"cube/internal/hoststat"
)

// MemInfo is the part of /proc/meminfo the density benchmark reads, in KiB.
type MemInfo struct {
	Total, Free, Available, Buffers, Cached, SReclaimable, Shmem int64
}

// Used is what `free` (procps-ng 4) calls used: total minus available.
func (m MemInfo) Used() int64 { return m.Total - m.Available }

// UsedClassic is the older `free` definition: total minus free, buffers
// and caches. It misses memory that gVisor keeps in its shared-memory
// file (counted as cache), which is why it is reported only beside Used.
func (m MemInfo) UsedClassic() int64 {
	return m.Total - m.Free - m.Buffers - m.Cached - m.SReclaimable
}

// ParseMemInfo reads /proc/meminfo's format.
func ParseMemInfo(r io.Reader) (MemInfo, error) {
	var m MemInfo
	fields := map[string]*int64{
		"MemTotal": &m.Total, "MemFree": &m.Free, "MemAvailable": &m.Available,
		"Buffers": &m.Buffers, "Cached": &m.Cached, "SReclaimable": &m.SReclaimable, "Shmem": &m.Shmem,
	}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		p, want := fields[name]
		if !want {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return m, fmt.Errorf("meminfo: %s has no value", name)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return m, fmt.Errorf("meminfo: %s: %w", name, err)
		}
		*p = v
	}
	if err := sc.Err(); err != nil {
		return m, err
	}
	if m.Total == 0 || m.Available == 0 {
		return m, fmt.Errorf("meminfo: no MemTotal or MemAvailable")
	}
	return m, nil
}

// ReadMemInfo reads the host's /proc/meminfo.
func ReadMemInfo() (MemInfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return MemInfo{}, err
	}
	defer f.Close()
	return ParseMemInfo(f)
}

// DensityConfig configures the density benchmark.
type DensityConfig struct {
	APIURL   string `json:"api_url"`
	Template string `json:"template"`
	// Batches are the sizes of the successive create-only batches (the
	// report's 1, 4, 5, 10 for a running total of 20).
	Batches []int `json:"batches"`
	// Settle is how long to wait after a batch before reading memory, so
	// lazily started work inside the sandboxes is counted.
	Settle  time.Duration `json:"settle_ns"`
	Timeout int           `json:"timeout_s"`
	// RunscMatch picks the server's runsc processes out of the host's
	// (the server's runsc --root); empty counts every runsc process.
	RunscMatch string `json:"runsc_match"`
}

// DensityPoint is the host's memory after a number of idle sandboxes.
type DensityPoint struct {
	Sandboxes     int     `json:"sandboxes"`
	UsedMB        float64 `json:"used_mb"`
	UsedClassicMB float64 `json:"used_classic_mb"`
	ShmemMB       float64 `json:"shmem_mb"`
	RunscPSSMB    float64 `json:"runsc_pss_mb"`
	RunscProcs    int     `json:"runsc_procs"`
	// Per-sandbox growth over the baseline.
	PerSandboxMB        float64 `json:"per_sandbox_mb"`
	PerSandboxClassicMB float64 `json:"per_sandbox_classic_mb"`
	PerSandboxPSSMB     float64 `json:"per_sandbox_pss_mb"`
}

// DensityReport is the JSON document of a density run.
type DensityReport struct {
	Config   DensityConfig  `json:"config"`
	Baseline DensityPoint   `json:"baseline"`
	Points   []DensityPoint `json:"points"`
	Create   Stats          `json:"create"`
	// Failed counts creates that did not succeed.
	Failed int `json:"failed"`
}

func measurePoint(n int, match string) (DensityPoint, error) {
	m, err := ReadMemInfo()
	if err != nil {
		return DensityPoint{}, err
	}
	pss, procs, err := hoststat.RunscPSS("/proc", match)
	if err != nil {
		return DensityPoint{}, err
	}
	return DensityPoint{
		Sandboxes: n, UsedMB: kibToMB(m.Used()), UsedClassicMB: kibToMB(m.UsedClassic()),
		ShmemMB: kibToMB(m.Shmem), RunscPSSMB: kibToMB(pss), RunscProcs: procs,
	}, nil
}

func kibToMB(k int64) float64 { return float64(k) / 1024 }

// RunDensity starts the batches of idle sandboxes, measures host memory
// after each, and deletes every sandbox it started before returning. It
// reads the local /proc, so it must run on the server's host.
func RunDensity(ctx context.Context, c *Client, cfg DensityConfig, p RoundProgress) (*DensityReport, error) {
	if cfg.Template == "" {
		return nil, fmt.Errorf("no template: pass -t TEMPLATE or set CUBE_TEMPLATE_ID")
	}
	if len(cfg.Batches) == 0 {
		return nil, fmt.Errorf("no batches given")
	}
	for _, b := range cfg.Batches {
		if b < 1 {
			return nil, fmt.Errorf("batch sizes must be at least 1, got %d", b)
		}
	}
	f := newFleet(c)
	defer f.Close()
	base, err := measurePoint(0, cfg.RunscMatch)
	if err != nil {
		return nil, fmt.Errorf("reading host memory: %w", err)
	}
	rep := &DensityReport{Config: cfg, Baseline: base}
	var creates []float64
	total := 0
	for i, b := range cfg.Batches {
		res, err := RunCreate(ctx, c, CreateConfig{APIURL: cfg.APIURL, Template: cfg.Template, Concurrency: b, Total: b, Mode: ModeCreateOnly, Timeout: cfg.Timeout}, nil)
		if err != nil {
			return nil, err
		}
		f.adopt(res.Kept...)
		total += len(res.Kept)
		rep.Failed += res.Summary.Failed
		for _, s := range res.Raw {
			if s.SandboxID != "" {
				creates = append(creates, s.CreateMS)
			}
		}
		if res.Summary.Failed > 0 && len(res.Kept) == 0 {
			return nil, fmt.Errorf("batch %d: no sandbox started: %s", i+1, strings.Join(res.Summary.TopErrors(1), ""))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(cfg.Settle):
		}
		pt, err := measurePoint(total, cfg.RunscMatch)
		if err != nil {
			return nil, err
		}
		if total > 0 {
			n := float64(total)
			pt.PerSandboxMB = (pt.UsedMB - base.UsedMB) / n
			pt.PerSandboxClassicMB = (pt.UsedClassicMB - base.UsedClassicMB) / n
			pt.PerSandboxPSSMB = (pt.RunscPSSMB - base.RunscPSSMB) / n
		}
		rep.Points = append(rep.Points, pt)
		p.tell(i+1, len(cfg.Batches))
	}
	rep.Create = Summarize(creates)
	return rep, nil
}

// WriteDensityText prints the density table.
func WriteDensityText(w io.Writer, rep *DensityReport) {
	fmt.Fprintf(w, "density  template=%s  batches=%v  settle=%s\n", rep.Config.Template, rep.Config.Batches, rep.Config.Settle)
	fmt.Fprintf(w, "%9s %10s %12s %10s %11s %12s %14s %12s\n", "sandboxes", "used_mb", "per_sb_mb", "shmem_mb", "runsc_pss", "per_sb_pss", "per_sb_classic", "runsc_procs")
	b := rep.Baseline
	fmt.Fprintf(w, "%9d %10.1f %12s %10.1f %11.1f %12s %14s %12d\n", 0, b.UsedMB, "-", b.ShmemMB, b.RunscPSSMB, "-", "-", b.RunscProcs)
	for _, p := range rep.Points {
		fmt.Fprintf(w, "%9d %10.1f %12.1f %10.1f %11.1f %12.1f %14.1f %12d\n", p.Sandboxes, p.UsedMB, p.PerSandboxMB, p.ShmemMB, p.RunscPSSMB, p.PerSandboxPSSMB, p.PerSandboxClassicMB, p.RunscProcs)
	}
	if rep.Failed > 0 {
		fmt.Fprintf(w, "%d creates failed\n", rep.Failed)
	}
	if n := len(rep.Points); n > 0 && rep.Points[n-1].RunscProcs == 0 {
		fmt.Fprintf(w, "no runsc process matched %q: PSS is not measured (pass the server's --data-dir)\n", rep.Config.RunscMatch)
	}
}
