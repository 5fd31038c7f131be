package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/store"
)

// running returns the container of a running sandbox.
func (n *Node) running(rec *store.Sandbox) (*live, error) {
	n.mu.Lock()
	l := n.live[rec.ID]
	n.mu.Unlock()
	if l == nil || rec.State != store.Running {
		return nil, cube.Errorf(cube.Conflict, "sandbox %q is %s, not running", rec.ID, rec.State)
	}
	return l, nil
}

// imageChecksum fingerprints a checkpoint image: the kernel state and
// page metadata in full, and every file's size. It is cheap enough to check
// before each restore, and catches truncated or replaced images.
func imageChecksum(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", name, info.Size())
		if name == "pages.img" {
			continue // large; covered by its size and pages_meta
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return "", err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// snapshotTemplate is the template record of a snapshot of rec, to be
// written into dir; it is building until the image is durable.
func snapshotTemplate(rec *store.Sandbox, snapID, dir string, names []string) *store.Template {
	t := *rec.Boot
	now := time.Now().UTC()
	t.ID, t.Aliases, t.Status, t.Error = snapID, names, store.TemplateBuilding, ""
	t.CreatedAt, t.UpdatedAt = now, now
	t.Checkpoint, t.Checksum, t.SizeBytes = dir, "", 0
	t.SourceSandbox, t.Parent, t.EnvdToken = rec.ID, rec.TemplateID, rec.EnvdToken
	return &t
}

// CreateSnapshot checkpoints a running sandbox, which keeps running, into
// a snapshot usable as a template. The snapshot is recorded (building,
// naming its directory) before the checkpoint, its checksum once the image
// is written, and it is ready once the image is durable under its final
// name; the reconciler finishes or drops one a crash interrupted.
func (n *Node) CreateSnapshot(ctx context.Context, sandboxID, name string) (*cube.Snapshot, error) {
	var names []string
	if name != "" {
		if !id.ValidName(name) {
			return nil, cube.Errorf(cube.Invalid, "snapshot name %q: use lowercase letters, digits, '-' and '_'", name).WithField("name")
		}
		if _, err := n.Template(ctx, name); err == nil {
			return nil, cube.Errorf(cube.Conflict, "a template or snapshot named %q exists already", name)
		}
		names = []string{name}
	}
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	l, err := n.running(rec)
	if err != nil {
		return nil, err
	}
	snapID := id.New("snap-", 16)
	dir := filepath.Join(n.cfg.DataDir, "snapshots", snapID)
	t := snapshotTemplate(rec, snapID, dir, names)
	if err := n.store.Templates().Put(ctx, t); err != nil {
		return nil, err
	}
	fault.Point(fault.SnapshotAfterIntent)
	drop := func() {
		os.RemoveAll(dir)
		n.store.Templates().Delete(context.Background(), snapID)
	}
	start := time.Now()
	tmp, sum, err := writeImage(ctx, l.sb, dir, true, "snapshot")
	if err != nil {
		drop()
		return nil, err
	}
	n.log.Debug("checkpoint taken", "sandbox", rec.ID, "took", time.Since(start))
	fault.Point(fault.SnapshotAfterCheckpoint)
	t.Checksum = sum
	if err := n.store.Templates().Put(ctx, t); err != nil {
		os.RemoveAll(tmp)
		drop()
		return nil, err
	}
	fault.Point(fault.SnapshotAfterChecksum)
	if err := publishImage(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		drop()
		return nil, diskError("snapshot", err)
	}
	fault.Point(fault.SnapshotAfterRename)
	t.Status, t.SizeBytes, t.UpdatedAt = store.TemplateReady, dirSize(dir), time.Now().UTC()
	if err := n.store.Templates().Put(ctx, t); err != nil {
		drop()
		return nil, err
	}
	fault.Point(fault.SnapshotAfterRecord)
	n.event(sandboxID, "info", "snapshot %s taken", snapID)
	return snapshotView(t), nil
}

func snapshotView(t *store.Template) *cube.Snapshot {
	return &cube.Snapshot{ID: t.ID, Names: t.Aliases, SandboxID: t.SourceSandbox, CreatedAt: t.CreatedAt, SizeBytes: t.SizeBytes}
}

// ListSnapshots returns the snapshots matching f.
func (n *Node) ListSnapshots(ctx context.Context, f cube.SnapshotFilter) ([]cube.Snapshot, error) {
	all, err := n.store.Templates().List(ctx, string(store.TemplateReady))
	if err != nil {
		return nil, err
	}
	var out []cube.Snapshot
	for _, t := range all {
		if t.SourceSandbox == "" || (f.SandboxID != "" && f.SandboxID != t.SourceSandbox) {
			continue
		}
		if f.Name != "" && f.Name != t.ID && !slices.Contains(t.Aliases, f.Name) {
			continue
		}
		out = append(out, *snapshotView(t))
	}
	return out, nil
}

// ForkSandbox checkpoints a sandbox once and starts req.Count children
// from that image, req.Concurrency at a time. The parent keeps running
// with its id and end time. A failed child does not fail the others.
func (n *Node) ForkSandbox(ctx context.Context, sandboxID string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	unlock := n.lock(sandboxID)
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		unlock()
		return nil, err
	}
	l, err := n.running(rec)
	if err != nil {
		unlock()
		return nil, err
	}
	// Children hold their memory once restored; the image goes with the
	// request. It needs no sync: no record names it, and the reconciler
	// removes one a crash left.
	dir := filepath.Join(n.cfg.DataDir, "snapshots", "fork-"+id.New("", 12))
	defer os.RemoveAll(dir)
	err = l.sb.Checkpoint(ctx, dir, true)
	unlock()
	if err != nil {
		return nil, diskError("fork", err)
	}
	conc := req.Concurrency
	if conc <= 0 {
		conc = 4
	}
	results := make([]cube.ForkResult, req.Count)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			child, err := n.startChild(ctx, rec, dir, req.Timeout)
			results[i] = cube.ForkResult{Sandbox: child, Err: err}
		}(i)
	}
	wg.Wait()
	n.event(sandboxID, "info", "forked into %d sandboxes", req.Count)
	return results, nil
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
	child := *parent
	child.ID, child.EnvdToken = id.Sandbox(), id.Token(32)
	if child.TrafficToken != "" {
		child.TrafficToken = id.Token(32)
	}
	child.CreatedAt, child.StartedAt, child.EndAt = now, now, now.Add(timeout)
	child.PauseImage, child.PausedAt = "", time.Time{}
	unlock := n.lock(child.ID)
	defer unlock()
	if err := n.start(ctx, &child, child.Boot, image, parent.EnvdToken); err != nil {
		return nil, err
	}
	n.event(child.ID, "info", "forked from %s", parent.ID)
	return n.view(&child), nil
}

// RollbackSandbox returns a sandbox, in place, to a snapshot it took: its
// id, tokens, metadata, end time and address stay. The current container
// is replaced only once the snapshot's is running, so a failed rollback
// leaves the sandbox as it was.
func (n *Node) RollbackSandbox(ctx context.Context, sandboxID, snapshotID string) (*cube.Rollback, error) {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	snap, err := n.Template(ctx, snapshotID)
	if err != nil {
		return nil, err
	}
	if snap.Status != store.TemplateReady {
		return nil, cube.Errorf(cube.Conflict, "snapshot %q is %s, not ready", snapshotID, snap.Status)
	}
	if snap.SourceSandbox != sandboxID {
		return nil, cube.Errorf(cube.Forbidden, "snapshot %q was not taken from sandbox %q; a sandbox rolls back only to its own snapshots", snapshotID, sandboxID)
	}
	if rec.State != store.Running {
		return nil, cube.Errorf(cube.Conflict, "sandbox %q is %s; connect to it first", sandboxID, rec.State)
	}
	l, err := n.launch(ctx, rec, snap, snap.Checkpoint, snap.EnvdToken)
	if err != nil {
		return nil, fmt.Errorf("rollback: %w", err)
	}
	n.mu.Lock()
	old := n.live[rec.ID]
	n.mu.Unlock()
	if err := n.attach(ctx, rec, l); err != nil {
		return nil, err
	}
	if old != nil {
		n.retire(old)
	}
	n.event(sandboxID, "info", "rolled back to %s", snap.ID)
	return &cube.Rollback{OperationID: id.New("op-", 12), Status: "completed"}, nil
}
