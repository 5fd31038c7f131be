package node

import (
	"context"
	"fmt"

	"cube/internal/cube"
	"cube/internal/fault"
	"cube/internal/id"
	"cube/internal/store"
)

// RollbackSandbox returns a sandbox, in place, to a snapshot it took: its
// id, tokens, metadata, end time and address stay. The current container
// is replaced only once the snapshot's is running, so a failed rollback
// leaves the sandbox as it was; the replaced one is removed after the
// answer.
func (n *Node) RollbackSandbox(ctx context.Context, sandboxID, snapshotID string) (*cube.Rollback, error) {
	sb, rec, err := n.open(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	defer sb.mu.Unlock()
	snap, err := n.TeamTemplate(ctx, rec.Team, snapshotID)
	if err != nil {
		return nil, err
	}
	if snap.Status != store.TemplateReady {
		return nil, cube.Errorf(cube.Conflict, "snapshot %q is %s, not ready", snapshotID, snap.Status)
	}
	if snap.SourceSandbox != sandboxID {
		return nil, cube.Errorf(cube.Forbidden, "snapshot %q was not taken from sandbox %q; a sandbox rolls back only to its own snapshots", snapshotID, sandboxID)
	}
	if err := sb.requireState("rollback", stateRunning); err != nil {
		return nil, err
	}
	box, err := n.launch(ctx, rec, snap, snap.Checkpoint, snap.EnvdToken, false)
	if err != nil {
		return nil, fmt.Errorf("rollback: %w", err)
	}
	var c cleanup
	defer n.cleanUp(&c, "rollback", "sandbox", sandboxID)
	c.Add(func() error { return n.retire(box) })
	fault.Point(fault.RollbackAfterRestore)
	old := sb.box
	if err := sb.attach(ctx, rec, box); err != nil {
		return nil, err
	}
	c.Release()
	fault.Point(fault.RollbackAfterRecord)
	if old != nil {
		n.discardLater(old, sandboxID)
	}
	n.event(sandboxID, "info", "rolled back to %s", snap.ID)
	return &cube.Rollback{OperationID: id.New("op-", 12), Status: "completed"}, nil
}
