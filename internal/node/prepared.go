package node

import (
	"context"
	"time"

	"cube/internal/id"
	"cube/internal/netslot"
	"cube/internal/runtime"
	"cube/internal/store"
)

// Prepared containers take the process set-up out of a cold restore. A
// restore that no warm sandbox serves (create from a snapshot, rollback,
// clone, resume from disk, a warm-pool refill) spends about half its time
// starting runsc's sandbox and gofer processes and installing their
// filters, none of which depends on the image. The node therefore keeps,
// for every kind of restore asked for recently (a PrepareKey: same
// rootfs, agent, limits and flags), a few containers already made by the
// runtime, each in its own network slot, and restores into one of them.
// A kind not asked for in preparedTTL has its containers discarded. Like
// the warm pool, a kind's depth follows demand: a restore of a kind
// already in demand that finds none waiting adds one, up to poolGrowth
// times PreparedPerKey (a clone of ten children at once restores ten),
// and each poolShrinkAfter without such a restore takes one back.
// Prepared containers have no store record: after a crash the reconciler
// removes them like any unknown container.

// preparedTTL is how long a kind of restore keeps its prepared containers
// after it was last asked for.
const preparedTTL = 10 * time.Minute

// preparedBox is a prepared container and the slot it was made in.
type preparedBox struct {
	p    runtime.Prepared
	slot *netslot.Slot
}

// preparedWant is a kind of restore asked for recently: what to prepare
// it from.
type preparedWant struct {
	image string
	tpl   store.Template
	last  time.Time
	// older is the image the kind was asked for before image, if another:
	// what to prepare from once image is deleted. It has no older.
	older *preparedWant
}

// preparer is the runtime's Preparer, or nil when it has none or the
// pool is off.
func (p *pools) preparer() runtime.Preparer {
	if p.h.cfg.PreparedPerKey <= 0 {
		return nil
	}
	pr, _ := p.h.rt.(runtime.Preparer)
	return pr
}

// restorePrepared restores image into a prepared container of its kind,
// if one waits, and notes the kind as wanted either way. nil means
// restore cold: no container waited, or restoring into it failed (the
// container is then gone, and a cold restore says why if it fails too).
func (p *pools) restorePrepared(ctx context.Context, tpl *store.Template, image string) *container {
	pr := p.preparer()
	if pr == nil {
		return nil
	}
	// A restore always has a network namespace, hence the stand-in.
	key, err := pr.PrepareKey(image, Spec(tpl, "", "-"))
	if err != nil {
		return nil
	}
	p.mu.Lock()
	w := p.wants[key]
	// Prepare from an image that lasts: a template's or snapshot's own
	// checkpoint rather than a clone's or a pause's, which go soon.
	if w != nil && image != tpl.Checkpoint && w.image != "" {
		w.last = time.Now()
	} else {
		nw := &preparedWant{image: image, tpl: *tpl, last: time.Now()}
		if w != nil && w.image != "" && w.image != image {
			nw.older = &preparedWant{image: w.image, tpl: w.tpl}
		}
		p.wants[key] = nw
	}
	var pb *preparedBox
	if list := p.prepared[key]; len(list) > 0 {
		pb = list[len(list)-1]
		p.prepared[key] = list[:len(list)-1]
	} else if w != nil {
		// A kind already in demand found none waiting.
		grow(p.needed, key, p.h.cfg.PreparedPerKey)
	}
	p.mu.Unlock()
	nudge(p.prepare)
	if pb == nil {
		return nil
	}
	sb, err := pb.p.Restore(ctx, image)
	if err != nil {
		p.h.log.Warn("restore into a prepared container failed; restoring cold", "template", tpl.ID, "container", pb.p.ID(), "err", err)
		p.h.release(pb.slot)
		return nil
	}
	return &container{sb: sb, slot: pb.slot}
}

// prepareLoop keeps PreparedPerKey containers ready for every wanted kind
// until ctx is cancelled, one at a time, and drops kinds gone stale.
func (p *pools) prepareLoop(ctx context.Context) {
	ctx = runtime.Background(ctx)
	every(ctx, 5*time.Second, p.prepare, func(ctx context.Context) {
		p.dropStalePrepared(time.Now())
		p.trimPrepared(time.Now())
		for ctx.Err() == nil && p.prepareOne(ctx) {
		}
	})
}

// prepareOne makes one container for the wanted kind furthest below its
// depth and reports whether it did anything.
func (p *pools) prepareOne(ctx context.Context) bool {
	pr := p.preparer()
	p.mu.Lock()
	var key string
	var want *preparedWant
	now, most := time.Now(), 0
	for k, w := range p.wants {
		if w.image == "" {
			continue // its image was deleted; the next restore of the kind names another
		}
		if short := target(p.needed, k, p.h.cfg.PreparedPerKey, now) - len(p.prepared[k]); short > most {
			key, want, most = k, w, short
		}
	}
	p.mu.Unlock()
	if want == nil || pr == nil {
		return false
	}
	slot, err := p.h.slots.Acquire(ctx)
	if err != nil {
		return false // no slot to spare: the sandboxes need them more
	}
	p.mu.Lock()
	p.preparing++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.preparing--
		p.mu.Unlock()
	}()
	cid := "p" + id.New("", 12)
	start := time.Now()
	made, err := pr.Prepare(context.WithoutCancel(ctx), want.image, Spec(&want.tpl, cid, slot.NetNS))
	if err != nil {
		p.h.release(slot)
		p.h.log.Warn("prepare a container failed; not preparing this kind until asked again", "template", want.tpl.ID, "err", err)
		p.mu.Lock()
		if p.wants[key] == want {
			delete(p.wants, key)
		}
		p.mu.Unlock()
		return true
	}
	p.h.tel.phase("prepare", "create", start)
	pb := &preparedBox{p: made, slot: slot}
	p.mu.Lock()
	if p.h.closed() || p.wants[key] == nil {
		p.mu.Unlock()
		p.killPrepared(pb)
		return false
	}
	p.prepared[key] = append(p.prepared[key], pb)
	p.mu.Unlock()
	return true
}

// trimPrepared discards the prepared containers of kinds deeper than
// their depth now: a kind deepened by a burst gives its containers
// (memory, slots) back as demand falls.
func (p *pools) trimPrepared(now time.Time) {
	p.mu.Lock()
	var out []*preparedBox
	for k, list := range p.prepared {
		if keep := target(p.needed, k, p.h.cfg.PreparedPerKey, now); len(list) > keep {
			out = append(out, list[keep:]...)
			p.prepared[k] = list[:keep]
		}
	}
	p.mu.Unlock()
	for _, pb := range out {
		p.killPrepared(pb)
	}
}

// dropStalePrepared forgets kinds not asked for since preparedTTL before
// now and discards their containers.
func (p *pools) dropStalePrepared(now time.Time) {
	p.forgetKinds(func(w *preparedWant) bool { return now.Sub(w.last) > preparedTTL })
}

// forgetKinds forgets the wanted kinds of restore that match picks and
// discards their containers.
func (p *pools) forgetKinds(match func(*preparedWant) bool) {
	var out []*preparedBox
	p.mu.Lock()
	for k, w := range p.wants {
		if match(w) {
			delete(p.wants, k)
			delete(p.needed, k)
			out = append(out, p.prepared[k]...)
			delete(p.prepared, k)
		}
	}
	p.mu.Unlock()
	for _, pb := range out {
		p.killPrepared(pb)
	}
}

// dropPreparedOf forgets the kinds of restore last asked for from tpl and,
// for a template (not a snapshot), every kind on its root filesystem, and
// discards their containers: a template's files go with it, and its
// prepared containers hold them open. A prepare under way finds its kind
// gone and discards what it made; this waits (a while) for it.
//
// A snapshot's kinds keep their containers. They hold only the files of
// the template the snapshot was taken on, and serve every restore of the
// same kind: the template's, its other snapshots', rollbacks and clones.
// (A sandbox that snapshots, rolls back and deletes the snapshot, round
// after round, would otherwise restore cold every time.) More are
// prepared from the image the kind was asked for before, if any, or from
// the next one a restore names.
func (p *pools) dropPreparedOf(tpl *store.Template) {
	if tpl.SourceSandbox != "" {
		p.mu.Lock()
		for k, w := range p.wants {
			// A want is replaced, never changed: prepareOne reads its
			// image and template unlocked.
			older := w.older
			if older != nil && older.tpl.ID == tpl.ID {
				older = nil
			}
			switch {
			case w.tpl.ID == tpl.ID && older != nil:
				p.wants[k] = &preparedWant{image: older.image, tpl: older.tpl, last: w.last}
			case w.tpl.ID == tpl.ID:
				p.wants[k] = &preparedWant{tpl: w.tpl, last: w.last}
			case older != w.older:
				p.wants[k] = &preparedWant{image: w.image, tpl: w.tpl, last: w.last}
			}
		}
		p.mu.Unlock()
		return
	}
	p.forgetKinds(func(w *preparedWant) bool {
		return w.tpl.ID == tpl.ID || w.tpl.Rootfs == tpl.Rootfs
	})
	p.waitBackground(func() bool { return p.preparing == 0 }, time.Minute)
}

// waitBackground waits until done (called with p.mu held) reports true,
// or for at most limit.
func (p *pools) waitBackground(done func() bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		p.mu.Lock()
		ok := done()
		p.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return ok
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePreparedSlot discards one prepared container, if any, so that its
// slot serves a sandbox instead, and reports whether it did.
func (p *pools) freePreparedSlot() bool {
	p.mu.Lock()
	var pb *preparedBox
	for k, list := range p.prepared {
		if len(list) > 0 {
			pb = list[len(list)-1]
			p.prepared[k] = list[:len(list)-1]
			break
		}
	}
	p.mu.Unlock()
	if pb == nil {
		return false
	}
	p.killPrepared(pb)
	return true
}

// drainPrepared discards every prepared container.
func (p *pools) drainPrepared() {
	p.mu.Lock()
	var out []*preparedBox
	for k, list := range p.prepared {
		out = append(out, list...)
		delete(p.prepared, k)
	}
	p.mu.Unlock()
	for _, pb := range out {
		p.killPrepared(pb)
	}
}

func (p *pools) killPrepared(pb *preparedBox) {
	if err := pb.p.Kill(context.Background()); err != nil {
		p.h.log.Warn("discard prepared container", "container", pb.p.ID(), "err", err)
	}
	if err := p.h.release(pb.slot); err != nil {
		p.h.log.Warn("release network slot", "slot", pb.slot.Index, "err", err)
	}
}

// Prepared is the number of prepared containers waiting, of every kind.
func (n *Node) Prepared() int {
	p := n.pools
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	for _, list := range p.prepared {
		total += len(list)
	}
	return total
}
