package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/store"
)

// scheduleWriteOut writes a frozen sandbox to disk after PauseWriteDelay,
// unless it was resumed (or paused anew) since pausedAt. Close cancels
// the wait: the next start re-adopts the frozen sandbox and schedules it
// again; a write-out already begun is finished.
func (n *Node) scheduleWriteOut(inst *instance, pausedAt time.Time) {
	ctx := n.ctx
	n.background(func() {
		t := time.NewTimer(n.cfg.PauseWriteDelay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.writeOut(context.WithoutCancel(ctx), inst, pausedAt); err != nil {
			n.log.Warn("write paused sandbox to disk; it stays paused in memory", "sandbox", inst.id, "err", err)
		}
	})
}

// writeOut checkpoints a frozen sandbox to disk and frees its container
// and slot. A sandbox resumed, paused again or killed meanwhile is left
// alone (a later pause has its own write-out).
//
// Each step is recorded before the next one depends on it, so a crash
// anywhere leaves something the reconciler can finish or roll back: the
// target directory is recorded before the checkpoint, the image's
// checksum before its rename, and the container is retired only once the
// store says the sandbox is on disk. The checkpoint leaves the container
// frozen in memory, so until then a failure (or a crash) still has the
// sandbox there.
func (n *Node) writeOut(ctx context.Context, inst *instance, pausedAt time.Time) error {
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.gone || inst.state != statePaused {
		return nil
	}
	rec, err := n.store.Sandboxes().Get(ctx, inst.id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if rec.State != store.Paused || !rec.PausedAt.Equal(pausedAt) {
		return nil
	}
	return n.writeOutLocked(ctx, inst, rec)
}

// writeOutLocked is writeOut's work, for a sandbox the caller holds
// locked and paused in memory. The image holds memory and files, or the
// files alone when the pause keeps no memory.
func (n *Node) writeOutLocked(ctx context.Context, inst *instance, rec *store.Sandbox) error {
	box := inst.box
	var c cleanup
	defer n.cleanUp(&c, "write out", "sandbox", rec.ID)
	n.changeState(inst, rec, stateWritingOut)
	c.Add(func() error { n.changeState(inst, rec, statePaused); return nil })
	dir := filepath.Join(n.sandboxDir(rec.ID), "pause")
	rec.PauseImageTarget, rec.PauseChecksum = dir, ""
	if err := n.save(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.PauseAfterIntent)
	save := func(tmp string) error { return box.sb.Checkpoint(ctx, tmp, true) }
	if rec.PauseFilesOnly {
		save = func(tmp string) error { return box.sb.SaveFiles(ctx, tmp) }
	}
	tmp, sum, err := n.writeImageWith(ctx, dir, "pause", save)
	if err != nil {
		return err
	}
	// Gone once published; until then it is not the sandbox's.
	c.Add(func() error { return os.RemoveAll(tmp) })
	fault.Point(fault.PauseAfterCheckpoint)
	rec.PauseChecksum = sum
	if err := n.save(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.PauseAfterChecksum)
	if err := publishImage(tmp, dir); err != nil {
		return diskError("pause", err)
	}
	fault.Point(fault.PauseAfterRename)
	n.changeState(inst, rec, statePausedOnDisk)
	rec.PauseImage, rec.PauseImageTarget = dir, ""
	rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
	if err := n.save(ctx, rec); err != nil {
		// The store may or may not name the image now, so it stays; the
		// frozen container stays too and the sandbox is paused in memory.
		return err
	}
	c.Release()
	fault.Point(fault.PauseAfterRecord)
	n.setBox(inst, nil, rec, cube.Network{})
	n.discard(box, rec.ID)
	n.event(rec.ID, "info", "paused sandbox written to disk")
	return nil
}
