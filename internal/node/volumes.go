package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/runtime"
	"cube/internal/store"
	"cube/internal/volume"
)

// Volume sizes when the configuration names none.
const (
	defaultVolumeBytes    = 1 << 30
	defaultMaxVolumeBytes = 100 << 30
)

// volumeSet is the node's share of persistent volumes: their disks, and
// the lock that keeps a volume from being deleted while a sandbox that
// mounts it is being created (creates hold it shared, a delete alone).
type volumeSet struct {
	h     *host
	once  sync.Once
	disks *volume.Disks
	err   error
	mu    sync.RWMutex
}

// volumeDisks returns the disks under <data>/volumes.
func (vs *volumeSet) volumeDisks() (*volume.Disks, error) {
	vs.once.Do(func() {
		vs.disks, vs.err = volume.NewDisks(filepath.Join(vs.h.cfg.DataDir, "volumes"))
	})
	return vs.disks, vs.err
}

// DefaultVolumeBytes is the size of a volume created without one.
func (n *Node) DefaultVolumeBytes() int64 {
	if n.cfg.VolumeBytes > 0 {
		return n.cfg.VolumeBytes
	}
	return min(defaultVolumeBytes, n.MaxVolumeBytes())
}

// MaxVolumeBytes is the largest volume this node makes.
func (n *Node) MaxVolumeBytes() int64 {
	if n.cfg.MaxVolumeBytes > 0 {
		return n.cfg.MaxVolumeBytes
	}
	return defaultMaxVolumeBytes
}

// CreateVolume records a volume (creating), makes and mounts its disk and
// records it ready. A name in use → Conflict. On failure nothing remains;
// a crash half-way leaves a creating record the reconciler removes.
func (n *Node) CreateVolume(ctx context.Context, team, name string, sizeBytes int64) (*cube.Volume, error) {
	if !volume.ValidName(name) {
		return nil, cube.Errorf(cube.Invalid, "volume name %q is invalid: use %s", name, volume.NameRule).WithField("name")
	}
	if sizeBytes == 0 {
		sizeBytes = n.DefaultVolumeBytes()
	}
	if sizeBytes < volume.MinBytes || sizeBytes > n.MaxVolumeBytes() {
		return nil, cube.Errorf(cube.Invalid, "volume size %d bytes is out of range: give %d MiB to %d MiB", sizeBytes, volume.MinBytes>>20, n.MaxVolumeBytes()>>20).WithField("sizeMB")
	}
	disks, err := n.vols.volumeDisks()
	if err != nil {
		return nil, err
	}
	// The disk image is sparse; a volume the host could not fill would
	// end as a full host disk instead of a full volume.
	if free, err := freeBytes(n.cfg.DataDir); err == nil && free < sizeBytes {
		return nil, cube.Errorf(cube.DiskFull, "a volume of %d MiB does not fit: the host has %d MiB free in the data directory; ask for less (sizeMB) or free space", sizeBytes>>20, free>>20)
	}
	if err := n.cfg.Quota.Disk(ctx, team, sizeBytes); err != nil {
		return nil, err
	}
	n.vols.mu.Lock()
	defer n.vols.mu.Unlock()
	if v, err := n.VolumeNamed(ctx, team, name); err != nil {
		return nil, err
	} else if v != nil {
		return nil, cube.Errorf(cube.Invalid, "Volume with name '%s' already exists (%s): pick another name or delete it first", name, v.ID).WithField("name")
	}
	rec := &store.Volume{ID: volume.NewID(), Team: team, Name: name, State: store.VolumeCreating, Node: n.cfg.NodeID, Token: "vtk_" + id.Token(24),
		SizeBytes: sizeBytes, CreatedAt: time.Now().UTC()}
	var c cleanup
	defer n.cleanUp(&c, "create", "volume", rec.ID)
	if err := n.store.Volumes().Put(ctx, rec); err != nil {
		return nil, err
	}
	c.Add(func() error { return n.store.Volumes().Delete(context.WithoutCancel(ctx), rec.ID) })
	if err := disks.Create(rec.ID, sizeBytes); err != nil {
		return nil, diskError("create volume", err)
	}
	c.Add(func() error { return disks.Remove(rec.ID) })
	rec.State = store.VolumeReady
	if err := n.store.Volumes().Put(ctx, rec); err != nil {
		return nil, err
	}
	c.Release()
	n.log.Info("volume created", "volume", rec.ID, "name", name, "bytes", sizeBytes)
	return volumeView(rec), nil
}

// ListVolumes returns the team's ready volumes (every team's for "").
func (n *Node) ListVolumes(ctx context.Context, team string) ([]cube.Volume, error) {
	recs, err := n.store.Volumes().List(ctx, string(store.VolumeReady))
	if err != nil {
		return nil, err
	}
	out := make([]cube.Volume, 0, len(recs))
	for _, r := range recs {
		if team == "" || r.Team == team {
			out = append(out, *volumeView(r))
		}
	}
	return out, nil
}

// GetVolume returns one ready volume with its usage.
func (n *Node) GetVolume(ctx context.Context, volumeID string) (*cube.Volume, error) {
	rec, err := n.vols.volumeRecord(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	v := volumeView(rec)
	if disks, err := n.vols.volumeDisks(); err == nil {
		if used, _, err := disks.Usage(rec.ID); err == nil {
			v.UsedBytes = used
		}
	}
	return v, nil
}

func (vs *volumeSet) volumeRecord(ctx context.Context, volumeID string) (*store.Volume, error) {
	notFound := cube.Errorf(cube.NotFound, "volume %q not found", volumeID)
	if !volume.ValidID(volumeID) {
		return nil, notFound
	}
	rec, err := vs.h.store.Volumes().Get(ctx, volumeID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.State != store.VolumeReady) {
		return nil, notFound
	}
	return rec, err
}

// VolumeNamed returns the team's live volume called name, or nil: names
// are unique within a team.
func (n *Node) VolumeNamed(ctx context.Context, team, name string) (*store.Volume, error) {
	return n.volumeNamed(ctx, team, name)
}

func (h *host) volumeNamed(ctx context.Context, team, name string) (*store.Volume, error) {
	recs, err := h.store.Volumes().List(ctx, string(store.VolumeReady), string(store.VolumeCreating))
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.Name == name && r.Team == team {
			return r, nil
		}
	}
	return nil, nil
}

// DeleteVolume removes a volume and its disk. A volume that a sandbox
// (running, paused or being created) or a snapshot mounts is kept:
// Conflict naming them, since their restores bind it again.
func (n *Node) DeleteVolume(ctx context.Context, volumeID string) error {
	disks, err := n.vols.volumeDisks()
	if err != nil {
		return err
	}
	n.vols.mu.Lock()
	defer n.vols.mu.Unlock()
	rec, err := n.vols.volumeRecord(ctx, volumeID)
	if err != nil {
		return err
	}
	users, err := n.vols.volumeUsers(ctx, rec.ID)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return cube.Errorf(cube.Conflict, "volume %q (%s) is mounted by %s: kill those sandboxes and delete those snapshots first", rec.Name, rec.ID, strings.Join(users, ", "))
	}
	rec.State = store.VolumeDeleting
	if err := n.store.Volumes().Put(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.VolumeDeleteAfterIntent)
	if err := disks.Remove(rec.ID); err != nil {
		return fmt.Errorf("remove volume %s: %w", rec.ID, err)
	}
	fault.Point(fault.VolumeDeleteAfterRemove)
	if err := n.store.Volumes().Delete(ctx, rec.ID); err != nil {
		return err
	}
	n.log.Info("volume deleted", "volume", rec.ID, "name", rec.Name)
	return nil
}

// volumeUsers names the sandboxes and snapshots whose boot record mounts
// volume volumeID.
func (vs *volumeSet) volumeUsers(ctx context.Context, volumeID string) ([]string, error) {
	var users []string
	sbs, err := vs.h.store.Sandboxes().List(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range sbs {
		if !recordIn(s, stateDeleting) && mountsVolume(s.Boot, volumeID) {
			users = append(users, "sandbox "+s.ID)
		}
	}
	tpls, err := vs.h.store.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tpls {
		if t.Status != store.TemplateDeleting && mountsVolume(t, volumeID) {
			users = append(users, "snapshot "+t.ID)
		}
	}
	return users, nil
}

func mountsVolume(t *store.Template, volumeID string) bool {
	return t != nil && slices.ContainsFunc(t.Mounts, func(m store.VolumeMount) bool { return m.VolumeID == volumeID })
}

// VolumeFiles opens a volume's content for the content API.
func (n *Node) VolumeFiles(ctx context.Context, volumeID string) (cube.VolumeFiles, error) {
	rec, err := n.vols.volumeRecord(ctx, volumeID)
	if err != nil {
		return nil, err
	}
	disks, err := n.vols.volumeDisks()
	if err != nil {
		return nil, err
	}
	// Held against a delete until the request closes the files, so a
	// delete never meets the volume busy.
	n.vols.mu.RLock()
	if err := disks.Mount(rec.ID); err != nil {
		n.vols.mu.RUnlock()
		return nil, err
	}
	f, err := volume.OpenFiles(disks.Path(rec.ID))
	if err != nil {
		n.vols.mu.RUnlock()
		return nil, err
	}
	return &heldFiles{Files: f, release: sync.OnceFunc(n.vols.mu.RUnlock)}, nil
}

// heldFiles are a volume's files opened for one request, holding the
// volume against deletion until closed.
type heldFiles struct {
	*volume.Files
	release func()
}

func (h *heldFiles) Close() error {
	defer h.release()
	return h.Files.Close()
}

// mountVolumes resolves a create request's volume mounts into boot, the
// new sandbox's boot record, and returns with the volumes held against
// deletion until unlock is called. A snapshot keeps the mounts it was
// taken with (a checkpoint cannot gain or lose one): asking for others
// is Invalid.
func (vs *volumeSet) mountVolumes(ctx context.Context, team string, boot *store.Template, asked []cube.VolumeMount) (unlock func(), err error) {
	vs.mu.RLock()
	release := vs.mu.RUnlock
	defer func() {
		if err != nil {
			release()
		}
	}()
	unlock = release
	if len(asked) == 0 {
		return unlock, nil
	}
	disks, err := vs.volumeDisks()
	if err != nil {
		return nil, err
	}
	var mounts []store.VolumeMount
	for _, m := range asked {
		v, err := vs.h.volumeNamed(ctx, team, m.Name)
		if err != nil {
			return nil, err
		}
		if v == nil || v.State != store.VolumeReady {
			return nil, cube.Errorf(cube.Invalid, "volumeMounts: volume %q does not exist: create it first (Volume.create or `cubemastercli volume create %s`)", m.Name, m.Name).WithField("volumeMounts")
		}
		if err := disks.Mount(v.ID); err != nil {
			return nil, err
		}
		mounts = append(mounts, store.VolumeMount{VolumeID: v.ID, Name: v.Name, Path: m.Path, ReadOnly: m.ReadOnly, Source: disks.Path(v.ID)})
	}
	if boot.SourceSandbox != "" || len(boot.Mounts) > 0 {
		if !sameMounts(boot.Mounts, mounts) {
			return nil, cube.Errorf(cube.Invalid, "volumeMounts: snapshot %s keeps the volume mounts it was taken with (%s): create from it without volumeMounts, or from a template", boot.ID, describeMounts(boot.Mounts)).WithField("volumeMounts")
		}
		return unlock, nil
	}
	boot.Mounts = mounts
	return unlock, nil
}

func sameMounts(a, b []store.VolumeMount) bool {
	key := func(ms []store.VolumeMount) []string {
		var k []string
		for _, m := range ms {
			k = append(k, fmt.Sprintf("%s|%s|%t", m.VolumeID, m.Path, m.ReadOnly))
		}
		slices.Sort(k)
		return k
	}
	return slices.Equal(key(a), key(b))
}

func describeMounts(ms []store.VolumeMount) string {
	if len(ms) == 0 {
		return "none"
	}
	var parts []string
	for _, m := range ms {
		parts = append(parts, m.Name+" at "+m.Path)
	}
	return strings.Join(parts, ", ")
}

// needsBoot reports whether rec must boot afresh instead of restoring
// tpl's image: it mounts volumes that image was not taken with (a
// checkpoint's mounts are fixed). Restores of its own pause images,
// snapshots and clones carry its mounts and restore as usual.
func needsBoot(rec *store.Sandbox, tpl *store.Template) bool {
	return rec.Boot != nil && len(rec.Boot.Mounts) > 0 && len(tpl.Mounts) == 0
}

// bootWithVolumes starts rec afresh from its boot record (the template's
// rootfs, agent and start command, with rec's volumes bound) in a new
// network slot and hands its envd the sandbox's token and environment.
// It takes the template's boot time instead of a restore's: the price of
// mounts the template's checkpoint does not have.
func (h *host) bootWithVolumes(ctx context.Context, rec *store.Sandbox, _ *store.Template) (*container, error) {
	start := time.Now()
	own := *rec.Boot
	own.CPUCount, own.MemoryMB = rec.CPUCount, rec.MemoryMB
	slot, err := h.acquireSlot(ctx, true)
	if err != nil {
		return nil, err
	}
	var c cleanup
	defer h.cleanUp(&c, "boot with volumes", "sandbox", rec.ID)
	c.Add(func() error { return h.release(slot) })
	sb, err := h.rt.Boot(ctx, Spec(&own, containerID(rec.ID), slot.NetNS))
	if err != nil {
		return nil, fmt.Errorf("boot sandbox %s with its volumes: %w", rec.ID, err)
	}
	box := &container{sb: sb, slot: slot}
	c.Release()
	c.Add(func() error { return h.retire(box) })
	booted := h.tel.phase("boot-volumes", "boot", start)
	if err := h.ready(ctx, box, rec, ""); err != nil {
		return nil, err
	}
	h.tel.phase("boot-volumes", "init", booted)
	c.Release()
	return box, nil
}

// freeBytes is the space left to unprivileged writers under dir.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// runtimeMounts are the runtime's mounts of a boot record's volumes.
func runtimeMounts(ms []store.VolumeMount) []runtime.Mount {
	var out []runtime.Mount
	for _, m := range ms {
		out = append(out, runtime.Mount{Source: m.Source, Destination: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

// mountsView is what the API reports of a boot record's mounts.
func mountsView(t *store.Template) []cube.VolumeMount {
	if t == nil {
		return nil
	}
	var out []cube.VolumeMount
	for _, m := range t.Mounts {
		out = append(out, cube.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out
}

func volumeView(r *store.Volume) *cube.Volume {
	return &cube.Volume{ID: r.ID, Team: r.Team, Name: r.Name, Token: r.Token, SizeBytes: r.SizeBytes, CreatedAt: r.CreatedAt}
}

// reconcileVolumes makes the volumes on disk agree with the store after a
// start: ready volumes are mounted (they usually still are), a create or
// delete a crash interrupted is undone or finished, and a directory no
// record names is removed with its disk and loop device.
func (vs *volumeSet) reconcileVolumes(ctx context.Context) error {
	disks, err := vs.volumeDisks()
	if err != nil {
		return err
	}
	recs, err := vs.h.store.Volumes().List(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		if !r.HeldBy(vs.h.cfg.NodeID) {
			continue // another node's disk
		}
		switch r.State {
		case store.VolumeReady:
			if err := disks.Mount(r.ID); err != nil {
				vs.h.log.Error("reconcile: volume cannot be mounted", "volume", r.ID, "err", err)
			}
			continue
		case store.VolumeCreating:
			vs.h.log.Warn("reconcile: removing volume whose create was interrupted", "volume", r.ID)
		default:
			vs.h.log.Warn("reconcile: finishing the delete of volume", "volume", r.ID)
		}
		if err := disks.Remove(r.ID); err != nil {
			vs.h.log.Error("reconcile: remove volume", "volume", r.ID, "err", err)
			continue
		}
		if err := vs.h.store.Volumes().Delete(ctx, r.ID); err != nil {
			return err
		}
	}
	dirs, err := disks.List()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if !known[d] {
			vs.h.log.Warn("reconcile: removing volume directory no record names", "volume", d)
			if err := disks.Remove(d); err != nil {
				vs.h.log.Error("reconcile: remove volume", "volume", d, "err", err)
			}
		}
	}
	return nil
}
