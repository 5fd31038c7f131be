package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/store"
)

// Start begins background work: the reaper that ends sandboxes at their
// end time, and the warm pool's refiller.
func (n *Node) Start() {
	if n.cfg.PoolSize > 0 {
		n.wg.Add(1)
		go n.refiller()
		n.wakeRefill()
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-n.stop:
				return
			case <-t.C:
				n.reap()
				if i%10 == 0 {
					n.checkAlive()
				}
			}
		}
	}()
}

// reap kills (or pauses, when the sandbox asks for it) every running
// sandbox past its end time.
func (n *Node) reap() {
	ctx := context.Background()
	recs, err := n.store.Sandboxes().List(ctx, string(store.Running))
	if err != nil {
		n.log.Warn("reaper: list sandboxes", "err", err)
		return
	}
	now := time.Now()
	for _, rec := range recs {
		if rec.EndAt.After(now) {
			continue
		}
		n.wg.Add(1)
		go func(sandboxID string) {
			defer n.wg.Done()
			unlock := n.lock(sandboxID)
			defer unlock()
			rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
			if err != nil || rec.State != store.Running || rec.EndAt.After(time.Now()) {
				return // changed meanwhile
			}
			if rec.AutoPause {
				if err := n.pause(ctx, rec); err != nil {
					n.log.Warn("auto-pause failed; killing", "sandbox", sandboxID, "err", err)
				} else {
					n.event(sandboxID, "info", "paused at end of timeout")
					return
				}
			}
			if err := n.destroy(ctx, rec, "timeout"); err != nil {
				n.log.Warn("reaper: kill", "sandbox", sandboxID, "err", err)
			}
		}(rec.ID)
	}
}

// checkAlive removes sandboxes whose container is gone (its PID 1 died,
// the host killed it for memory): they must not be listed as running.
func (n *Node) checkAlive() {
	ctx := context.Background()
	ids, err := n.rt.List(ctx)
	if err != nil {
		return
	}
	alive := map[string]bool{}
	for _, id := range ids {
		alive[id] = true
	}
	n.mu.Lock()
	var dead []string
	for sid, l := range n.live {
		if !alive[l.sb.ID()] {
			dead = append(dead, sid)
		}
	}
	n.mu.Unlock()
	for _, sid := range dead {
		unlock := n.lock(sid)
		n.mu.Lock()
		l := n.live[sid]
		n.mu.Unlock()
		if rec, err := n.store.Sandboxes().Get(ctx, sid); err == nil && l != nil && !alive[l.sb.ID()] {
			if still, _ := n.rt.List(ctx); !slices.Contains(still, l.sb.ID()) {
				n.log.Warn("sandbox exited unexpectedly; removing it", "sandbox", sid, "container", l.sb.ID())
				n.destroy(ctx, rec, "exited unexpectedly")
			}
		}
		unlock()
	}
}

// PauseSandbox pauses a running sandbox: at once in memory, and written
// to disk (memory and files, freeing its memory and network slot) a
// little later unless it is resumed first. keepMemory false is accepted
// and treated like true: a sandbox's files live in its memory, so they are
// saved together.
func (n *Node) PauseSandbox(ctx context.Context, sandboxID string, keepMemory bool) error {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return err
	}
	if rec.State == store.Paused {
		return cube.Errorf(cube.Conflict, "sandbox %q is already paused", sandboxID)
	}
	if err := n.pause(ctx, rec); err != nil {
		return err
	}
	n.event(sandboxID, "info", "paused")
	return nil
}

// pause freezes rec's processes and records it as paused; the write-out
// to disk follows after PauseWriteDelay. The caller holds its lock.
func (n *Node) pause(ctx context.Context, rec *store.Sandbox) error {
	n.mu.Lock()
	l := n.live[rec.ID]
	n.mu.Unlock()
	if l == nil || rec.State != store.Running {
		return cube.Errorf(cube.Conflict, "sandbox %q is %s, not running", rec.ID, rec.State)
	}
	if err := l.sb.Pause(ctx); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	rec.State, rec.PausedAt = store.Paused, time.Now().UTC()
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		l.sb.Resume(context.Background())
		rec.State = store.Running
		return err
	}
	n.mu.Lock()
	l.frozen = true
	n.mu.Unlock()
	n.scheduleWriteOut(rec.ID, rec.PausedAt)
	return nil
}

// scheduleWriteOut writes a frozen sandbox to disk after PauseWriteDelay,
// unless it was resumed (or paused anew) since pausedAt.
func (n *Node) scheduleWriteOut(sandboxID string, pausedAt time.Time) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		select {
		case <-n.stop:
			return // the next start re-adopts the frozen sandbox
		case <-time.After(n.cfg.PauseWriteDelay):
		}
		if err := n.writeOut(sandboxID, pausedAt); err != nil {
			n.log.Warn("write paused sandbox to disk; it stays paused in memory", "sandbox", sandboxID, "err", err)
		}
	}()
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
func (n *Node) writeOut(sandboxID string, pausedAt time.Time) error {
	unlock := n.lock(sandboxID)
	defer unlock()
	ctx := context.Background()
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if err != nil || rec.State != store.Paused || !rec.PausedAt.Equal(pausedAt) {
		return nil
	}
	n.mu.Lock()
	l := n.live[sandboxID]
	n.mu.Unlock()
	if l == nil || !l.frozen {
		return nil
	}
	dir := filepath.Join(n.sandboxDir(rec.ID), "pause")
	rec.PauseImageTarget, rec.PauseChecksum = dir, ""
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.PauseAfterIntent)
	tmp, sum, err := writeImage(ctx, l.sb, dir, true, "pause")
	if err != nil {
		return err
	}
	fault.Point(fault.PauseAfterCheckpoint)
	rec.PauseChecksum = sum
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	fault.Point(fault.PauseAfterChecksum)
	if err := publishImage(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return diskError("pause", err)
	}
	fault.Point(fault.PauseAfterRename)
	rec.PauseImage, rec.PauseImageTarget = dir, ""
	rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		// The store may or may not name the image now, so it stays; the
		// frozen container stays too and the sandbox is paused in memory.
		return err
	}
	fault.Point(fault.PauseAfterRecord)
	n.mu.Lock()
	delete(n.live, rec.ID)
	n.mu.Unlock()
	n.retire(l)
	n.event(rec.ID, "info", "paused sandbox written to disk")
	return nil
}

// diskError turns a full disk into a DiskFull error the user can act on.
func diskError(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device") {
		return cube.Errorf(cube.DiskFull, "%s: the host's disk is full: free space in the data directory or delete snapshots", op)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// resume brings a paused sandbox back: by thawing it when it is still in
// memory, else by restoring its image into a fresh slot. The caller holds
// its lock. Time spent paused does not count against the timeout. An
// image that does not match its checksum is not restored: the sandbox
// stays paused and its image stays where it is.
func (n *Node) resume(ctx context.Context, rec *store.Sandbox) error {
	paused := time.Since(rec.PausedAt)
	n.mu.Lock()
	l := n.live[rec.ID]
	n.mu.Unlock()
	// A pause image no longer needed once the sandbox runs; removed only
	// after the record stops naming it.
	var stale string
	if l != nil && l.frozen {
		if err := l.sb.Resume(ctx); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		n.mu.Lock()
		l.frozen = false
		n.mu.Unlock()
		rec.State = store.Running
		// A write-out that failed half-way may have left its image.
		stale = rec.PauseImageTarget
		if rec.PauseImage != "" {
			stale = rec.PauseImage
		}
	} else {
		if rec.Boot == nil || rec.PauseImage == "" {
			return fmt.Errorf("sandbox %q has no pause image", rec.ID)
		}
		image, sum := rec.PauseImage, rec.PauseChecksum
		if err := verifyPauseImage(rec); err != nil {
			return err
		}
		rec.State = store.Resuming
		if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
			return err
		}
		l, err := n.launch(ctx, rec, rec.Boot, image, rec.EnvdToken)
		if err != nil {
			// The sandbox stays paused with its image intact.
			rec.State = store.Paused
			n.store.Sandboxes().Put(context.Background(), rec)
			return fmt.Errorf("resume: %w", err)
		}
		rec.PauseImage, rec.PauseChecksum = "", ""
		if err := n.attach(ctx, rec, l); err != nil {
			rec.State, rec.PauseImage, rec.PauseChecksum = store.Paused, image, sum
			rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
			n.store.Sandboxes().Put(context.Background(), rec)
			return err
		}
		stale = image
	}
	rec.EndAt = rec.EndAt.Add(paused)
	rec.PauseImage, rec.PauseChecksum, rec.PauseImageTarget, rec.PausedAt = "", "", "", time.Time{}
	n.event(rec.ID, "info", "resumed after %s paused", paused.Round(time.Millisecond))
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	if stale != "" {
		os.RemoveAll(stale)
	}
	return nil
}

// verifyPauseImage checks a paused sandbox's image against the checksum
// taken when it was written.
func verifyPauseImage(rec *store.Sandbox) error {
	if _, err := os.Stat(filepath.Join(rec.PauseImage, "checkpoint.img")); err != nil {
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
