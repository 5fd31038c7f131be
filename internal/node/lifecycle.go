package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"cube/internal/api"
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
		for {
			select {
			case <-n.stop:
				return
			case <-t.C:
				n.reap()
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

// PauseSandbox writes a running sandbox's memory and files to disk and
// frees its memory and network slot.
func (n *Node) PauseSandbox(ctx context.Context, sandboxID string, keepMemory bool) error {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return err
	}
	if rec.State == store.Paused {
		return api.Errorf(http.StatusConflict, "sandbox %q is already paused", sandboxID)
	}
	if err := n.pause(ctx, rec); err != nil {
		return err
	}
	n.event(sandboxID, "info", "paused")
	return nil
}

// pause checkpoints rec and stops it. The caller holds its lock. On
// failure the sandbox keeps running.
func (n *Node) pause(ctx context.Context, rec *store.Sandbox) error {
	n.mu.Lock()
	l := n.live[rec.ID]
	n.mu.Unlock()
	if l == nil {
		return fmt.Errorf("sandbox %q has no running container", rec.ID)
	}
	dir := filepath.Join(n.sandboxDir(rec.ID), "pause")
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	rec.State = store.Pausing
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	if err := l.sb.Checkpoint(ctx, tmp, false); err != nil {
		os.RemoveAll(tmp)
		rec.State = store.Running
		n.store.Sandboxes().Put(context.Background(), rec)
		return diskError("pause", err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.live, rec.ID)
	n.mu.Unlock()
	if err := n.release(l.slot); err != nil {
		n.log.Warn("release network slot", "sandbox", rec.ID, "err", err)
	}
	rec.State = store.Paused
	rec.PauseImage = dir
	rec.PausedAt = time.Now().UTC()
	rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
	return n.store.Sandboxes().Put(ctx, rec)
}

// diskError turns a full disk into a 507 the user can act on.
func diskError(op string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || strings.Contains(err.Error(), "no space left on device") {
		return api.Errorf(http.StatusInsufficientStorage, "%s: the host's disk is full: free space in the data directory or delete snapshots", op)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// resume restores a paused sandbox into a fresh slot. The caller holds its
// lock. Time spent paused does not count against the timeout.
func (n *Node) resume(ctx context.Context, rec *store.Sandbox) error {
	if rec.Boot == nil {
		return fmt.Errorf("sandbox %q has no boot record", rec.ID)
	}
	paused := time.Since(rec.PausedAt)
	image := rec.PauseImage
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
	if err := n.attach(ctx, rec, l); err != nil {
		return err
	}
	rec.EndAt = rec.EndAt.Add(paused)
	rec.PauseImage, rec.PausedAt = "", time.Time{}
	os.RemoveAll(image)
	n.event(rec.ID, "info", "resumed after %s paused", paused.Round(time.Millisecond))
	return n.store.Sandboxes().Put(ctx, rec)
}
