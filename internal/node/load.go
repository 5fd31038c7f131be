package node

import (
	"context"
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

// Load counts this node's sandboxes.
func (n *Node) Load(ctx context.Context) (Load, error) {
	recs, err := n.ownSandboxes(ctx)
	if err != nil {
		return Load{}, err
	}
	var l Load
	for _, rec := range recs {
		switch {
		case recordIn(rec, stateRunning):
			l.Running++
			l.CPUs += rec.CPUCount
			l.MemoryMB += rec.MemoryMB
		case recordIn(rec, stateCreating):
			l.Starting++
		}
		if rec.Slot >= 0 {
			l.HoldingSlots++
		}
	}
	return l, nil
}
