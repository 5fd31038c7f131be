package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
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

// takeWarm claims a warm sandbox of a template, if one is ready. A create
// that finds the pool empty (a miss), or empties it, grows the pool.
func (n *Node) takeWarm(tplID string) *container {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer nudge(n.refill)
	list := n.warm[tplID]
	if len(list) == 0 {
		n.tel.poolMisses.WithLabelValues(tplID).Inc()
		n.growPool(tplID)
		return nil
	}
	box := list[len(list)-1]
	n.warm[tplID] = list[:len(list)-1]
	if len(list) == 1 {
		n.growPool(tplID)
	}
	return box
}

// growPool adds one to tplID's pool target, up to poolGrowth times
// PoolSize; n.mu held.
func (n *Node) growPool(tplID string) {
	d := n.demand[tplID]
	if d == nil {
		d = &poolDemand{}
		n.demand[tplID] = d
	}
	d.lastMiss = time.Now()
	if d.extra < (poolGrowth-1)*n.cfg.PoolSize {
		d.extra++
	}
}

// poolTarget is how many warm sandboxes tplID should have now; n.mu held.
func (n *Node) poolTarget(tplID string, now time.Time) int {
	d := n.demand[tplID]
	if d == nil {
		return n.cfg.PoolSize
	}
	shrink := time.Duration(poolShrinkAfter.Load())
	for d.extra > 0 && now.Sub(d.lastMiss) > shrink {
		d.extra--
		d.lastMiss = d.lastMiss.Add(shrink)
	}
	return n.cfg.PoolSize + d.extra
}

// refiller keeps every pool at its target until ctx is cancelled. Each of
// the refillWorkers runs one restore at a time.
func (n *Node) refiller(ctx context.Context) {
	var wg sync.WaitGroup
	for range refillWorkers {
		wg.Go(func() { every(ctx, 2*time.Second, n.refill, n.refillPools) })
	}
	wg.Wait()
}

// refillPools trims one pool deeper than its target and fills pools
// until none is short.
func (n *Node) refillPools(ctx context.Context) {
	n.trimOne(time.Now())
	for ctx.Err() == nil && n.fillOne(ctx) {
		nudge(n.refill) // more to do: let the other worker help
	}
}

// fillOne adds one warm sandbox to the pool furthest below its target and
// reports whether it did.
func (n *Node) fillOne(ctx context.Context) bool {
	tpls, err := n.store.Templates().List(ctx, string(store.TemplateReady))
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("warm pool: list templates", "err", err)
		}
		return false
	}
	var target *store.Template
	short := 0
	now := time.Now()
	n.mu.Lock()
	for _, t := range tpls {
		if t.SourceSandbox != "" || t.Checkpoint == "" || !t.HeldBy(n.cfg.NodeID) {
			continue // snapshots are restored on demand; other nodes' templates warm there
		}
		have := len(n.warm[t.ID]) + n.filling[t.ID]
		if gap := n.poolTarget(t.ID, now) - have; gap > short {
			target, short = t, gap
		}
	}
	if target != nil {
		n.filling[target.ID]++
	}
	n.mu.Unlock()
	if target == nil {
		return false
	}
	defer func() {
		n.mu.Lock()
		if n.filling[target.ID]--; n.filling[target.ID] <= 0 {
			delete(n.filling, target.ID)
		}
		n.mu.Unlock()
	}()
	// A restore begun is finished: Close waits the moment it takes, and
	// the container is then drained with the pool.
	box, err := n.restore(context.WithoutCancel(ctx), target, target.Checkpoint, warmPrefix+id.New("", 12), false)
	if cube.KindOf(err) == cube.Capacity {
		return false // every slot serves a sandbox: no room for the pool
	}
	if err != nil {
		n.log.Warn("warm pool: restore failed", "template", target.ID, "err", err)
		return false
	}
	// A template deleted after this read is drained by drainWarm, which
	// waits for this refill; the store is read outside n.mu.
	t, err := n.store.Templates().Get(context.WithoutCancel(ctx), target.ID)
	n.mu.Lock()
	if err != nil || t.Status != store.TemplateReady || n.closing {
		n.mu.Unlock()
		n.discard(box, "") // deleted or shutting down meanwhile
		return false
	}
	n.warm[target.ID] = append(n.warm[target.ID], box)
	n.mu.Unlock()
	return true
}

// trimOne discards one warm sandbox of a pool deeper than its target now,
// if any: a pool deepened by a burst gives its sandboxes (memory, slots)
// back one at a time as demand falls, one per refiller tick.
func (n *Node) trimOne(now time.Time) {
	n.mu.Lock()
	var box *container
	for t, list := range n.warm {
		if len(list) > n.poolTarget(t, now) {
			box = list[len(list)-1]
			n.warm[t] = list[:len(list)-1]
			break
		}
	}
	n.mu.Unlock()
	if box != nil {
		n.discard(box, "")
	}
}

// drainWarm kills the warm sandboxes of one template, or of all when
// tplID is empty, waits (a while) for refills under way to end, and kills
// what they added meanwhile: each one finds the template gone or is
// drained here.
func (n *Node) drainWarm(tplID string) {
	n.takeOutWarm(tplID)
	n.waitBackground(func() bool {
		for t, k := range n.filling {
			if (tplID == "" || t == tplID) && k > 0 {
				return false
			}
		}
		return true
	}, time.Minute)
	n.takeOutWarm(tplID)
}

// takeOutWarm kills the warm sandboxes of one template, or of all.
func (n *Node) takeOutWarm(tplID string) {
	n.mu.Lock()
	var out []*container
	for t, list := range n.warm {
		if tplID == "" || t == tplID {
			out = append(out, list...)
			delete(n.warm, t)
			delete(n.demand, t)
		}
	}
	n.mu.Unlock()
	for _, box := range out {
		n.discard(box, "")
	}
}

// freeWarmSlot discards one warm sandbox of the deepest pool, if any, so
// that its slot serves a sandbox asked for instead, and reports whether
// it did.
func (n *Node) freeWarmSlot() bool {
	n.mu.Lock()
	var deepest string
	for t, list := range n.warm {
		if len(list) > len(n.warm[deepest]) {
			deepest = t
		}
	}
	list := n.warm[deepest]
	if len(list) == 0 {
		n.mu.Unlock()
		return false
	}
	box := list[len(list)-1]
	n.warm[deepest] = list[:len(list)-1]
	n.mu.Unlock()
	n.discard(box, "")
	return true
}

// Warm is the number of warm sandboxes ready for a template.
func (n *Node) Warm(tplID string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.warm[tplID])
}
