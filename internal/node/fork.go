package node

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/quota"
	"cube/internal/store"
)

// ForkSandbox checkpoints a sandbox once and starts req.Count children
// from that image, req.Concurrency at a time. The parent keeps running
// with its id and end time. A failed child does not fail the others.
func (n *Node) ForkSandbox(ctx context.Context, sandboxID string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	rec, dir, err := n.checkpointForFork(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			n.log.Warn("fork: remove checkpoint image", "sandbox", sandboxID, "err", err)
		}
	}()
	results := n.startChildren(ctx, rec, dir, req)
	fault.Point(fault.ForkAfterChildren)
	n.event(sandboxID, "info", "forked into %d sandboxes", req.Count)
	return results, nil
}

// startChildren starts req.Count children of parent from image,
// req.Concurrency at a time; a failed child does not fail the others.
func (n *Node) startChildren(ctx context.Context, parent *store.Sandbox, image string, req cube.ForkRequest) []cube.ForkResult {
	conc := req.Concurrency
	if conc <= 0 {
		conc = 4
	}
	results := make([]cube.ForkResult, req.Count)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range results {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			child, err := n.startChild(ctx, parent, image, req.Timeout)
			results[i] = cube.ForkResult{Sandbox: child, Err: err}
		})
	}
	wg.Wait()
	return results
}

// checkpointForFork checkpoints a running sandbox, which keeps running,
// for its children, holding its lock only that long. Children hold their
// memory once restored, so the image goes with the request. It needs no
// sync: no record names it, and the reconciler removes one a crash left.
func (h *host) checkpointForFork(ctx context.Context, sandboxID string) (*store.Sandbox, string, error) {
	sb, rec, err := h.open(ctx, sandboxID)
	if err != nil {
		return nil, "", err
	}
	defer sb.mu.Unlock()
	dir, err := sb.checkpointForFork(ctx)
	if err != nil {
		return nil, "", err
	}
	return rec, dir, nil
}

// checkpointForFork writes the running sandbox's image for its children
// and returns where; the sandbox runs on. The caller holds its lock.
func (s *sandbox) checkpointForFork(ctx context.Context) (string, error) {
	if err := s.requireState("fork", stateRunning); err != nil {
		return "", err
	}
	dir := filepath.Join(s.h.cfg.DataDir, "snapshots", "fork-"+id.New("", 12))
	start := time.Now()
	if err := s.box.sb.Checkpoint(ctx, dir, true); err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			s.h.log.Warn("fork: remove checkpoint image", "sandbox", s.id, "err", rerr)
		}
		return "", diskError("fork", err)
	}
	s.h.tel.phase("clone", "checkpoint", start)
	fault.Point(fault.ForkAfterCheckpoint)
	return dir, nil
}

// startChild starts a copy of parent from its checkpoint image, with its
// own id, tokens and slot.
func (n *Node) startChild(ctx context.Context, parent *store.Sandbox, image string, timeout time.Duration) (*cube.Sandbox, error) {
	if err := n.checkCapacity(ctx); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	if timeout <= 0 {
		timeout = parent.EndAt.Sub(now)
	}
	if err := n.cfg.Quota.Timeout(ctx, parent.Team, timeout); err != nil {
		return nil, err
	}
	release, err := n.cfg.Quota.Start(ctx, parent.Team, quota.Sandboxes{Count: 1, VCPUs: max(parent.CPUCount, 1), MemoryMB: parent.MemoryMB})
	if err != nil {
		return nil, err
	}
	defer release()
	child := *parent
	child.ID, child.EnvdToken, child.Node = id.Sandbox(), id.Token(32), n.cfg.NodeID
	if child.TrafficToken != "" {
		child.TrafficToken = id.Token(32)
	}
	child.CreatedAt, child.StartedAt, child.EndAt = now, now, now.Add(timeout)
	child.PauseImage, child.PausedAt, child.RunningSince = "", time.Time{}, time.Time{}
	// Nothing of the parent's place on the host: a crash before the child
	// runs must not make reconcile remove the parent's container.
	child.ContainerID, child.Slot, child.HostAddr = "", -1, ""
	child.PauseImageTarget, child.PauseChecksum, child.PauseFilesOnly = "", "", false
	n.store.NewLog(child.ID) // a new sandbox: its log starts empty
	sb := n.track(child.ID, stateCreating)
	defer sb.mu.Unlock()
	if err := sb.start(ctx, &child, child.Boot, image, parent.EnvdToken); err != nil {
		return nil, err
	}
	n.event(child.ID, "info", "forked from %s", parent.ID)
	return n.view(&child)
}
