package node

import (
	"fmt"
	"slices"
	"time"

	"cube/internal/cube"

	"cube/internal/store"
)

// state is where a sandbox is in its lifecycle. Every lifecycle method
// checks it first (requireState) and moves it on (changeState) in the
// same step as the record, so the rules for which operation may follow
// which are here and in those methods rather than spread across checks
// of record fields.
//
// The store keeps fewer states than the node tells apart: the three
// paused states are all recorded as store.Paused (what differs is whether
// the record names a container, an image in flight or an image on disk),
// which is what lets records written by earlier versions reconcile.
type state int

const (
	// stateCreating: the record is written and the container is being
	// launched. The sandbox is not found until it runs; a crash leaves a
	// record the reconciler removes.
	stateCreating state = iota
	// stateRunning: the container runs in its network slot.
	stateRunning
	// statePaused: the container is frozen in memory, still holding its
	// slot, and resumes in milliseconds; a write-out is scheduled.
	statePaused
	// stateWritingOut: a frozen sandbox is being checkpointed to disk.
	// The record names the image in flight (PauseImageTarget) before the
	// checkpoint starts, so a crash is finished or rolled back.
	stateWritingOut
	// statePausedOnDisk: the sandbox is only its pause image; it holds no
	// container, memory or slot.
	statePausedOnDisk
	// stateResuming: a sandbox paused on disk is being restored from its
	// image; a failure or crash leaves it paused on disk.
	stateResuming
	// stateMoving: a sandbox paused on disk is being handed to another
	// node, which resumes it there (see move.go). Until that node says how
	// it went, or the record says whose it is, nothing else is done to it.
	stateMoving
	// stateDeleting: the sandbox is being removed. It is not found from
	// the moment this is recorded, and the reconciler completes a delete
	// a crash interrupted.
	stateDeleting
)

// running: the container runs.
func (s state) running() bool { return s == stateRunning }

// frozen: paused in memory, its container still there to thaw.
func (s state) frozen() bool { return s == statePaused }

// inMemory: its container runs or is frozen, so its envd answers (or
// will once thawed) without a restore.
func (s state) inMemory() bool { return s == stateRunning || s == statePaused }

// moving: handed to another node, which has not said how it went.
func (s state) moving() bool { return s == stateMoving }

// deleting: being removed, and no longer found.
func (s state) deleting() bool { return s == stateDeleting }

// paused reports whether s is one of the paused states.
func (s state) paused() bool {
	return s == statePaused || s == stateWritingOut || s == statePausedOnDisk || s == stateMoving
}

// stored is the record's name for s.
func (s state) stored() store.SandboxState {
	switch s {
	case stateCreating:
		return store.Creating
	case stateRunning:
		return store.Running
	case statePaused, stateWritingOut, statePausedOnDisk, stateMoving:
		return store.Paused
	case stateResuming:
		return store.Resuming
	case stateDeleting:
		return store.Killing
	}
	panic(fmt.Sprintf("node: unknown sandbox state %d", int(s)))
}

// String is the state as users see it in messages: its stored name.
func (s state) String() string { return string(s.stored()) }

// stateOf reads the state a record was left in, for the reconciler. A
// record names a container while paused in memory, and an image in flight
// while being written out. ok is false for a name no version writes.
func stateOf(rec *store.Sandbox) (s state, ok bool) {
	switch rec.State {
	case store.Creating:
		return stateCreating, true
	case store.Running:
		return stateRunning, true
	case store.Paused:
		switch {
		case rec.PauseImageTarget != "":
			return stateWritingOut, true
		case rec.ContainerID != "":
			return statePaused, true
		}
		return statePausedOnDisk, true
	case store.Resuming:
		return stateResuming, true
	case store.Killing:
		return stateDeleting, true
	}
	return 0, false
}

// requireState refuses op unless the sandbox is in one of allowed, with
// the Conflict message each operation has always given.
func (s *sandbox) requireState(op string, allowed ...state) error {
	if slices.Contains(allowed, s.state) {
		return nil
	}
	if s.state.moving() {
		return cube.Errorf(cube.Conflict, "sandbox %q is moving to another node to resume there; try again in a moment", s.id).WithRetryAfter(2 * time.Second)
	}
	switch op {
	case "rollback":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s; connect to it first", s.id, s.state)
	case "move":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s; only a sandbox paused on disk moves to another node", s.id, s.state)
	case "connect", "kill", "set timeout", "update network":
		return cube.Errorf(cube.Conflict, "sandbox %q is %s", s.id, s.state)
	}
	return cube.Errorf(cube.Conflict, "sandbox %q is %s, not running", s.id, s.state)
}

// recordIn reports whether rec was left in one of states (see stateOf).
func recordIn(rec *store.Sandbox, states ...state) bool {
	s, ok := stateOf(rec)
	return ok && slices.Contains(states, s)
}

// recordPaused reports whether rec was left in one of the paused states.
func recordPaused(rec *store.Sandbox) bool {
	s, ok := stateOf(rec)
	return ok && s.paused()
}
