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
// A kind not asked for in preparedTTL has its containers discarded.
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
}

// preparer is the runtime's Preparer, or nil when it has none or the
// pool is off.
func (n *Node) preparer() runtime.Preparer {
	if n.cfg.PreparedPerKey <= 0 {
		return nil
	}
	p, _ := n.rt.(runtime.Preparer)
	return p
}

// restorePrepared restores image into a prepared container of its kind,
// if one waits, and notes the kind as wanted either way. nil means
// restore cold: no container waited, or restoring into it failed (the
// container is then gone, and a cold restore says why if it fails too).
func (n *Node) restorePrepared(ctx context.Context, tpl *store.Template, image string) *container {
	pr := n.preparer()
	if pr == nil {
		return nil
	}
	// A restore always has a network namespace, hence the stand-in.
	key, err := pr.PrepareKey(image, Spec(tpl, "", "-"))
	if err != nil {
		return nil
	}
	n.mu.Lock()
	// Prepare from an image that lasts: a template's or snapshot's own
	// checkpoint rather than a clone's or a pause's, which go soon.
	if w := n.wants[key]; w != nil && image != tpl.Checkpoint {
		w.last = time.Now()
	} else {
		n.wants[key] = &preparedWant{image: image, tpl: *tpl, last: time.Now()}
	}
	var pb *preparedBox
	if list := n.prepared[key]; len(list) > 0 {
		pb = list[len(list)-1]
		n.prepared[key] = list[:len(list)-1]
	}
	n.mu.Unlock()
	nudge(n.prepare)
	if pb == nil {
		return nil
	}
	sb, err := pb.p.Restore(ctx, image)
	if err != nil {
		n.log.Warn("restore into a prepared container failed; restoring cold", "template", tpl.ID, "container", pb.p.ID(), "err", err)
		n.release(pb.slot)
		return nil
	}
	return &container{sb: sb, slot: pb.slot}
}

// prepareLoop keeps PreparedPerKey containers ready for every wanted kind
// until ctx is cancelled, one at a time, and drops kinds gone stale.
func (n *Node) prepareLoop(ctx context.Context) {
	every(ctx, 5*time.Second, n.prepare, func(ctx context.Context) {
		n.dropStalePrepared(time.Now())
		for ctx.Err() == nil && n.prepareOne(ctx) {
		}
	})
}

// prepareOne makes one container for the wanted kind that has the fewest
// and reports whether it did anything.
func (n *Node) prepareOne(ctx context.Context) bool {
	pr := n.preparer()
	n.mu.Lock()
	var key string
	var want *preparedWant
	best := n.cfg.PreparedPerKey
	for k, w := range n.wants {
		if have := len(n.prepared[k]); have < best {
			key, want, best = k, w, have
		}
	}
	n.mu.Unlock()
	if want == nil || pr == nil {
		return false
	}
	slot, err := n.slots.Acquire(ctx)
	if err != nil {
		return false // no slot to spare: the sandboxes need them more
	}
	n.mu.Lock()
	n.preparing++
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.preparing--
		n.mu.Unlock()
	}()
	cid := "p" + id.New("", 12)
	start := time.Now()
	p, err := pr.Prepare(context.WithoutCancel(ctx), want.image, Spec(&want.tpl, cid, slot.NetNS))
	if err != nil {
		n.release(slot)
		n.log.Warn("prepare a container failed; not preparing this kind until asked again", "template", want.tpl.ID, "err", err)
		n.mu.Lock()
		if n.wants[key] == want {
			delete(n.wants, key)
		}
		n.mu.Unlock()
		return true
	}
	n.tel.phase("prepare", "create", start)
	pb := &preparedBox{p: p, slot: slot}
	n.mu.Lock()
	if n.closing || n.wants[key] == nil {
		n.mu.Unlock()
		n.killPrepared(pb)
		return false
	}
	n.prepared[key] = append(n.prepared[key], pb)
	n.mu.Unlock()
	return true
}

// dropStalePrepared forgets kinds not asked for since preparedTTL before
// now and discards their containers.
func (n *Node) dropStalePrepared(now time.Time) {
	n.forgetKinds(func(w *preparedWant) bool { return now.Sub(w.last) > preparedTTL })
}

// forgetKinds forgets the wanted kinds of restore that match picks and
// discards their containers.
func (n *Node) forgetKinds(match func(*preparedWant) bool) {
	var out []*preparedBox
	n.mu.Lock()
	for k, w := range n.wants {
		if match(w) {
			delete(n.wants, k)
			out = append(out, n.prepared[k]...)
			delete(n.prepared, k)
		}
	}
	n.mu.Unlock()
	for _, pb := range out {
		n.killPrepared(pb)
	}
}

// dropPreparedOf forgets the kinds of restore last asked for from tpl and,
// for a template (not a snapshot), every kind on its root filesystem, and
// discards their containers: a template's files go with it, and its
// prepared containers hold them open. A prepare under way finds its kind
// gone and discards what it made; this waits (a while) for it.
func (n *Node) dropPreparedOf(tpl *store.Template) {
	n.forgetKinds(func(w *preparedWant) bool {
		return w.tpl.ID == tpl.ID || (tpl.SourceSandbox == "" && w.tpl.Rootfs == tpl.Rootfs)
	})
	n.waitBackground(func() bool { return n.preparing == 0 }, time.Minute)
}

// waitBackground waits until done (called with n.mu held) reports true,
// or for at most limit.
func (n *Node) waitBackground(done func() bool, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		n.mu.Lock()
		ok := done()
		n.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return ok
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// freePreparedSlot discards one prepared container, if any, so that its
// slot serves a sandbox instead, and reports whether it did.
func (n *Node) freePreparedSlot() bool {
	n.mu.Lock()
	var pb *preparedBox
	for k, list := range n.prepared {
		if len(list) > 0 {
			pb = list[len(list)-1]
			n.prepared[k] = list[:len(list)-1]
			break
		}
	}
	n.mu.Unlock()
	if pb == nil {
		return false
	}
	n.killPrepared(pb)
	return true
}

// drainPrepared discards every prepared container.
func (n *Node) drainPrepared() {
	n.mu.Lock()
	var out []*preparedBox
	for k, list := range n.prepared {
		out = append(out, list...)
		delete(n.prepared, k)
	}
	n.mu.Unlock()
	for _, pb := range out {
		n.killPrepared(pb)
	}
}

func (n *Node) killPrepared(pb *preparedBox) {
	if err := pb.p.Kill(context.Background()); err != nil {
		n.log.Warn("discard prepared container", "container", pb.p.ID(), "err", err)
	}
	if err := n.release(pb.slot); err != nil {
		n.log.Warn("release network slot", "slot", pb.slot.Index, "err", err)
	}
}

// Prepared is the number of prepared containers waiting, of every kind.
func (n *Node) Prepared() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	total := 0
	for _, list := range n.prepared {
		total += len(list)
	}
	return total
}
