package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
)

// PauseSandbox pauses a running sandbox: at once in memory, and written
// to disk (memory and files, freeing its memory and network slot) a
// little later unless it is resumed first. With keepMemory false only its
// files are kept, written to disk before PauseSandbox returns; a resume
// then boots the template afresh with them (see pauseAs).
func (n *Node) PauseSandbox(ctx context.Context, sandboxID string, keepMemory bool) error {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer sb.mu.Unlock()
	if sb.state.paused() {
		return cube.Errorf(cube.Conflict, "Error pausing sandbox - sandbox '%s' is already paused", sandboxID)
	}
	if err := sb.pauseAs(ctx, rec, !keepMemory); err != nil {
		return err
	}
	n.event(sandboxID, "info", "paused")
	return nil
}

// pauseAs pauses a running sandbox, keeping its memory or (filesOnly)
// its files alone. A files-only pause writes the files out at once and
// frees the container and slot: nothing of the sandbox's memory is worth
// keeping frozen. If that write fails the sandbox is thawed and runs on,
// so a failed pause loses nothing. The caller holds its lock.
func (s *sandbox) pauseAs(ctx context.Context, rec *store.Sandbox, filesOnly bool) error {
	if !filesOnly {
		return s.pause(ctx, rec)
	}
	if err := s.freeze(ctx, rec, true); err != nil {
		return err
	}
	if err := s.writeOutLocked(ctx, rec); err != nil {
		if rerr := s.resume(context.WithoutCancel(ctx), rec); rerr != nil {
			// Still frozen and recorded as paused: the usual write-out
			// keeps its files on disk.
			s.h.log.Warn("thaw after a failed files-only pause", "sandbox", rec.ID, "err", rerr)
			s.scheduleWriteOut(rec.PausedAt)
		}
		return fmt.Errorf("pause: save the sandbox's files: %w", err)
	}
	return nil
}

// pause freezes a running sandbox's processes and records it as paused;
// the write-out to disk follows after PauseWriteDelay. The caller holds
// its lock.
func (s *sandbox) pause(ctx context.Context, rec *store.Sandbox) error {
	if err := s.freeze(ctx, rec, false); err != nil {
		return err
	}
	s.scheduleWriteOut(rec.PausedAt)
	return nil
}

// freeze stops a running sandbox's processes and records it as paused,
// and whether its pause keeps files only. The caller holds its lock.
func (s *sandbox) freeze(ctx context.Context, rec *store.Sandbox, filesOnly bool) error {
	if err := s.requireState("pause", stateRunning); err != nil {
		return err
	}
	box := s.box
	at := time.Now()
	if err := box.sb.Pause(ctx); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	at = s.h.tel.phase("pause", "freeze", at)
	var c cleanup
	defer s.h.cleanUp(&c, "pause", "sandbox", rec.ID)
	c.Add(func() error { return box.sb.Resume(context.WithoutCancel(ctx)) })
	ran := s.stopRunning(rec, &c)
	s.changeState(rec, statePaused)
	c.Add(func() error { s.changeState(rec, stateRunning); return nil })
	rec.PausedAt, rec.PauseFilesOnly = time.Now().UTC(), filesOnly
	c.Add(func() error { rec.PausedAt, rec.PauseFilesOnly = time.Time{}, false; return nil })
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	s.h.tel.phase("pause", "record", at)
	c.Release()
	s.h.recordRun(ctx, ran)
	return nil
}

// resume brings a paused sandbox back: by thawing it when it is still in
// memory, else by restoring its image into a fresh slot. The caller holds
// its lock. Time spent paused does not count against the timeout. An
// image that does not match its checksum is not restored: the sandbox
// stays paused and its image stays where it is.
func (s *sandbox) resume(ctx context.Context, rec *store.Sandbox) error {
	if err := s.requireState("resume", statePaused, statePausedOnDisk); err != nil {
		return err
	}
	paused := time.Since(rec.PausedAt)
	var c cleanup
	defer s.h.cleanUp(&c, "resume", "sandbox", rec.ID)
	// A pause image no longer needed once the sandbox runs; removed only
	// after the record stops naming it.
	var stale string
	at, op := time.Now(), "resume"
	if s.state.frozen() {
		box := s.box
		if err := box.sb.Resume(ctx); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		at = s.h.tel.phase(op, "thaw", at)
		c.Add(func() error { return box.sb.Pause(context.WithoutCancel(ctx)) })
		s.startRunning(rec, &c)
		s.changeState(rec, stateRunning)
		c.Add(func() error { s.changeState(rec, statePaused); return nil })
		// A write-out whose last save failed may have recorded the
		// sandbox as gone from its slot; it is still there.
		rec.Slot, rec.HostAddr, rec.ContainerID = box.slot.Index, box.slot.HostAddr.String(), box.sb.ID()
		// A write-out that failed half-way may have left its image.
		stale = rec.PauseImageTarget
		if rec.PauseImage != "" {
			stale = rec.PauseImage
		}
	} else {
		op = "resume-from-disk"
		image, err := s.resumeFromDisk(ctx, rec, &c)
		if err != nil {
			return err
		}
		at = s.h.tel.phase(op, "launch", at)
		stale = image
	}
	rec.EndAt = rec.EndAt.Add(paused)
	rec.PauseImage, rec.PauseChecksum, rec.PauseImageTarget, rec.PausedAt = "", "", "", time.Time{}
	rec.PauseFilesOnly = false
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	s.h.tel.phase(op, "record", at)
	c.Release()
	s.h.event(rec.ID, "info", "resumed after %s paused", paused.Round(time.Millisecond))
	if stale != "" {
		if err := os.RemoveAll(stale); err != nil {
			s.h.log.Warn("remove pause image after resume", "sandbox", rec.ID, "err", err)
		}
	}
	return nil
}

// resumeFromDisk restores a sandbox paused on disk from its image and
// records it as running; it returns the image, now stale. Its undos go
// into c: a failure then, or later in the resume, leaves the sandbox
// paused on disk with its image intact.
func (s *sandbox) resumeFromDisk(ctx context.Context, rec *store.Sandbox, c *cleanup) (string, error) {
	if rec.Boot == nil || rec.PauseImage == "" {
		return "", fmt.Errorf("sandbox %q has no pause image", rec.ID)
	}
	image := rec.PauseImage
	if err := verifyPauseImage(rec); err != nil {
		return "", err
	}
	before := *rec
	c.Add(func() error {
		*rec = before
		s.changeState(rec, statePausedOnDisk)
		return s.h.save(context.WithoutCancel(ctx), rec)
	})
	s.changeState(rec, stateResuming)
	if err := s.h.save(ctx, rec); err != nil {
		return "", err
	}
	var box *container
	var err error
	if rec.PauseFilesOnly {
		box, err = s.h.bootWithFiles(ctx, rec, rec.Boot, image, rec.EnvdToken)
	} else {
		box, err = s.h.launch(ctx, rec, rec.Boot, image, rec.EnvdToken, false) // it keeps its token
	}
	if err != nil {
		return "", fmt.Errorf("resume: %w", err)
	}
	c.Add(func() error {
		s.setBox(nil, rec, cube.Network{})
		return s.h.retire(box)
	})
	rec.PauseImage, rec.PauseChecksum = "", ""
	if err := s.attach(ctx, rec, box); err != nil {
		return "", err
	}
	return image, nil
}

// verifyPauseImage checks a paused sandbox's image against the checksum
// taken when it was written.
func verifyPauseImage(rec *store.Sandbox) error {
	if !imageComplete(rec.PauseImage) {
		return fmt.Errorf("the pause image of sandbox %q is missing on disk; it cannot be resumed: kill it with `cubemastercli rm %s`", rec.ID, rec.ID)
	}
	if rec.PauseChecksum == "" {
		return nil // written before pause images had checksums
	}
	if !imageIntact(rec.PauseImage, rec.PauseChecksum) {
		return cube.Errorf(cube.Damaged, "the pause image of sandbox %q is damaged (checksum mismatch); it stays paused and its image is kept in %s: kill it with `cubemastercli rm %s`", rec.ID, rec.PauseImage, rec.ID)
	}
	return nil
}

// diskError turns a full disk into a DiskFull error the user can act on.
func diskError(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device") {
		return cube.Errorf(cube.DiskFull, "%s: the host's disk is full: free space in the data directory or delete snapshots", op)
	}
	return fmt.Errorf("%s: %w", op, err)
}
