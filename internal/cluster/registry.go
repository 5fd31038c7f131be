// Package cluster keeps a node's own record in the state database: the
// node registers at start, heartbeats its resources and their use, and
// takes new sandboxes only while its status is ready. Operators change a
// node's status (drain, standby, ready) and remove nodes that are gone
// through the Registry of any node.
//
// With the embedded SQLite store the service is one node; the record is
// the same, so the operators' commands and the API do not change when
// nodes share a PostgreSQL database.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// Config configures a Registry.
type Config struct {
	Store *store.Store
	// ID names the node; Address is its API base URL for its peers.
	ID, Address, Version string
	// Interval is the time between heartbeats (default 2s); a node whose
	// last heartbeat is older than Timeout (default 5 × Interval) is
	// reported unhealthy.
	Interval, Timeout time.Duration
	// CACert is the PEM certificate peers verify this node's certificates
	// by (mutual TLS between nodes); empty without it.
	CACert string
	// Usage reads the node's resources and their use for a heartbeat; the
	// Register function registers with it (Open does not read it).
	Usage  func(ctx context.Context) store.NodeUsage
	Logger *slog.Logger
	// Now is time.Now; tests move it.
	Now func() time.Time
}

// Registry is one node's handle on the node records.
type Registry struct {
	cfg Config
	// mu guards status. Writes of node records are transactions of the
	// store (Update), so neither heartbeats nor status changes, from this
	// node or another, undo each other.
	mu     sync.Mutex
	status cube.NodeStatus
	// alive is which nodes heartbeat, as of this node's last heartbeat:
	// read without mu, which heartbeats hold while the database answers.
	alive atomic.Pointer[map[string]bool]
	// members are the nodes of the table, as of its membership version
	// membersAt (store.StaleNodes); with mu.
	members   []string
	membersAt int64
	// records are the node records as of the last read by changes (see
	// records), for placement and the cluster's totals.
	records records
	// trust is the nodes' recorded authorities (see trust.go).
	trust trust
}

// Register opens the registry and records the node as started (Open,
// then Registry.Register with cfg.Usage).
func Register(ctx context.Context, cfg Config) (*Registry, error) {
	r, err := Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Register(ctx, cfg.Usage); err != nil {
		return nil, err
	}
	return r, nil
}

// Open reads the node records for a node that registers later: peers can
// be looked up, checked and placed on from then on. The node that runs the
// sandboxes is made with this registry (it shows the sandboxes of nodes
// that stopped heartbeating lost, and fetches files from peers), while
// what this node reports of itself needs that node: so opening and
// registering are two steps. cfg.Usage is not read.
func Open(ctx context.Context, cfg Config) (*Registry, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Registry{cfg: cfg}
	alive, err := r.readAlive(ctx)
	if err != nil {
		return nil, fmt.Errorf("register node %s: %w", cfg.ID, err)
	}
	r.alive.Store(&alive)
	return r, nil
}

// Register records the node as started, with usage read now and at every
// heartbeat after (nil: none): a new node is ready; one that was drained
// or set aside before a restart stays so, since an operator's decision
// outlives the process. Call it once, before Run.
func (r *Registry) Register(ctx context.Context, usage func(ctx context.Context) store.NodeUsage) error {
	if usage == nil {
		usage = func(context.Context) store.NodeUsage { return store.NodeUsage{} }
	}
	cfg := &r.cfg
	cfg.Usage = usage
	r.mu.Lock()
	defer r.mu.Unlock()
	now := cfg.Now().UTC()
	rec, err := cfg.Store.Nodes().Get(ctx, cfg.ID)
	if errors.Is(err, store.ErrNotFound) {
		rec = &store.Node{ID: cfg.ID, Status: store.NodeReady, StatusChangedAt: now}
	} else if err != nil {
		return fmt.Errorf("register node %s: %w", cfg.ID, err)
	}
	rec.Address, rec.Version, rec.StartedAt, rec.HeartbeatAt, rec.CACert = cfg.Address, cfg.Version, now, now, cfg.CACert
	rec.Usage = cfg.Usage(ctx)
	if err := cfg.Store.Nodes().Put(ctx, rec); err != nil {
		return fmt.Errorf("register node %s: %w", cfg.ID, err)
	}
	r.status = cube.NodeStatus(rec.Status)
	alive, err := r.readAlive(ctx)
	if err != nil {
		return fmt.Errorf("register node %s: %w", cfg.ID, err)
	}
	r.alive.Store(&alive)
	return nil
}

// Run heartbeats until ctx ends. A failed heartbeat is logged and tried
// again at the next tick: a node that cannot reach the database keeps
// serving the sandboxes it runs.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.heartbeat(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("node heartbeat", "node", r.cfg.ID, "err", err)
		}
	}
}

// heartbeat writes the node's usage and the time, and picks up a status an
// operator set through another node. Only those two fields change, in one
// transaction, so a status set meanwhile is not written back over.
func (r *Registry) heartbeat(ctx context.Context) error {
	read := r.cfg.Now().UTC()
	usage := r.cfg.Usage(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now().UTC()
	var status store.NodeStatus
	err := r.cfg.Store.Nodes().Update(ctx, r.cfg.ID, func(rec *store.Node) error {
		rec.HeartbeatAt, rec.Usage = now, usage
		rec.Reservations = settled(rec.Reservations, read, now)
		status = rec.Status
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		// Removed by an operator while it ran: it registers again.
		status = store.NodeStatus(r.status)
		err = r.cfg.Store.Nodes().Put(ctx, &store.Node{ID: r.cfg.ID, Address: r.cfg.Address, Version: r.cfg.Version, CACert: r.cfg.CACert,
			Status: status, StatusChangedAt: now, StartedAt: now, HeartbeatAt: now, Usage: usage})
	}
	if err != nil {
		return err
	}
	r.status = cube.NodeStatus(status)
	if alive, err := r.readAlive(ctx); err == nil {
		r.alive.Store(&alive)
	}
	return nil
}

// readAlive reads which nodes heartbeat: the nodes whose heartbeat is
// late, and the members again only when a node was added or removed
// since the last read. Every node reads this each heartbeat, so it reads
// no row of the nodes that heartbeat: the cluster reads O(nodes) rows an
// interval, not O(nodes²). The caller holds mu (or is Open).
func (r *Registry) readAlive(ctx context.Context) (map[string]bool, error) {
	stale, version, err := r.cfg.Store.StaleNodes(ctx, r.cfg.Now().Add(-r.cfg.Timeout))
	if err != nil {
		return nil, err
	}
	if r.members == nil || version != r.membersAt {
		ids, err := r.cfg.Store.NodeIDs(ctx)
		if err != nil {
			return nil, err
		}
		if ids == nil {
			ids = []string{}
		}
		r.members, r.membersAt = ids, version
	}
	alive := make(map[string]bool, len(r.members))
	for _, id := range r.members {
		alive[id] = true
	}
	for _, id := range stale {
		// Late as view has it: never this node.
		if id != r.cfg.ID {
			alive[id] = false
		}
	}
	return alive, nil
}

// Alive reports whether a node heartbeats, as of this node's last
// heartbeat; a node the table does not hold (removed) does not.
func (r *Registry) Alive(nodeID string) bool {
	return (*r.alive.Load())[nodeID]
}

// AlivePeers names the other nodes that heartbeat, as of this node's last
// heartbeat, in a stable order.
func (r *Registry) AlivePeers() []string {
	var out []string
	for id, ok := range *r.alive.Load() {
		if ok && id != r.cfg.ID {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Admit answers whether this node takes a new sandbox: nil while it is
// ready, else an Unavailable error saying why and what undoes it.
func (r *Registry) Admit() error {
	r.mu.Lock()
	status := r.status
	r.mu.Unlock()
	if status == cube.NodeReady {
		return nil
	}
	return cube.Errorf(cube.Unavailable, "node %s is %s and takes no new sandboxes; `cubemastercli node uncordon %s` makes it ready again", r.cfg.ID, status, r.cfg.ID)
}

// AdmitNow is Admit by the status recorded now rather than at the last
// heartbeat: for work that is rare and heavy (a fork), which should not
// land on a node an operator drained a moment ago. While the database is
// out of reach it answers as Admit.
func (r *Registry) AdmitNow(ctx context.Context) error {
	if rec, err := r.cfg.Store.Nodes().Get(ctx, r.cfg.ID); err == nil {
		r.mu.Lock()
		r.status = cube.NodeStatus(rec.Status)
		r.mu.Unlock()
	}
	return r.Admit()
}

// ListNodes returns every node, this one first.
func (r *Registry) ListNodes(ctx context.Context) ([]cube.Node, error) {
	recs, err := r.cfg.Store.Nodes().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cube.Node, 0, len(recs))
	for _, rec := range recs {
		n := r.view(rec)
		if n.Self {
			out = append([]cube.Node{n}, out...)
		} else {
			out = append(out, n)
		}
	}
	return out, nil
}

// GetNode returns one node.
func (r *Registry) GetNode(ctx context.Context, id string) (cube.Node, error) {
	rec, err := r.cfg.Store.Nodes().Get(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Node{}, cube.Errorf(cube.NotFound, "node %q not found: list nodes with `cubemastercli node list`", id)
	}
	if err != nil {
		return cube.Node{}, err
	}
	return r.view(rec), nil
}

// SetNodeStatus makes a node ready, draining or standby.
func (r *Registry) SetNodeStatus(ctx context.Context, id string, status cube.NodeStatus) error {
	switch status {
	case cube.NodeReady, cube.NodeDraining, cube.NodeStandby:
	default:
		return cube.Errorf(cube.Invalid, "status %q cannot be set: use ready, draining or standby", status).WithField("status")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.cfg.Store.Nodes().Update(ctx, id, func(rec *store.Node) error {
		if rec.Status != store.NodeStatus(status) {
			rec.Status, rec.StatusChangedAt = store.NodeStatus(status), r.cfg.Now().UTC()
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return cube.Errorf(cube.NotFound, "node %q not found: list nodes with `cubemastercli node list`", id)
	}
	if err != nil {
		return err
	}
	if id == r.cfg.ID {
		r.status = status
	}
	r.cfg.Logger.Info("node status changed", "node", id, "status", status)
	return nil
}

// RemoveNode forgets a node that no longer runs. A node that still
// heartbeats would only register again: it is refused, as is this one.
func (r *Registry) RemoveNode(ctx context.Context, id string) error {
	n, err := r.GetNode(ctx, id)
	if err != nil {
		return err
	}
	if n.Self || n.Status != cube.NodeUnhealthy {
		return cube.Errorf(cube.Conflict, "node %s is running (its last heartbeat was %s ago): stop it first, then remove it", id, r.cfg.Now().Sub(n.HeartbeatAt).Round(time.Second))
	}
	return r.cfg.Store.Nodes().Delete(ctx, id)
}

// view is a record as the API shows it: unhealthy once its heartbeat is
// older than the timeout, whatever status it was given.
func (r *Registry) view(rec *store.Node) cube.Node {
	status := cube.NodeStatus(rec.Status)
	self := rec.ID == r.cfg.ID
	if !self && r.cfg.Now().Sub(rec.HeartbeatAt) > r.cfg.Timeout {
		status = cube.NodeUnhealthy
	}
	u := rec.Usage
	return cube.Node{
		ID: rec.ID, Address: rec.Address, Status: status, StatusChangedAt: rec.StatusChangedAt,
		Version: rec.Version, StartedAt: rec.StartedAt, HeartbeatAt: rec.HeartbeatAt, Self: self,
		Usage: cube.NodeUsage{
			CPUCount: u.CPUCount, CPUPercent: u.CPUPercent, MemoryTotalBytes: u.MemoryTotalBytes, MemoryUsedBytes: u.MemoryUsedBytes,
			AllocatedCPU: u.AllocatedCPU, AllocatedMemoryBytes: u.AllocatedMemoryBytes, DiskTotalBytes: u.DiskTotalBytes,
			DiskUsedBytes: u.DiskUsedBytes, SlotsTotal: u.SlotsTotal, SlotsUsed: u.SlotsUsed, Sandboxes: u.Sandboxes,
			SandboxesStarting: u.SandboxesStarting, CreateSuccesses: u.CreateSuccesses, CreateFails: u.CreateFails,
			CPUModel: u.CPUModel, Arch: u.Arch,
		},
	}
}
