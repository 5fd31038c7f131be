package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"cube/internal/cube"
	"cube/internal/egress"
	"cube/internal/envd/protocol"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/netslot"
	"cube/internal/store"
)

// cleanup collects undo steps, run in reverse when an operation fails.
type cleanup struct{ undo []func() }

func (c *cleanup) Add(f func()) { c.undo = append(c.undo, f) }
func (c *cleanup) Clean() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo = nil
}

// Template looks a template up by id or alias.
func (n *Node) Template(ctx context.Context, idOrAlias string) (*store.Template, error) {
	if t, err := n.store.Templates().Get(ctx, idOrAlias); err == nil {
		return t, nil
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	all, err := n.store.Templates().List(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range all {
		if slices.Contains(t.Aliases, idOrAlias) {
			return t, nil
		}
	}
	return nil, cube.Errorf(cube.NotFound, "template %q not found: list templates with `cubemastercli tpl list`", idOrAlias)
}

// CreateSandbox restores a template's snapshot into a fresh network slot,
// hands envd its token and environment, and returns once envd answers.
func (n *Node) CreateSandbox(ctx context.Context, req cube.CreateRequest) (*cube.Sandbox, error) {
	tpl, err := n.Template(ctx, req.Template)
	if err != nil {
		return nil, err
	}
	if tpl.Status != store.TemplateReady {
		return nil, cube.Errorf(cube.Conflict, "template %q is %s, not ready", req.Template, tpl.Status)
	}
	if err := egress.Validate(policyOf(req.Network)); err != nil {
		return nil, cube.Errorf(cube.Invalid, "network: %v", err).WithField("network")
	}
	if err := n.checkCapacity(ctx); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	rec := &store.Sandbox{
		ID: id.Sandbox(), TemplateID: tpl.ID, State: store.Creating, Slot: -1,
		CreatedAt: now, StartedAt: now, EndAt: now.Add(req.Timeout), Timeout: req.Timeout,
		CPUCount: tpl.CPUCount, MemoryMB: tpl.MemoryMB, DiskSizeMB: tpl.DiskSizeMB,
		Metadata: req.Metadata, EnvVars: req.EnvVars, EnvdToken: id.Token(32),
		AutoPause: req.AutoPause, AutoResume: req.AutoResume,
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
	if req.Template != tpl.ID {
		rec.Alias = req.Template
	}
	if p := req.Network.AllowPublicTraffic; p != nil && !*p {
		rec.TrafficToken = id.Token(32)
	}
	if rec.Network, err = json.Marshal(req.Network); err != nil {
		return nil, err
	}
	unlock := n.lock(rec.ID)
	defer unlock()
	if err := n.start(ctx, rec, tpl, tpl.Checkpoint, tpl.EnvdToken); err != nil {
		return nil, err
	}
	n.event(rec.ID, "info", "sandbox created from template %s", tpl.ID)
	return n.view(rec), nil
}

// start records rec as creating, launches it from image and records it
// as running. On failure nothing is left behind and rec is removed from
// the store.
func (n *Node) start(ctx context.Context, rec *store.Sandbox, tpl *store.Template, image, oldToken string) error {
	rec.State = store.Creating
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	l, err := n.launch(ctx, rec, tpl, image, oldToken)
	if err != nil {
		n.store.Sandboxes().Delete(context.Background(), rec.ID)
		return err
	}
	return n.attach(ctx, rec, l)
}

// attach records a launched container as rec's and rec as running.
func (n *Node) attach(ctx context.Context, rec *store.Sandbox, l *live) error {
	rec.State = store.Running
	rec.Slot, rec.HostAddr, rec.ContainerID = l.slot.Index, l.slot.HostAddr.String(), l.sb.ID()
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		n.retire(l)
		return err
	}
	n.mu.Lock()
	l.trafficToken, l.maskHost = rec.TrafficToken, network(rec).MaskRequestHost
	n.live[rec.ID] = l
	n.mu.Unlock()
	return nil
}

// launch starts rec's container from image, with an envd initialised for
// rec (token, environment): from the template's warm pool when it has one
// ready, else by restoring image now. oldToken is the envd token inside
// the image (empty for templates built from images). It does not touch the
// store; on failure it leaves nothing behind. A crash mid-way leaves a
// container and slot no record names, which the reconciler removes.
func (n *Node) launch(ctx context.Context, rec *store.Sandbox, tpl *store.Template, image, oldToken string) (*live, error) {
	start := time.Now()
	// The sandbox's own limits apply; a restore may change them, but warm
	// sandboxes were restored with the template's.
	own := *tpl
	own.CPUCount, own.MemoryMB = rec.CPUCount, rec.MemoryMB
	sameLimits := own.CPUCount == tpl.CPUCount && own.MemoryMB == tpl.MemoryMB
	if image == tpl.Checkpoint && sameLimits {
		if l := n.takeWarm(tpl.ID); l != nil {
			if err := n.ready(ctx, l, rec, oldToken); err != nil {
				n.log.Warn("warm sandbox did not take /init; restoring a fresh one", "template", tpl.ID, "err", err)
				n.discard(l)
			} else {
				n.log.Debug("sandbox launched", "sandbox", rec.ID, "warm", true, "took", time.Since(start))
				return l, nil
			}
		}
	}
	l, err := n.restore(ctx, &own, image, containerID(rec.ID))
	if err != nil {
		return nil, err
	}
	restored := time.Now()
	if err := n.ready(ctx, l, rec, oldToken); err != nil {
		n.discard(l)
		return nil, err
	}
	// The split shows where a cold start spends its time.
	n.log.Debug("sandbox launched", "sandbox", rec.ID, "warm", false,
		"restore", restored.Sub(start), "init", time.Since(restored))
	return l, nil
}

// ready puts rec's egress policy on a restored sandbox and hands its envd
// the sandbox's token and environment.
func (n *Node) ready(ctx context.Context, l *live, rec *store.Sandbox, oldToken string) error {
	if err := n.applyPolicy(l.slot, rec); err != nil {
		return err
	}
	token, need := rec.EnvdToken, n.cfg.CodeContextsNeedToken
	return n.agentAt(l.slot.HostAddr).Init(ctx, protocol.Init{
		EnvVars:        rec.EnvVars,
		AccessToken:    &token,
		DefaultUser:    "user",
		DefaultWorkdir: "/home/user",
		// A Cube extension; agents that predate it ignore it.
		CodeContextsNeedToken: &need,
	}, oldToken)
}

// restore starts image as container cid in a fresh network slot.
func (n *Node) restore(ctx context.Context, tpl *store.Template, image, cid string) (l *live, err error) {
	if err := n.verifyImage(tpl, image); err != nil {
		return nil, err
	}
	slot, err := n.slots.Acquire(ctx)
	if errors.Is(err, netslot.ErrExhausted) {
		return nil, cube.Errorf(cube.Capacity, "no free network slot: kill or pause sandboxes").WithRetryAfter(time.Second)
	}
	if err != nil {
		return nil, fmt.Errorf("network slot: %w", err)
	}
	sb, err := n.rt.Restore(ctx, image, Spec(tpl, cid, slot.NetNS))
	if err != nil {
		n.release(slot)
		return nil, fmt.Errorf("restore sandbox from %s: %w", tpl.ID, err)
	}
	return &live{sb: sb, slot: slot}, nil
}

// discard kills a container that never became a sandbox and frees its slot.
func (n *Node) discard(l *live) { n.retire(l) }

// containerID names the runsc container of a sandbox. A sandbox that is
// rolled back or resumed gets a new container, so the name carries a
// generation suffix.
func containerID(sandboxID string) string {
	return sandboxID + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

// verifyImage checks a checkpoint against its recorded checksum before a
// restore is attempted, so a damaged image is reported as such.
func (n *Node) verifyImage(tpl *store.Template, image string) error {
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

func (n *Node) checkCapacity(ctx context.Context) error {
	all, err := n.store.Sandboxes().List(ctx)
	if err != nil {
		return err
	}
	if len(all) >= n.cfg.MaxSandboxes {
		return cube.Errorf(cube.Capacity, "sandbox limit of %d reached: kill sandboxes or raise --max-sandboxes", n.cfg.MaxSandboxes).WithRetryAfter(time.Second)
	}
	return nil
}

// record loads a sandbox's record; unknown → NotFound.
func (n *Node) record(ctx context.Context, sandboxID string) (*store.Sandbox, error) {
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (rec.State == store.Creating || rec.State == store.Killing)) {
		return nil, cube.Errorf(cube.NotFound, "sandbox %q not found", sandboxID)
	}
	return rec, err
}

// view is the API's picture of a record.
func (n *Node) view(rec *store.Sandbox) *cube.Sandbox {
	state := cube.StateRunning
	if rec.State == store.Paused || rec.State == store.Pausing {
		state = cube.StatePaused
	}
	netw := network(rec)
	return &cube.Sandbox{
		ID: rec.ID, TemplateID: rec.TemplateID, Alias: rec.Alias, EnvdVersion: n.cfg.EnvdVersion,
		EnvdAccessToken: rec.EnvdToken, TrafficAccessToken: rec.TrafficToken, State: state,
		StartedAt: rec.StartedAt, EndAt: rec.EndAt, CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB,
		DiskSizeMB: rec.DiskSizeMB, Metadata: rec.Metadata, Network: netw,
		AutoPause: rec.AutoPause, AutoResume: rec.AutoResume,
	}
}

// GetSandbox returns one sandbox.
func (n *Node) GetSandbox(ctx context.Context, sandboxID string) (*cube.Sandbox, error) {
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return n.view(rec), nil
}

// ListSandboxes returns the sandboxes matching f.
func (n *Node) ListSandboxes(ctx context.Context, f cube.ListFilter) ([]cube.Sandbox, error) {
	all, err := n.store.Sandboxes().List(ctx, string(store.Running), string(store.Paused), string(store.Pausing), string(store.Resuming))
	if err != nil {
		return nil, err
	}
	var out []cube.Sandbox
	for _, rec := range all {
		v := n.view(rec)
		if f.Matches(v) {
			out = append(out, *v)
		}
	}
	return out, nil
}

// CountSandboxes feeds the by-state gauge.
func (n *Node) CountSandboxes(ctx context.Context) (map[cube.SandboxState]int, error) {
	list, err := n.ListSandboxes(ctx, cube.ListFilter{})
	if err != nil {
		return nil, err
	}
	out := map[cube.SandboxState]int{cube.StateRunning: 0, cube.StatePaused: 0}
	for _, s := range list {
		out[s.State]++
	}
	return out, nil
}

// KillSandbox destroys a sandbox, running or paused.
func (n *Node) KillSandbox(ctx context.Context, sandboxID string) error {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return err
	}
	return n.destroy(ctx, rec, "killed")
}

// destroy removes everything a sandbox holds. The caller holds its lock.
// The sandbox is recorded as killing first: from then on it is not found,
// and the reconciler completes a delete a crash interrupted.
func (n *Node) destroy(ctx context.Context, rec *store.Sandbox, why string) error {
	rec.State = store.Killing
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	fault.Point(fault.SandboxDeleteAfterIntent)
	n.mu.Lock()
	l := n.live[rec.ID]
	delete(n.live, rec.ID)
	n.mu.Unlock()
	if l != nil {
		n.retire(l)
	} else if rec.ContainerID != "" {
		n.rt.Remove(context.Background(), rec.ContainerID)
	}
	fault.Point(fault.SandboxDeleteAfterStop)
	os.RemoveAll(n.sandboxDir(rec.ID))
	fault.Point(fault.SandboxDeleteAfterRemove)
	if err := n.store.Sandboxes().Delete(context.Background(), rec.ID); err != nil {
		return err
	}
	n.store.DeleteEvents(context.Background(), rec.ID)
	n.log.Info("sandbox removed", "sandbox", rec.ID, "why", why)
	return nil
}

// SetTimeout moves a sandbox's end time to now+timeout (never earlier when
// extendOnly).
func (n *Node) SetTimeout(ctx context.Context, sandboxID string, timeout time.Duration, extendOnly bool) error {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return err
	}
	end := time.Now().UTC().Add(timeout)
	if extendOnly && end.Before(rec.EndAt) {
		return nil
	}
	rec.EndAt = end
	return n.store.Sandboxes().Put(ctx, rec)
}

// ConnectSandbox returns a running sandbox and extends its end time.
func (n *Node) ConnectSandbox(ctx context.Context, sandboxID string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, false, err
	}
	resumed := false
	switch rec.State {
	case store.Running:
		if req.RequirePaused {
			return nil, false, cube.Errorf(cube.Conflict, "sandbox %q is already running", sandboxID)
		}
	case store.Paused:
		if err := n.resume(ctx, rec); err != nil {
			return nil, false, err
		}
		resumed = true
	default:
		return nil, false, cube.Errorf(cube.Conflict, "sandbox %q is %s", sandboxID, rec.State)
	}
	if req.AutoPause != nil {
		rec.AutoPause = *req.AutoPause
	}
	if end := time.Now().UTC().Add(req.Timeout); end.After(rec.EndAt) {
		rec.EndAt = end
	}
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return nil, false, err
	}
	return n.view(rec), resumed, nil
}

// Resolve maps a proxied request to the sandbox port behind it. A running
// sandbox is answered from memory, since every proxied request asks; the
// store is read only for the others. Resolve changes nothing: a paused
// sandbox that may auto-resume is reported as such, with its traffic token,
// and woken by Resume once the proxy has checked the request.
func (n *Node) Resolve(ctx context.Context, sandboxID string, port int) (cube.Target, error) {
	n.mu.Lock()
	l := n.live[sandboxID]
	if l != nil && !l.frozen {
		t := cube.Target{
			Addr:               net.JoinHostPort(l.slot.HostAddr.String(), strconv.Itoa(port)),
			Upstream:           l.sb.ID(),
			TrafficAccessToken: l.trafficToken,
			MaskRequestHost:    l.maskHost,
		}
		n.mu.Unlock()
		return t, nil
	}
	n.mu.Unlock()
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", sandboxID)
	}
	if err != nil {
		return cube.Target{}, fmt.Errorf("sandbox %q cannot be looked up: %v", sandboxID, err)
	}
	switch {
	case rec.State == store.Paused && rec.AutoResume:
		return cube.Target{Paused: true, TrafficAccessToken: rec.TrafficToken}, nil
	case rec.State != store.Running:
		return cube.Target{}, fmt.Errorf("sandbox %q is %s", sandboxID, rec.State)
	}
	netw := network(rec)
	return cube.Target{
		Addr:               net.JoinHostPort(rec.HostAddr, strconv.Itoa(port)),
		Upstream:           rec.ContainerID,
		TrafficAccessToken: rec.TrafficToken,
		MaskRequestHost:    netw.MaskRequestHost,
	}, nil
}

// Resume wakes a paused sandbox whose lifecycle allows auto-resume, for a
// proxied request the proxy has authorised, and resolves the port again.
func (n *Node) Resume(ctx context.Context, sandboxID string, port int) (cube.Target, error) {
	rec, err := n.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return cube.Target{}, cube.Errorf(cube.NotFound, "sandbox %q not found", sandboxID)
	}
	if err != nil {
		return cube.Target{}, fmt.Errorf("sandbox %q cannot be looked up: %v", sandboxID, err)
	}
	if rec.State == store.Paused {
		if !rec.AutoResume {
			return cube.Target{}, fmt.Errorf("sandbox %q is %s", sandboxID, rec.State)
		}
		if _, _, err := n.ConnectSandbox(ctx, sandboxID, cube.ConnectRequest{Timeout: max(rec.Timeout, time.Minute)}); err != nil {
			return cube.Target{}, err
		}
	}
	t, err := n.Resolve(ctx, sandboxID, port)
	if err == nil && t.Paused {
		// Paused again before the request got through.
		return cube.Target{}, fmt.Errorf("sandbox %q is paused", sandboxID)
	}
	return t, err
}

// SandboxMetrics returns a current resource sample of a running sandbox.
func (n *Node) SandboxMetrics(ctx context.Context, sandboxID string, start, end time.Time) ([]cube.Metric, error) {
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	l := n.live[sandboxID]
	n.mu.Unlock()
	if l == nil {
		return []cube.Metric{}, nil
	}
	st, err := l.sb.Stats(ctx)
	if err != nil {
		return nil, fmt.Errorf("read sandbox stats: %w", err)
	}
	now := time.Now()
	n.mu.Lock()
	pct := 0.0
	if !l.cpuAt.IsZero() {
		if dt := now.Sub(l.cpuAt); dt > 0 {
			pct = 100 * float64(st.CPUTime-l.cpuTime) / float64(dt)
		}
	} else if up := now.Sub(rec.StartedAt); up > 0 {
		pct = 100 * float64(st.CPUTime) / float64(up)
	}
	l.cpuAt, l.cpuTime = now, st.CPUTime
	n.mu.Unlock()
	cpus := max(rec.CPUCount, 1)
	m := cube.Metric{
		Time: now.UTC(), CPUCount: cpus, CPUUsedPct: min(pct/float64(cpus), 100),
		MemUsed: int64(st.MemoryBytes), MemTotal: int64(rec.MemoryMB) << 20,
		DiskTotal: int64(rec.DiskSizeMB) << 20,
	}
	// The writable layer lives in the sandbox's memory; envd sees its use.
	if d, err := n.agentAt(l.slot.HostAddr).Metrics(ctx, rec.EnvdToken); err == nil {
		m.DiskUsed, m.DiskTotal, m.MemCache = int64(d.DiskUsed), int64(d.DiskTotal), int64(d.MemCache)
	}
	if (!start.IsZero() && now.Before(start)) || (!end.IsZero() && now.After(end.Add(time.Second))) {
		return []cube.Metric{}, nil
	}
	return []cube.Metric{m}, nil
}

// policyOf is the egress policy a sandbox's network settings ask for.
func policyOf(nw cube.Network) egress.Policy {
	return egress.Policy{
		AllowInternet: nw.AllowInternetAccess == nil || *nw.AllowInternetAccess,
		AllowOut:      nw.AllowOut,
		DenyOut:       nw.DenyOut,
	}
}

// network is the network settings recorded with a sandbox.
func network(rec *store.Sandbox) cube.Network {
	var nw cube.Network
	json.Unmarshal(rec.Network, &nw)
	return nw
}

// applyPolicy puts rec's egress policy on its slot: before the user's
// code can run, and again after an adoption.
func (n *Node) applyPolicy(slot *netslot.Slot, rec *store.Sandbox) error {
	if n.cfg.Egress == nil {
		return nil
	}
	if err := n.cfg.Egress.Apply(slot, policyOf(network(rec))); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	return nil
}

// UpdateNetwork replaces a running sandbox's egress policy, live.
func (n *Node) UpdateNetwork(ctx context.Context, sandboxID string, nw cube.Network) error {
	if err := egress.Validate(policyOf(nw)); err != nil {
		return cube.Errorf(cube.Invalid, "network: %v", err).WithField("network")
	}
	unlock := n.lock(sandboxID)
	defer unlock()
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return err
	}
	old := network(rec)
	// Only the egress part is replaced; inbound settings stay.
	old.AllowInternetAccess, old.AllowOut, old.DenyOut = nw.AllowInternetAccess, nw.AllowOut, nw.DenyOut
	if rec.Network, err = json.Marshal(old); err != nil {
		return err
	}
	n.mu.Lock()
	l := n.live[sandboxID]
	n.mu.Unlock()
	if l != nil {
		if err := n.applyPolicy(l.slot, rec); err != nil {
			return err
		}
	}
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return err
	}
	n.event(sandboxID, "info", "network policy replaced")
	return nil
}
