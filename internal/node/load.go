package node

import (
	"context"

	"cube/internal/store"
)

// Load is what this node's sandboxes hold, for its heartbeat and the
// nodes API.
type Load struct {
	// Running and Starting count sandboxes; HoldingSlots those that hold a
	// network slot (running, or paused but still in memory).
	Running, Starting, HoldingSlots int
	// CPUs and MemoryMB are the limits of the running ones, summed.
	CPUs, MemoryMB int
}

// Load counts this node's sandboxes, in the database (store.NodeLoad):
// the heartbeat asks every 2 s, and the node's rows are totalled where
// they are rather than read and decoded here.
func (n *Node) Load(ctx context.Context) (Load, error) {
	nl, err := n.store.NodeLoad(ctx, n.cfg.NodeID)
	if err != nil {
		return Load{}, err
	}
	return Load{
		Running: nl.Count[store.Running], Starting: nl.Count[store.Creating], HoldingSlots: nl.HoldingSlots,
		CPUs: nl.CPUs, MemoryMB: nl.MemoryMB,
	}, nil
}
