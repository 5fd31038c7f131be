package node

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"cube/internal/cube"
	"cube/internal/netslot"
	"cube/internal/runtime"
	"cube/internal/store"
)

// container is a runsc container in its network slot: what a running or
// frozen sandbox holds of the host, and what a warm one waits with.
type container struct {
	sb   runtime.Sandbox
	slot *netslot.Slot
}

// instance is one sandbox this node holds, from its create (or its
// adoption by the reconciler) to its removal, which also drops its lock.
// Each lifecycle method has the same shape: lock, requireState, act
// (registering undos in a cleanup), changeState, save.
type instance struct {
	id string
	// mu is held for a whole lifecycle operation, so kill, pause, resume
	// and snapshot of one sandbox are serialised.
	mu sync.Mutex

	// The fields below are written with both mu and the node's mu held,
	// and read with either: the resolver and metrics only look.
	state state
	// box is the sandbox's container; nil while it is paused on disk.
	box *container
	// gone is set when the sandbox is removed, for operations that were
	// waiting for mu.
	gone bool
	// trafficToken and maskHost are what the proxy needs of the record on
	// every request; neither changes while the container runs.
	trafficToken, maskHost string
	// httpsPorts are the ports the proxy reaches over TLS.
	httpsPorts []int
	// envdToken finds the sandbox of a signed file URL (FindByToken).
	envdToken string
	// cpu is the last CPU reading, for utilisation between samples.
	cpuAt   time.Time
	cpuTime time.Duration
	// handOvers counts the hand-overs begun (move.go), so that the end of
	// one that failed late cannot end a newer one.
	handOvers uint64
}

// track registers a sandbox the node now holds and returns it locked.
func (n *Node) track(sandboxID string, s state) *instance {
	inst := &instance{id: sandboxID, state: s}
	inst.mu.Lock()
	n.mu.Lock()
	n.sandboxes[sandboxID] = inst
	n.mu.Unlock()
	return inst
}

// untrack forgets a removed sandbox, its lock included. The caller holds
// inst.mu; operations waiting for it find the sandbox gone.
func (n *Node) untrack(inst *instance) {
	n.mu.Lock()
	defer n.mu.Unlock()
	inst.gone, inst.box = true, nil
	if n.sandboxes[inst.id] == inst {
		delete(n.sandboxes, inst.id)
	}
}

// lock takes a sandbox's lock for a lifecycle operation; the caller
// unlocks inst.mu. A sandbox the node does not hold is not found.
func (n *Node) lock(sandboxID string) (*instance, error) {
	n.mu.Lock()
	inst := n.sandboxes[sandboxID]
	n.mu.Unlock()
	if inst == nil {
		return nil, notFound(sandboxID)
	}
	inst.mu.Lock()
	if inst.gone {
		inst.mu.Unlock()
		return nil, notFound(sandboxID)
	}
	return inst, nil
}

// open locks a sandbox and loads its record; the caller unlocks inst.mu.
func (n *Node) open(ctx context.Context, sandboxID string) (*instance, *store.Sandbox, error) {
	inst, err := n.lock(sandboxID)
	if err != nil {
		return nil, nil, err
	}
	rec, err := n.record(ctx, sandboxID)
	if err != nil {
		inst.mu.Unlock()
		return nil, nil, err
	}
	return inst, rec, nil
}

// notFound is E2B's answer for a sandbox that does not exist, word for
// word: users and tools match on it.
func notFound(sandboxID string) error {
	return cube.Errorf(cube.NotFound, "Sandbox %q doesn't exist or you don't have access to it", sandboxID)
}

// requireState refuses op unless the sandbox is in one of allowed, with
// the Conflict message each operation has always given.
func (inst *instance) requireState(op string, allowed ...state) error {
	if slices.Contains(allowed, inst.state) {
		return nil
	}
	if inst.state == stateMoving {
		return cube.Errorf(cube.Conflict, "sandbox %q is moving to another node to resume there; try again in a moment", inst.id).WithRetryAfter(2 * time.Second)
	}
	switch op {
	case "rollback":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s; connect to it first", inst.id, inst.state)
	case "move":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s; only a sandbox paused on disk moves to another node", inst.id, inst.state)
	case "connect", "kill", "set timeout", "update network":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s", inst.id, inst.state)
	}
	return cube.Errorf(cube.Conflict, "sandbox %q is %s, not running", inst.id, inst.state)
}

// changeState moves a locked sandbox to s, and its record with it; the
// caller saves the record.
func (n *Node) changeState(inst *instance, rec *store.Sandbox, s state) {
	n.mu.Lock()
	inst.state = s
	n.mu.Unlock()
	rec.State = s.stored()
}

// setBox gives a locked sandbox its container (nil: none), with what the
// resolver needs of rec.
func (n *Node) setBox(inst *instance, box *container, rec *store.Sandbox, nw cube.Network) {
	n.mu.Lock()
	defer n.mu.Unlock()
	inst.box = box
	inst.trafficToken, inst.maskHost, inst.httpsPorts = rec.TrafficToken, nw.MaskRequestHost, nw.HTTPSPorts
	inst.envdToken = rec.EnvdToken
	inst.cpuAt, inst.cpuTime = time.Time{}, 0
}

// save writes a sandbox's record.
func (n *Node) save(ctx context.Context, rec *store.Sandbox) error {
	if err := n.store.Sandboxes().Put(ctx, rec); err != nil {
		return fmt.Errorf("record sandbox %s: %w", rec.ID, err)
	}
	return nil
}

// cleanUp runs c's undos after op failed, logging what could not be
// undone with attrs (which name what op was on); it is meant for a defer.
func (n *Node) cleanUp(c *cleanup, op string, attrs ...any) {
	if err := c.Clean(); err != nil {
		n.log.Warn(op+": undo after failure", append(attrs, "err", err)...)
	}
}

// discard retires a container, logging what failed; for containers no
// caller waits on (warm ones, replaced ones).
func (n *Node) discard(c *container, sandboxID string) {
	if err := n.retire(c); err != nil {
		n.log.Warn("retire container", "sandbox", sandboxID, "container", c.sb.ID(), "err", err)
	}
}

// release returns a network slot to the pool. The egress filter forgets
// the slot first: once released, the slot may be handed to another sandbox
// at once, and a Forget after that would drop the new sandbox's policy.
func (n *Node) release(s *netslot.Slot) error {
	if n.cfg.Egress != nil {
		n.cfg.Egress.Forget(s)
	}
	return n.slots.Release(s)
}

func isNotFound(err error) bool { return cube.KindOf(err) == cube.NotFound }
