package node

import (
	"context"
	"os"

	"cube/internal/fault"
	"cube/internal/store"
)

// KillSandbox destroys a sandbox, running or paused.
func (n *Node) KillSandbox(ctx context.Context, sandboxID string) error {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer sb.mu.Unlock()
	if err := sb.requireState("kill", stateRunning, statePaused, statePausedOnDisk); err != nil {
		return err
	}
	return sb.destroy(ctx, rec, "killed")
}

// destroy removes everything a sandbox holds, and the sandbox's sandbox
// with it. The caller holds its lock. The sandbox is recorded as deleting
// first: from then on it is not found, and the reconciler completes a
// delete a crash interrupted. Past that point the delete goes on whatever
// fails; what could not be removed is logged, and left to the reconciler.
func (s *sandbox) destroy(ctx context.Context, rec *store.Sandbox, why string) error {
	var c cleanup
	defer s.h.cleanUp(&c, "kill", "sandbox", rec.ID)
	was := s.state
	ran := s.stopRunning(rec, &c)
	s.changeState(rec, stateDeleting)
	c.Add(func() error { s.changeState(rec, was); return nil })
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	c.Release()
	s.h.recordRun(ctx, ran)
	fault.Point(fault.SandboxDeleteAfterIntent)
	s.h.mu.Lock()
	box := s.box
	s.box = nil
	s.h.mu.Unlock()
	bg := context.WithoutCancel(ctx)
	if box != nil {
		s.h.discard(box, rec.ID)
	} else if rec.ContainerID != "" {
		if err := s.h.rt.Remove(bg, rec.ContainerID); err != nil {
			s.h.log.Warn("remove sandbox container", "sandbox", rec.ID, "container", rec.ContainerID, "err", err)
		}
	}
	fault.Point(fault.SandboxDeleteAfterStop)
	if err := os.RemoveAll(s.h.sandboxDir(rec.ID)); err != nil {
		s.h.log.Warn("remove sandbox directory", "sandbox", rec.ID, "err", err)
	}
	fault.Point(fault.SandboxDeleteAfterRemove)
	// The host holds nothing of the sandbox any more; a record that could
	// not be deleted says killing, which the next start finishes.
	s.h.untrack(s)
	if err := s.h.store.Sandboxes().Delete(bg, rec.ID); err != nil {
		return err
	}
	if err := s.h.store.DeleteEvents(bg, rec.ID); err != nil {
		s.h.log.Warn("delete sandbox events", "sandbox", rec.ID, "err", err)
	}
	s.h.log.Info("sandbox removed", "sandbox", rec.ID, "why", why)
	return nil
}
