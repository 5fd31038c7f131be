package node

import (
	"context"
	"os"

	"cube/internal/fault"
	"cube/internal/store"
)

// KillSandbox destroys a sandbox, running or paused.
func (n *Node) KillSandbox(ctx context.Context, sandboxID string) error {
	inst, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer inst.mu.Unlock()
	if err := inst.requireState("kill", stateRunning, statePaused, statePausedOnDisk); err != nil {
		return err
	}
	return n.destroy(ctx, inst, rec, "killed")
}

// destroy removes everything a sandbox holds, and the sandbox's instance
// with it. The caller holds its lock. The sandbox is recorded as deleting
// first: from then on it is not found, and the reconciler completes a
// delete a crash interrupted. Past that point the delete goes on whatever
// fails; what could not be removed is logged, and left to the reconciler.
func (n *Node) destroy(ctx context.Context, inst *instance, rec *store.Sandbox, why string) error {
	var c cleanup
	defer n.cleanUp(&c, "kill", "sandbox", rec.ID)
	was := inst.state
	n.changeState(inst, rec, stateDeleting)
	c.Add(func() error { n.changeState(inst, rec, was); return nil })
	if err := n.save(ctx, rec); err != nil {
		return err
	}
	c.Release()
	fault.Point(fault.SandboxDeleteAfterIntent)
	n.mu.Lock()
	box := inst.box
	inst.box = nil
	n.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	if box != nil {
		n.discard(box, rec.ID)
	} else if rec.ContainerID != "" {
		if err := n.rt.Remove(bg, rec.ContainerID); err != nil {
			n.log.Warn("remove sandbox container", "sandbox", rec.ID, "container", rec.ContainerID, "err", err)
		}
	}
	fault.Point(fault.SandboxDeleteAfterStop)
	if err := os.RemoveAll(n.sandboxDir(rec.ID)); err != nil {
		n.log.Warn("remove sandbox directory", "sandbox", rec.ID, "err", err)
	}
	fault.Point(fault.SandboxDeleteAfterRemove)
	// The host holds nothing of the sandbox any more; a record that could
	// not be deleted says killing, which the next start finishes.
	n.untrack(inst)
	if err := n.store.Sandboxes().Delete(bg, rec.ID); err != nil {
		return err
	}
	if err := n.store.DeleteEvents(bg, rec.ID); err != nil {
		n.log.Warn("delete sandbox events", "sandbox", rec.ID, "err", err)
	}
	n.log.Info("sandbox removed", "sandbox", rec.ID, "why", why)
	return nil
}
