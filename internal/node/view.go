package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"cube/internal/cube"
	"cube/internal/egress"
	"cube/internal/store"
)

// A sandbox's record is what the API shows of it: this file maps one to
// the other, and the network settings kept in the record to the policy
// they ask for.

// record loads a sandbox's record; unknown, still being created or being
// deleted → NotFound.
func (h *host) record(ctx context.Context, sandboxID string) (*store.Sandbox, error) {
	rec, err := h.store.Sandboxes().Get(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && recordIn(rec, stateCreating, stateDeleting)) {
		return nil, notFound(sandboxID)
	}
	return rec, err
}

// view is the API's picture of a record.
func (h *host) view(rec *store.Sandbox) (*cube.Sandbox, error) {
	state := cube.StateRunning
	if recordPaused(rec) {
		state = cube.StatePaused
	}
	if !h.mine(rec) && h.cfg.PeerAlive != nil && !h.cfg.PeerAlive(rec.Node) {
		state = cube.StateLost
	}
	netw, err := network(rec)
	if err != nil {
		return nil, err
	}
	return &cube.Sandbox{
		ID: rec.ID, Team: rec.Team, TemplateID: rec.TemplateID, Node: cmp.Or(rec.Node, h.cfg.NodeID), Alias: rec.Alias, EnvdVersion: h.cfg.EnvdVersion,
		EnvdAccessToken: rec.EnvdToken, TrafficAccessToken: rec.TrafficToken, State: state,
		StartedAt: rec.StartedAt, EndAt: rec.EndAt, CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB,
		DiskSizeMB: rec.DiskSizeMB, Metadata: rec.Metadata, Network: netw,
		AutoPause: rec.AutoPause, AutoResume: rec.AutoResume, VolumeMounts: mountsView(rec.Boot),
	}, nil
}

// GetSandbox returns one sandbox.
func (n *Node) GetSandbox(ctx context.Context, sandboxID string) (*cube.Sandbox, error) {
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return n.view(rec)
}

// listed are the record states a list reads: store.Paused is each of
// the paused states.
var listed = []string{string(store.Running), string(store.Paused), string(store.Resuming)}

// ListSandboxes returns the sandboxes matching f, reading only its
// team's records when it names one.
func (n *Node) ListSandboxes(ctx context.Context, f cube.ListFilter) ([]cube.Sandbox, error) {
	out, _, err := n.listPage(ctx, f, store.PageQuery{Team: f.Team, States: listed, Asc: true}, 0)
	return out, err
}

// ListSandboxPage returns one page of the sandboxes matching f in start
// order, read by the store's index from where the last page ended.
func (n *Node) ListSandboxPage(ctx context.Context, f cube.ListFilter, p cube.Page) ([]cube.Sandbox, *cube.Cursor, error) {
	q := store.PageQuery{Team: f.Team, States: listed, Since: p.Since, Asc: p.Asc}
	if p.After != nil {
		q.AfterSeq, q.AfterID = p.After.Time.UnixNano(), p.After.ID
	}
	return n.listPage(ctx, f, q, max(p.Limit, 1))
}

// listPage reads up to limit sandboxes (0: all) that q selects and f
// keeps, and the cursor after them when more follow.
func (n *Node) listPage(ctx context.Context, f cube.ListFilter, q store.PageQuery, limit int) ([]cube.Sandbox, *cube.Cursor, error) {
	var out []cube.Sandbox
	var bad error
	recs, last, more, err := n.store.SandboxPage(ctx, q, limit, func(rec *store.Sandbox) bool {
		v, err := n.view(rec)
		if err != nil {
			bad = cmp.Or(bad, err)
			return false
		}
		if !f.Matches(v) {
			return false
		}
		out = append(out, *v)
		return true
	})
	if err != nil {
		return nil, nil, err
	}
	if bad != nil {
		return nil, nil, bad
	}
	out = out[:len(recs)] // the one kept past the page is not in it
	if !more || len(recs) == 0 {
		return out, nil, nil
	}
	return out, &cube.Cursor{Time: time.Unix(0, last), ID: recs[len(recs)-1].ID}, nil
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

// policyOf is the egress policy a sandbox's network settings ask for.
func policyOf(nw cube.Network) egress.Policy {
	return egress.Policy{
		AllowInternet: nw.AllowInternetAccess == nil || *nw.AllowInternetAccess,
		AllowOut:      nw.AllowOut,
		DenyOut:       nw.DenyOut,
		Rules:         egressRules(nw.Rules),
	}
}

// network is the network settings recorded with a sandbox. Settings that
// do not decode are an error: read as empty, they would open a sandbox's
// egress that its create closed.
func network(rec *store.Sandbox) (cube.Network, error) {
	var nw cube.Network
	if len(rec.Network) == 0 {
		return nw, nil // recorded without settings: the defaults
	}
	if err := json.Unmarshal(rec.Network, &nw); err != nil {
		return cube.Network{}, fmt.Errorf("sandbox %s: stored network settings do not decode: %w", rec.ID, err)
	}
	return nw, nil
}
