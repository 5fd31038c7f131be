package node

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"cube/internal/cube"
	"cube/internal/netslot"
	"cube/internal/quota"
	"cube/internal/store"
)

// The settings of a sandbox that change while it lives: its end time,
// its lifecycle flags on connect, and its egress policy.

// SetTimeout moves a sandbox's end time to now+timeout (never earlier when
// extendOnly).
func (n *Node) SetTimeout(ctx context.Context, sandboxID string, timeout time.Duration, extendOnly bool) error {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer sb.mu.Unlock()
	if err := sb.requireState("set timeout", stateRunning, statePaused, statePausedOnDisk); err != nil {
		return err
	}
	if err := n.cfg.Quota.Timeout(ctx, rec.Team, timeout); err != nil {
		return err
	}
	end := time.Now().UTC().Add(timeout)
	if extendOnly && end.Before(rec.EndAt) {
		return nil
	}
	rec.EndAt = end
	return n.save(ctx, rec)
}

// ConnectSandbox returns a running sandbox and extends its end time. A
// request to move the sandbox here (req.MoveFrom) takes it over from its
// node first.
func (n *Node) ConnectSandbox(ctx context.Context, sandboxID string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	if from := req.MoveFrom; from != "" && from != n.cfg.NodeID && !n.Holds(sandboxID) {
		if err := n.adoptMoved(ctx, sandboxID, from); err != nil {
			return nil, false, err
		}
	}
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return nil, false, err
	}
	defer sb.mu.Unlock()
	if err := sb.requireState("connect", stateRunning, statePaused, statePausedOnDisk); err != nil {
		return nil, false, err
	}
	resumed := false
	if sb.state.running() {
		if req.RequirePaused {
			return nil, false, cube.Errorf(cube.Conflict, "sandbox %q is already running", sandboxID)
		}
	} else {
		if err := n.cfg.Quota.Timeout(ctx, rec.Team, req.Timeout); err != nil {
			return nil, false, err
		}
		release, err := n.cfg.Quota.Start(ctx, rec.Team, quota.Sandboxes{Count: 1, VCPUs: max(rec.CPUCount, 1), MemoryMB: rec.MemoryMB})
		if err != nil {
			return nil, false, err
		}
		err = sb.resume(ctx, rec)
		release()
		if err != nil {
			return nil, false, err
		}
		resumed = true
	}
	if req.AutoPause != nil {
		rec.AutoPause = *req.AutoPause
	}
	if end := time.Now().UTC().Add(req.Timeout); end.After(rec.EndAt) {
		rec.EndAt = end
	}
	if err := n.save(ctx, rec); err != nil {
		return nil, false, err
	}
	v, err := n.view(rec)
	if err != nil {
		return nil, false, err
	}
	return v, resumed, nil
}

// applyPolicy puts rec's egress policy on its slot: before the user's
// code can run, and again after an adoption.
func (h *host) applyPolicy(slot *netslot.Slot, rec *store.Sandbox) error {
	if h.cfg.Egress == nil {
		return nil
	}
	nw, err := network(rec)
	if err != nil {
		return err
	}
	p := policyOf(nw)
	p.Owner, p.Team = rec.ID, sandboxTeam(rec.Team)
	if err := h.cfg.Egress.Apply(slot, p); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	return nil
}

// UpdateNetwork replaces a running sandbox's egress policy, live.
func (n *Node) UpdateNetwork(ctx context.Context, sandboxID string, nw cube.Network) error {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return err
	}
	defer sb.mu.Unlock()
	if err := n.checkNetwork(rec.Team, nw); err != nil {
		return err
	}
	if err := sb.requireState("update network", stateRunning, statePaused, statePausedOnDisk); err != nil {
		return err
	}
	old, err := network(rec)
	if err != nil {
		return err
	}
	// Only the egress part is replaced; inbound settings stay.
	old.AllowInternetAccess, old.AllowOut, old.DenyOut, old.Rules = nw.AllowInternetAccess, nw.AllowOut, nw.DenyOut, nw.Rules
	if rec.Network, err = json.Marshal(old); err != nil {
		return err
	}
	if box := sb.box; box != nil {
		if err := n.applyPolicy(box.slot, rec); err != nil {
			return err
		}
	}
	if err := n.save(ctx, rec); err != nil {
		return err
	}
	n.event(sandboxID, "info", "network policy replaced")
	return nil
}
