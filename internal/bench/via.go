package bench

import (
	"context"
	"fmt"
	"io"
	"time"
)

// A cluster answers on every node: a request to a node that does not hold
// the sandbox (or the template of a create) is forwarded to the one that
// does. The via benchmark measures what that hop costs, side by side in
// one run: the same operations sent to the holding node (direct) and to
// another node (via), alternating which goes first each round so drift of
// the host hits both alike.

// ViaConfig is a via run's settings.
type ViaConfig struct {
	APIURL   string `json:"api_url"`
	Via      string `json:"via"`
	Template string `json:"template"`
	Timeout  int    `json:"timeout"`
	Rounds   int    `json:"rounds"`
	Warmup   int    `json:"warmup"`
	// Gets is the number of GET /sandboxes/{id} per round and path: the
	// hop alone, without a sandbox's start to hide it.
	Gets int `json:"gets"`
}

func (c ViaConfig) validate() error {
	switch {
	case c.Via == "":
		return fmt.Errorf("--via is required: the URL of a node other than --api-url's, which forwards to it")
	case c.Rounds < 1:
		return fmt.Errorf("--rounds must be at least 1")
	case c.Gets < 1:
		return fmt.Errorf("--gets must be at least 1")
	}
	return nil
}

// ViaRow is one operation through one path.
type ViaRow struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Stats
}

// ViaReport is the JSON document of a via run. Added* are via minus
// direct at the median, the cost of the hop.
type ViaReport struct {
	Command        string    `json:"command"`
	Config         ViaConfig `json:"config"`
	Node           string    `json:"node"`
	Rows           []ViaRow  `json:"rows"`
	AddedCreateP50 float64   `json:"added_create_p50_ms"`
	AddedGetP50    float64   `json:"added_get_p50_ms"`
}

// RunVia measures creates and reads through direct (the node holding
// cfg.Template) and via (another node). Every sandbox it creates is
// deleted through direct.
func RunVia(ctx context.Context, direct, via *Client, cfg ViaConfig, progress RoundProgress) (*ViaReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	rep := &ViaReport{Command: "via", Config: cfg}
	paths := []struct {
		name string
		c    *Client
	}{{"direct", direct}, {"via", via}}
	create := map[string][]float64{}
	get := map[string][]float64{}
	total := cfg.Warmup + cfg.Rounds
	for round := 0; round < total; round++ {
		for k := range paths {
			p := paths[(k+round)%2]
			t := time.Now()
			sb, err := p.c.CreateSandbox(ctx, cfg.Template, cfg.Timeout)
			took := ms(time.Since(t))
			if err != nil {
				return nil, fmt.Errorf("create through %s: %w", p.name, err)
			}
			if rep.Node == "" {
				rep.Node = sb.ClientID
			}
			var reads []float64
			for range cfg.Gets {
				t := time.Now()
				if _, err := p.c.api.GetSandbox(ctx, sb.SandboxID); err != nil {
					direct.DeleteSandbox(context.WithoutCancel(ctx), sb.SandboxID)
					return nil, fmt.Errorf("get through %s: %w", p.name, explain(err))
				}
				reads = append(reads, ms(time.Since(t)))
			}
			if err := direct.DeleteSandbox(context.WithoutCancel(ctx), sb.SandboxID); err != nil {
				return nil, fmt.Errorf("delete %s: %w", sb.SandboxID, err)
			}
			if sb.ClientID != rep.Node {
				return nil, fmt.Errorf("the sandboxes landed on nodes %s and %s: --template must be held by one node only (give a template of --api-url's node)", rep.Node, sb.ClientID)
			}
			if round >= cfg.Warmup {
				create[p.name] = append(create[p.name], took)
				get[p.name] = append(get[p.name], reads...)
			}
		}
		if progress != nil {
			progress(round+1, total)
		}
	}
	for _, op := range []struct {
		name string
		xs   map[string][]float64
	}{{"create", create}, {"get", get}} {
		for _, p := range paths {
			rep.Rows = append(rep.Rows, ViaRow{Op: op.name, Path: p.name, Stats: Summarize(op.xs[p.name])})
		}
	}
	rep.AddedCreateP50 = rep.Rows[1].P50 - rep.Rows[0].P50
	rep.AddedGetP50 = rep.Rows[3].P50 - rep.Rows[2].P50
	return rep, nil
}

// WriteViaTable prints a via run as a table: per operation and path the
// latency percentiles, then what the hop added at the median.
func WriteViaTable(w io.Writer, rep *ViaReport) {
	fmt.Fprintf(w, "sandboxes on node %s; via = through another node\n", rep.Node)
	fmt.Fprintf(w, "%-8s %-7s %5s %9s %9s %9s %9s %9s\n", "op", "path", "n", "p50_ms", "p95_ms", "avg_ms", "min_ms", "max_ms")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%-8s %-7s %5d %9.2f %9.2f %9.2f %9.2f %9.2f\n", r.Op, r.Path, r.Count, r.P50, r.P95, r.Avg, r.Min, r.Max)
	}
	fmt.Fprintf(w, "added by the hop at p50: create %+.2f ms, get %+.2f ms\n", rep.AddedCreateP50, rep.AddedGetP50)
}
