package node

import (
	"context"
	"slices"
	"time"
)

// watchAlive looks every few seconds, until ctx is cancelled, for
// sandboxes whose container is gone (its PID 1 died, the host killed it
// for memory): they must not be listed as running.
func (n *Node) watchAlive(ctx context.Context) { every(ctx, 5*time.Second, nil, n.checkAlive) }

// checkAlive removes the sandboxes whose container the runtime no longer
// lists. A container is only declared dead after a second listing under
// the sandbox's lock, so one started or replaced meanwhile is spared.
func (n *Node) checkAlive(ctx context.Context) {
	ids, err := n.rt.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("check sandboxes alive: list containers", "err", err)
		}
		return
	}
	n.mu.Lock()
	var dead []*instance
	var keep []consoleKeeper
	for _, inst := range n.sandboxes {
		if inst.box == nil {
			continue
		}
		if !slices.Contains(ids, inst.box.sb.ID()) {
			dead = append(dead, inst)
		} else if k, ok := inst.box.sb.(consoleKeeper); ok {
			keep = append(keep, k)
		}
	}
	n.mu.Unlock()
	for _, inst := range dead {
		n.removeDead(context.WithoutCancel(ctx), inst)
	}
	for _, k := range keep {
		if err := k.KeepConsole(); err != nil {
			n.log.Warn("check sandboxes alive: console keeper", "err", err)
		}
	}
}

// consoleKeeper is a sandbox whose console needs a process of its own to
// drain it (gVisor's keeper); a keeper that died is replaced here.
type consoleKeeper interface{ KeepConsole() error }

// removeDead destroys a sandbox whose container is gone, if it still is.
func (n *Node) removeDead(ctx context.Context, inst *instance) {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.gone || inst.box == nil {
		return
	}
	cid := inst.box.sb.ID()
	rec, err := n.record(ctx, inst.id)
	if err != nil {
		if !isNotFound(err) {
			n.log.Warn("check sandbox alive: load sandbox", "sandbox", inst.id, "err", err)
		}
		return
	}
	still, err := n.rt.List(ctx)
	if err != nil || slices.Contains(still, cid) {
		return
	}
	n.log.Warn("sandbox exited unexpectedly; removing it", "sandbox", inst.id, "container", cid)
	if err := n.destroy(ctx, inst, rec, "exited unexpectedly"); err != nil {
		n.log.Warn("remove exited sandbox", "sandbox", inst.id, "err", err)
	}
}
