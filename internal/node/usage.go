package node

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Per-sandbox resource series. Each is labelled by sandbox ID, so the
// series exist only while their sandbox runs: the collector emits what it
// reads at scrape time and keeps nothing for a sandbox that is gone.
var (
	sandboxCPUDesc = prometheus.NewDesc("cube_sandbox_cpu_seconds_total",
		"CPU time a running sandbox has used, by sandbox (series end with the sandbox).", []string{"sandbox"}, nil)
	sandboxMemDesc = prometheus.NewDesc("cube_sandbox_memory_bytes",
		"Memory a running sandbox uses, by sandbox (series end with the sandbox).", []string{"sandbox"}, nil)
	capacityDesc = prometheus.NewDesc("cube_sandbox_capacity",
		"Sandboxes (running plus paused) the node allows at once.", nil, nil)
)

const (
	// usageMaxAge is how long a sandbox's reading serves scrapes: each
	// reading asks the runtime (a runsc process), so a busy scraper does
	// not cost one per sandbox per scrape.
	usageMaxAge = 10 * time.Second
	// usageReaders bounds the readings taken at once.
	usageReaders = 4
	// usageTimeout bounds one reading; a sandbox that does not answer in
	// time keeps its previous reading, or has none.
	usageTimeout = 3 * time.Second
)

type usageReading struct {
	at  time.Time
	cpu time.Duration
	mem uint64
}

// usageCollector reads every running sandbox's CPU time and memory.
type usageCollector struct {
	n  *Node
	mu sync.Mutex // serialises scrapes and guards last
	// last holds the latest reading of each sandbox that was running at
	// the previous scrape; the others are dropped at each scrape.
	last map[string]usageReading
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- sandboxCPUDesc
	ch <- sandboxMemDesc
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil {
		c.last = map[string]usageReading{}
	}
	boxes := map[string]*container{}
	c.n.mu.Lock()
	for id, sb := range c.n.sandboxes {
		if sb.state.running() && sb.box != nil {
			boxes[id] = sb.box
		}
	}
	c.n.mu.Unlock()
	for id := range c.last {
		if boxes[id] == nil {
			delete(c.last, id)
		}
	}
	now := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, usageReaders)
	stale := map[string]*container{}
	for id, box := range boxes {
		if r, ok := c.last[id]; !ok || now.Sub(r.at) >= usageMaxAge {
			stale[id] = box
		}
	}
	for id, box := range stale {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), usageTimeout)
			defer cancel()
			st, err := box.sb.Stats(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			c.last[id] = usageReading{at: time.Now(), cpu: st.CPUTime, mem: st.MemoryBytes}
			mu.Unlock()
		}()
	}
	wg.Wait()
	for id, r := range c.last {
		ch <- prometheus.MustNewConstMetric(sandboxCPUDesc, prometheus.CounterValue, r.cpu.Seconds(), id)
		ch <- prometheus.MustNewConstMetric(sandboxMemDesc, prometheus.GaugeValue, float64(r.mem), id)
	}
}
