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
// A record keeps each state as itself, the paused ones as store.Paused
// with the one it is in (store.PauseState): nodes of other versions share
// the store and read only the state name. Moving is the one state not
// recorded: the record stays paused on disk until the node taking the
// sandbox over writes it, so a crash leaves the sandbox where the record
// says.
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

// stored is how a record names s: its state and, for a paused state,
// which one.
func (s state) stored() (store.SandboxState, store.PauseState) {
	switch s {
	case stateCreating:
		return store.Creating, ""
	case stateRunning:
		return store.Running, ""
	case statePaused:
		return store.Paused, store.PauseFrozen
	case stateWritingOut:
		return store.Paused, store.PauseWritingOut
	case statePausedOnDisk, stateMoving:
		return store.Paused, store.PauseOnDisk
	case stateResuming:
		return store.Resuming, ""
	case stateDeleting:
		return store.Killing, ""
	}
	panic(fmt.Sprintf("node: unknown sandbox state %d", int(s)))
}

// String is the state as users see it in messages: its stored name, one
// for the three paused states as the API shows them.
func (s state) String() string {
	st, _ := s.stored()
	return string(st)
}

// recordAs writes s into rec, both names together so that a record never
// holds a paused state left over from an earlier one.
func recordAs(rec *store.Sandbox, s state) {
	rec.State, rec.Pause = s.stored()
}

// stateOf reads the state a record was left in. The store gives every
// paused record the paused state it is in, those written by other
// versions included. ok is false for a name no version writes.
func stateOf(rec *store.Sandbox) (s state, ok bool) {
	switch rec.State {
	case store.Creating:
		return stateCreating, true
	case store.Running:
		return stateRunning, true
	case store.Paused:
		switch rec.Pause {
		case store.PauseFrozen:
			return statePaused, true
		case store.PauseWritingOut:
			return stateWritingOut, true
		case store.PauseOnDisk:
			return statePausedOnDisk, true
		}
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
