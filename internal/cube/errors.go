package cube

import (
	"errors"
	"fmt"
	"time"
)

// Kind says why an operation failed, in terms of the domain: what the
// caller may do about it (fix the request, wait, free space, pick another
// name). Transports choose their own answer for each kind; the HTTP layer
// maps them to E2B status codes in one table.
type Kind int

// The kinds the core reports. The zero Kind means "no kind": an internal
// failure, which transports report as such with the error's text.
const (
	// NotFound: the sandbox, template, snapshot or build job does not exist.
	NotFound Kind = iota + 1
	// Conflict: the object is in the wrong state for the operation (already
	// paused, still building) or a name is taken.
	Conflict
	// Invalid: the request itself is wrong; Field names the part, when one
	// part is to blame.
	Invalid
	// Forbidden: the operation is refused on this object whatever its state
	// (rolling back to another sandbox's snapshot).
	Forbidden
	// Capacity: the host runs as much as it may (sandboxes, network slots,
	// uploads at once); RetryAfter says when trying again is worth it.
	Capacity
	// DiskFull: the host's disk has no room for what the operation writes.
	DiskFull
	// Damaged: a stored image fails its checksum; it is kept for inspection
	// and nothing is started from it.
	Damaged
	// TooLarge: the input exceeds a configured size limit.
	TooLarge
	// Unavailable: the service is shutting down and takes no new work.
	Unavailable
	// Unsupported: this server does not implement the operation.
	Unsupported
)

// Kinds lists every kind, for tables that must cover them all.
var Kinds = []Kind{NotFound, Conflict, Invalid, Forbidden, Capacity, DiskFull, Damaged, TooLarge, Unavailable, Unsupported}

var kindNames = map[Kind]string{
	NotFound: "not found", Conflict: "conflict", Invalid: "invalid", Forbidden: "forbidden",
	Capacity: "capacity", DiskFull: "disk full", Damaged: "damaged", TooLarge: "too large",
	Unavailable: "unavailable", Unsupported: "unsupported",
}

func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a failure of a known kind. Its message is written for the user
// who made the call (it names the object and what to do), and transports
// show it as it is.
type Error struct {
	Kind    Kind
	Message string
	// RetryAfter, for Capacity and Unavailable, is how long to wait before
	// trying again; zero means no advice.
	RetryAfter time.Duration
	// Field, for Invalid, names the offending part of the request.
	Field string
	// Err is the underlying cause, kept for errors.Is/As and logs.
	Err error
}

// Errorf returns an *Error of kind k with a formatted message. A %w verb in
// format is unwrapped into Err.
func Errorf(k Kind, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Kind: k, Message: err.Error(), Err: errors.Unwrap(err)}
}

func (e *Error) Error() string { return e.Message }

func (e *Error) Unwrap() error { return e.Err }

// WithRetryAfter sets RetryAfter and returns e, for one-line returns.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// WithField sets Field and returns e, for one-line returns.
func (e *Error) WithField(field string) *Error {
	e.Field = field
	return e
}

// KindOf is the Kind of the first *Error in err's chain; Unavailable for
// an outage of something the service depends on (see Outage); zero when
// there is neither.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	var o outage
	if errors.As(err, &o) {
		return Unavailable
	}
	return 0
}

// outage is implemented by the errors of a dependency that is out of
// reach for a while (the state database restarting): the call failed for
// no fault of the caller's and is worth making again after Outage. The
// packages below the core (the store) return such errors without knowing
// this one.
type outage interface {
	error
	Outage() time.Duration
}

// RetryAfterOf is how long the caller of a failed operation should wait
// before trying again: the RetryAfter of the first *Error in err's chain
// when it is Capacity or Unavailable, else an outage's wait, else zero (no
// advice: waiting does not mend the other kinds).
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		if e.Kind == Capacity || e.Kind == Unavailable {
			return e.RetryAfter
		}
		return 0
	}
	var o outage
	if errors.As(err, &o) {
		return o.Outage()
	}
	return 0
}

// ErrNotSupported is what a service may return (wrapped or not) for an
// operation it does not implement yet.
var ErrNotSupported = &Error{Kind: Unsupported, Message: "operation not supported by this server"}

// ErrAnsweredElsewhere is in the chain of a call's error when the request
// the call serves was handed whole to the node holding what it is about,
// which answers it instead (a node of an earlier version, in a cluster
// being upgraded): the node that took the request answers, and records,
// nothing of it.
var ErrAnsweredElsewhere = errors.New("the request is answered by the node that holds what it is about")
