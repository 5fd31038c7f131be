package node

import (
	"context"
	"fmt"
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
	// paused is set while a warm pool keeps the container paused (a
	// snapshot's); readyWarm resumes it.
	paused bool
	// envdToken is the token a warm pool gave the container's envd ahead
	// of any create (keyAhead); a new sandbox that takes the container
	// adopts it. Empty for every other container.
	envdToken string
}

// sandbox is one sandbox this node holds, from its create (or its
// adoption by the reconciler) to its removal, which also drops its lock.
// Each lifecycle method has the same shape: lock, requireState, act
// (registering undos in a cleanup), changeState, save. The caller takes
// the lock (host.open); the method does the rest, so the rules for what a
// sandbox may do next are in its methods and in state.go.
type sandbox struct {
	id string
	// h is what the sandbox acts with: the runtime, store, slots and pools
	// it shares with the node.
	h *host
	// mu is held for a whole lifecycle operation, so kill, pause, resume
	// and snapshot of one sandbox are serialised.
	mu sync.Mutex

	// The fields below are written with both mu and h.mu held,
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
	// endAt is the end time of the record last saved or read: the reaper
	// looks here instead of reading every record (reaper.go).
	endAt time.Time
}

// track registers a sandbox the node now holds and returns it locked.
func (h *host) track(sandboxID string, s state) *sandbox {
	sb := &sandbox{id: sandboxID, h: h, state: s}
	sb.mu.Lock()
	h.mu.Lock()
	h.sandboxes[sandboxID] = sb
	h.mu.Unlock()
	return sb
}

// untrack forgets a removed sandbox, its lock included. The caller holds
// sb.mu; operations waiting for it find the sandbox gone.
func (h *host) untrack(sb *sandbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	sb.gone, sb.box = true, nil
	if h.sandboxes[sb.id] == sb {
		delete(h.sandboxes, sb.id)
	}
}

// get finds a sandbox the node holds, without taking its lock.
func (h *host) get(sandboxID string) *sandbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sandboxes[sandboxID]
}

// lock takes a sandbox's lock for a lifecycle operation; the caller
// unlocks sb.mu. A sandbox the node does not hold is not found.
func (h *host) lock(sandboxID string) (*sandbox, error) {
	h.mu.Lock()
	sb := h.sandboxes[sandboxID]
	h.mu.Unlock()
	if sb == nil {
		return nil, notFound(sandboxID)
	}
	sb.mu.Lock()
	if sb.gone {
		sb.mu.Unlock()
		return nil, notFound(sandboxID)
	}
	return sb, nil
}

// open locks a sandbox and loads its record; the caller unlocks sb.mu.
func (h *host) open(ctx context.Context, sandboxID string) (*sandbox, *store.Sandbox, error) {
	sb, err := h.lock(sandboxID)
	if err != nil {
		return nil, nil, err
	}
	rec, err := h.record(ctx, sandboxID)
	if err != nil {
		sb.mu.Unlock()
		return nil, nil, err
	}
	return sb, rec, nil
}

// notFound is E2B's answer for a sandbox that does not exist, word for
// word: users and tools match on it.
func notFound(sandboxID string) error {
	return cube.Errorf(cube.NotFound, "Sandbox %q doesn't exist or you don't have access to it", sandboxID)
}

// changeState moves a locked sandbox to st, and its record with it; the
// caller saves the record.
func (s *sandbox) changeState(rec *store.Sandbox, st state) {
	s.h.mu.Lock()
	s.state = st
	s.h.mu.Unlock()
	recordAs(rec, st)
}

// setBox gives a locked sandbox its container (nil: none), with what the
// resolver needs of rec.
func (s *sandbox) setBox(box *container, rec *store.Sandbox, nw cube.Network) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	s.box = box
	s.trafficToken, s.maskHost, s.httpsPorts = rec.TrafficToken, nw.MaskRequestHost, nw.HTTPSPorts
	s.envdToken = rec.EnvdToken
	s.cpuAt, s.cpuTime = time.Time{}, 0
	s.endAt = rec.EndAt
}

// save writes a sandbox's record.
func (h *host) save(ctx context.Context, rec *store.Sandbox) error {
	if err := h.store.Sandboxes().Put(ctx, rec); err != nil {
		return fmt.Errorf("record sandbox %s: %w", rec.ID, err)
	}
	h.mu.Lock()
	if sb := h.sandboxes[rec.ID]; sb != nil {
		sb.endAt = rec.EndAt
	}
	h.mu.Unlock()
	return nil
}

// cleanUp runs c's undos after op failed, logging what could not be
// undone with attrs (which name what op was on); it is meant for a defer.
func (h *host) cleanUp(c *cleanup, op string, attrs ...any) {
	if err := c.Clean(); err != nil {
		h.log.Warn(op+": undo after failure", append(attrs, "err", err)...)
	}
}

// discard retires a container, logging what failed; for containers no
// caller waits on (warm ones, replaced ones).
func (h *host) discard(c *container, sandboxID string) {
	if err := h.retire(c); err != nil {
		h.log.Warn("retire container", "sandbox", sandboxID, "container", c.sb.ID(), "err", err)
	}
}

// discardLater discards a container its sandbox no longer runs in, on
// a goroutine of its own: the request that replaced it need not wait for
// its removal. Close waits for it; once Close has begun it is done at
// once. A crash before it is done leaves a container no record names,
// which the reconciler removes.
func (h *host) discardLater(c *container, sandboxID string) {
	if !h.background(func() { h.discard(c, sandboxID) }) {
		h.discard(c, sandboxID)
	}
}

// release returns a network slot to the pool. The egress filter forgets
// the slot first: once released, the slot may be handed to another sandbox
// at once, and a Forget after that would drop the new sandbox's policy.
func (h *host) release(s *netslot.Slot) error {
	if h.cfg.Egress != nil {
		h.cfg.Egress.Forget(s)
	}
	return h.slots.Release(s)
}

func isNotFound(err error) bool { return cube.KindOf(err) == cube.NotFound }
