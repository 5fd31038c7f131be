package usage

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cube/internal/store"
)

// MaxTeamLabels bounds the teams the series name: the first to run
// sandboxes have a series of their own, every later one is added into
// team="other".
const MaxTeamLabels = 50

// OtherTeams is the team label of the teams beyond MaxTeamLabels.
const OtherTeams = "other"

// collectEvery is how long a reading serves scrapes: each one adds up the
// usage table.
const collectEvery = 5 * time.Second

var (
	teamRunningDesc = prometheus.NewDesc("cube_team_sandboxes_running",
		"Sandboxes running on this node, by team (the first 50 teams to run sandboxes here by ID, the rest as team=\"other\").", []string{"team"}, nil)
	teamVCPUDesc = prometheus.NewDesc("cube_team_vcpu_seconds_total",
		"Running time of the sandboxes on this node times their vCPUs, by team (labelled as cube_team_sandboxes_running).", []string{"team"}, nil)
	teamMemoryDesc = prometheus.NewDesc("cube_team_memory_mib_seconds_total",
		"Running time of the sandboxes on this node times their memory in MiB, by team (labelled as cube_team_sandboxes_running).", []string{"team"}, nil)
)

// collector reads the teams' series from the store at scrape time: the
// stretches ended on the node (the usage table) and those under way.
type collector struct {
	r    *Reader
	node string

	mu sync.Mutex // serialises scrapes and guards the fields below
	at time.Time
	// last holds the latest reading by label; the counters never go below
	// it (a stretch that just ended is for a moment neither under way nor
	// in the table yet).
	last map[string]teamReading
	err  error
}

type teamReading struct {
	running   int
	vcpu, mem float64
}

// Collector returns the per-team series of the sandboxes that run and
// ran on node (every node's with ""). Its labels name teams: serve it to
// admin scrapes only.
func (r *Reader) Collector(node string) prometheus.Collector {
	return &collector{r: r, node: node, last: map[string]teamReading{}}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- teamRunningDesc
	ch <- teamVCPUDesc
	ch <- teamMemoryDesc
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.r.now(); now.Sub(c.at) >= collectEvery || now.Before(c.at) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.err = c.read(ctx, now)
		cancel()
		c.at = now
	}
	if c.err != nil {
		for _, d := range []*prometheus.Desc{teamRunningDesc, teamVCPUDesc, teamMemoryDesc} {
			ch <- prometheus.NewInvalidMetric(d, c.err)
		}
		return
	}
	for team, v := range c.last {
		ch <- prometheus.MustNewConstMetric(teamRunningDesc, prometheus.GaugeValue, float64(v.running), team)
		ch <- prometheus.MustNewConstMetric(teamVCPUDesc, prometheus.CounterValue, v.vcpu, team)
		ch <- prometheus.MustNewConstMetric(teamMemoryDesc, prometheus.CounterValue, v.mem, team)
	}
}

// read takes a reading into c.last.
func (c *collector) read(ctx context.Context, now time.Time) error {
	sums, err := c.r.st.SumUsage(ctx, c.node)
	if err != nil {
		return err
	}
	recs, err := c.r.st.Sandboxes().List(ctx, string(store.Running))
	if err != nil {
		return err
	}
	byTeam := map[string]teamReading{}
	// Teams in the order they first ran here: those with ended stretches
	// by their first, then those with only one under way, by ID.
	var order []string
	for _, s := range sums {
		order = append(order, s.Team)
		byTeam[s.Team] = teamReading{vcpu: float64(s.VCPUMillis) / 1000, mem: float64(s.MemoryMiBMillis) / 1000}
	}
	var fresh []string
	for _, rec := range recs {
		if c.node != "" && rec.Node != c.node {
			continue
		}
		v, seen := byTeam[rec.Team]
		if !seen && !slices.Contains(fresh, rec.Team) {
			fresh = append(fresh, rec.Team)
		}
		secs := max(now.Sub(since(rec)).Seconds(), 0)
		v.running++
		v.vcpu += secs * float64(max(rec.CPUCount, 1))
		v.mem += secs * float64(rec.MemoryMB)
		byTeam[rec.Team] = v
	}
	slices.Sort(fresh)
	order = append(order, fresh...)
	labelled := map[string]teamReading{}
	for i, team := range order {
		label := team
		if i >= MaxTeamLabels || team == "" {
			label = OtherTeams
		}
		v, add := labelled[label], byTeam[team]
		labelled[label] = teamReading{running: v.running + add.running, vcpu: v.vcpu + add.vcpu, mem: v.mem + add.mem}
	}
	for label, v := range labelled {
		prev := c.last[label]
		v.vcpu, v.mem = max(v.vcpu, prev.vcpu), max(v.mem, prev.mem)
		labelled[label] = v
	}
	// A label no longer read (a team that ran only a stretch under way,
	// passed by teams whose stretches ended first) keeps its counters
	// with nothing running, while the bound allows.
	for label, prev := range c.last {
		if _, ok := labelled[label]; !ok && len(labelled) <= MaxTeamLabels {
			prev.running = 0
			labelled[label] = prev
		}
	}
	c.last = labelled
	return nil
}
