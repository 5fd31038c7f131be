package node

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/runtime"
	"cube/internal/store"
)

// Phase names the step of a template snapshot build, for progress reports.
type Phase string

const (
	PhaseBooting      Phase = "BOOTING"
	PhaseProbing      Phase = "PROBING"
	PhaseSnapshotting Phase = "SNAPSHOTTING"
)

// BuildSnapshot boots tpl fresh from its rootfs in a network slot, waits
// until probe succeeds against the sandbox's host-side address, then
// checkpoints it into tpl.Checkpoint (by default the template's
// directory) with the manifest of the template's files, and stops it. It
// sets tpl.Envd (to this node's agent), tpl.Checkpoint, tpl.Checksum and
// tpl.SizeBytes; the caller stores the template, which may be marked ready
// at once: the image is synced to disk before BuildSnapshot returns. On
// failure nothing is left behind.
func (n *Node) BuildSnapshot(ctx context.Context, tpl *store.Template, probe func(ctx context.Context, addr netip.Addr) error, phase func(Phase)) error {
	var c cleanup
	defer n.cleanUp(&c, "build snapshot", "template", tpl.ID)
	if phase == nil {
		phase = func(Phase) {}
	}
	tpl.Envd = n.agentDir
	phase(PhaseBooting)
	slot, err := n.acquireSlot(ctx, true)
	if err != nil {
		return err
	}
	// The build container and its slot go whatever the outcome: only the
	// image stays.
	defer func() {
		if err := n.release(slot); err != nil {
			n.log.Warn("build snapshot: release network slot", "template", tpl.ID, "slot", slot.Index, "err", err)
		}
	}()
	cid := "build-" + tpl.ID + "-" + id.New("", 6)
	sb, err := n.rt.Boot(ctx, Spec(tpl, cid, slot.NetNS))
	if err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	defer func() {
		if err := sb.Kill(context.Background()); err != nil {
			n.log.Warn("build snapshot: kill build container", "template", tpl.ID, "container", cid, "err", err)
		}
	}()

	phase(PhaseProbing)
	if err := probe(ctx, slot.HostAddr); err != nil {
		return err
	}

	phase(PhaseSnapshotting)
	final := tpl.Checkpoint
	if final == "" {
		final = filepath.Join(n.cfg.DataDir, "templates", tpl.ID, "checkpoint")
	}
	// The manifest goes into the image before its checksum is taken, so
	// the checksum the template records vouches for every file a copy of
	// it is served with. The container has stopped by then.
	tmp, sum, err := n.writeImageWith(ctx, final, "snapshot", func(tmp string) error {
		if err := sb.Checkpoint(ctx, tmp, false); err != nil {
			return err
		}
		// The hot list is a file of the image like the others: learnt
		// first, so the manifest lists it and a copy on another node
		// checks out.
		n.learnHotPages(ctx, tpl, tmp)
		at := time.Now()
		files, err := writeTemplateManifest(tmp, tpl.Rootfs, tpl.Envd)
		if err != nil {
			return err
		}
		n.log.Info("template manifest written", "template", tpl.ID, "files", files, "took", time.Since(at).Round(time.Millisecond))
		return nil
	})
	if err != nil {
		return err
	}
	c.Add(func() error { return os.RemoveAll(tmp) })
	fault.Point(fault.BuildAfterCheckpoint)
	if err := publishImage(tmp, final); err != nil {
		return diskError("snapshot", err)
	}
	c.Add(func() error { return os.RemoveAll(final) })
	fault.Point(fault.BuildAfterRename)
	tpl.Checkpoint, tpl.Checksum = final, sum
	tpl.SizeBytes = dirSize(final)
	tpl.UpdatedAt = time.Now().UTC()
	c.Release()
	return nil
}

// dirSize is the bytes of the files under dir that are its own.
func dirSize(dir string) int64 {
	var total int64
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() && info.Name() == runtime.ParentsDir && path != dir {
			return filepath.SkipDir // other images' bytes, linked
		}
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return nil
	})
	return total
}
