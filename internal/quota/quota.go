// Package quota holds each team to the limits its admin set (cube.Quotas):
// running sandboxes and their vCPUs and memory, the longest timeout, disk
// for templates, snapshots and volumes, and builds at once. A team's use
// is counted from the state store, which every node of a cluster shares,
// so a quota holds across the cluster and not per node.
//
// A check and the record it guards are not one transaction: two creates
// of one team racing on two nodes can both pass at the limit. On one node
// they cannot: a sandbox admitted but not yet recorded holds a
// reservation that the next check counts. Teams never wait for each
// other: each has its own lock, held only while counting.
package quota

import (
	"context"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// Lookup returns a team's quotas.
type Lookup func(ctx context.Context, team string) (cube.Quotas, error)

// Checker checks teams against their quotas.
type Checker struct {
	st     *store.Store
	lookup Lookup

	mu    sync.Mutex
	teams map[string]*teamUse
}

// teamUse is what this node has admitted for a team and not yet recorded.
type teamUse struct {
	mu       sync.Mutex
	reserved Sandboxes
}

// Sandboxes is an amount of running sandboxes.
type Sandboxes struct {
	Count    int
	VCPUs    int
	MemoryMB int
}

func (a Sandboxes) plus(b Sandboxes) Sandboxes {
	return Sandboxes{a.Count + b.Count, a.VCPUs + b.VCPUs, a.MemoryMB + b.MemoryMB}
}

// New returns a checker of the teams in st, their quotas read through
// lookup. A nil Checker checks nothing (no teams: every test node).
func New(st *store.Store, lookup Lookup) *Checker {
	return &Checker{st: st, lookup: lookup, teams: map[string]*teamUse{}}
}

func (c *Checker) team(id string) *teamUse {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.teams[id]
	if !ok {
		t = &teamUse{}
		c.teams[id] = t
	}
	return t
}

func over(quota string, use, add, limit int64, unit string) error {
	return cube.Errorf(cube.Capacity, "team quota %s reached: %d%s in use, %d%s more asked, the limit is %d%s; free some or ask the admin to raise it",
		quota, use, unit, add, unit, limit, unit)
}

// Start admits sandboxes of a team that are about to run (a create, a
// resume, the children of a fork), or says which quota they would pass.
// The caller calls release once they are recorded (or failed).
func (c *Checker) Start(ctx context.Context, team string, add Sandboxes) (release func(), err error) {
	if c == nil || team == "" {
		return func() {}, nil
	}
	q, err := c.lookup(ctx, team)
	if err != nil {
		return nil, err
	}
	if q.RunningSandboxes == 0 && q.VCPUs == 0 && q.MemoryMB == 0 {
		return func() {}, nil
	}
	t := c.team(team)
	t.mu.Lock()
	defer t.mu.Unlock()
	use, err := c.running(ctx, team)
	if err != nil {
		return nil, err
	}
	use = use.plus(t.reserved)
	switch {
	case q.RunningSandboxes > 0 && use.Count+add.Count > q.RunningSandboxes:
		return nil, over("runningSandboxes", int64(use.Count), int64(add.Count), int64(q.RunningSandboxes), "")
	case q.VCPUs > 0 && use.VCPUs+add.VCPUs > q.VCPUs:
		return nil, over("vcpus", int64(use.VCPUs), int64(add.VCPUs), int64(q.VCPUs), " vCPU")
	case q.MemoryMB > 0 && use.MemoryMB+add.MemoryMB > q.MemoryMB:
		return nil, over("memoryMB", int64(use.MemoryMB), int64(add.MemoryMB), int64(q.MemoryMB), " MiB")
	}
	t.reserved = t.reserved.plus(add)
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.reserved = t.reserved.plus(Sandboxes{-add.Count, -add.VCPUs, -add.MemoryMB})
			t.mu.Unlock()
		})
	}, nil
}

// running is the team's sandboxes that hold CPU and memory: running, or
// on their way there.
func (c *Checker) running(ctx context.Context, team string) (Sandboxes, error) {
	n, cpus, mem, err := c.st.TeamUse(ctx, team, store.Creating, store.Running, store.Resuming)
	if err != nil {
		return Sandboxes{}, err
	}
	return Sandboxes{n, cpus, mem}, nil
}

// Timeout says whether a team may ask for a sandbox lifetime of d.
func (c *Checker) Timeout(ctx context.Context, team string, d time.Duration) error {
	if c == nil || team == "" {
		return nil
	}
	q, err := c.lookup(ctx, team)
	if err != nil {
		return err
	}
	if q.MaxTimeout > 0 && d > q.MaxTimeout {
		return cube.Errorf(cube.Capacity, "team quota maxTimeout: a timeout of %s was asked, the limit is %s; ask for less or ask the admin to raise it",
			d.Round(time.Second), q.MaxTimeout)
	}
	return nil
}

// Disk says whether a team may store add more bytes: its templates,
// snapshots and volumes together stay within its disk quota.
func (c *Checker) Disk(ctx context.Context, team string, add int64) error {
	if c == nil || team == "" {
		return nil
	}
	q, err := c.lookup(ctx, team)
	if err != nil || q.DiskBytes == 0 {
		return err
	}
	use, err := c.DiskUse(ctx, team)
	if err != nil {
		return err
	}
	if use+add > q.DiskBytes {
		return over("diskBytes", use, add, q.DiskBytes, " bytes")
	}
	return nil
}

// DiskUse is what a team stores: its templates and snapshots (their own
// files) and the sizes of its volumes.
func (c *Checker) DiskUse(ctx context.Context, team string) (int64, error) {
	var use int64
	tpls, err := c.st.Templates().List(ctx)
	if err != nil {
		return 0, err
	}
	for _, t := range tpls {
		if t.Team == team {
			use += t.SizeBytes
		}
	}
	vols, err := c.st.Volumes().List(ctx)
	if err != nil {
		return 0, err
	}
	for _, v := range vols {
		if v.Team == team {
			use += v.SizeBytes
		}
	}
	return use, nil
}

// Builds admits one more template build of a team, or says it has as
// many running as its quota allows. running counts the team's builds in
// progress (the builder knows which phases those are).
func (c *Checker) Builds(ctx context.Context, team string, running int) error {
	if c == nil || team == "" {
		return nil
	}
	q, err := c.lookup(ctx, team)
	if err != nil {
		return err
	}
	if q.Builds > 0 && running+1 > q.Builds {
		return over("builds", int64(running), 1, int64(q.Builds), "")
	}
	return nil
}
