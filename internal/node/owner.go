package node

import (
	"context"
	"errors"

	"cube/internal/store"
)

// A store may be shared by several nodes (a cluster on PostgreSQL); each
// sandbox record names the node that runs it, and a node reconciles,
// reaps and counts only its own: another node's container, slot and files
// are on another host.

// mine reports whether rec is this node's sandbox. A record without a
// node is, until the reconciler takes it (see takeUnowned).
func (h *host) mine(rec *store.Sandbox) bool {
	return rec.Node == "" || rec.Node == h.cfg.NodeID
}

// ownSandboxes lists this node's sandbox records in the given states (all
// states when none are given), reading no other node's.
func (h *host) ownSandboxes(ctx context.Context, states ...store.SandboxState) ([]*store.Sandbox, error) {
	return h.store.NodeSandboxes(ctx, h.cfg.NodeID, states...)
}

// takeUnowned writes this node's name into the records that have none:
// those a single node wrote before it joined a cluster. Each is taken in
// its own transaction, so two nodes starting at once cannot both take one.
func (h *host) takeUnowned(ctx context.Context) error {
	if h.cfg.NodeID == "" {
		return nil
	}
	all, err := h.store.NodeSandboxes(ctx, "")
	if err != nil {
		return err
	}
	for _, rec := range all {
		if rec.Node != "" {
			continue
		}
		err := h.store.Sandboxes().Update(ctx, rec.ID, func(r *store.Sandbox) error {
			if r.Node == "" {
				r.Node = h.cfg.NodeID
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// Holds reports whether the sandbox is this node's and known in memory
// (running, paused or on its way): in a cluster, calls on such a sandbox
// and its traffic are served here without reading the store.
func (n *Node) Holds(sandboxID string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.sandboxes[sandboxID]
	return ok
}
