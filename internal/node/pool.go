package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
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
//
// A snapshot has no pool until it is in demand: its second create within
// poolShrinkAfter of the one before gives it one warm sandbox, and every
// later miss one more, up to poolGrowth times PoolSize; each
// poolShrinkAfter without a miss takes one back, down to none. A snapshot
// created from once (a tree search that forks each state once) thus
// costs no restore beyond its own, and one that seeds a stream of
// sandboxes (rollouts from one state) serves them warm. A warm sandbox of
// a snapshot is paused as soon as its agent has answered its warm-up
// request, so the snapshot's processes run only for that moment before
// the create that takes it resumes them, much as after a restore on
// demand, whose processes run while its agent is initialised. A snapshot
// with volume mounts is always restored on demand, since a pooled
// sandbox would hold its volumes. One team's snapshots hold at most
// teamSnapshotPool times PoolSize warm sandboxes together.
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
	// rollbacks is a snapshot's: its last demand came from a rollback,
	// not a create, so its warm sandboxes are not keyed ahead (a sandbox
	// rolled back keeps its token; see keyAhead).
	rollbacks bool
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
	// onDemand counts the restores under way for creates that found
	// their template's pool empty; the pool is not refilled meanwhile.
	onDemand map[string]int
	// demand grows a template's pool past PoolSize, snapshotDemand a
	// snapshot's past none (a snapshot's pool exists while it has an
	// entry there); filling counts the refills under way per template.
	demand         map[string]*poolDemand
	snapshotDemand map[string]*poolDemand
	filling        map[string]int
	// filled is closed, and replaced, each time a refill ends; waiting
	// counts the creates waiting for one, per template.
	filled  chan struct{}
	waiting map[string]int
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
		onDemand: map[string]int{}, demand: map[string]*poolDemand{}, snapshotDemand: map[string]*poolDemand{},
		filling: map[string]int{}, filled: make(chan struct{}), waiting: map[string]int{},
		prepared: map[string][]*preparedBox{}, wants: map[string]*preparedWant{}, needed: map[string]*poolDemand{},
		prepare: make(chan struct{}, 1),
	}
}

// pooled reports whether sandboxes of tpl may come from a warm pool: a
// template's always, a snapshot's unless it has volume mounts.
func pooled(tpl *store.Template) bool {
	return tpl.SourceSandbox == "" || len(tpl.Mounts) == 0
}

// takeWarm claims a warm sandbox of a template or snapshot, if one is
// ready. A create that finds the pool empty (a miss), or empties it,
// grows the pool; fresh says it is for a new sandbox, not a rollback
// (see growPool). Misses are counted for templates only: a snapshot's
// first creates miss by design, and a series per snapshot would grow
// without bound.
//
// A create that finds a template's pool empty while a refill of it is
// under way, for which no other create waits yet, waits for that refill,
// at most fillWait: the refill is further along than a restore begun now
// would be, and on the cores the waiting create leaves idle it ends
// sooner. A snapshot's refill also pauses the sandbox after its warm-up;
// measured back to back, waiting for one was slower than restoring on
// demand, so a snapshot's creates do not wait.
func (p *pools) takeWarm(ctx context.Context, tpl *store.Template, fresh bool) *container {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer nudge(p.refill)
	if tpl.SourceSandbox == "" && len(p.warm[tpl.ID]) == 0 && p.filling[tpl.ID] > p.waiting[tpl.ID] {
		p.waitForRefill(ctx, tpl.ID)
	}
	list := p.warm[tpl.ID]
	if len(list) == 0 {
		if tpl.SourceSandbox == "" {
			p.h.tel.poolMisses.WithLabelValues(tpl.ID).Inc()
		}
		p.growPool(tpl, fresh)
		return nil
	}
	box := list[len(list)-1]
	p.warm[tpl.ID] = list[:len(list)-1]
	if len(list) == 1 {
		p.growPool(tpl, fresh)
	}
	return box
}

// restoringOnDemand marks a restore of tplID's image for a create that
// found its pool empty, until the returned function is called, which then
// wakes the refiller. A refill of that pool would restore the same image
// on the same cores at the same moment and slow the create down; it
// waits for the create instead.
func (p *pools) restoringOnDemand(tplID string) (done func()) {
	p.mu.Lock()
	p.onDemand[tplID]++
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		drop(p.onDemand, tplID)
		p.mu.Unlock()
		nudge(p.refill)
	}
}

// waitForRefill waits until tplID's pool has a sandbox, no refill of it
// is under way, ctx ends or fillWait has passed; p.mu held (released
// while waiting).
func (p *pools) waitForRefill(ctx context.Context, tplID string) {
	p.waiting[tplID]++
	defer drop(p.waiting, tplID)
	timeout := time.NewTimer(time.Duration(fillWait.Load()))
	defer timeout.Stop()
	for len(p.warm[tplID]) == 0 && p.filling[tplID] > 0 {
		filled := p.filled
		p.mu.Unlock()
		gaveUp := false
		select {
		case <-filled:
		case <-ctx.Done():
			gaveUp = true
		case <-timeout.C:
			gaveUp = true
		}
		p.mu.Lock()
		if gaveUp {
			return
		}
	}
}

// drop takes one from key's count in counts, and forgets key at zero.
func drop(counts map[string]int, key string) {
	if counts[key]--; counts[key] <= 0 {
		delete(counts, key)
	}
}

// fillWait bounds how long a create waits for a refill under way
// (nanoseconds; tests lengthen it): about a restore into a prepared
// container, so that waiting in vain costs no more than that restore
// would have.
var fillWait atomic.Int64

func init() { fillWait.Store(int64(150 * time.Millisecond)) }

// teamSnapshotPool times PoolSize bounds the warm sandboxes (ready or
// being restored) that one team's snapshots hold together: they have no
// records and count against no quota, so without it a team could make the
// node keep a pool for every snapshot it has.
const teamSnapshotPool = poolGrowth

// snapshotSandboxesByTeam counts the warm sandboxes, ready or being
// restored, of the snapshots among tpls, per team; p.mu held.
func (p *pools) snapshotSandboxesByTeam(tpls []*store.Template) map[string]int {
	n := map[string]int{}
	for _, t := range tpls {
		if t.SourceSandbox != "" {
			n[t.Team] += len(p.warm[t.ID]) + p.filling[t.ID]
		}
	}
	return n
}

// growPool deepens tpl's pool by one after a create found it empty or
// emptied it; p.mu held. A template's pool grows up to poolGrowth times
// PoolSize; a snapshot's first such create only records the demand, and
// a repeat within poolShrinkAfter grows it up to the same bound. fresh
// says the sandbox was a new one (a create, a fork), not a rollback; a
// snapshot's pool keys its sandboxes ahead while its demand is fresh.
func (p *pools) growPool(tpl *store.Template, fresh bool) {
	if tpl.SourceSandbox == "" {
		grow(p.demand, tpl.ID, p.h.cfg.PoolSize)
		return
	}
	now := time.Now()
	d := p.snapshotDemand[tpl.ID]
	if d == nil {
		p.snapshotDemand[tpl.ID] = &poolDemand{lastMiss: now, rollbacks: !fresh}
		return
	}
	d.rollbacks = !fresh
	if now.Sub(d.lastMiss) <= time.Duration(poolShrinkAfter.Load()) && d.extra < poolGrowth*p.h.cfg.PoolSize {
		d.extra++
	}
	d.lastMiss = now
}

// poolTarget is how many warm sandboxes the template or snapshot tplID
// should have now; p.mu held.
func (p *pools) poolTarget(tplID string, now time.Time) int {
	if _, ok := p.snapshotDemand[tplID]; ok {
		return target(p.snapshotDemand, tplID, 0, now)
	}
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
	short, keyed := 0, false
	now := time.Now()
	p.mu.Lock()
	pooledOf := p.snapshotSandboxesByTeam(tpls)
	for _, t := range tpls {
		if t.Checkpoint == "" || !t.HeldBy(p.h.cfg.NodeID) {
			continue // other nodes' templates warm there
		}
		if _, inDemand := p.snapshotDemand[t.ID]; t.SourceSandbox != "" && !inDemand {
			continue // snapshots not in demand are restored on demand
		}
		if p.onDemand[t.ID] > 0 {
			continue // refilled once the create restoring it is done
		}
		if t.SourceSandbox != "" && pooledOf[t.Team] >= teamSnapshotPool*p.h.cfg.PoolSize {
			continue // the team's snapshots hold their share of warm sandboxes
		}
		have := len(p.warm[t.ID]) + p.filling[t.ID]
		if gap := p.poolTarget(t.ID, now) - have; gap > short {
			target, short = t, gap
		}
	}
	if target != nil {
		p.filling[target.ID]++
		d := p.snapshotDemand[target.ID]
		keyed = target.SourceSandbox == "" || d != nil && !d.rollbacks
	}
	p.mu.Unlock()
	if target == nil {
		return false
	}
	defer func() {
		p.mu.Lock()
		drop(p.filling, target.ID)
		close(p.filled) // wakes creates waiting for a refill
		p.filled = make(chan struct{})
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
	if keyed {
		p.keyAhead(ctx, box, target)
	} else {
		p.warmUp(ctx, box, target.EnvdToken)
	}
	if target.SourceSandbox != "" {
		// The snapshot's processes wait for the create that takes it.
		if err := box.sb.Pause(ctx); err != nil {
			p.h.log.Warn("warm pool: pause a restored snapshot", "snapshot", target.ID, "err", err)
			p.h.discard(box, "")
			return false
		}
		box.paused = true
	}
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

// keyAhead gives a warm sandbox's envd a token of its own, a new random
// one, and checks that it took (envd serves the new token and refuses the
// image's): the create that takes the sandbox adopts that token, and its
// /init is then one request instead of three (the token checks need not
// be repeated: no code but the image's ran since). It also warms the
// sandbox up, as warmUp does. A sandbox whose agent does not answer
// within warmUpTimeout is pooled unkeyed, and its create hands it a token
// as for a sandbox restored on demand.
//
// A template's warm sandboxes are keyed ahead: each becomes a new sandbox,
// with a new token. A snapshot's are while creates (or forks) ask for it:
// a rollback keeps the sandbox's token, so when rollbacks ask for it its
// sandboxes keep the snapshot's, and a rollback's /init stays one request.
// A rollback that takes a keyed one, or a create an unkeyed one, pays the
// two token checks at handout.
func (p *pools) keyAhead(ctx context.Context, box *container, tpl *store.Template) {
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	key := id.Token(32)
	if err := p.h.agentAt(box.slot.HostAddr).Init(ctx, protocol.Init{AccessToken: &key}, tpl.EnvdToken); err != nil {
		p.h.log.Warn("warm pool: could not key a warm sandbox ahead; its create will", "template", tpl.ID, "err", err)
		return
	}
	box.envdToken = key
}

// warmUpTimeout bounds warmUp and keyAhead.
const warmUpTimeout = 2 * time.Second

// trimOne discards one warm sandbox of a pool deeper than its target now,
// if any: a pool deepened by a burst gives its sandboxes (memory, slots)
// back one at a time as demand falls, one per refiller tick. A snapshot
// whose demand has lapsed and whose pool is empty is forgotten.
func (p *pools) trimOne(now time.Time) {
	p.mu.Lock()
	shrink := time.Duration(poolShrinkAfter.Load())
	for id, d := range p.snapshotDemand {
		if p.poolTarget(id, now) == 0 && len(p.warm[id]) == 0 && p.filling[id] == 0 && now.Sub(d.lastMiss) > shrink {
			delete(p.snapshotDemand, id)
			delete(p.warm, id)
		}
	}
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
	if tplID == "" {
		clear(p.snapshotDemand)
	} else {
		delete(p.snapshotDemand, tplID)
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
