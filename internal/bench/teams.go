package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"cube/internal/api/wire"
	"cube/internal/client"
	"cube/internal/id"
)

// Every request is checked against its API key, and a create, resume or
// fork of a team with quotas also counts the team's running sandboxes.
// The teams benchmark measures what those checks add, side by side in one
// run: the same operations with the admin key (the first team, which has
// no quotas: no quota check) and with the key of a throwaway team whose
// quotas are set high enough never to be reached (the check runs, with
// its caches as they are in service), alternating which goes first each
// round so drift of the host hits both alike. Both paths check a key; the
// key check alone is measured by the teams package's Go benchmarks.
//
// A second measurement runs creates of two such teams at once, to show
// that the check of one team does not hold up another's creates.

// TeamsConfig is a teams run's settings.
type TeamsConfig struct {
	APIURL   string `json:"api_url"`
	Template string `json:"template"`
	Timeout  int    `json:"timeout"`
	Rounds   int    `json:"rounds"`
	Warmup   int    `json:"warmup"`
	// Gets is the number of GET /sandboxes/{id} per round and key.
	Gets int `json:"gets"`
	// Background idle sandboxes of the first team are held during the
	// run, so the quota check's scan of the store has rows to read.
	Background int `json:"background"`
	// Concurrency and Total are the creates in flight and the creates of
	// each team in the second measurement; Passes repeats it, in
	// alternating order.
	Concurrency int `json:"concurrency"`
	Total       int `json:"total"`
	Passes      int `json:"passes"`
}

func (c TeamsConfig) validate() error {
	switch {
	case c.Template == "":
		return errors.New("no template: pass -t TEMPLATE or set CUBE_TEMPLATE_ID")
	case c.Rounds < 1:
		return errors.New("--rounds must be at least 1")
	case c.Warmup < 0:
		return errors.New("--warmup cannot be negative")
	case c.Gets < 1:
		return errors.New("--gets must be at least 1")
	case c.Background < 0:
		return errors.New("--background cannot be negative")
	case c.Concurrency < 0 || c.Total < 0 || c.Passes < 0:
		return errors.New("--concurrency, --total and --passes cannot be negative (0 skips the creates at once)")
	}
	return nil
}

func (c TeamsConfig) atOnce() bool { return c.Concurrency >= 1 && c.Total >= 1 && c.Passes >= 1 }

// steps is the progress a run reports: its rounds, then the cases of
// creating at once.
func (c TeamsConfig) steps() int {
	if c.atOnce() {
		return c.Warmup + c.Rounds + 3*c.Passes
	}
	return c.Warmup + c.Rounds
}

// args is the command line that makes this run, for the page.
func (c TeamsConfig) args() string {
	return fmt.Sprintf("teams -t %s --rounds %d --warmup %d --gets %d --background %d -c %d -n %d --passes %d",
		c.Template, c.Rounds, c.Warmup, c.Gets, c.Background, c.Concurrency, c.Total, c.Passes)
}

// The two keys of the side-by-side measurement.
const (
	pathAdmin = "admin"
	pathTeam  = "team"
)

// TeamsRow is one operation with one key.
type TeamsRow struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Stats
}

// AtOnceRow is the creates of one team in one case of the second
// measurement: Teams teams creating at once, Concurrency in flight each.
type AtOnceRow struct {
	Case        string `json:"case"`
	Team        string `json:"team"`
	Teams       int    `json:"teams"`
	Concurrency int    `json:"concurrency"`
	Failed      int    `json:"failed"`
	Create      Stats  `json:"create"`
}

// Cases of the second measurement.
const (
	caseAlone    = "alone"     // team A alone at c
	caseTogether = "together"  // teams A and B at c each, at once
	caseAloneX2  = "alone-2xc" // team A alone at 2c: the same load as together
)

// TeamsReport is the JSON document of a teams run. Added* are team minus
// admin at the median: what the quota check adds (both paths check a
// key).
type TeamsReport struct {
	Command        string      `json:"command"`
	Args           string      `json:"args"`
	Config         TeamsConfig `json:"config"`
	Node           string      `json:"node"`
	Background     int         `json:"background"`
	Rows           []TeamsRow  `json:"rows"`
	AddedCreateP50 float64     `json:"added_create_p50_ms"`
	AddedGetP50    float64     `json:"added_get_p50_ms"`
	// The 95 % confidence intervals of Added* (bootstrap): how finely
	// this host's noise lets the run tell.
	AddedCreateCI [2]float64  `json:"added_create_p50_ci95_ms"`
	AddedGetCI    [2]float64  `json:"added_get_p50_ci95_ms"`
	AtOnce        []AtOnceRow `json:"at_once,omitempty"`
	// TogetherMinusAlone is the create p50 of both teams' creates at once
	// minus that of one team with as many in flight (alone-2xc), and
	// TogetherMinusAloneCI its 95 % confidence interval: above 0 when
	// checks of one team hold up another's creates, or by noise.
	TogetherMinusAlone   float64    `json:"together_minus_alone_p50_ms,omitempty"`
	TogetherMinusAloneCI [2]float64 `json:"together_minus_alone_p50_ci95_ms,omitempty"`
}

// row returns the row of op through path, or nil.
func (r *TeamsReport) row(op, path string) *TeamsRow {
	for i := range r.Rows {
		if r.Rows[i].Op == op && r.Rows[i].Path == path {
			return &r.Rows[i]
		}
	}
	return nil
}

// atOnce returns the row of a case (team "" is the first of it), or nil.
func (r *TeamsReport) atOnce(c, team string) *AtOnceRow {
	for i := range r.AtOnce {
		if r.AtOnce[i].Case == c && (team == "" || r.AtOnce[i].Team == team) {
			return &r.AtOnce[i]
		}
	}
	return nil
}

// benchQuotas are the throwaway teams' quotas: set, so every create is
// checked, and far above anything the run holds.
var benchQuotas = wire.Quotas{RunningSandboxes: 1000, VCPUs: 4000, MemoryMB: 4000000, MaxTimeoutSeconds: 86400, DiskBytes: 1 << 40}

// sandboxes are the sandboxes a run holds, each with the client that
// deletes it, so that all of them go at the end, also after a failure.
type sandboxes struct {
	mu   sync.Mutex
	live map[string]*Client
}

func (s *sandboxes) add(id string, c *Client) {
	s.mu.Lock()
	s.live[id] = c
	s.mu.Unlock()
}

// remove deletes a sandbox and forgets it.
func (s *sandboxes) remove(ctx context.Context, id string) error {
	s.mu.Lock()
	c := s.live[id]
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	err := c.DeleteSandbox(context.WithoutCancel(ctx), id)
	if err == nil || isNotFound(err) {
		s.mu.Lock()
		delete(s.live, id)
		s.mu.Unlock()
		return nil
	}
	return err
}

func (s *sandboxes) removeAll(ctx context.Context) error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.live))
	for id := range s.live {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := s.remove(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// benchTeam is a throwaway team and a client with its key.
type benchTeam struct {
	id, key string
	c       *Client
}

// TeamsRun holds what a teams run made, to remove at the end.
type teamsRun struct {
	admin *Client
	cfg   TeamsConfig
	sbs   *sandboxes
	teams []*benchTeam
}

// newTeam makes a throwaway team with benchQuotas and a key for it.
func (r *teamsRun) newTeam(ctx context.Context, suffix string, concurrency int) (*benchTeam, error) {
	name := "cube-bench-" + id.Token(4) + "-" + suffix
	t, err := r.admin.api.CreateTeam(ctx, name, &benchQuotas)
	if err != nil {
		return nil, fmt.Errorf("create team %s: %w", name, explain(err))
	}
	bt := &benchTeam{id: t.TeamID}
	r.teams = append(r.teams, bt)
	k, err := r.admin.api.AdminCreateKey(ctx, t.TeamID, "cube-bench")
	if err != nil {
		return nil, fmt.Errorf("create a key of team %s: %w", t.TeamID, explain(err))
	}
	bt.key = k.Key
	if bt.c, err = NewClient(r.admin.base, k.Key, concurrency); err != nil {
		return nil, err
	}
	return bt, nil
}

// cleanUp removes every sandbox of the run, then the teams (their keys go
// with them). A team that still owns sandboxes (a create whose answer was
// lost) has them killed first.
func (r *teamsRun) cleanUp(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	defer cancel()
	errs := []error{r.sbs.removeAll(ctx)}
	for _, t := range r.teams {
		var err error
		for try := 0; try < 10; try++ {
			if err = explain(r.admin.api.DeleteTeam(ctx, t.id)); err == nil || isNotFound(err) {
				err = nil
				break
			}
			var ae *client.APIError
			if !errors.As(err, &ae) || ae.Status != http.StatusConflict {
				break
			}
			r.admin.api.AdminKillSandboxes(ctx, t.id)
			time.Sleep(time.Second)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete team %s: %w", t.id, err))
		}
	}
	return errors.Join(errs...)
}

// RunTeams measures creates and reads with admin (the key cube-bench is
// given, of the first team, which has no quotas) and with the key of a
// team with quotas that it makes. It removes everything it made,
// sandboxes, teams and keys, also when it fails.
func RunTeams(ctx context.Context, admin *Client, cfg TeamsConfig, progress RoundProgress) (rep *TeamsReport, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &teamsRun{admin: admin, cfg: cfg, sbs: &sandboxes{live: map[string]*Client{}}}
	// A clean-up that fails leaves the report as measured, with the error.
	defer func() {
		if cerr := r.cleanUp(ctx); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean-up: %w", cerr))
		}
	}()
	if err := r.adminUnchecked(ctx); err != nil {
		return nil, err
	}
	rep = &TeamsReport{Command: "teams", Args: cfg.args(), Config: cfg}
	a, err := r.newTeam(ctx, "a", max(1, 2*cfg.Concurrency))
	if err != nil {
		return nil, err
	}
	if err := r.background(ctx); err != nil {
		return nil, err
	}
	rep.Background = cfg.Background

	total := cfg.steps()
	done := 0
	step := func() {
		done++
		if progress != nil {
			progress(done, total)
		}
	}
	if err := r.sideBySide(ctx, rep, a, step); err != nil {
		return nil, err
	}
	if cfg.atOnce() {
		b, err := r.newTeam(ctx, "b", cfg.Concurrency)
		if err != nil {
			return nil, err
		}
		var together, alone []float64
		if rep.AtOnce, together, alone, err = r.atOnce(ctx, a, b, step); err != nil {
			return nil, err
		}
		rep.TogetherMinusAlone = Median(together) - Median(alone)
		rep.TogetherMinusAloneCI = medianDiffCI(together, alone)
	}
	return rep, nil
}

// adminUnchecked makes sure the admin key's own team has no quotas on
// running sandboxes, so that its creates skip the check.
func (r *teamsRun) adminUnchecked(ctx context.Context) error {
	teams, err := r.admin.api.ListTeams(ctx)
	if err != nil {
		return fmt.Errorf("list teams: %w", explain(err))
	}
	for _, t := range teams {
		if !t.IsDefault {
			continue
		}
		if q := t.Quotas; q.RunningSandboxes != 0 || q.VCPUs != 0 || q.MemoryMB != 0 {
			return fmt.Errorf("the admin key's team %s has quotas on running sandboxes (%+v): its creates would be checked too; give the key of a team without them", t.TeamID, q)
		}
		return nil
	}
	return errors.New("GET /teams names no team of the admin key (isDefault)")
}

// background starts the idle sandboxes of the first team that the run
// holds.
func (r *teamsRun) background(ctx context.Context) error {
	for i := range r.cfg.Background {
		sb, err := r.admin.CreateSandbox(ctx, r.cfg.Template, r.cfg.Timeout)
		if err != nil {
			return fmt.Errorf("background sandbox %d of %d: %w", i+1, r.cfg.Background, err)
		}
		r.sbs.add(sb.SandboxID, r.admin)
	}
	return nil
}

// sideBySide is the first measurement: each round a create, Gets reads
// and a delete with each key, alternating which key goes first.
func (r *teamsRun) sideBySide(ctx context.Context, rep *TeamsReport, a *benchTeam, step func()) error {
	cfg := r.cfg
	paths := []struct {
		name string
		c    *Client
	}{{pathAdmin, r.admin}, {pathTeam, a.c}}
	samples := map[string]map[string][]float64{"create": {}, "get": {}, "delete": {}}
	for round := 0; round < cfg.Warmup+cfg.Rounds; round++ {
		for k := range paths {
			p := paths[(k+round)%2]
			t := time.Now()
			sb, err := p.c.CreateSandbox(ctx, cfg.Template, cfg.Timeout)
			create := ms(time.Since(t))
			if err != nil {
				return fmt.Errorf("create with the %s key: %w", p.name, err)
			}
			r.sbs.add(sb.SandboxID, p.c)
			if rep.Node == "" {
				rep.Node = sb.ClientID
			}
			var reads []float64
			for range cfg.Gets {
				t := time.Now()
				if _, err := p.c.api.GetSandbox(ctx, sb.SandboxID); err != nil {
					return fmt.Errorf("get with the %s key: %w", p.name, explain(err))
				}
				reads = append(reads, ms(time.Since(t)))
			}
			t = time.Now()
			if err := r.sbs.remove(ctx, sb.SandboxID); err != nil {
				return fmt.Errorf("delete with the %s key: %w", p.name, err)
			}
			del := ms(time.Since(t))
			if round >= cfg.Warmup {
				samples["create"][p.name] = append(samples["create"][p.name], create)
				samples["get"][p.name] = append(samples["get"][p.name], reads...)
				samples["delete"][p.name] = append(samples["delete"][p.name], del)
			}
		}
		step()
	}
	for _, op := range []string{"create", "get", "delete"} {
		for _, p := range paths {
			rep.Rows = append(rep.Rows, TeamsRow{Op: op, Path: p.name, Stats: Summarize(samples[op][p.name])})
		}
	}
	rep.AddedCreateP50 = rep.row("create", pathTeam).P50 - rep.row("create", pathAdmin).P50
	rep.AddedGetP50 = rep.row("get", pathTeam).P50 - rep.row("get", pathAdmin).P50
	rep.AddedCreateCI = medianDiffCI(samples["create"][pathTeam], samples["create"][pathAdmin])
	rep.AddedGetCI = medianDiffCI(samples["get"][pathTeam], samples["get"][pathAdmin])
	return nil
}

// medianDiffCI is the 95 % confidence interval of median(a) - median(b)
// by the percentile bootstrap (2000 resamples of each, a fixed seed so a
// result file can be recomputed).
func medianDiffCI(a, b []float64) [2]float64 {
	if len(a) == 0 || len(b) == 0 {
		return [2]float64{}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const resamples = 2000
	diffs := make([]float64, resamples)
	ra, rb := make([]float64, len(a)), make([]float64, len(b))
	for i := range diffs {
		for j := range ra {
			ra[j] = a[rng.IntN(len(a))]
		}
		for j := range rb {
			rb[j] = b[rng.IntN(len(b))]
		}
		diffs[i] = Median(ra) - Median(rb)
	}
	return [2]float64{Percentile(diffs, 2.5), Percentile(diffs, 97.5)}
}

// atOnce is the second measurement: team A alone at c, teams A and B at
// c each at once, and team A alone at 2c (as many creates in flight as
// the two teams together), in that order and then backwards.
// It returns the rows, and the creates of both teams at once and of the
// one team at 2c.
func (r *teamsRun) atOnce(ctx context.Context, a, b *benchTeam, step func()) (rows []AtOnceRow, together, alone []float64, err error) {
	cfg := r.cfg
	type key struct{ c, team string }
	creates := map[key][]float64{}
	failed := map[key]int{}
	run := func(c string) error {
		type batch struct {
			team string
			bt   *benchTeam
			conc int
		}
		var batches []batch
		switch c {
		case caseAlone:
			batches = []batch{{"A", a, cfg.Concurrency}}
		case caseTogether:
			batches = []batch{{"A", a, cfg.Concurrency}, {"B", b, cfg.Concurrency}}
		case caseAloneX2:
			batches = []batch{{"A", a, 2 * cfg.Concurrency}}
		}
		n := cfg.Total
		if c == caseAloneX2 {
			n = 2 * cfg.Total
		}
		var wg sync.WaitGroup
		xs := make([][]float64, len(batches))
		nf := make([]int, len(batches))
		errs := make([]error, len(batches))
		for i, bb := range batches {
			wg.Add(1)
			go func() {
				defer wg.Done()
				xs[i], nf[i], errs[i] = r.createBatch(ctx, bb.bt.c, bb.conc, n)
			}()
		}
		wg.Wait()
		for i, bb := range batches {
			k := key{c, bb.team}
			creates[k] = append(creates[k], xs[i]...)
			failed[k] += nf[i]
		}
		step()
		return errors.Join(errs...)
	}
	order := []string{caseAlone, caseTogether, caseAloneX2}
	for pass := range cfg.Passes {
		for i := range order {
			c := order[i]
			if pass%2 == 1 {
				c = order[len(order)-1-i]
			}
			if err := run(c); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	for _, c := range []struct {
		name        string
		teams, conc int
		memberTeams []string
	}{{caseAlone, 1, cfg.Concurrency, []string{"A"}}, {caseTogether, 2, cfg.Concurrency, []string{"A", "B"}}, {caseAloneX2, 1, 2 * cfg.Concurrency, []string{"A"}}} {
		for _, t := range c.memberTeams {
			k := key{c.name, t}
			rows = append(rows, AtOnceRow{Case: c.name, Team: t, Teams: c.teams, Concurrency: c.conc, Failed: failed[k], Create: Summarize(creates[k])})
		}
	}
	together = append(append(together, creates[key{caseTogether, "A"}]...), creates[key{caseTogether, "B"}]...)
	return rows, together, creates[key{caseAloneX2, "A"}], nil
}

// createBatch creates n sandboxes with c, conc at once, deleting each
// once it answers, and returns the creates' latencies and how many
// failed. A batch where every create failed is an error.
func (r *teamsRun) createBatch(ctx context.Context, c *Client, conc, n int) ([]float64, int, error) {
	jobs := make(chan struct{})
	var mu sync.Mutex
	var xs []float64
	var errs []error
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t := time.Now()
				sb, err := c.CreateSandbox(ctx, r.cfg.Template, r.cfg.Timeout)
				took := ms(time.Since(t))
				if err == nil {
					r.sbs.add(sb.SandboxID, c)
					err = r.sbs.remove(ctx, sb.SandboxID)
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					xs = append(xs, took)
				}
				mu.Unlock()
			}
		}()
	}
dispatch:
	for range n {
		select {
		case jobs <- struct{}{}:
		case <-ctx.Done():
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return xs, len(errs), err
	}
	if len(xs) == 0 && len(errs) > 0 {
		return nil, len(errs), fmt.Errorf("every create failed: %w", errs[0])
	}
	return xs, len(errs), nil
}

// atOnceLabel names a case for tables.
func atOnceLabel(r AtOnceRow) string {
	switch r.Case {
	case caseAlone:
		return "one team alone"
	case caseTogether:
		return "two teams at once, team " + r.Team
	case caseAloneX2:
		return "one team, as many in flight as both"
	}
	return r.Case
}

// WriteTeamsTable prints a teams run: per operation and key the latency
// percentiles, what the quota check added at the median, and the creates
// of two teams at once.
func WriteTeamsTable(w io.Writer, rep *TeamsReport) {
	fmt.Fprintf(w, "admin = the admin key (first team, no quotas); team = a team with quotas; %d background sandboxes held\n", rep.Background)
	fmt.Fprintf(w, "%-8s %-6s %5s %9s %9s %9s %9s %9s %9s\n", "op", "key", "n", "p50_ms", "p90_ms", "p95_ms", "avg_ms", "min_ms", "max_ms")
	for _, r := range rep.Rows {
		fmt.Fprintf(w, "%-8s %-6s %5d %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", r.Op, r.Path, r.Count, r.P50, r.P90, r.P95, r.Avg, r.Min, r.Max)
	}
	fmt.Fprintf(w, "added at p50 (team - admin): create %+.2f ms (95%% CI %+.2f … %+.2f), get %+.3f ms (95%% CI %+.3f … %+.3f)\n",
		rep.AddedCreateP50, rep.AddedCreateCI[0], rep.AddedCreateCI[1], rep.AddedGetP50, rep.AddedGetCI[0], rep.AddedGetCI[1])
	if len(rep.AtOnce) == 0 {
		return
	}
	fmt.Fprintf(w, "\ncreates at once (create+delete each)\n%-38s %9s %5s %6s %9s %9s\n", "case", "in_flight", "n", "failed", "p50_ms", "p90_ms")
	for _, r := range rep.AtOnce {
		fmt.Fprintf(w, "%-38s %9d %5d %6d %9.2f %9.2f\n", atOnceLabel(r), r.Teams*r.Concurrency, r.Create.Count, r.Failed, r.Create.P50, r.Create.P90)
	}
	fmt.Fprintf(w, "two teams at once minus one team with as many in flight, at p50: %+.1f ms (95%% CI %+.1f … %+.1f)\n",
		rep.TogetherMinusAlone, rep.TogetherMinusAloneCI[0], rep.TogetherMinusAloneCI[1])
}

func teamsCommand(o *common) *cobra.Command {
	var cfg TeamsConfig
	cmd := &cobra.Command{
		Use:   "teams",
		Short: "What authorisation and quota checks add to a create and a read (admin key vs a team with quotas)",
		Long: `teams makes, with the admin key it is given, a throwaway team with quotas
(high enough never to be reached) and a key for it. Each round it creates a
sandbox of --template, reads it --gets times and deletes it, with the admin
key (the first team, which has no quotas, so no quota check) and with the
team's key (the quota check runs), alternating which goes first; it reports
both keys' latencies and what the team's checks add at the median. It holds
--background idle sandboxes of the first team meanwhile, so the quota
check's scan of the store has rows to read.

Then it creates sandboxes of that team alone (-c in flight, -n creates),
of a second such team at once with it (-c each, -n each), and of the first
team alone at 2c (2n creates), --passes times in alternating order, to show
whether one team's quota checks hold up another's creates.

The teams, their keys and every sandbox it made are removed at the end,
also when it fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Template = o.templateID()
			cfg.Timeout = o.timeout
			admin, err := o.client(max(1, cfg.Concurrency))
			if err != nil {
				return err
			}
			cfg.APIURL = o.apiURL
			ctx, stop := signalContext(cmd.Context())
			defer stop()
			p, finish := o.roundProgress(cfg.steps(), "teams")
			rep, err := RunTeams(ctx, admin, cfg, p)
			finish()
			if rep == nil {
				return fmt.Errorf("teams: %w", err)
			}
			// Measured, but not cleaned up: the numbers and the error.
			WriteTeamsTable(o.stdout, rep)
			if err != nil {
				return fmt.Errorf("teams: %w", err)
			}
			return o.writeJSON(rep)
		},
	}
	f := cmd.Flags()
	f.IntVarP(&cfg.Rounds, "rounds", "r", 30, "measured rounds (one create with each key per round)")
	f.IntVarP(&cfg.Warmup, "warmup", "w", 3, "warm-up rounds (discarded)")
	f.IntVar(&cfg.Gets, "gets", 20, "GET /sandboxes/{id} per sandbox")
	f.IntVar(&cfg.Background, "background", 20, "idle sandboxes of the first team held during the run")
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 4, "creates in flight per team when creating at once (0: skip)")
	f.IntVarP(&cfg.Total, "total", "n", 20, "creates per team and pass when creating at once")
	f.IntVar(&cfg.Passes, "passes", 2, "passes over the three cases of creating at once, in alternating order")
	return cmd
}

// teamsLabel is how a page names a key of the first measurement.
func teamsLabel(path string) string {
	switch path {
	case pathAdmin:
		return "admin (first team, no quotas)"
	case pathTeam:
		return "team (quotas set)"
	}
	return path
}
