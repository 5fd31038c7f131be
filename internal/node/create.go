package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/netslot"
	"cube/internal/quota"
	"cube/internal/runtime"
	"cube/internal/store"
)

// CreateSandbox restores a template's snapshot into a fresh network slot,
// hands envd its token and environment, and returns once envd answers.
func (n *Node) CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	tpl, err := n.TeamTemplate(ctx, req.Team, req.Template)
	if err != nil {
		return nil, err
	}
	if tpl.Status != store.TemplateReady {
		return nil, cube.Errorf(cube.Conflict, "template %q is %s, not ready", req.Template, tpl.Status)
	}
	if tpl, err = n.copies.localTemplate(ctx, tpl); err != nil {
		return nil, err
	}
	if err := n.checkNetwork(req.Team, req.Network); err != nil {
		return nil, err
	}
	if err := n.checkCapacity(ctx); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := &store.Sandbox{
		ID: id.Sandbox(), Team: req.Team, TemplateID: tpl.ID, State: store.Creating, Slot: -1, Node: n.cfg.NodeID,
		CreatedAt: now, StartedAt: now, EndAt: now.Add(req.Timeout), Timeout: req.Timeout,
		CPUCount: tpl.CPUCount, MemoryMB: tpl.MemoryMB, DiskSizeMB: tpl.DiskSizeMB,
		Metadata: req.Metadata, EnvVars: req.EnvVars, EnvdToken: id.Token(32),
		AutoPause: req.AutoPause, AutoResume: req.AutoResume,
		AutoPauseFilesOnly: req.AutoPause && !req.AutoPauseMemory,
	}
	if req.CPUCount > 0 {
		rec.CPUCount = req.CPUCount
	}
	if req.MemoryMB > 0 {
		rec.MemoryMB = req.MemoryMB
	}
	boot := *tpl
	boot.Aliases = nil
	rec.Boot = &boot
	unlock, err := n.vols.mountVolumes(ctx, req.Team, &boot, req.VolumeMounts)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if req.Template != tpl.ID {
		rec.Alias = req.Template
	}
	if p := req.Network.AllowPublicTraffic; p != nil && !*p {
		rec.TrafficToken = id.Token(32)
	}
	if rec.Network, err = json.Marshal(req.Network); err != nil {
		return nil, err
	}
	if err := n.cfg.Quota.Timeout(ctx, req.Team, req.Timeout); err != nil {
		return nil, err
	}
	release, err := n.cfg.Quota.Start(ctx, req.Team, quota.Sandboxes{Count: 1, VCPUs: max(rec.CPUCount, 1), MemoryMB: rec.MemoryMB})
	if err != nil {
		return nil, err
	}
	defer release()
	n.store.NewLog(rec.ID) // a new sandbox: its log starts empty
	sb := n.track(rec.ID, stateCreating)
	defer sb.mu.Unlock()
	if err := sb.start(ctx, rec, tpl, tpl.Checkpoint, tpl.EnvdToken); err != nil {
		return nil, err
	}
	n.event(rec.ID, "info", "sandbox created from template %s", tpl.ID)
	return n.view(rec)
}

// start records a newly tracked sandbox as creating, launches it from
// image and records it as running. On failure nothing is left behind: no
// container, no record, no sandbox.
func (s *sandbox) start(ctx context.Context, rec *store.Sandbox, tpl *store.Template, image, oldToken string) error {
	var c cleanup
	defer s.h.cleanUp(&c, "create", "sandbox", rec.ID)
	c.Add(func() error { s.h.untrack(s); return nil })
	s.changeState(rec, stateCreating)
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	c.Add(func() error { return s.h.store.Sandboxes().Delete(context.WithoutCancel(ctx), rec.ID) })
	fault.Point(fault.SandboxCreateAfterIntent)
	box, err := s.h.launch(ctx, rec, tpl, image, oldToken, true)
	if err != nil {
		return err
	}
	c.Add(func() error { return s.h.retire(box) })
	fault.Point(fault.SandboxCreateAfterLaunch)
	if err := s.attach(ctx, rec, box); err != nil {
		return err
	}
	c.Release()
	return nil
}

// attach records a launched container as the sandbox's, and the sandbox
// as running. On failure the caller still owns box, and the sandbox is
// in the state it was.
func (s *sandbox) attach(ctx context.Context, rec *store.Sandbox, box *container) error {
	nw, err := network(rec)
	if err != nil {
		return err
	}
	var c cleanup
	defer s.h.cleanUp(&c, "attach", "sandbox", rec.ID)
	was := s.state
	s.startRunning(rec, &c)
	s.changeState(rec, stateRunning)
	c.Add(func() error { s.changeState(rec, was); return nil })
	rec.Slot, rec.HostAddr, rec.ContainerID = box.slot.Index, box.slot.HostAddr.String(), box.sb.ID()
	if err := s.h.save(ctx, rec); err != nil {
		return err
	}
	c.Release()
	s.setBox(box, rec, nw)
	return nil
}

// launch starts rec's container from image, with an envd initialised for
// rec (token, environment): from the template's warm pool when it has one
// ready, else by restoring image now. oldToken is the envd token inside
// the image (empty for templates built from images). fresh says rec is a
// new sandbox's (a create, a fork), which may take the token a warm
// sandbox was keyed with; a rollback's keeps its own. It does not touch
// the store; on failure it leaves nothing behind. A crash mid-way leaves a
// container and slot no record names, which the reconciler removes.
func (h *host) launch(ctx context.Context, rec *store.Sandbox, tpl *store.Template, image, oldToken string, fresh bool) (*container, error) {
	if needsBoot(rec, tpl) {
		return h.bootWithVolumes(ctx, rec, tpl)
	}
	start := time.Now()
	// The sandbox's own limits apply; a restore may change them, but warm
	// sandboxes were restored with the template's.
	own := *tpl
	own.CPUCount, own.MemoryMB = rec.CPUCount, rec.MemoryMB
	sameLimits := own.CPUCount == tpl.CPUCount && own.MemoryMB == tpl.MemoryMB
	// Templates have warm pools, and so do snapshots in demand (their
	// sandboxes wait paused); see pool.go.
	if h.cfg.PoolSize > 0 && image == tpl.Checkpoint && sameLimits && pooled(tpl) {
		if box := h.pools.takeWarm(ctx, tpl, fresh); box != nil {
			if err := h.readyWarm(ctx, box, rec, oldToken, fresh); err != nil {
				h.log.Warn("warm sandbox could not be handed out; restoring a fresh one", "template", tpl.ID, "sandbox", rec.ID, "err", err)
				h.discard(box, rec.ID)
			} else {
				h.tel.phase("launch", "warm-init", start)
				return box, nil
			}
		}
		defer h.pools.restoringOnDemand(tpl.ID)()
	}
	box, err := h.restore(ctx, &own, image, containerID(rec.ID), true)
	if err != nil {
		return nil, err
	}
	var c cleanup
	defer h.cleanUp(&c, "launch", "sandbox", rec.ID)
	c.Add(func() error { return h.retire(box) })
	restored := h.tel.phase("launch", "restore", start)
	if err := h.ready(ctx, box, rec, oldToken); err != nil {
		return nil, err
	}
	c.Release()
	h.tel.phase("launch", "init", restored)
	return box, nil
}

// readyWarm readies a sandbox taken from a warm pool, which was restored
// in the background: it first gets a request's CPU priority back, then,
// when its pool kept it paused (a snapshot's), its processes resume. When
// its pool keyed it ahead, a fresh rec (a new sandbox's) takes its envd's
// token, and should readying fail keeps the token it had; a rollback's
// hands envd the sandbox's own token over the key.
func (h *host) readyWarm(ctx context.Context, box *container, rec *store.Sandbox, oldToken string, fresh bool) error {
	if p, ok := box.sb.(runtime.Promoter); ok {
		if err := p.Promote(); err != nil {
			return err
		}
	}
	if box.paused {
		if err := box.sb.Resume(ctx); err != nil {
			return err
		}
		box.paused = false
	}
	if box.envdToken == "" {
		return h.ready(ctx, box, rec, oldToken)
	}
	if !fresh {
		return h.ready(ctx, box, rec, box.envdToken)
	}
	own := rec.EnvdToken
	rec.EnvdToken = box.envdToken
	err := h.ready(ctx, box, rec, box.envdToken)
	if err != nil {
		rec.EnvdToken = own
	}
	return err
}

// ready puts rec's egress policy on a restored sandbox and hands its envd
// the sandbox's token and environment.
func (h *host) ready(ctx context.Context, box *container, rec *store.Sandbox, oldToken string) error {
	if err := h.applyPolicy(box.slot, rec); err != nil {
		return err
	}
	token, need := rec.EnvdToken, h.cfg.CodeContextsNeedToken
	user, workdir := defaultUser(rec.Boot)
	return h.agentAt(box.slot.HostAddr).Init(ctx, protocol.Init{
		EnvVars:        h.egressTrustEnv(rec.Boot, rec.EnvVars),
		AccessToken:    &token,
		DefaultUser:    user,
		DefaultWorkdir: workdir,
		// A Cube extension; agents that predate it ignore it.
		CodeContextsNeedToken: &need,
	}, oldToken)
}

// defaultUser is who the SDK's commands run as, and where, when they do
// not say: E2B's user in its home, or for a template built by steps the
// user and directory its last USER and WORKDIR steps chose.
func defaultUser(tpl *store.Template) (user, workdir string) {
	if tpl != nil && len(tpl.Layers) > 0 && tpl.User != "" && tpl.Cwd != "" {
		return tpl.User, tpl.Cwd
	}
	return "user", "/home/user"
}

// restore starts image as container cid in a fresh network slot, or in
// a prepared container (which has its own ID and slot) when one waits.
// Refills of the warm pool pass evict false and take only a free slot; a
// sandbox a user asked for may take one from a pool.
func (h *host) restore(ctx context.Context, tpl *store.Template, image, cid string, evict bool) (*container, error) {
	at := time.Now()
	if err := h.verifyImage(tpl, image); err != nil {
		return nil, err
	}
	at = h.tel.phase("restore", "verify", at)
	if box := h.pools.restorePrepared(ctx, tpl, image); box != nil {
		h.tel.phase("restore", "into-prepared", at)
		return box, nil
	}
	slot, err := h.acquireSlot(ctx, evict)
	if err != nil {
		return nil, err
	}
	var c cleanup
	defer h.cleanUp(&c, "restore", "container", cid)
	c.Add(func() error { return h.release(slot) })
	sb, err := h.rt.Restore(ctx, image, Spec(tpl, cid, slot.NetNS))
	if err != nil {
		return nil, fmt.Errorf("restore sandbox from %s: %w", tpl.ID, err)
	}
	h.tel.phase("restore", "cold", at)
	c.Release()
	return &container{sb: sb, slot: slot}, nil
}

// acquireSlot takes a free network slot. When none is free and evict is
// set, prepared containers and then warm sandboxes give theirs up first:
// they exist to make sandboxes faster, never to stop one.
//
// A slot freed so may be taken meanwhile by a refill or a prepare under
// way, which then holds it without a container to give up yet; while such
// background work runs, acquireSlot waits for it (at most slotWait) and
// evicts again rather than failing.
func (h *host) acquireSlot(ctx context.Context, evict bool) (*netslot.Slot, error) {
	deadline := time.Now().Add(slotWait)
	slot, err := h.slots.Acquire(ctx)
	for evict && errors.Is(err, netslot.ErrExhausted) {
		if !h.pools.freePreparedSlot() && !h.pools.freeWarmSlot() {
			if !h.pools.backgroundBusy() || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		slot, err = h.slots.Acquire(ctx)
	}
	if errors.Is(err, netslot.ErrExhausted) {
		return nil, cube.Errorf(cube.Capacity, "no free network slot: kill or pause sandboxes").WithRetryAfter(time.Second)
	}
	if err != nil {
		return nil, fmt.Errorf("network slot: %w", err)
	}
	return slot, nil
}

// slotWait bounds how long a sandbox waits for background work to give
// way a slot.
const slotWait = 5 * time.Second

// backgroundBusy reports whether a refill or a prepare is under way.
func (p *pools) backgroundBusy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	busy := p.preparing
	for _, k := range p.filling {
		busy += k
	}
	return busy > 0
}

// containerID names the runsc container of a sandbox. A sandbox that is
// rolled back or resumed gets a new container, so the name carries a
// generation suffix.
func containerID(sandboxID string) string {
	return sandboxID + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// verifyImage checks a checkpoint against its recorded checksum before a
// restore is attempted, so a damaged image is reported as such.
func (h *host) verifyImage(tpl *store.Template, image string) error {
	if _, err := os.Stat(filepath.Join(image, "checkpoint.img")); err != nil {
		return fmt.Errorf("the snapshot image of %s is missing on disk: rebuild or delete it", tpl.ID)
	}
	if tpl.Checksum != "" && image == tpl.Checkpoint {
		sum, err := imageChecksum(image)
		if err != nil || sum != tpl.Checksum {
			if tpl.SourceSandbox == "" {
				return cube.Errorf(cube.Damaged, "the snapshot image of template %s is damaged (checksum mismatch); delete it with `cubemastercli tpl delete --template-id %s` and build it again", tpl.ID, tpl.ID)
			}
			return cube.Errorf(cube.Damaged, "the snapshot image of %s is damaged (checksum mismatch); delete it with `cubemastercli snapshot delete %s`", tpl.ID, tpl.ID)
		}
	}
	return nil
}

// checkCapacity refuses a new sandbox when the node holds its limit. It
// counts the sandboxes the node holds in memory (every one it runs, has
// paused or is creating), which are its records: no query per create.
func (h *host) checkCapacity(ctx context.Context) error {
	h.mu.Lock()
	n := len(h.sandboxes)
	h.mu.Unlock()
	if n >= h.cfg.MaxSandboxes {
		return cube.Errorf(cube.Capacity, "sandbox limit of %d reached: kill sandboxes or raise --max-sandboxes", h.cfg.MaxSandboxes).WithRetryAfter(time.Second)
	}
	return nil
}
