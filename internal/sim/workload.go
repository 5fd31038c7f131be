package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"cube/internal/api/wire"
	"cube/internal/client"
	"cube/internal/envd/protocol"
)

// Config is one simulation: a cluster of Nodes nodes driven up to
// Sandboxes live sandboxes, then through the mixed workload, a drain and
// the loss of a node.
type Config struct {
	Nodes     int
	Sandboxes int
	// Duration is the mixed workload's length (0: 30s).
	Duration time.Duration
	// FillTimeout bounds the creates up to Sandboxes (0: 10m); the
	// result says how many were reached.
	FillTimeout time.Duration
	// Concurrency is the workload's clients at once (0: 16).
	Concurrency int
	// Rate bounds the mixed workload's operations per second (0: as fast
	// as Concurrency clients go).
	Rate float64
	// Seed fixes every random choice of each client.
	Seed uint64
	// PauseShare is the share of live sandboxes the mixed workload keeps
	// paused (0: 0.1).
	PauseShare float64
	// CostOps is how many creates, reads and kills each measurement of
	// their cost in the database makes (0: 100).
	CostOps int
	// IdleWindow is how long the background (heartbeats, reapers) is
	// measured with no workload (0: 10s).
	IdleWindow time.Duration
	// DrainPaused is how many sandboxes of the drained node are paused
	// before the drain (0: 50).
	DrainPaused int
	// MaxConnections is PostgreSQL's max_connections (0: its default, 100).
	MaxConnections int
	// PauseWriteDelay is the nodes' (0: 2s).
	PauseWriteDelay time.Duration
	// StoreParams are added to every node's --store URL.
	StoreParams string
	// PgBouncer, when set, runs the nodes through a PgBouncer in
	// transaction mode holding at most this many server connections.
	PgBouncer int
	// SkipLoss and SkipDrain leave those phases out.
	SkipLoss, SkipDrain bool
	// Losses is how many nodes the last phase kills at once, at random,
	// before it accounts for every sandbox (0: none; at most all but
	// two nodes).
	Losses int
	// Dir is where PostgreSQL and the nodes keep their data (a temporary
	// directory made and removed when empty).
	Dir string
	// Log receives the nodes' warnings; Progress one line per phase.
	Log      io.Writer
	Progress func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.Duration == 0 {
		c.Duration = 30 * time.Second
	}
	if c.FillTimeout == 0 {
		c.FillTimeout = 10 * time.Minute
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 16
	}
	if c.PauseShare == 0 {
		c.PauseShare = 0.1
	}
	if c.CostOps <= 0 {
		c.CostOps = 100
	}
	if c.IdleWindow == 0 {
		c.IdleWindow = 10 * time.Second
	}
	if c.DrainPaused == 0 {
		c.DrainPaused = 50
	}
	if c.PauseWriteDelay == 0 {
		c.PauseWriteDelay = 2 * time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string, ...any) {}
	}
}

// Result is what one simulation measured.
type Result struct {
	Nodes int `json:"nodes"`
	// Error is what ended the run early, if anything did.
	Error            string  `json:"error,omitempty"`
	TargetSandboxes  int     `json:"targetSandboxes"`
	Reached          int     `json:"reachedSandboxes"`
	MaxConnections   int     `json:"pgMaxConnections"`
	StartSeconds     float64 `json:"startSeconds"`
	TotalSeconds     float64 `json:"totalSeconds"`
	FillSeconds      float64 `json:"fillSeconds"`
	FillCreatesPerS  float64 `json:"fillCreatesPerSecond"`
	FillStoppedEarly string  `json:"fillStoppedEarly,omitempty"`
	// Fill is every create of the fill; FillBuckets the same by how
	// full the cluster was.
	Fill        OpSummary `json:"fill"`
	FillBuckets []Bucket  `json:"fillBuckets"`
	// IdleEmpty and IdleFull are the background with no workload, with
	// no sandboxes and with those reached.
	IdleEmpty Background `json:"idleEmpty"`
	IdleFull  Background `json:"idleFull"`
	// CostEmpty and CostFull are the database's work per create, read
	// (through a node not holding the sandbox) and kill, at both sizes.
	CostEmpty Cost `json:"costEmpty"`
	CostFull  Cost `json:"costFull"`
	// Ops are the mixed workload's operations.
	Ops        map[string]OpSummary `json:"ops"`
	OpsPerS    float64              `json:"opsPerSecond"`
	MixSeconds float64              `json:"mixSeconds"`
	Mix        Background           `json:"mixLoad"`
	// ListAll is one listing of every sandbox, all its pages.
	ListAll   OpSummary `json:"listAll"`
	SignedURL SignedURL `json:"signedURL"`
	Loss      *Loss     `json:"loss,omitempty"`
	Losses    *Losses   `json:"losses,omitempty"`
	// Via is what the cluster adds to one create or read at a time: the
	// same calls through the node that holds the template (placed there)
	// and through another node (placed, then made on the holder).
	Via   *Via   `json:"via,omitempty"`
	Drain *Drain `json:"drain,omitempty"`
	// Connections are the nodes' sessions in PostgreSQL, sampled each
	// second.
	Connections ConnStats  `json:"connections"`
	Warnings    []LogCount `json:"nodeWarnings,omitempty"`
	// PGErrors counts FATAL and ERROR lines of PostgreSQL's log by text.
	PGErrors map[string]int `json:"pgErrors,omitempty"`
}

// Bucket is the creates made while the cluster held From to To sandboxes.
type Bucket struct {
	From, To int    `json:"-"`
	Range    string `json:"range"`
	OpSummary
}

// Background is the load with what was running then.
type Background struct {
	Seconds             float64 `json:"seconds"`
	HeartbeatWritesPerS float64 `json:"heartbeatWritesPerSecond"`
	StatementsPerS      float64 `json:"statementsPerSecond"`
	RowsReadPerS        float64 `json:"rowsReadPerSecond"`
	RowsWrittenPerS     float64 `json:"rowsWrittenPerSecond"`
	WALBytesPerS        float64 `json:"walBytesPerSecond"`
	PGCPUCores          float64 `json:"pgCPUCores"`
	SimCPUCores         float64 `json:"simCPUCores"`
	// OtherCPUCores is what the host's other processes used meanwhile
	// (the machine may be shared).
	OtherCPUCores float64 `json:"otherCPUCores"`
	Connections   int     `json:"connections"`
	// Top are the statements by calls per second.
	Top []Breakdown `json:"statements"`
	// a and b are the statistics at the window's ends.
	a, b DBStats
}

// Cost is the database's work per operation, the background taken away.
type Cost struct {
	Sandboxes int `json:"sandboxes"`
	// Via is the node called, Owner the node holding the sandboxes.
	Via   string `json:"via"`
	Owner string `json:"owner"`
	// Involved is how many nodes the creates involved (Via, and those
	// they were placed on).
	Involved  int         `json:"involvedNodes"`
	Create    PerOp       `json:"create"`
	Read      PerOp       `json:"read"`
	Kill      PerOp       `json:"kill"`
	TopCreate []Breakdown `json:"createStatements"`
	TopRead   []Breakdown `json:"readStatements"`
}

// PerOp is one operation's share of the database's work.
type PerOp struct {
	Ops          int       `json:"ops"`
	Statements   float64   `json:"statements"`
	Writes       float64   `json:"writes"`
	RowsWritten  float64   `json:"rowsWritten"`
	RowsRead     float64   `json:"rowsRead"`
	Transactions float64   `json:"transactions"`
	WALBytes     float64   `json:"walBytes"`
	PGCPUms      float64   `json:"pgCPUms"`
	SimCPUms     float64   `json:"simCPUms"`
	Latency      OpSummary `json:"latency"`
	// Cluster* are every node's statements and rows for the operation
	// (the others' background taken away too).
	ClusterStatements  float64 `json:"clusterStatements"`
	ClusterRowsWritten float64 `json:"clusterRowsWritten"`
	ClusterRowsRead    float64 `json:"clusterRowsRead"`
}

// SignedURL is the lookup of signed file URLs through a node whose
// sandboxes did not make them: the peer that did asked first, last.
type SignedURL struct {
	First  OpSummary      `json:"firstPeer"`
	Last   OpSummary      `json:"lastPeer"`
	Status map[string]int `json:"status"`
}

// Loss is a node killed (not deregistered).
type Loss struct {
	Node string `json:"node"`
	// UnhealthyAfter is when another node's API first said so;
	// LostAfter when one of its sandboxes first read lost there.
	UnhealthyAfterS float64 `json:"unhealthyAfterSeconds"`
	LostAfterS      float64 `json:"lostAfterSeconds"`
	// Creates made through the survivors meanwhile, and how many failed.
	Creates      int       `json:"creates"`
	CreateFails  int       `json:"createFails"`
	CreateErrors []string  `json:"createErrors,omitempty"`
	Reads        OpSummary `json:"readsOfItsSandboxes"`
	Sandboxes    int       `json:"sandboxes"`
}

// Via are creates and reads made one at a time, through the node that
// holds the template or the sandbox and through another node.
type Via struct {
	CreateOwn, CreateOther OpSummary
	ReadOwn, ReadOther     OpSummary
	// ListPage is a page of 100 of the list, through another node.
	ListPage OpSummary
}

// Losses are several nodes killed at once (not deregistered), and then
// every sandbox a client was told exists, and did not kill, looked for
// through a survivor: those of the survivors in its list, in the state
// the client left them in, and those of the killed nodes read "lost".
type Losses struct {
	Nodes []string `json:"nodes"`
	// AllUnhealthyAfterS is when the survivor's API said every killed
	// node is unhealthy.
	AllUnhealthyAfterS float64 `json:"allUnhealthyAfterSeconds"`
	// Sandboxes were acknowledged and live before the losses; OnKilled
	// of them on the killed nodes.
	Sandboxes int `json:"sandboxes"`
	OnKilled  int `json:"onKilled"`
	// Listed and ReadLost are those accounted for; Missing (and a few
	// IDs of them, with what was found) those that were not.
	Listed   int      `json:"listed"`
	ReadLost int      `json:"readLost"`
	Missing  int      `json:"missing"`
	Examples []string `json:"examples,omitempty"`
	// CheckS is how long the accounting took (a list of every sandbox
	// and a read of each on a killed node).
	CheckS float64 `json:"checkSeconds"`
}

// Drain is a node drained: its sandboxes paused to disk resumed through
// other nodes, which take them over.
type Drain struct {
	Node   string `json:"node"`
	Paused int    `json:"paused"`
	Moved  int    `json:"moved"`
	Stayed int    `json:"stayed"`
	Failed int    `json:"failed"`
	// WaitDiskS is the wait for the pauses to reach disk; MoveS the
	// time to resume every one elsewhere.
	WaitDiskS float64   `json:"waitToDiskSeconds"`
	MoveS     float64   `json:"moveSeconds"`
	Latency   OpSummary `json:"perMove"`
	// NotOnDisk are the paused sandboxes still in memory when the wait
	// ended.
	NotOnDisk int `json:"notOnDisk"`
}

// ConnStats are the sessions seen.
type ConnStats struct {
	Max   int            `json:"max"`
	AtMax map[string]int `json:"atMax"`
	End   int            `json:"end"`
}

// sim is one run's state.
type sim struct {
	cfg  Config
	c    *Cluster
	pg   *Postgres
	live *pool
	rec  *recorder
	res  *Result
	// templates are the ready nodes' templates (a drained one's is
	// dropped).
	mu        sync.Mutex
	accepting []*Node
	snapshots []snapshotRef
	conns     ConnStats
}

type snapshotRef struct{ id, owner string }

// Run runs one simulation and stops everything it started.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	start := time.Now()
	res := &Result{Nodes: cfg.Nodes, TargetSandboxes: cfg.Sandboxes}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "cube-sim-")
		if err != nil {
			return nil, err
		}
		dir = d
		defer os.RemoveAll(d)
	}
	pgDir := filepath.Join(dir, fmt.Sprintf("pg-%d", cfg.Nodes))
	if err := os.MkdirAll(pgDir, 0o700); err != nil {
		return nil, err
	}
	cfg.Progress("%d nodes: starting PostgreSQL", cfg.Nodes)
	pg, err := StartPostgres(ctx, pgDir, PostgresOptions{MaxConnections: cfg.MaxConnections})
	if err != nil {
		return nil, err
	}
	defer pg.Stop()
	res.MaxConnections = pg.MaxConnections(ctx)
	s := &sim{cfg: cfg, pg: pg, live: newPool(), rec: newRecorder(), res: res}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); s.sampleConnections(sampleCtx) }()
	// finish records what the sessions and the logs showed.
	finish := func() {
		stopSampling()
		<-sampled
		s.mu.Lock()
		res.Connections = s.conns
		s.mu.Unlock()
		res.Connections.End, _, _ = pg.Connections(ctx)
		if s.c != nil {
			res.Warnings = s.c.Warnings()
			if len(res.Warnings) > 15 {
				res.Warnings = res.Warnings[:15]
			}
			s.c.Stop()
		}
		res.PGErrors = pgErrors(pg.Log())
		res.TotalSeconds = time.Since(start).Seconds()
	}
	perNode := int(math.Ceil(float64(cfg.Sandboxes)/float64(cfg.Nodes)*1.5)) + 64
	cfg.Progress("%d nodes: starting the nodes (%d slots each)", cfg.Nodes, perNode)
	t0 := time.Now()
	c, err := StartCluster(ctx, pg, filepath.Join(dir, fmt.Sprintf("cluster-%d", cfg.Nodes)), ClusterOptions{
		Nodes: cfg.Nodes, Slots: perNode, MaxSandboxes: perNode, PauseWriteDelay: cfg.PauseWriteDelay, Log: cfg.Log,
		StoreParams: cfg.StoreParams, PgBouncerPool: cfg.PgBouncer})
	if err != nil {
		res.Error = "start: " + err.Error()
		finish()
		return res, err
	}
	defer c.Stop()
	res.StartSeconds = time.Since(t0).Seconds()
	s.c, s.accepting = c, c.Alive()
	err = s.phases(ctx)
	if err != nil {
		res.Error = err.Error()
	}
	finish()
	return res, err
}

// phases runs the workload's phases in order.
func (s *sim) phases(ctx context.Context) error {
	cfg, res := s.cfg, s.res
	var err error
	cfg.Progress("%d nodes: background with no sandboxes (%s)", cfg.Nodes, cfg.IdleWindow)
	if res.IdleEmpty, err = s.idle(ctx); err != nil {
		return err
	}
	cfg.Progress("%d nodes: cost of %d creates, reads and kills with no sandboxes", cfg.Nodes, cfg.CostOps)
	if res.CostEmpty, err = s.cost(ctx, res.IdleEmpty); err != nil {
		return err
	}
	cfg.Progress("%d nodes: creating up to %d sandboxes (%d clients, at most %s)", cfg.Nodes, cfg.Sandboxes, cfg.Concurrency, cfg.FillTimeout)
	s.fill(ctx)
	res.Reached = s.live.len()
	cfg.Progress("%d nodes: %d sandboxes in %.0fs (%.1f creates/s)%s", cfg.Nodes, res.Reached, res.FillSeconds, res.FillCreatesPerS, stopped(res.FillStoppedEarly))
	cfg.Progress("%d nodes: background with %d sandboxes (%s)", cfg.Nodes, res.Reached, cfg.IdleWindow)
	if res.IdleFull, err = s.idle(ctx); err != nil {
		return err
	}
	cfg.Progress("%d nodes: cost of %d creates, reads and kills with %d sandboxes", cfg.Nodes, cfg.CostOps, res.Reached)
	if res.CostFull, err = s.cost(ctx, res.IdleFull); err != nil {
		return err
	}
	if len(s.c.Alive()) >= 2 {
		cfg.Progress("%d nodes: %d creates and reads one at a time, through the template's node and through another", cfg.Nodes, cfg.CostOps)
		res.Via = s.oneAtATime(ctx)
	}
	cfg.Progress("%d nodes: listing every sandbox", cfg.Nodes)
	s.listAll(ctx)
	cfg.Progress("%d nodes: mixed workload for %s", cfg.Nodes, cfg.Duration)
	if err := s.mix(ctx); err != nil {
		return err
	}
	if len(s.c.Alive()) >= 2 {
		cfg.Progress("%d nodes: signed file URLs through a node that did not sign them", cfg.Nodes)
		s.signedURLs(ctx)
	}
	if !cfg.SkipDrain && len(s.c.Alive()) >= 2 {
		cfg.Progress("%d nodes: drain", cfg.Nodes)
		res.Drain = s.drain(ctx)
	}
	if !cfg.SkipLoss && len(s.c.Alive()) >= 2 {
		cfg.Progress("%d nodes: loss of a node", cfg.Nodes)
		res.Loss = s.loss(ctx)
	}
	if k := min(cfg.Losses, len(s.c.Alive())-2); k > 0 {
		cfg.Progress("%d nodes: %d nodes lost at once, then every sandbox accounted for", cfg.Nodes, k)
		res.Losses = s.losses(ctx, k)
	}
	return nil
}

func stopped(why string) string {
	if why == "" {
		return ""
	}
	return ": stopped early, " + why
}

// sampleConnections reads the nodes' sessions every second.
func (s *sim) sampleConnections(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		n, by, err := s.pg.Connections(ctx)
		if err == nil {
			s.mu.Lock()
			if n > s.conns.Max {
				s.conns.Max, s.conns.AtMax = n, by
			}
			s.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// idle measures the background over the idle window: no client calls.
func (s *sim) idle(ctx context.Context) (Background, error) {
	a, err := s.pg.Stats(ctx)
	if err != nil {
		return Background{}, err
	}
	select {
	case <-ctx.Done():
		return Background{}, ctx.Err()
	case <-time.After(s.cfg.IdleWindow):
	}
	b, err := s.pg.Stats(ctx)
	if err != nil {
		return Background{}, err
	}
	bg := background(b.SubOf(a, s.roles()))
	bg.a, bg.b = a, b
	bg.Connections, _, _ = s.pg.Connections(ctx)
	return bg, nil
}

func background(d Delta) Background {
	per := func(x float64) float64 { return x / d.Seconds }
	return Background{Seconds: d.Seconds, HeartbeatWritesPerS: per(d.HeartbeatWrites), StatementsPerS: per(d.Statements),
		RowsReadPerS: per(d.RowsRead), RowsWrittenPerS: per(d.RowsWritten), WALBytesPerS: per(d.WALBytes),
		PGCPUCores: per(d.CPU), SimCPUCores: per(d.SelfCPU), OtherCPUCores: per(d.OtherCPU), Top: d.Top(d.Seconds, 8, 0.05)}
}

// rng is client i's random source: the same seed makes the same choices.
func (s *sim) rng(phase string, i int) *rand.Rand {
	h := uint64(14695981039346656037)
	for _, b := range []byte(phase) {
		h = (h ^ uint64(b)) * 1099511628211
	}
	return rand.New(rand.NewPCG(s.cfg.Seed, h+uint64(i)))
}

// via picks the node a client calls about something owner holds: any
// other node that runs, or owner when it is the only one.
func (s *sim) via(rng *rand.Rand, owner string) *Node {
	alive := s.c.Alive()
	var others []*Node
	for _, n := range alive {
		if n.ID != owner {
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return alive[0]
	}
	return others[rng.IntN(len(others))]
}

// template picks a ready node's template, or a snapshot now and then.
func (s *sim) template(rng *rand.Rand, snapshots bool) (id, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if snapshots && len(s.snapshots) > 0 && rng.IntN(10) == 0 {
		sn := s.snapshots[rng.IntN(len(s.snapshots))]
		if n := s.c.Node(sn.owner); n != nil && !n.Killed() && s.acceptingLocked(n) {
			return sn.id, sn.owner
		}
	}
	n := s.accepting[rng.IntN(len(s.accepting))]
	return n.Template, n.ID
}

func (s *sim) acceptingLocked(n *Node) bool {
	for _, a := range s.accepting {
		if a == n {
			return true
		}
	}
	return false
}

// stopAccepting drops a drained or killed node's templates from the
// creates' choices.
func (s *sim) stopAccepting(n *Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keep []*Node
	for _, a := range s.accepting {
		if a != n {
			keep = append(keep, a)
		}
	}
	s.accepting = keep
}

const sandboxTimeout = 3 * 3600

func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 90*time.Second)
}

// create makes one sandbox through a node other than the template's and
// adds it to the pool. A refusal with Retry-After (429: every node full,
// 503: unavailable for now) is honoured as the SDKs do: the create waits
// and tries again, through another node, until its time is up; the
// latency recorded is the client's, from the first attempt, and each
// refusal is counted.
func (s *sim) create(ctx context.Context, rng *rand.Rand, op string, snapshots bool) (*box, time.Duration, error) {
	return s.createWith(ctx, op, func() (string, *Node) {
		tpl, owner := s.template(rng, snapshots)
		return tpl, s.via(rng, owner)
	})
}

// createWith is create of the template through the node pick names, each
// attempt.
func (s *sim) createWith(ctx context.Context, op string, pick func() (tpl string, via *Node)) (*box, time.Duration, error) {
	ctx, cancel := opCtx(ctx)
	defer cancel()
	timeout := sandboxTimeout
	t := time.Now()
	for {
		tpl, via := pick()
		var sb wire.Sandbox
		h, err := via.Client.Do(ctx, http.MethodPost, "/sandboxes", nil, wire.NewSandbox{TemplateID: tpl, Timeout: &timeout}, &sb)
		if wait, ok := retryAfter(h, err); ok && ctx.Err() == nil {
			s.rec.refused(op, err)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
				continue
			}
		}
		d := time.Since(t)
		if err == nil && sb.SandboxID == "" {
			err = errors.New("create answered no sandboxID")
		}
		s.rec.add(op, d, err)
		if err != nil {
			return nil, d, err
		}
		b := &box{id: sb.SandboxID, owner: sb.ClientID, token: sb.EnvdAccessToken}
		s.live.add(b)
		return b, d, nil
	}
}

// retryAfter is how long an answer refused for now asks the client to
// wait (at most 5s), and whether it is such an answer: 429, or 503 with
// Retry-After.
func retryAfter(h http.Header, err error) (time.Duration, bool) {
	var ae *client.APIError
	if err == nil || !errors.As(err, &ae) || (ae.Status != http.StatusTooManyRequests && ae.Status != http.StatusServiceUnavailable) {
		return 0, false
	}
	secs, perr := strconv.Atoi(h.Get("Retry-After"))
	if perr != nil {
		if ae.Status == http.StatusServiceUnavailable {
			return 0, false
		}
		secs = 1
	}
	return min(time.Duration(max(secs, 1))*time.Second, 5*time.Second), true
}

// kill kills a taken box through a node that does not hold it.
func (s *sim) kill(ctx context.Context, rng *rand.Rand, op string, b *box) error {
	via := s.via(rng, b.owner)
	ctx, cancel := opCtx(ctx)
	defer cancel()
	t := time.Now()
	err := via.Client.KillSandbox(ctx, b.id)
	s.rec.add(op, time.Since(t), err)
	if err == nil || client.IsNotFound(err) {
		s.live.remove(b)
	} else {
		s.live.release(b, b.paused)
	}
	return err
}

// get reads a taken box through a node that does not hold it.
func (s *sim) get(ctx context.Context, rng *rand.Rand, op string, b *box) (*wire.SandboxDetail, error) {
	via := s.via(rng, b.owner)
	ctx, cancel := opCtx(ctx)
	defer cancel()
	t := time.Now()
	d, err := via.Client.GetSandbox(ctx, b.id)
	s.rec.add(op, time.Since(t), err)
	return d, err
}

// fill creates sandboxes with Concurrency clients until Sandboxes live,
// FillTimeout, or a run of failures.
func (s *sim) fill(ctx context.Context) {
	cfg := s.cfg
	target := cfg.Sandboxes
	// loop bounds the fill; a create under way when it ends finishes.
	loop, cancel := context.WithTimeout(ctx, cfg.FillTimeout)
	defer cancel()
	const nBuckets = 10
	buckets := make([][]time.Duration, nBuckets)
	var bmu sync.Mutex
	var reserved, fails atomic.Int64
	reserved.Store(int64(s.live.len()))
	var why atomic.Value
	start := time.Now()
	made := s.live.len()
	var wg sync.WaitGroup
	lastReport := time.Now()
	var reportMu sync.Mutex
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := s.rng("fill", i)
			for loop.Err() == nil {
				at := reserved.Add(1)
				if at > int64(target) {
					return
				}
				_, d, err := s.create(ctx, rng, "fill create", false)
				if err != nil {
					reserved.Add(-1)
					if fails.Add(1) >= 200 {
						why.CompareAndSwap(nil, "200 creates failed in a row: "+shorten(err.Error(), 200))
						cancel()
					}
					continue
				}
				fails.Store(0)
				k := int((at - 1) * nBuckets / int64(max(target, 1)))
				bmu.Lock()
				buckets[min(k, nBuckets-1)] = append(buckets[min(k, nBuckets-1)], d)
				bmu.Unlock()
				reportMu.Lock()
				if time.Since(lastReport) > 30*time.Second {
					lastReport = time.Now()
					cfg.Progress("%d nodes:   %d sandboxes after %.0fs", cfg.Nodes, s.live.len(), time.Since(start).Seconds())
				}
				reportMu.Unlock()
			}
		}()
	}
	wg.Wait()
	res := s.res
	res.FillSeconds = time.Since(start).Seconds()
	res.FillCreatesPerS = float64(s.live.len()-made) / res.FillSeconds
	if w, ok := why.Load().(string); ok {
		res.FillStoppedEarly = w
	} else if s.live.len() < target {
		res.FillStoppedEarly = fmt.Sprintf("the fill's time limit (%s) passed", cfg.FillTimeout)
	}
	res.Fill = s.rec.summary("fill create")
	for k, ds := range buckets {
		from, to := k*target/nBuckets, (k+1)*target/nBuckets
		res.FillBuckets = append(res.FillBuckets, Bucket{From: from, To: to, Range: fmt.Sprintf("%d-%d", from, to), OpSummary: summarise(ds)})
	}
}

// cost measures the database's work per create, read and kill: CostOps
// of each, four clients at once, every one through the first node about
// the second node's sandboxes (its template's, placed there). Each node
// connects as a role of its own, so the statements of those two nodes
// alone are counted, their own background (measured in bg's window just
// before, at the same size) taken away: the other nodes' heartbeats and
// reapers do not blur it. What every node did (Cluster*) is counted too,
// with every node's background taken away: it includes what the others
// read because of the creates, and more noise.
func (s *sim) cost(ctx context.Context, bg Background) (Cost, error) {
	n := s.cfg.CostOps
	out := Cost{Sandboxes: s.live.len()}
	alive := s.c.Alive()
	via, owner := alive[0], alive[0]
	if len(alive) > 1 {
		owner = alive[1]
	}
	out.Via, out.Owner = via.ID, owner.ID
	// involved are the nodes the operations involve: the one called and
	// those the sandboxes were placed on (the holder, or any node that
	// copied its template when placement found the holder full).
	involved := map[string]bool{via.ID: true, owner.ID: true}
	var invMu sync.Mutex
	every := s.roles()
	var made []*box
	var mu sync.Mutex
	measure := func(op string, do func(i int)) (PerOp, Delta, error) {
		a, err := s.pg.Stats(ctx)
		if err != nil {
			return PerOp{}, Delta{}, err
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= n || ctx.Err() != nil {
						return
					}
					do(i)
				}
			}()
		}
		wg.Wait()
		b, err := s.pg.Stats(ctx)
		if err != nil {
			return PerOp{}, Delta{}, err
		}
		invMu.Lock()
		pair := maps.Clone(involved)
		invMu.Unlock()
		d := b.SubOf(a, pair).Less(bg.b.SubOf(bg.a, pair))
		all := b.SubOf(a, every).Less(bg.b.SubOf(bg.a, every))
		lat := s.rec.summary("cost " + op)
		ops := lat.Count
		if ops == 0 {
			return PerOp{Latency: lat}, d, nil
		}
		p, c := d.Per(float64(ops)), all.Per(float64(ops))
		return PerOp{Ops: ops, Statements: p.Statements, Writes: p.Writes, RowsWritten: p.RowsWritten, RowsRead: p.RowsRead,
			Transactions: p.Transactions, WALBytes: c.WALBytes, PGCPUms: c.CPU * 1000, SimCPUms: c.SelfCPU * 1000, Latency: lat,
			ClusterStatements: c.Statements, ClusterRowsWritten: c.RowsWritten, ClusterRowsRead: c.RowsRead}, d, nil
	}
	s.rec.reset("cost create", "cost read", "cost kill")
	var err error
	var d Delta
	if out.Create, d, err = measure("create", func(i int) {
		if b, _, err := s.createWith(ctx, "cost create", func() (string, *Node) { return owner.Template, via }); err == nil {
			mu.Lock()
			made = append(made, b)
			mu.Unlock()
			invMu.Lock()
			involved[b.owner] = true
			invMu.Unlock()
		}
	}); err != nil {
		return out, err
	}
	out.TopCreate = d.Top(float64(max(out.Create.Ops, 1)), 14, 0.05)
	out.Involved = len(involved)
	// The boxes made are the reads' and kills', not the pool's choices.
	for _, b := range made {
		s.live.mu.Lock()
		s.live.busy[b] = true
		s.live.mu.Unlock()
	}
	if out.Read, d, err = measure("read", func(i int) {
		if len(made) > 0 {
			b := made[i%len(made)]
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			_, err := via.Client.GetSandbox(cctx, b.id)
			cancel()
			s.rec.add("cost read", time.Since(t), err)
		}
	}); err != nil {
		return out, err
	}
	out.TopRead = d.Top(float64(max(out.Read.Ops, 1)), 10, 0.05)
	if out.Kill, _, err = measure("kill", func(i int) {
		if i < len(made) {
			b := made[i]
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			err := via.Client.KillSandbox(cctx, b.id)
			cancel()
			s.rec.add("cost kill", time.Since(t), err)
			if err == nil {
				s.live.remove(b)
			} else {
				s.live.release(b, b.paused)
			}
		}
	}); err != nil {
		return out, err
	}
	return out, nil
}

// roles are every node's database role.
func (s *sim) roles() map[string]bool {
	out := map[string]bool{}
	for _, n := range s.c.Nodes {
		out[n.ID] = true
	}
	return out
}

// listAll lists every sandbox through one node, following the pages, as
// client.ListSandboxes does; and measures the first page alone.
func (s *sim) listAll(ctx context.Context) {
	n := s.c.Alive()[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	t := time.Now()
	_, err := n.Client.ListSandboxes(ctx, client.ListOptions{})
	s.rec.add("list all pages", time.Since(t), err)
	s.res.ListAll = s.rec.summary("list all pages")
}

// mix runs the mixed workload for Duration: reads through other nodes,
// creates and kills that keep the count, pauses and resumes that keep
// PauseShare paused, snapshots, forks (and the child killed), first pages
// of the list.
func (s *sim) mix(ctx context.Context) error {
	cfg := s.cfg
	a, err := s.pg.Stats(ctx)
	if err != nil {
		return err
	}
	ctx2, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var lim *rate.Limiter
	if cfg.Rate > 0 {
		lim = rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Concurrency)
	}
	var ops atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := s.rng("mix", i)
			for ctx2.Err() == nil {
				if lim != nil && lim.Wait(ctx2) != nil {
					return
				}
				// An operation under way when the time is up ends.
				s.mixOp(ctx, rng)
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	s.res.MixSeconds = time.Since(start).Seconds()
	s.res.OpsPerS = float64(ops.Load()) / s.res.MixSeconds
	b, err := s.pg.Stats(ctx)
	if err != nil {
		return err
	}
	s.res.Mix = background(b.SubOf(a, s.roles()))
	s.res.Mix.Connections, _, _ = s.pg.Connections(ctx)
	all := s.rec.all()
	s.res.Ops = map[string]OpSummary{}
	for op, sum := range all {
		if strings.HasPrefix(op, "mix ") {
			s.res.Ops[strings.TrimPrefix(op, "mix ")] = sum
		}
	}
	return nil
}

// mixOp is one operation of the mixed workload.
func (s *sim) mixOp(ctx context.Context, rng *rand.Rand) {
	live, paused := s.live.counts()
	running := func(b *box) bool { return !b.paused }
	switch r := rng.IntN(100); {
	case r < 40:
		if b := s.live.take(rng, nil); b != nil {
			s.get(ctx, rng, "mix read", b)
			s.live.release(b, b.paused)
		}
	case r < 60:
		// Churn: one killed, one made, the count kept.
		if b := s.live.take(rng, nil); b != nil {
			s.kill(ctx, rng, "mix kill", b)
		}
		s.create(ctx, rng, "mix create", true)
	case r < 65:
		via := s.c.Alive()[rng.IntN(len(s.c.Alive()))]
		cctx, cancel := opCtx(ctx)
		t := time.Now()
		var page []wire.ListedSandbox
		_, err := via.Client.Do(cctx, http.MethodGet, "/v2/sandboxes", url.Values{"limit": {"100"}}, nil, &page)
		cancel()
		s.rec.add("mix list (first page of 100)", time.Since(t), err)
	case r < 85:
		if float64(paused) < s.cfg.PauseShare*float64(live) {
			if b := s.live.take(rng, running); b != nil {
				via := s.via(rng, b.owner)
				cctx, cancel := opCtx(ctx)
				t := time.Now()
				err := via.Client.PauseSandbox(cctx, b.id, true)
				cancel()
				s.rec.add("mix pause", time.Since(t), err)
				s.live.release(b, err == nil || b.paused)
			}
		} else if b := s.live.take(rng, func(b *box) bool { return b.paused }); b != nil {
			s.resume(ctx, rng, "mix resume", b, nil)
		}
	case r < 92:
		if b := s.live.take(rng, running); b != nil {
			via := s.via(rng, b.owner)
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			sn, err := via.Client.CreateSnapshot(cctx, b.id, "")
			cancel()
			s.rec.add("mix snapshot", time.Since(t), err)
			if err == nil {
				s.mu.Lock()
				s.snapshots = append(s.snapshots, snapshotRef{id: sn.SnapshotID, owner: b.owner})
				s.mu.Unlock()
			}
			s.live.release(b, b.paused)
		}
	default:
		if b := s.live.take(rng, running); b != nil {
			via := s.via(rng, b.owner)
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			out, err := via.Client.ForkSandbox(cctx, b.id, 1)
			cancel()
			if err == nil && (len(out) != 1 || out[0].Sandbox == nil) {
				err = fmt.Errorf("fork answered %d children, first %+v", len(out), out)
			}
			s.rec.add("mix fork", time.Since(t), err)
			s.live.release(b, b.paused)
			if err == nil {
				child := &box{id: out[0].Sandbox.SandboxID, owner: out[0].Sandbox.ClientID, token: out[0].Sandbox.EnvdAccessToken}
				s.live.add(child)
				if c := s.live.take(rng, func(x *box) bool { return x == child }); c != nil {
					s.kill(ctx, rng, "mix kill", c)
				}
			}
		}
	}
}

// resume resumes a taken paused box through a node that does not hold it
// and records where it runs now; moved, when set, is told whether it
// runs on another node than before.
func (s *sim) resume(ctx context.Context, rng *rand.Rand, op string, b *box, moved func(bool)) error {
	via := s.via(rng, b.owner)
	cctx, cancel := opCtx(ctx)
	defer cancel()
	t := time.Now()
	sb, _, err := via.Client.ConnectSandbox(cctx, b.id, sandboxTimeout)
	s.rec.add(op, time.Since(t), err)
	if err != nil {
		s.live.release(b, true)
		return err
	}
	if moved != nil {
		moved(sb.ClientID != b.owner)
	}
	s.live.mu.Lock()
	b.owner = sb.ClientID
	s.live.mu.Unlock()
	s.live.release(b, false)
	return nil
}

// signedURLs looks signed file URLs up through the first node: of a
// sandbox of the peer it asks first, then of the one it asks last (peers
// are asked in the order of their names). The node looks its peers up
// one by one; the answer is the sandbox's own (a fake one has no agent
// to answer, so the owner's proxy answers 502).
func (s *sim) signedURLs(ctx context.Context) {
	alive := s.c.Alive()
	via := alive[0]
	first, last := alive[1], alive[len(alive)-1]
	s.res.SignedURL.Status = map[string]int{}
	for _, who := range []struct {
		op string
		n  *Node
	}{{"signed url, first peer", first}, {"signed url, last peer", last}} {
		bs := s.live.of(who.n.ID, ptr(false))
		for i := 0; i < 15 && i < len(bs); i++ {
			b := bs[i]
			exp := time.Now().Add(time.Minute).Unix()
			q := url.Values{"path": {"/tmp/f"}, "username": {"root"}, "signature_expiration": {strconv.FormatInt(exp, 10)},
				"signature": {protocol.SignFileURL("/tmp/f", "read", "root", b.token, exp)}}
			cctx, cancel := opCtx(ctx)
			req, _ := http.NewRequestWithContext(cctx, http.MethodGet, via.URL+"/files?"+q.Encode(), nil)
			t := time.Now()
			resp, err := s.c.HTTP.Do(req)
			d := time.Since(t)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				s.res.SignedURL.Status[strconv.Itoa(resp.StatusCode)]++
				if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusTooManyRequests {
					err = fmt.Errorf("answered %d", resp.StatusCode)
				}
			}
			cancel()
			s.rec.add(who.op, d, err)
			// The lookups are limited to 20 a second per client address.
			time.Sleep(60 * time.Millisecond)
		}
	}
	s.res.SignedURL.First = s.rec.summary("signed url, first peer")
	s.res.SignedURL.Last = s.rec.summary("signed url, last peer")
}

func ptr[T any](v T) *T { return &v }

// drain pauses sandboxes of the second node, waits for them to reach
// disk, drains the node through the first, and resumes every paused
// sandbox of it through other nodes, which take them over.
func (s *sim) drain(ctx context.Context) *Drain {
	alive := s.c.Alive()
	d := alive[1]
	out := &Drain{Node: d.ID}
	// Pause some running ones (besides those the mix left paused).
	running := s.live.of(d.ID, ptr(false))
	if len(running) > s.cfg.DrainPaused {
		running = running[:s.cfg.DrainPaused]
	}
	s.parallel(8, len(running), func(rng *rand.Rand, i int) {
		b := running[i]
		if s.live.take(rng, func(x *box) bool { return x == b }) == nil {
			return
		}
		via := s.via(rng, b.owner)
		cctx, cancel := opCtx(ctx)
		t := time.Now()
		err := via.Client.PauseSandbox(cctx, b.id, true)
		cancel()
		s.rec.add("drain pause", time.Since(t), err)
		s.live.release(b, err == nil)
	})
	paused := s.live.of(d.ID, ptr(true))
	out.Paused = len(paused)
	// Wait until they are on disk: only those move.
	t0 := time.Now()
	deadline := t0.Add(s.cfg.PauseWriteDelay + 2*time.Minute)
	for _, b := range paused {
		for {
			rec, err := s.c.Sandbox(ctx, b.id)
			if err == nil && rec.PausedOnDisk() {
				break
			}
			if !time.Now().Before(deadline) || ctx.Err() != nil {
				out.NotOnDisk++
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	out.WaitDiskS = time.Since(t0).Seconds()
	if err := s.c.Drain(ctx, alive[0], d); err != nil {
		s.rec.add("drain", 0, err)
		return out
	}
	s.stopAccepting(d)
	t1 := time.Now()
	var mu sync.Mutex
	s.parallel(8, len(paused), func(rng *rand.Rand, i int) {
		b := paused[i]
		if s.live.take(rng, func(x *box) bool { return x == b }) == nil {
			return
		}
		err := s.resume(ctx, rng, "drain move", b, func(moved bool) {
			mu.Lock()
			if moved {
				out.Moved++
			} else {
				out.Stayed++
			}
			mu.Unlock()
		})
		if err != nil {
			mu.Lock()
			out.Failed++
			mu.Unlock()
		}
	})
	out.MoveS = time.Since(t1).Seconds()
	out.Latency = s.rec.summary("drain move")
	return out
}

// loss kills the last node and measures how long the first takes to say
// it is unhealthy and its sandboxes lost, while two clients create
// through the survivors and read the lost node's sandboxes.
func (s *sim) loss(ctx context.Context) *Loss {
	alive := s.c.Alive()
	observer, victim := alive[0], alive[len(alive)-1]
	out := &Loss{Node: victim.ID}
	its := s.live.of(victim.ID, nil)
	out.Sandboxes = len(its)
	s.stopAccepting(victim)
	t0 := time.Now()
	killed := s.c.Kill(victim)
	watchCtx, stop := context.WithTimeout(ctx, 90*time.Second)
	defer stop()
	var wg sync.WaitGroup
	var creates, fails atomic.Int64
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := s.rng("loss", i)
			for watchCtx.Err() == nil {
				if i == 0 {
					// A create and a kill, keeping the count.
					b, _, err := s.create(ctx, rng, "loss create", false)
					creates.Add(1)
					if err != nil {
						fails.Add(1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					if s.live.take(rng, func(x *box) bool { return x == b }) != nil {
						s.kill(ctx, rng, "loss kill", b)
					}
				} else if len(its) > 0 {
					b := its[rng.IntN(len(its))]
					cctx, cancel := opCtx(watchCtx)
					t := time.Now()
					_, err := observer.Client.GetSandbox(cctx, b.id)
					cancel()
					if watchCtx.Err() == nil {
						s.rec.add("loss read", time.Since(t), err)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	var sample *box
	if len(its) > 0 {
		sample = its[0]
	}
	for watchCtx.Err() == nil && (out.UnhealthyAfterS == 0 || (sample != nil && out.LostAfterS == 0)) {
		if out.UnhealthyAfterS == 0 {
			if n, err := observer.Client.GetNode(watchCtx, victim.ID); err == nil && n.Status == "unhealthy" {
				out.UnhealthyAfterS = time.Since(t0).Seconds()
			}
		}
		if sample != nil && out.LostAfterS == 0 {
			if d, err := observer.Client.GetSandbox(watchCtx, sample.id); err == nil && d.State == "lost" {
				out.LostAfterS = time.Since(t0).Seconds()
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	wg.Wait()
	<-killed
	out.Creates, out.CreateFails = int(creates.Load()), int(fails.Load())
	out.Reads = s.rec.summary("loss read")
	out.CreateErrors = s.rec.summary("loss create").Sample
	for _, b := range its {
		s.live.remove(b)
	}
	return out
}

// oneAtATime creates CostOps sandboxes of the second node's template one
// at a time, alternately through that node and through the first, reads
// each through its own node and through the first, and kills them: with
// no other call in flight, the difference between the two is what
// placement on another node and forwarding add.
func (s *sim) oneAtATime(ctx context.Context) *Via {
	alive := s.c.Alive()
	other, holder := alive[0], alive[1]
	const (
		cOwn, cOther = "one at a time: create via its node", "one at a time: create via another node"
		rOwn, rOther = "one at a time: read via its node", "one at a time: read via another node"
	)
	s.rec.reset(cOwn, cOther, rOwn, rOther)
	rng := s.rng("via", 0)
	for i := range s.cfg.CostOps {
		op, via := cOwn, holder
		if i%2 == 1 {
			op, via = cOther, other
		}
		b, _, err := s.createWith(ctx, op, func() (string, *Node) { return holder.Template, via })
		if err != nil {
			continue
		}
		s.live.take(rng, func(x *box) bool { return x == b })
		for _, r := range []struct {
			op string
			n  *Node
		}{{rOwn, s.c.Node(b.owner)}, {rOther, other}} {
			if r.n == nil || r.n == other && b.owner == other.ID {
				continue
			}
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			_, err := r.n.Client.GetSandbox(cctx, b.id)
			cancel()
			s.rec.add(r.op, time.Since(t), err)
		}
		s.kill(ctx, rng, "one at a time: kill", b)
	}
	// Pages of 100 of the list, one at a time: the first ten pages, each
	// read after the one before with its token, five times over.
	const lPage = "one at a time: a page of 100 of the list"
	s.rec.reset(lPage)
	for range 5 {
		q := url.Values{"limit": {"100"}}
		for range 10 {
			cctx, cancel := opCtx(ctx)
			t := time.Now()
			var page []wire.ListedSandbox
			h, err := other.Client.Do(cctx, http.MethodGet, "/v2/sandboxes", q, nil, &page)
			cancel()
			s.rec.add(lPage, time.Since(t), err)
			if err != nil || h.Get("X-Next-Token") == "" {
				break
			}
			q.Set("nextToken", h.Get("X-Next-Token"))
		}
	}
	return &Via{CreateOwn: s.rec.summary(cOwn), CreateOther: s.rec.summary(cOther), ReadOwn: s.rec.summary(rOwn), ReadOther: s.rec.summary(rOther),
		ListPage: s.rec.summary(lPage)}
}

// losses kills k nodes at random but the first (the survivor that looks),
// waits until it says they are unhealthy, and accounts for every live
// sandbox through it.
func (s *sim) losses(ctx context.Context, k int) *Losses {
	alive := s.c.Alive()
	observer := alive[0]
	rng := s.rng("losses", 0)
	others := slices.Clone(alive[1:])
	rng.Shuffle(len(others), func(i, j int) { others[i], others[j] = others[j], others[i] })
	victims := others[:k]
	out := &Losses{}
	killed := map[string]bool{}
	for _, v := range victims {
		out.Nodes = append(out.Nodes, v.ID)
		killed[v.ID] = true
		s.stopAccepting(v)
	}
	boxes := s.live.snapshot()
	out.Sandboxes = len(boxes)
	t0 := time.Now()
	var stopped []<-chan error
	for _, v := range victims {
		stopped = append(stopped, s.c.Kill(v))
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for pending := slices.Clone(out.Nodes); len(pending) > 0 && waitCtx.Err() == nil; {
		pending = slices.DeleteFunc(pending, func(id string) bool {
			n, err := observer.Client.GetNode(waitCtx, id)
			return err == nil && n.Status == "unhealthy"
		})
		if len(pending) == 0 {
			out.AllUnhealthyAfterS = time.Since(t0).Seconds()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range stopped {
		<-c
	}
	t1 := time.Now()
	listed, err := observer.Client.ListSandboxes(ctx, client.ListOptions{})
	states := map[string]string{}
	for _, l := range listed {
		states[l.SandboxID] = l.State
	}
	miss := func(b *box, found string) {
		out.Missing++
		if len(out.Examples) < 10 {
			out.Examples = append(out.Examples, fmt.Sprintf("%s on %s (paused %v): %s", b.id, b.owner, b.paused, found))
		}
	}
	for _, b := range boxes {
		if killed[b.owner] {
			out.OnKilled++
			// Each node sees another as lost once its own view of the
			// living has caught up (one heartbeat): read until then.
			var state string
			for try := 0; try < 50; try++ {
				d, err := observer.Client.GetSandbox(ctx, b.id)
				if err != nil {
					state = err.Error()
				} else if state = d.State; state == "lost" {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if state == "lost" {
				out.ReadLost++
			} else {
				miss(b, state)
			}
			continue
		}
		want := map[bool]string{false: "running", true: "paused"}[b.paused]
		switch got, ok := states[b.id]; {
		case err != nil:
			miss(b, "list failed: "+err.Error())
		case !ok:
			miss(b, "not listed")
		case got != want:
			miss(b, "listed "+got)
		default:
			out.Listed++
		}
	}
	out.CheckS = time.Since(t1).Seconds()
	for _, b := range boxes {
		if killed[b.owner] {
			s.live.remove(b)
		}
	}
	return out
}

// parallel runs do for 0..n-1 on k clients.
func (s *sim) parallel(k, n int, do func(rng *rand.Rand, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range k {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := s.rng("parallel", w)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				do(rng, i)
			}
		}()
	}
	wg.Wait()
}

// pgErrors counts PostgreSQL's FATAL and ERROR log lines by message.
func pgErrors(log string) map[string]int {
	out := map[string]int{}
	for _, line := range strings.Split(log, "\n") {
		for _, level := range []string{"FATAL:", "ERROR:"} {
			if i := strings.Index(line, level); i >= 0 {
				out[strings.TrimSpace(line[i:])]++
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
