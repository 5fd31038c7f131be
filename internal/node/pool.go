package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/runtime"
	"cube/internal/store"
)

// The warm pool keeps, per template built from an image, a few sandboxes
// already restored from its snapshot and waiting in their network slots.
// Handing one out is a claim plus envd's /init, which is what makes a
// create take milliseconds instead of a restore's hundreds. The pool is
// refilled in the background by refillWorkers restores at once; when it is
// empty a create restores cold. Warm sandboxes have no store record, so
// after a crash the reconciler removes them like any unknown container.
//
// The pool's depth follows demand: every create that finds it empty (a
// miss) or takes its last sandbox adds one to the template's depth, up to
// poolGrowth times PoolSize, and each poolShrinkAfter without such a
// create takes one back. A stream of creates faster than the refill thus
// deepens the pool until it lasts, a burst drains it once and finds it
// deeper the next time, and an idle template holds only PoolSize.
const (
	refillWorkers = 2
	poolGrowth    = 4
)

// poolShrinkAfter is how long a pool keeps a sandbox of extra depth
// without a create that needed it (nanoseconds; tests shorten it).
var poolShrinkAfter atomic.Int64

func init() { poolShrinkAfter.Store(int64(time.Minute)) }

// warmPrefix starts the container IDs of warm sandboxes.
const warmPrefix = "w"

// poolDemand is how far demand has grown one template's pool.
type poolDemand struct {
	extra    int       // sandboxes kept beyond PoolSize
	lastMiss time.Time // when a create last found the pool empty or emptied it
}

// pools are the containers kept ready for sandboxes to start in: warm
// sandboxes per template (this file) and prepared containers per kind of
// restore (prepared.go). They have no records; the node drains them on
// Close, and the reconciler removes what a crash left.
type pools struct {
	h *host

	// mu guards the maps and counts below.
	mu sync.Mutex
	// warm holds restored, not yet handed out sandboxes per template.
	warm   map[string][]*container
	refill chan struct{}
	// demand grows a template's pool past PoolSize; filling counts the
	// refills under way per template.
	demand  map[string]*poolDemand
	filling map[string]int
	// prepared holds containers made ahead of restores, per PrepareKey;
	// wants the kinds of restore asked for recently.
	prepared map[string][]*preparedBox
	wants    map[string]*preparedWant
	// needed grows a kind's prepared containers past PreparedPerKey.
	needed  map[string]*poolDemand
	prepare chan struct{}
	// preparing counts the prepares under way (at most one: the
	// preparer makes one container at a time).
	preparing int
}

func newPools(h *host) *pools {
	return &pools{
		h:    h,
		warm: map[string][]*container{}, refill: make(chan struct{}, 1),
		demand: map[string]*poolDemand{}, filling: map[string]int{},
		prepared: map[string][]*preparedBox{}, wants: map[string]*preparedWant{}, needed: map[string]*poolDemand{},
		prepare: make(chan struct{}, 1),
	}
}

// takeWarm claims a warm sandbox of a template, if one is ready. A create
// that finds the pool empty (a miss), or empties it, grows the pool.
func (p *pools) takeWarm(tplID string) *container {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer nudge(p.refill)
	list := p.warm[tplID]
	if len(list) == 0 {
		p.h.tel.poolMisses.WithLabelValues(tplID).Inc()
		p.growPool(tplID)
		return nil
	}
	box := list[len(list)-1]
	p.warm[tplID] = list[:len(list)-1]
	if len(list) == 1 {
		p.growPool(tplID)
	}
	return box
}

// growPool adds one to tplID's pool target, up to poolGrowth times
// PoolSize; p.mu held.
func (p *pools) growPool(tplID string) {
	grow(p.demand, tplID, p.h.cfg.PoolSize)
}

// poolTarget is how many warm sandboxes tplID should have now; p.mu held.
func (p *pools) poolTarget(tplID string, now time.Time) int {
	return target(p.demand, tplID, p.h.cfg.PoolSize, now)
}

// grow adds one to the depth of key's pool in demand, whose base depth is
// base, up to poolGrowth times base.
func grow(demand map[string]*poolDemand, key string, base int) {
	d := demand[key]
	if d == nil {
		d = &poolDemand{}
		demand[key] = d
	}
	d.lastMiss = time.Now()
	if d.extra < (poolGrowth-1)*base {
		d.extra++
	}
}

// target is the depth key's pool should have now: base, plus what demand
// added and poolShrinkAfter has not yet taken back.
func target(demand map[string]*poolDemand, key string, base int, now time.Time) int {
	d := demand[key]
	if d == nil {
		return base
	}
	shrink := time.Duration(poolShrinkAfter.Load())
	for d.extra > 0 && now.Sub(d.lastMiss) > shrink {
		d.extra--
		d.lastMiss = d.lastMiss.Add(shrink)
	}
	return base + d.extra
}

// refiller keeps every pool at its target until ctx is cancelled. Each of
// the refillWorkers runs one restore at a time.
func (p *pools) refiller(ctx context.Context) {
	ctx = runtime.Background(ctx)
	var wg sync.WaitGroup
	for range refillWorkers {
		wg.Go(func() { every(ctx, 2*time.Second, p.refill, p.refillPools) })
	}
	wg.Wait()
}

// refillPools trims one pool deeper than its target and fills pools
// until none is short.
func (p *pools) refillPools(ctx context.Context) {
	p.trimOne(time.Now())
	for ctx.Err() == nil && p.fillOne(ctx) {
		nudge(p.refill) // more to do: let the other worker help
	}
}

// fillOne adds one warm sandbox to the pool furthest below its target and
// reports whether it did.
func (p *pools) fillOne(ctx context.Context) bool {
	tpls, err := p.h.store.Templates().List(ctx, string(store.TemplateReady))
	if err != nil {
		if ctx.Err() == nil {
			p.h.log.Warn("warm pool: list templates", "err", err)
		}
		return false
	}
	var target *store.Template
	short := 0
	now := time.Now()
	p.mu.Lock()
	for _, t := range tpls {
		if t.SourceSandbox != "" || t.Checkpoint == "" || !t.HeldBy(p.h.cfg.NodeID) {
			continue // snapshots are restored on demand; other nodes' templates warm there
		}
		have := len(p.warm[t.ID]) + p.filling[t.ID]
		if gap := p.poolTarget(t.ID, now) - have; gap > short {
			target, short = t, gap
		}
	}
	if target != nil {
		p.filling[target.ID]++
	}
	p.mu.Unlock()
	if target == nil {
		return false
	}
	defer func() {
		p.mu.Lock()
		if p.filling[target.ID]--; p.filling[target.ID] <= 0 {
			delete(p.filling, target.ID)
		}
		p.mu.Unlock()
	}()
	// A restore begun is finished: Close waits the moment it takes, and
	// the container is then drained with the pool.
	box, err := p.h.restore(context.WithoutCancel(ctx), target, target.Checkpoint, warmPrefix+id.New("", 12), false)
	if cube.KindOf(err) == cube.Capacity {
		return false // every slot serves a sandbox: no room for the pool
	}
	if err != nil {
		p.h.log.Warn("warm pool: restore failed", "template", target.ID, "err", err)
		return false
	}
	p.warmUp(ctx, box, target.EnvdToken)
	// A template deleted after this read is drained by drainWarm, which
	// waits for this refill; the store is read outside p.mu.
	t, err := p.h.store.Templates().Get(context.WithoutCancel(ctx), target.ID)
	p.mu.Lock()
	if err != nil || t.Status != store.TemplateReady || p.h.closed() {
		p.mu.Unlock()
		p.h.discard(box, "") // deleted or shutting down meanwhile
		return false
	}
	p.warm[target.ID] = append(p.warm[target.ID], box)
	p.mu.Unlock()
	return true
}

// warmUp asks a warm sandbox's agent for its metrics until it answers,
// for at most warmUpTimeout. A sandbox that shares its template's memory
// copies each page it writes on its first write, and an agent's first
// request writes many (its HTTP server, its Go runtime): made here, in the
// background, those copies are not part of the create that takes the
// sandbox, whose /init then runs on pages already its own. A sandbox
// that does not answer is still pooled; its create finds out.
func (p *pools) warmUp(ctx context.Context, box *container, token string) {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	agent := p.h.agentAt(box.slot.HostAddr)
	for ctx.Err() == nil {
		if _, err := agent.Metrics(ctx, token); err == nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// warmUpTimeout bounds warmUp.
const warmUpTimeout = 2 * time.Second

// trimOne discards one warm sandbox of a pool deeper than its target now,
// if any: a pool deepened by a burst gives its sandboxes (memory, slots)
// back one at a time as demand falls, one per refiller tick.
func (p *pools) trimOne(now time.Time) {
	p.mu.Lock()
	var box *container
	for t, list := range p.warm {
		if len(list) > p.poolTarget(t, now) {
			box = list[len(list)-1]
			p.warm[t] = list[:len(list)-1]
			break
		}
	}
	p.mu.Unlock()
	if box != nil {
		p.h.discard(box, "")
	}
}

// drainWarm kills the warm sandboxes of one template, or of all when
// tplID is empty, waits (a while) for refills under way to end, and kills
// what they added meanwhile: each one finds the template gone or is
// drained here.
func (p *pools) drainWarm(tplID string) {
	p.takeOutWarm(tplID)
	p.waitBackground(func() bool {
		for t, k := range p.filling {
			if (tplID == "" || t == tplID) && k > 0 {
				return false
			}
		}
		return true
	}, time.Minute)
	p.takeOutWarm(tplID)
}

// takeOutWarm kills the warm sandboxes of one template, or of all.
func (p *pools) takeOutWarm(tplID string) {
	p.mu.Lock()
	var out []*container
	for t, list := range p.warm {
		if tplID == "" || t == tplID {
			out = append(out, list...)
			delete(p.warm, t)
			delete(p.demand, t)
		}
	}
	p.mu.Unlock()
	for _, box := range out {
		p.h.discard(box, "")
	}
}

// freeWarmSlot discards one warm sandbox of the deepest pool, if any, so
// that its slot serves a sandbox asked for instead, and reports whether
// it did.
func (p *pools) freeWarmSlot() bool {
	p.mu.Lock()
	var deepest string
	for t, list := range p.warm {
		if len(list) > len(p.warm[deepest]) {
			deepest = t
		}
	}
	list := p.warm[deepest]
	if len(list) == 0 {
		p.mu.Unlock()
		return false
	}
	box := list[len(list)-1]
	p.warm[deepest] = list[:len(list)-1]
	p.mu.Unlock()
	p.h.discard(box, "")
	return true
}

// Warm is the number of warm sandboxes ready for a template.
func (n *Node) Warm(tplID string) int {
	p := n.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.warm[tplID])
}
