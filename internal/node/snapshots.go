package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/store"
)

// snapshotTemplate is the template record of a snapshot of rec, to be
// written into dir; it is building until the image is durable.
func snapshotTemplate(rec *store.Sandbox, snapID, dir string, names []string) *store.Template {
	t := *rec.Boot
	now := time.Now().UTC()
	t.ID, t.Aliases, t.Status, t.Error = snapID, names, store.TemplateBuilding, ""
	t.CreatedAt, t.UpdatedAt = now, now
	t.Checkpoint, t.Checksum, t.SizeBytes = dir, "", 0
	t.SourceSandbox, t.Parent, t.EnvdToken = rec.ID, rec.TemplateID, rec.EnvdToken
	// A snapshot is its sandbox's team's alone, whoever owns the template.
	t.Team, t.Public = rec.Team, false
	// The image is written on the sandbox's node.
	t.Node = rec.Node
	return &t
}

// CreateSnapshot checkpoints a running sandbox, which keeps running, into
// a snapshot usable as a template, with the manifest of its files (its
// template's rootfs and agent, its own checkpoint). The snapshot is
// recorded (building, naming its directory) before the checkpoint, its
// checksum once the image is written, and it is ready once the image is
// durable under its final name; the reconciler finishes or drops one a
// crash interrupted.
func (n *Node) CreateSnapshot(ctx context.Context, sandboxID, name string) (*cube.Snapshot, error) {
	var names []string
	if name != "" {
		if !id.ValidName(name) {
			return nil, cube.Errorf(cube.Invalid, "snapshot name %q: use lowercase letters, digits, '-' and '_'", name).WithField("name")
		}
		names = []string{name}
	}
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	defer sb.mu.Unlock()
	if name != "" {
		// Names are the team's own: another team may use the same.
		all, err := n.store.TemplatesNamed(ctx, name)
		if err != nil {
			return nil, err
		}
		if store.OwnTemplate(all, rec.Team, name) != nil {
			return nil, cube.Errorf(cube.Conflict, "a template or snapshot named %q exists already", name)
		}
	}
	if err := sb.requireState("snapshot", stateRunning); err != nil {
		return nil, err
	}
	if err := n.checkReserve("snapshot"); err != nil {
		return nil, err
	}
	// A snapshot's size is known once it is written: a team that has
	// reached its disk quota takes no more.
	if err := n.cfg.Quota.Disk(ctx, rec.Team, 1); err != nil {
		return nil, err
	}
	box := sb.box
	snapID := id.New("snap-", 16)
	dir := filepath.Join(n.cfg.DataDir, "snapshots", snapID)
	t := snapshotTemplate(rec, snapID, dir, names)
	var c cleanup
	defer n.cleanUp(&c, "snapshot", "sandbox", sandboxID)
	if err := n.store.Templates().Put(ctx, t); err != nil {
		return nil, err
	}
	c.Add(func() error {
		// The image goes only once no record can name it.
		if err := n.store.Templates().Delete(context.WithoutCancel(ctx), snapID); err != nil {
			return err
		}
		return os.RemoveAll(dir)
	})
	fault.Point(fault.SnapshotAfterIntent)
	start := time.Now()
	// The snapshot's manifest, like a build's, is in the image before its
	// checksum is taken; the sandbox runs on meanwhile.
	tmp, sum, err := n.writeImageWith(ctx, dir, "snapshot", func(tmp string) error {
		if err := box.sb.Checkpoint(ctx, tmp, true); err != nil {
			return err
		}
		listed, err := writeSnapshotManifest(tmp, rec.Boot)
		if err != nil {
			return err
		}
		if !listed {
			n.log.Info("snapshot without a manifest: its template was built before manifests, so copies of it are checked by the checkpoint's checksum only", "sandbox", sandboxID, "snapshot", snapID, "template", rec.Boot.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.Add(func() error { return os.RemoveAll(tmp) })
	n.log.Debug("checkpoint taken", "sandbox", rec.ID, "took", time.Since(start))
	fault.Point(fault.SnapshotAfterCheckpoint)
	t.Checksum = sum
	if err := n.store.Templates().Put(ctx, t); err != nil {
		return nil, err
	}
	fault.Point(fault.SnapshotAfterChecksum)
	at := time.Now()
	if err := publishImage(tmp, dir); err != nil {
		return nil, diskError("snapshot", err)
	}
	at = n.tel.phase("snapshot", "publish", at)
	fault.Point(fault.SnapshotAfterRename)
	t.Status, t.SizeBytes, t.UpdatedAt = store.TemplateReady, dirSize(dir), time.Now().UTC()
	if err := n.store.Templates().Put(ctx, t); err != nil {
		return nil, err
	}
	n.tel.phase("snapshot", "record", at)
	c.Release()
	fault.Point(fault.SnapshotAfterRecord)
	n.event(sandboxID, "info", "snapshot %s taken", snapID)
	return snapshotView(t), nil
}

func snapshotView(t *store.Template) *cube.Snapshot {
	return &cube.Snapshot{ID: t.ID, Team: t.Team, Names: t.Aliases, SandboxID: t.SourceSandbox, CreatedAt: t.CreatedAt, SizeBytes: t.SizeBytes}
}

// ListSnapshots returns the snapshots matching f.
func (n *Node) ListSnapshots(ctx context.Context, f cube.SnapshotFilter, p cube.Page) ([]cube.Snapshot, *cube.Cursor, error) {
	q := store.PageQuery{Team: f.Team, States: []string{string(store.TemplateReady)}, Asc: p.Asc}
	if p.After != nil {
		q.AfterSeq, q.AfterID = p.After.Time.UnixNano(), p.After.ID
	}
	recs, last, more, err := n.store.TemplatePage(ctx, q, max(p.Limit, 1), func(t *store.Template) bool {
		return t.SourceSandbox != "" && (f.SandboxID == "" || f.SandboxID == t.SourceSandbox) &&
			(f.Name == "" || f.Name == t.ID || slices.Contains(t.Aliases, f.Name))
	})
	if err != nil {
		return nil, nil, err
	}
	out := make([]cube.Snapshot, 0, len(recs))
	for _, t := range recs {
		out = append(out, *snapshotView(t))
	}
	if !more || len(recs) == 0 {
		return out, nil, nil
	}
	return out, &cube.Cursor{Time: time.Unix(0, last), ID: recs[len(recs)-1].ID}, nil
}
