package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cube/internal/store"
)

// Reconcile makes the host and the store agree after a start, in
// particular after a crash. Each sandbox record whose container and slot
// are still alive is re-adopted; a sandbox caught half-way through an
// operation is finished or rolled back; every runsc container, network
// slot and directory that no record accounts for is removed. Each decision
// is logged.
func (n *Node) Reconcile(ctx context.Context) error {
	containers, err := n.rt.List(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, c := range containers {
		running[c] = true
	}
	recs, err := n.store.Sandboxes().List(ctx)
	if err != nil {
		return err
	}
	keepContainer := map[string]bool{}
	slotsInUse := map[int]bool{}
	keepDir := map[string]bool{}
	for _, rec := range recs {
		switch rec.State {
		case store.Running:
			if n.adopt(ctx, rec, running[rec.ContainerID]) {
				keepContainer[rec.ContainerID] = true
				slotsInUse[rec.Slot] = true
				keepDir[rec.ID] = true
				continue
			}
			n.log.Warn("reconcile: sandbox lost its container; removing", "sandbox", rec.ID, "container", rec.ContainerID)
			n.forget(ctx, rec)
		case store.Paused:
			if rec.PauseImageTarget != "" {
				switch n.settleWriteOut(ctx, rec, running[rec.ContainerID]) {
				case writeOutFinished:
					keepDir[rec.ID] = true
				case writeOutRolledBack:
					keepContainer[rec.ContainerID] = true
					slotsInUse[rec.Slot] = true
					keepDir[rec.ID] = true
				}
				continue
			}
			if rec.ContainerID != "" && n.adopt(ctx, rec, running[rec.ContainerID]) {
				// Paused in memory when the server stopped: keep it frozen
				// and write it out as planned.
				n.mu.Lock()
				n.live[rec.ID].frozen = true
				n.mu.Unlock()
				n.scheduleWriteOut(rec.ID, rec.PausedAt)
				keepContainer[rec.ContainerID] = true
				slotsInUse[rec.Slot] = true
				keepDir[rec.ID] = true
				continue
			}
			if _, err := os.Stat(filepath.Join(rec.PauseImage, "checkpoint.img")); err == nil {
				n.log.Info("reconcile: keeping paused sandbox", "sandbox", rec.ID)
				keepDir[rec.ID] = true
				continue
			}
			n.log.Error("reconcile: paused sandbox lost: neither its container nor its image remains; removing", "sandbox", rec.ID, "image", rec.PauseImage)
			n.forget(ctx, rec)
		case store.Pausing:
			// The checkpoint either completed (rename done) or not; a
			// complete image wins, else the container if it still runs.
			img := filepath.Join(n.sandboxDir(rec.ID), "pause")
			if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err == nil {
				rec.State, rec.PauseImage, rec.Slot, rec.HostAddr = store.Paused, img, -1, ""
				n.store.Sandboxes().Put(ctx, rec)
				n.log.Info("reconcile: finished interrupted pause", "sandbox", rec.ID)
				keepDir[rec.ID] = true
				continue
			}
			rec.State = store.Running
			if n.adopt(ctx, rec, running[rec.ContainerID]) {
				n.store.Sandboxes().Put(ctx, rec)
				n.log.Info("reconcile: rolled back interrupted pause", "sandbox", rec.ID)
				keepContainer[rec.ContainerID] = true
				slotsInUse[rec.Slot] = true
				keepDir[rec.ID] = true
				continue
			}
			n.forget(ctx, rec)
		case store.Resuming:
			if rec.PauseImage != "" {
				if _, err := os.Stat(filepath.Join(rec.PauseImage, "checkpoint.img")); err == nil {
					rec.State, rec.Slot, rec.HostAddr, rec.ContainerID = store.Paused, -1, "", ""
					n.store.Sandboxes().Put(ctx, rec)
					n.log.Info("reconcile: interrupted resume; sandbox stays paused", "sandbox", rec.ID)
					keepDir[rec.ID] = true
					continue
				}
			}
			n.forget(ctx, rec)
		default: // creating, killing: never finished, so never handed out
			n.log.Info("reconcile: removing sandbox interrupted while "+string(rec.State), "sandbox", rec.ID)
			n.forget(ctx, rec)
		}
	}
	for _, c := range containers {
		if !keepContainer[c] {
			n.log.Info("reconcile: removing unknown container", "container", c)
			if err := n.rt.Remove(ctx, c); err != nil {
				n.log.Warn("reconcile: remove container", "container", c, "err", err)
			}
		}
	}
	removed, err := n.slots.Reconcile(slotsInUse)
	for _, r := range removed {
		n.log.Info("reconcile: removed leftover network object", "name", r)
	}
	if err != nil {
		n.log.Warn("reconcile: network slots", "err", err)
	}
	n.sweepDirs(keepDir)
	if err := n.settleTemplates(ctx); err != nil {
		return err
	}
	n.sweepSnapshots(ctx)
	return nil
}

// How settleWriteOut decided.
type writeOutOutcome int

const (
	writeOutFinished   writeOutOutcome = iota // paused on disk
	writeOutRolledBack                        // paused in memory, container re-adopted
	writeOutLost                              // removed
)

// settleWriteOut decides a pause write-out a crash interrupted (the record
// names its target). A complete image matching the recorded checksum
// finishes it: the sandbox is paused on disk and its container, if any,
// is surplus. Otherwise the frozen container, if it survived, is
// re-adopted, the partial image dropped, and the write-out scheduled
// again. With neither the sandbox is gone; that happens only when the
// host lost the container and the disk lost the image.
func (n *Node) settleWriteOut(ctx context.Context, rec *store.Sandbox, alive bool) writeOutOutcome {
	target := rec.PauseImageTarget
	if imageIntact(target, rec.PauseChecksum) {
		rec.PauseImage, rec.PauseImageTarget = target, ""
		rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
		if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
			// The record still names the image as in flight; the image
			// is complete, so the next start finishes it again.
			n.log.Warn("reconcile: record finished write-out", "sandbox", rec.ID, "err", err)
		}
		n.log.Info("reconcile: finished interrupted write-out; sandbox paused on disk", "sandbox", rec.ID, "image", target)
		return writeOutFinished
	}
	if rec.ContainerID != "" && n.adopt(ctx, rec, alive) {
		os.RemoveAll(target)
		os.RemoveAll(target + ".tmp")
		rec.PauseImageTarget, rec.PauseChecksum = "", ""
		if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
			n.log.Warn("reconcile: record rolled-back write-out", "sandbox", rec.ID, "err", err)
		}
		n.mu.Lock()
		n.live[rec.ID].frozen = true
		n.mu.Unlock()
		n.scheduleWriteOut(rec.ID, rec.PausedAt)
		n.log.Info("reconcile: rolled back interrupted write-out; sandbox paused in memory", "sandbox", rec.ID)
		return writeOutRolledBack
	}
	n.log.Error("reconcile: paused sandbox lost: its write-out to disk was interrupted, its image is incomplete and its container is gone; removing",
		"sandbox", rec.ID, "image", target, "container", rec.ContainerID)
	n.forget(ctx, rec)
	return writeOutLost
}

// settleTemplates completes what a crash interrupted on templates and
// snapshots: a snapshot still building is finished when its image is
// complete and matches its recorded checksum, else dropped (it was never
// reported as taken); a delete is completed. Template builds are the
// builder's to recover.
func (n *Node) settleTemplates(ctx context.Context) error {
	tpls, err := n.store.Templates().List(ctx, string(store.TemplateBuilding), string(store.TemplateDeleting))
	if err != nil {
		return err
	}
	for _, t := range tpls {
		switch {
		case t.Status == store.TemplateDeleting:
			n.removeTemplateFiles(t)
			if err := n.store.Templates().Delete(ctx, t.ID); err != nil {
				return err
			}
			n.log.Info("reconcile: completed interrupted delete", "template", t.ID)
		case t.SourceSandbox != "" && imageIntact(t.Checkpoint, t.Checksum):
			t.Status, t.SizeBytes, t.UpdatedAt = store.TemplateReady, dirSize(t.Checkpoint), time.Now().UTC()
			if err := n.store.Templates().Put(ctx, t); err != nil {
				return err
			}
			n.log.Info("reconcile: finished interrupted snapshot", "snapshot", t.ID, "sandbox", t.SourceSandbox)
		case t.SourceSandbox != "":
			n.removeTemplateFiles(t)
			if err := n.store.Templates().Delete(ctx, t.ID); err != nil {
				return err
			}
			n.log.Info("reconcile: dropped interrupted snapshot; its image was incomplete", "snapshot", t.ID, "sandbox", t.SourceSandbox)
		}
	}
	return nil
}

// sweepSnapshots removes checkpoint images under snapshots/ that no
// template names: fork images and snapshots whose record never landed.
func (n *Node) sweepSnapshots(ctx context.Context) {
	tpls, err := n.store.Templates().List(ctx)
	if err != nil {
		return
	}
	used := map[string]bool{}
	for _, t := range tpls {
		used[t.Checkpoint] = true
	}
	dir := filepath.Join(n.cfg.DataDir, "snapshots")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if p := filepath.Join(dir, e.Name()); !used[p] {
			n.log.Info("reconcile: removing unreferenced checkpoint image", "dir", p)
			os.RemoveAll(p)
		}
	}
}

// adopt takes over a sandbox that survived the server: its container must
// run and its slot must still be intact.
func (n *Node) adopt(ctx context.Context, rec *store.Sandbox, alive bool) bool {
	if !alive || rec.Slot < 0 {
		return false
	}
	sb, err := n.rt.Attach(ctx, rec.ContainerID)
	if err != nil {
		n.log.Warn("reconcile: attach", "sandbox", rec.ID, "err", err)
		return false
	}
	slot, err := n.slots.Adopt(rec.Slot)
	if err != nil {
		n.log.Warn("reconcile: adopt slot", "sandbox", rec.ID, "slot", rec.Slot, "err", err)
		return false
	}
	if err := n.applyPolicy(slot, rec); err != nil {
		n.log.Warn("reconcile: re-apply egress policy", "sandbox", rec.ID, "err", err)
		return false
	}
	n.mu.Lock()
	n.live[rec.ID] = &live{sb: sb, slot: slot, trafficToken: rec.TrafficToken, maskHost: network(rec).MaskRequestHost}
	n.mu.Unlock()
	n.log.Info("reconcile: re-adopted running sandbox", "sandbox", rec.ID, "slot", rec.Slot)
	return true
}

// forget removes a sandbox the host no longer holds (or holds only in
// part): container, directory, record.
func (n *Node) forget(ctx context.Context, rec *store.Sandbox) {
	if rec.ContainerID != "" {
		n.rt.Remove(ctx, rec.ContainerID)
	}
	os.RemoveAll(n.sandboxDir(rec.ID))
	n.store.Sandboxes().Delete(ctx, rec.ID)
	n.store.DeleteEvents(ctx, rec.ID)
}

// sweepDirs removes sandbox directories no record keeps and half-written
// checkpoint directories anywhere under the data dir.
func (n *Node) sweepDirs(keep map[string]bool) {
	sbDir := filepath.Join(n.cfg.DataDir, "sandboxes")
	entries, _ := os.ReadDir(sbDir)
	for _, e := range entries {
		if !keep[e.Name()] {
			n.log.Info("reconcile: removing orphaned sandbox directory", "dir", e.Name())
			os.RemoveAll(filepath.Join(sbDir, e.Name()))
		}
	}
	for _, pattern := range []string{"templates/*/*.tmp", "sandboxes/*/*.tmp"} {
		matches, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, pattern))
		for _, m := range matches {
			if strings.HasSuffix(m, ".tmp") {
				n.log.Info("reconcile: removing half-written checkpoint", "dir", m)
				os.RemoveAll(m)
			}
		}
	}
}
