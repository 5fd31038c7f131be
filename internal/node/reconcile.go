package node

import (
	"context"
	"os"
	"path/filepath"
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
	// Volumes first: sandboxes restored or resumed from here on bind them.
	if err := n.vols.reconcileVolumes(ctx); err != nil {
		return err
	}
	containers, err := n.rt.List(ctx)
	if err != nil {
		return err
	}
	running := map[string]bool{}
	for _, c := range containers {
		running[c] = true
	}
	if err := n.takeUnowned(ctx); err != nil {
		return err
	}
	if err := n.copies.dropStaleCopies(ctx); err != nil {
		n.log.Warn("reconcile: copies of templates", "err", err)
	}
	recs, err := n.ownSandboxes(ctx)
	if err != nil {
		return err
	}
	keepContainer := map[string]bool{}
	slotsInUse := map[int]bool{}
	keepDir := map[string]bool{}
	keep := func(rec *store.Sandbox) {
		keepContainer[rec.ContainerID] = true
		slotsInUse[rec.Slot] = true
		keepDir[rec.ID] = true
	}
	for _, rec := range recs {
		s, known := stateOf(rec)
		if !known {
			n.log.Warn("reconcile: removing sandbox in a state this version does not know", "sandbox", rec.ID, "state", rec.State)
			n.forget(ctx, rec)
			continue
		}
		switch s {
		case stateRunning:
			if n.adopt(ctx, rec, running[rec.ContainerID], stateRunning) != nil {
				keep(rec)
				continue
			}
			n.log.Warn("reconcile: sandbox lost its container; removing", "sandbox", rec.ID, "container", rec.ContainerID)
			n.lostRun(ctx, rec)
			n.forget(ctx, rec)
		case stateWritingOut:
			switch n.settleWriteOut(ctx, rec, running[rec.ContainerID]) {
			case writeOutFinished:
				keepDir[rec.ID] = true
			case writeOutRolledBack:
				keep(rec)
			}
		case statePaused, statePausedOnDisk:
			if s.frozen() {
				if sb := n.adopt(ctx, rec, running[rec.ContainerID], statePaused); sb != nil {
					// Paused in memory when the server stopped: keep it
					// frozen and write it out as planned.
					sb.scheduleWriteOut(rec.PausedAt)
					keep(rec)
					continue
				}
			}
			if imageComplete(rec.PauseImage) {
				n.log.Info("reconcile: keeping paused sandbox", "sandbox", rec.ID)
				n.trackOnDisk(rec.ID)
				keepDir[rec.ID] = true
				continue
			}
			n.log.Error("reconcile: paused sandbox lost: neither its container nor its image remains; removing", "sandbox", rec.ID, "image", rec.PauseImage)
			n.forget(ctx, rec)
		case stateResuming:
			if rec.PauseImage != "" {
				if imageComplete(rec.PauseImage) {
					recordAs(rec, statePausedOnDisk)
					rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
					if err := n.save(ctx, rec); err != nil {
						// Read as resuming again at the next start, and
						// settled the same way.
						n.log.Warn("reconcile: record interrupted resume", "sandbox", rec.ID, "err", err)
					}
					n.log.Info("reconcile: interrupted resume; sandbox stays paused", "sandbox", rec.ID)
					n.trackOnDisk(rec.ID)
					keepDir[rec.ID] = true
					continue
				}
			}
			n.forget(ctx, rec)
		default: // creating, deleting: never finished, so never handed out
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
	if gone, err := n.store.DeleteOrphanEvents(ctx); err != nil {
		n.log.Warn("reconcile: remove the logs of sandboxes that are gone", "err", err)
	} else if gone > 0 {
		n.log.Info("reconcile: removed log lines of sandboxes that are gone", "lines", gone)
	}
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
		recordAs(rec, statePausedOnDisk)
		rec.PauseImage, rec.PauseImageTarget = target, ""
		rec.Slot, rec.HostAddr, rec.ContainerID = -1, "", ""
		n.trackOnDisk(rec.ID)
		if err := n.save(ctx, rec); err != nil {
			// The record still names the image as in flight; the image
			// is complete, so the next start finishes it again.
			n.log.Warn("reconcile: record finished write-out", "sandbox", rec.ID, "err", err)
		}
		n.log.Info("reconcile: finished interrupted write-out; sandbox paused on disk", "sandbox", rec.ID, "image", target)
		return writeOutFinished
	}
	var sb *sandbox
	if rec.ContainerID != "" {
		sb = n.adopt(ctx, rec, alive, statePaused)
	}
	if sb != nil {
		for _, dir := range []string{target, target + ".tmp"} {
			if err := os.RemoveAll(dir); err != nil {
				n.log.Warn("reconcile: remove partial pause image", "sandbox", rec.ID, "dir", dir, "err", err)
			}
		}
		recordAs(rec, statePaused)
		rec.PauseImageTarget, rec.PauseChecksum = "", ""
		if err := n.save(ctx, rec); err != nil {
			n.log.Warn("reconcile: record rolled-back write-out", "sandbox", rec.ID, "err", err)
		}
		sb.scheduleWriteOut(rec.PausedAt)
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
		if !t.HeldBy(n.cfg.NodeID) {
			continue // another node's files
		}
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
		// Without the list every image would look unreferenced.
		n.log.Warn("reconcile: list templates; checkpoint images not swept", "err", err)
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
			n.removeDir(p)
		}
	}
}

// adopt takes over a sandbox that survived the server, in state s: its
// container must run and its slot must still be intact. It returns the
// sandbox's sandbox, or nil when the sandbox cannot be adopted.
func (h *host) adopt(ctx context.Context, rec *store.Sandbox, alive bool, s state) *sandbox {
	if !alive || rec.Slot < 0 {
		return nil
	}
	nw, err := network(rec)
	if err != nil {
		h.log.Warn("reconcile: network settings", "sandbox", rec.ID, "err", err)
		return nil
	}
	rs, err := h.rt.Attach(ctx, rec.ContainerID)
	if err != nil {
		h.log.Warn("reconcile: attach", "sandbox", rec.ID, "err", err)
		return nil
	}
	slot, err := h.slots.Adopt(rec.Slot)
	if err != nil {
		h.log.Warn("reconcile: adopt slot", "sandbox", rec.ID, "slot", rec.Slot, "err", err)
		return nil
	}
	if err := h.applyPolicy(slot, rec); err != nil {
		h.log.Warn("reconcile: re-apply egress policy", "sandbox", rec.ID, "err", err)
		h.release(slot)
		return nil
	}
	sb := h.track(rec.ID, s)
	defer sb.mu.Unlock()
	sb.setBox(&container{sb: rs, slot: slot}, rec, nw)
	h.log.Info("reconcile: re-adopted running sandbox", "sandbox", rec.ID, "slot", rec.Slot)
	return sb
}

// trackOnDisk takes over a sandbox paused on disk.
func (h *host) trackOnDisk(sandboxID string) {
	h.track(sandboxID, statePausedOnDisk).mu.Unlock()
}

// forget removes a sandbox the host no longer holds (or holds only in
// part): container, directory, record. What cannot be removed is logged;
// the next start tries again.
func (n *Node) forget(ctx context.Context, rec *store.Sandbox) {
	if rec.ContainerID != "" {
		if err := n.rt.Remove(ctx, rec.ContainerID); err != nil {
			n.log.Warn("reconcile: remove sandbox container", "sandbox", rec.ID, "container", rec.ContainerID, "err", err)
		}
	}
	if err := os.RemoveAll(n.sandboxDir(rec.ID)); err != nil {
		n.log.Warn("reconcile: remove sandbox directory", "sandbox", rec.ID, "err", err)
	}
	if err := n.store.Sandboxes().Delete(ctx, rec.ID); err != nil {
		n.log.Warn("reconcile: delete sandbox record", "sandbox", rec.ID, "err", err)
	}
	if err := n.store.DeleteEvents(ctx, rec.ID); err != nil {
		n.log.Warn("reconcile: delete sandbox events", "sandbox", rec.ID, "err", err)
	}
}

// sweepDirs removes sandbox directories no record keeps, half-written
// checkpoint directories anywhere under the data dir, and what a
// hand-over received into a sandbox's directory and had not yet removed
// (move.go): a crash after its record named this node leaves it in a
// directory that is kept.
func (n *Node) sweepDirs(keep map[string]bool) {
	sbDir := filepath.Join(n.cfg.DataDir, "sandboxes")
	entries, _ := os.ReadDir(sbDir)
	for _, e := range entries {
		if !keep[e.Name()] {
			n.log.Info("reconcile: removing orphaned sandbox directory", "dir", e.Name())
			n.removeDir(filepath.Join(sbDir, e.Name()))
		}
	}
	for _, pattern := range []string{"templates/*/*.tmp", "sandboxes/*/*.tmp", "sandboxes/*/.moving.*"} {
		matches, _ := filepath.Glob(filepath.Join(n.cfg.DataDir, pattern))
		for _, m := range matches {
			n.log.Info("reconcile: removing half-written files", "dir", m)
			n.removeDir(m)
		}
	}
}
