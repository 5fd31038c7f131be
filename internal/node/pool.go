package node

import (
	"context"
	"time"

	"cube/internal/id"
	"cube/internal/store"
)

// The warm pool keeps, per template built from an image, a few sandboxes
// already restored from its snapshot and waiting in their network slots.
// Handing one out is a claim plus envd's /init, which is what makes a
// create take milliseconds instead of a restore's hundreds. The pool is
// refilled in the background; when it is empty a create restores cold.
// Warm sandboxes have no store record, so after a crash the reconciler
// removes them like any unknown container.

// takeWarm claims a warm sandbox of a template, if one is ready.
func (n *Node) takeWarm(tplID string) *container {
	n.mu.Lock()
	defer n.mu.Unlock()
	list := n.warm[tplID]
	if len(list) == 0 {
		return nil
	}
	box := list[len(list)-1]
	n.warm[tplID] = list[:len(list)-1]
	n.wakeRefill()
	return box
}

// wakeRefill nudges the refiller; n.mu may be held.
func (n *Node) wakeRefill() {
	select {
	case n.refill <- struct{}{}:
	default:
	}
}

// refiller keeps every pool full until ctx is cancelled, one restore at a
// time so that refills never crowd out the creates they serve.
func (n *Node) refiller(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.refill:
		case <-t.C:
		}
		for ctx.Err() == nil && n.fillOne(ctx) {
		}
	}
}

// fillOne adds one warm sandbox to the emptiest pool that needs one and
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
	best := n.cfg.PoolSize
	n.mu.Lock()
	for _, t := range tpls {
		if t.SourceSandbox != "" || t.Checkpoint == "" {
			continue // snapshots are restored on demand
		}
		if have := len(n.warm[t.ID]); have < best {
			target, best = t, have
		}
	}
	n.mu.Unlock()
	if target == nil {
		return false
	}
	// A restore begun is finished: Close waits the moment it takes, and
	// the container is then drained with the pool.
	box, err := n.restore(context.WithoutCancel(ctx), target, target.Checkpoint, "w"+id.New("", 12))
	if err != nil {
		n.log.Warn("warm pool: restore failed", "template", target.ID, "err", err)
		return false
	}
	n.mu.Lock()
	if t, err := n.store.Templates().Get(context.WithoutCancel(ctx), target.ID); err != nil || t.Status != store.TemplateReady || n.closing {
		n.mu.Unlock()
		n.discard(box, "") // deleted or shutting down meanwhile
		return false
	}
	n.warm[target.ID] = append(n.warm[target.ID], box)
	n.mu.Unlock()
	return true
}

// drainWarm kills the warm sandboxes of one template, or of all when
// tplID is empty.
func (n *Node) drainWarm(tplID string) {
	n.mu.Lock()
	var out []*container
	for t, list := range n.warm {
		if tplID == "" || t == tplID {
			out = append(out, list...)
			delete(n.warm, t)
		}
	}
	n.mu.Unlock()
	for _, box := range out {
		n.discard(box, "")
	}
}

// Warm is the number of warm sandboxes ready for a template.
func (n *Node) Warm(tplID string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.warm[tplID])
}
