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
func (s *sandbox) scheduleWriteOut(pausedAt time.Time) {
	ctx := s.h.ctx
	s.h.background(func() {
		t := time.NewTimer(s.h.cfg.PauseWriteDelay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.writeOut(context.WithoutCancel(ctx), pausedAt); err != nil {
			s.h.log.Warn("write paused sandbox to disk; it stays paused in memory", "sandbox", s.id, "err", err)
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
func (s *sandbox) writeOut(ctx context.Context, pausedAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone || !s.state.frozen() {
		return nil
	}
	rec, err := s.h.store.Sandboxes().Get(ctx, s.id)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !recordIn(rec, statePaused) || !rec.PausedAt.Equal(pausedAt) {
		return nil
	}
	return s.writeOutLocked(ctx, rec)
}

// writeOutLocked is writeOut's work, for a sandbox the caller holds
// locked and paused in memory. The image holds memory and files, or the
// files alone when the pause keeps no memory.
func (s *sandbox) writeOutLocked(ctx context.Context, rec *store.Sandbox) error {
	box := s.box
	var c cleanup
	defer s.h.cleanUp(&c, "write out", "sandbox", rec.ID)
	s.changeState(rec, stateWritingOut)
	c.Add(func() error { s.changeState(rec, statePaused); return nil })
	dir := filepath.Join(s.h.sandboxDir(rec.ID), "pause")
	rec.PauseImageTarget, rec.PauseChecksum = dir, ""
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.PauseAfterIntent)
	save := func(tmp string) error { return box.sb.Checkpoint(ctx, tmp, true) }
	if rec.PauseFilesOnly {
		save = func(tmp string) error { return box.sb.SaveFiles(ctx, tmp) }
	}
	tmp, sum, err := s.h.writeImageWith(ctx, dir, "pause", save)
	if err != nil {
		return err
	}
	// Gone once published; until then it is not the sandbox's.
	c.Add(func() error { return os.RemoveAll(tmp) })
	fault.Point(fault.PauseAfterCheckpoint)
	rec.PauseChecksum = sum
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.PauseAfterChecksum)
	if err := publishImage(tmp, dir); err != nil {
		return diskError("pause", err)
	}
	fault.Point(fault.PauseAfterRename)
	s.changeState(rec, statePausedOnDisk)
	rec.PauseImage, rec.PauseImageTarget = dir, ""
	rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
	if err := s.h.save(ctx, rec); err != nil {
		// The store may or may not name the image now, so it stays; the
		// frozen container stays too and the sandbox is paused in memory.
		return err
	}
	c.Release()
	fault.Point(fault.PauseAfterRecord)
	s.setBox(nil, rec, cube.Network{})
	s.h.discard(box, rec.ID)
	s.h.event(rec.ID, "info", "paused sandbox written to disk")
	return nil
}
