// Package sim runs a cluster of Cube nodes in one process, to find what
// breaks first as nodes and sandboxes grow: each node is the real server
// assembly (server.Run: API, forwarding, placement, registry, audit,
// teams, the PostgreSQL store with its claim) on nodefake's in-memory
// runtime, network slots and agents instead of gVisor, all sharing one
// PostgreSQL server the simulation starts for itself. A workload
// (workload.go) drives them through their HTTP APIs as E2B clients would,
// and measures latencies and what the database did (stats.go).
package sim

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cube/internal/client"
	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/node"
	"cube/internal/node/nodefake"
	"cube/internal/pgbouncer"
	"cube/internal/server"
	"cube/internal/store"
	"cube/internal/teams"
)

// ClusterOptions shape a simulated cluster.
type ClusterOptions struct {
	// Nodes is how many nodes to start.
	Nodes int
	// Slots is each node's network slots, and MaxSandboxes its limit of
	// running and paused sandboxes.
	Slots, MaxSandboxes int
	// PauseWriteDelay is how long a paused sandbox stays in memory before
	// it is written to disk (0: 2s).
	PauseWriteDelay time.Duration
	// StartConcurrency bounds the nodes starting at once (0: 8).
	StartConcurrency int
	// Log receives the nodes' warnings; nil discards them (they are
	// counted either way).
	Log io.Writer
	// StoreParams are added to the query of every node's --store URL
	// (e.g. pool_max_conns=16, where the store takes it).
	StoreParams string
	// PgBouncerPool, when set, puts a PgBouncer in transaction mode
	// between the nodes and PostgreSQL, holding at most this many server
	// connections.
	PgBouncerPool int
}

// Cluster is a running simulated cluster.
type Cluster struct {
	PG *Postgres
	// Key is the API key every node takes (the first team's admin key).
	Key   string
	Nodes []*Node
	// HTTP is the client the workload calls the nodes with.
	HTTP *http.Client

	opts    ClusterOptions
	bouncer *pgbouncer.Pooler
	dir     string
	secret  string
	envd    string
	// store is the simulation's own handle on the database while the
	// templates are written; check is its one connection for checks once
	// the nodes run.
	store *store.Store
	check *sql.DB
	logs  *logCounter
}

// Node is one node of the cluster.
type Node struct {
	ID string
	// URL is its API's base URL (also the address its peers reach it at).
	URL string
	// Store is the URL of the database as the node's own role.
	Store    string
	DataDir  string
	Template string
	Client   *client.Client

	runtime *nodefake.Runtime
	slots   *nodefake.Slots
	agents  *nodefake.Agents

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
	killed bool
}

// Killed reports whether the node was stopped by Kill.
func (n *Node) Killed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.killed
}

// StartCluster starts o.Nodes nodes on pg, each with a template of its
// own (built on the fakes before the node starts, as a build would), and
// returns once every node serves.
func StartCluster(ctx context.Context, pg *Postgres, dir string, o ClusterOptions) (*Cluster, error) {
	if o.Nodes < 1 {
		return nil, errors.New("a cluster needs a node")
	}
	if o.PauseWriteDelay == 0 {
		o.PauseWriteDelay = 2 * time.Second
	}
	if o.StartConcurrency <= 0 {
		o.StartConcurrency = 8
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	c := &Cluster{PG: pg, Key: teams.NewKey(), opts: o, dir: dir, secret: randomHex(32), logs: newLogCounter(o.Log)}
	c.HTTP = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute,
	}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The node installs its agent binary by content; any bytes will do.
	c.envd = filepath.Join(dir, "cube-envd")
	if err := os.WriteFile(c.envd, []byte("fake cube-envd of cube-sim\n"), 0o755); err != nil {
		return nil, err
	}
	var err error
	if c.store, err = store.OpenPostgres(ctx, pg.URL); err != nil {
		return nil, err
	}
	secretsKey := randomHex(32)
	for i := range o.Nodes {
		n := &Node{ID: fmt.Sprintf("node-%03d", i+1), runtime: nodefake.NewRuntime(), slots: nodefake.NewSlots(o.Slots), agents: nodefake.NewAgents()}
		n.DataDir = filepath.Join(dir, "nodes", n.ID)
		if n.Store, err = pg.Role(ctx, n.ID); err != nil {
			c.Stop()
			return nil, err
		}
		if o.StoreParams != "" {
			n.Store += "&" + o.StoreParams
		}
		n.Template = "tpl-" + n.ID
		if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
			c.Stop()
			return nil, err
		}
		// Every node takes the same key, as CUBE_API_KEY would give it.
		if err := os.WriteFile(filepath.Join(n.DataDir, "api-key"), []byte(c.Key+"\n"), 0o600); err != nil {
			c.Stop()
			return nil, err
		}
		if err := c.buildTemplate(ctx, n); err != nil {
			c.Stop()
			return nil, fmt.Errorf("template of %s: %w", n.ID, err)
		}
		c.Nodes = append(c.Nodes, n)
	}
	if o.PgBouncerPool > 0 {
		roles := make([]string, len(c.Nodes))
		for i, n := range c.Nodes {
			roles[i] = n.ID
		}
		if c.bouncer, err = startPgBouncer(ctx, pg, filepath.Join(dir, "pgbouncer"), roles, o.PgBouncerPool); err != nil {
			c.Stop()
			return nil, err
		}
		for _, n := range c.Nodes {
			if n.Store, err = c.bouncer.Through(n.Store); err != nil {
				c.Stop()
				return nil, err
			}
		}
	}
	sem := make(chan struct{}, o.StartConcurrency)
	errs := make(chan error, len(c.Nodes))
	for _, n := range c.Nodes {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- c.start(ctx, n, secretsKey)
		}()
	}
	var first error
	serving := 0
	for range c.Nodes {
		if err := <-errs; err != nil && first == nil {
			first = err
		} else if err == nil {
			serving++
		}
	}
	if first != nil {
		c.Stop()
		return nil, fmt.Errorf("%d of %d nodes started, then: %w", serving, len(c.Nodes), first)
	}
	// The simulation's own connections are not to count against the
	// nodes': checks read the database through one connection of their
	// own (check).
	c.store.Close()
	c.store = nil
	if c.check, err = sql.Open("pgx", pg.URL); err != nil {
		c.Stop()
		return nil, err
	}
	c.check.SetMaxOpenConns(1)
	c.check.SetMaxIdleConns(0)
	return c, nil
}

// buildTemplate builds n's template on its fakes through a node of its
// own on n's data directory, which is closed before the server starts
// there, and records it as the first team's.
func (c *Cluster) buildTemplate(ctx context.Context, n *Node) error {
	nd, err := node.New(node.Config{DataDir: n.DataDir, Envd: c.envd, Runtime: n.runtime, Slots: n.slots, Store: c.store,
		Logger: c.logs.logger().With("node", n.ID), DiskReserveMB: -1, EnvdVersion: protocol.Version,
		NodeID: n.ID, AgentAt: n.agents.At})
	if err != nil {
		return err
	}
	defer nd.Close()
	// The rootfs is kept outside the data directory, whose top-level
	// folders the server makes private at start: the template's manifest
	// records the rootfs's mode, which copies are checked against.
	tpl := &store.Template{ID: n.Template, Team: cube.FirstTeam, Status: store.TemplateBuilding, Node: n.ID,
		Rootfs: filepath.Join(c.dir, "rootfs", n.Template), DiskSizeMB: 64, MemoryMB: 256, CPUCount: 1,
		CreatedAt: time.Now().UTC()}
	if err := os.MkdirAll(tpl.Rootfs, 0o755); err != nil {
		return err
	}
	probe := func(context.Context, netip.Addr) error { return nil }
	if err := nd.BuildSnapshot(ctx, tpl, probe, nil); err != nil {
		return err
	}
	tpl.Status = store.TemplateReady
	return c.store.Templates().Put(ctx, tpl)
}

// start runs n's server until Kill or Stop, and returns once it serves.
func (c *Cluster) start(ctx context.Context, n *Node, secretsKey string) error {
	ready := make(chan string, 1)
	o := server.Options{
		Listen: "127.0.0.1:0", DataDir: n.DataDir, Store: n.Store, NodeID: n.ID,
		ClusterSecret: c.secret, ClusterInsecureTransport: true,
		Envd: c.envd, Slots: c.opts.Slots, MaxSandboxes: c.opts.MaxSandboxes, DiskReserveMB: -1,
		PauseWriteDelay: c.opts.PauseWriteDelay, SecretsKey: secretsKey,
		Logger: c.logs.logger().With("node", n.ID),
		Ready:  func(addr string) { ready <- addr },
		Parts:  &server.Parts{Runtime: n.runtime, Slots: n.slots, AgentAt: n.agents.At},
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- server.Run(runCtx, o) }()
	select {
	case addr := <-ready:
		n.URL = "http://" + addr
		n.Client = client.New(n.URL, c.Key)
		n.Client.HTTP = c.HTTP
		return nil
	case err := <-n.done:
		n.done <- err
		return fmt.Errorf("node %s: %w", n.ID, err)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Kill stops a node as a crash would as far as the cluster can tell: it
// stops serving and heartbeating, its claim on the database goes with its
// connections, and its record is left as it was (not deregistered), so
// its peers declare it lost once its heartbeat is late. Its containers
// stay in its fake runtime. The node counts as killed (Alive leaves it
// out) when Kill returns; the returned channel says when it has stopped.
func (c *Cluster) Kill(n *Node) <-chan error {
	stopped := make(chan error, 1)
	n.mu.Lock()
	if n.killed || n.cancel == nil {
		n.mu.Unlock()
		stopped <- nil
		return stopped
	}
	n.killed = true
	n.mu.Unlock()
	n.cancel()
	go func() { stopped <- <-n.done }()
	return stopped
}

// Drain sets a node draining through another node's API, as an operator
// would (cubemastercli node drain).
func (c *Cluster) Drain(ctx context.Context, via, n *Node) error {
	return via.Client.SetNodeStatus(ctx, n.ID, string(cube.NodeDraining))
}

// Alive are the nodes not killed.
func (c *Cluster) Alive() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if !n.Killed() {
			out = append(out, n)
		}
	}
	return out
}

// Node returns the node named id, nil when none is.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Sandbox reads a sandbox's record through the simulation's own
// connection.
func (c *Cluster) Sandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	var data string
	if err := c.check.QueryRowContext(ctx, `SELECT data FROM sandboxes WHERE id = $1`, id).Scan(&data); err != nil {
		return nil, err
	}
	var rec store.Sandbox
	if err := json.Unmarshal([]byte(data), &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}

// Warnings are the warnings and errors the nodes logged, most frequent
// first.
func (c *Cluster) Warnings() []LogCount { return warnings(c.logs.snapshot(), nil) }

// Stop stops every node still running and closes the simulation's store.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		n.mu.Lock()
		cancel, done, killed := n.cancel, n.done, n.killed
		n.killed = true
		n.mu.Unlock()
		if cancel == nil || killed {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancel()
			<-done
		}()
	}
	wg.Wait()
	if c.bouncer != nil {
		c.bouncer.Stop()
	}
	if c.store != nil {
		c.store.Close()
	}
	if c.check != nil {
		c.check.Close()
	}
	if t, ok := c.HTTP.Transport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// logger is the logger of a component of the simulation itself.
func (c *Cluster) logger() *slog.Logger { return c.logs.logger().With("component", "sim") }
