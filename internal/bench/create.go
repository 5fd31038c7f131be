package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Modes of the create benchmark.
const (
	ModeCreateDelete = "create-delete"
	ModeCreateOnly   = "create-only"
)

// CreateConfig is what a create run was asked to do; it is echoed in the
// JSON report so a result file says how it was made.
type CreateConfig struct {
	APIURL      string `json:"api_url"`
	Template    string `json:"template"`
	Concurrency int    `json:"concurrency"`
	Total       int    `json:"total"`
	Warmup      int    `json:"warmup"`
	Mode        string `json:"mode"`
	// Timeout is the sandbox lifetime asked for in each create (seconds).
	Timeout int `json:"timeout_s"`
}

// Validate rejects configurations that cannot run.
func (c CreateConfig) Validate() error {
	switch {
	case c.Template == "":
		return fmt.Errorf("no template: pass -t TEMPLATE or set CUBE_TEMPLATE_ID")
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency (-c) must be at least 1, got %d", c.Concurrency)
	case c.Total < 1:
		return fmt.Errorf("total (-n) must be at least 1, got %d", c.Total)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up rounds (-w) cannot be negative, got %d", c.Warmup)
	case c.Mode != ModeCreateDelete && c.Mode != ModeCreateOnly:
		return fmt.Errorf("mode (-m) must be %s or %s, got %q", ModeCreateDelete, ModeCreateOnly, c.Mode)
	case c.Timeout < 0:
		return fmt.Errorf("timeout cannot be negative, got %d", c.Timeout)
	}
	return nil
}

// Sample is one measured iteration. Seq counts from 1.
type Sample struct {
	Seq       int     `json:"seq"`
	SandboxID string  `json:"sandbox_id,omitempty"`
	StartMS   float64 `json:"start_ms"`
	CreateMS  float64 `json:"create_ms"`
	DeleteMS  float64 `json:"delete_ms,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Summary is the whole-run outcome. An iteration succeeds when its create
// and (in create-delete mode) its delete succeeded.
type Summary struct {
	Total         int            `json:"total"`
	Successful    int            `json:"successful"`
	Failed        int            `json:"failed"`
	SuccessRate   float64        `json:"success_rate"`
	TotalTimeS    float64        `json:"total_time_s"`
	ThroughputQPS float64        `json:"throughput_qps"`
	Errors        map[string]int `json:"errors,omitempty"`
	// Partial is set when the run was interrupted before every iteration
	// was dispatched.
	Partial bool `json:"partial,omitempty"`
}

// CreateReport is the JSON document of a create run.
type CreateReport struct {
	Config  CreateConfig `json:"config"`
	Summary Summary      `json:"summary"`
	Create  Stats        `json:"create"`
	Delete  Stats        `json:"delete"`
	Raw     []Sample     `json:"raw"`
	// Kept lists the sandboxes left running in create-only mode.
	Kept []string `json:"kept,omitempty"`
	// Telemetry covers the measured iterations; an operation is one
	// iteration (a create and, in create-delete mode, its delete).
	Telemetry
}

// Progress is told after each measured iteration, one call at a time.
type Progress func(done, failed int)

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RunCreate runs warm-up iterations (one at a time, not counted), then
// cfg.Total create(-delete) iterations with cfg.Concurrency workers. A
// cancelled ctx stops dispatching; sandboxes already created are still
// deleted in create-delete mode.
func RunCreate(ctx context.Context, c *Client, cfg CreateConfig, progress Progress) (*CreateReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Warm-up: page cache, pools, connections. A failure here is fatal and
	// reported as such, because it means nothing below can succeed.
	for i := 0; i < cfg.Warmup; i++ {
		sb, err := c.CreateSandbox(ctx, cfg.Template, cfg.Timeout)
		if err != nil {
			return nil, fmt.Errorf("warm-up create %d of %d: %w", i+1, cfg.Warmup, err)
		}
		if err := c.DeleteSandbox(context.WithoutCancel(ctx), sb.SandboxID); err != nil {
			return nil, fmt.Errorf("warm-up delete %d of %d: %w", i+1, cfg.Warmup, err)
		}
	}

	samples := make([]Sample, cfg.Total)
	jobs := make(chan int)
	var mu sync.Mutex
	done, failed := 0, 0
	var wg sync.WaitGroup
	m := c.newMeter()
	m.start()
	start := time.Now()
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				s := iteration(ctx, c, cfg, start)
				s.Seq = i + 1
				samples[i] = s
				mu.Lock()
				done++
				if s.Error != "" {
					failed++
				}
				// Told under the lock so the callback needs no locking.
				if progress != nil {
					progress(done, failed)
				}
				mu.Unlock()
			}
		}()
	}
	dispatched := 0
dispatch:
	for i := 0; i < cfg.Total; i++ {
		select {
		case jobs <- i:
			dispatched++
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)

	rep := &CreateReport{Config: cfg, Raw: samples[:dispatched], Telemetry: m.stop(dispatched)}
	rep.Summary = summarize(rep.Raw, cfg, elapsed)
	rep.Summary.Partial = dispatched < cfg.Total
	var creates, deletes []float64
	for _, s := range rep.Raw {
		if s.SandboxID != "" {
			creates = append(creates, s.CreateMS)
			if cfg.Mode == ModeCreateOnly {
				rep.Kept = append(rep.Kept, s.SandboxID)
			}
		}
		if s.DeleteMS > 0 && s.Error == "" {
			deletes = append(deletes, s.DeleteMS)
		}
	}
	rep.Create = Summarize(creates)
	rep.Delete = Summarize(deletes)
	return rep, nil
}

func iteration(ctx context.Context, c *Client, cfg CreateConfig, start time.Time) Sample {
	var s Sample
	t0 := time.Now()
	s.StartMS = ms(t0.Sub(start))
	sb, err := c.CreateSandbox(ctx, cfg.Template, cfg.Timeout)
	s.CreateMS = ms(time.Since(t0))
	if err != nil {
		s.Error = err.Error()
		return s
	}
	s.SandboxID = sb.SandboxID
	if cfg.Mode == ModeCreateDelete {
		// The delete runs even after an interrupt so nothing is left behind.
		t1 := time.Now()
		err := c.DeleteSandbox(context.WithoutCancel(ctx), sb.SandboxID)
		s.DeleteMS = ms(time.Since(t1))
		if err != nil {
			s.Error = err.Error()
		}
	}
	return s
}

func summarize(raw []Sample, cfg CreateConfig, elapsed time.Duration) Summary {
	sum := Summary{Total: len(raw), TotalTimeS: elapsed.Seconds()}
	for _, s := range raw {
		if s.Error == "" {
			sum.Successful++
			continue
		}
		sum.Failed++
		if sum.Errors == nil {
			sum.Errors = map[string]int{}
		}
		sum.Errors[s.Error]++
	}
	if sum.Total > 0 {
		sum.SuccessRate = 100 * float64(sum.Successful) / float64(sum.Total)
	}
	if elapsed > 0 {
		sum.ThroughputQPS = float64(sum.Successful) / elapsed.Seconds()
	}
	return sum
}

// TopErrors returns the distinct error messages, most frequent first.
func (s Summary) TopErrors(n int) []string {
	type kv struct {
		msg string
		n   int
	}
	var all []kv
	for m, c := range s.Errors {
		all = append(all, kv{m, c})
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].n != all[j].n {
			return all[i].n > all[j].n
		}
		return all[i].msg < all[j].msg
	})
	var out []string
	for i, e := range all {
		if i == n {
			break
		}
		out = append(out, fmt.Sprintf("%d× %s", e.n, e.msg))
	}
	return out
}
