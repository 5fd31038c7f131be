package cube

import (
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"
)

func TestKindOf(t *testing.T) {
	e := Errorf(DiskFull, "snapshot of %s: %w", "sb1", fs.ErrExist)
	if e.Error() != "snapshot of sb1: file already exists" || !errors.Is(e, fs.ErrExist) {
		t.Errorf("Errorf = %q, unwraps to ErrExist: %v", e, errors.Is(e, fs.ErrExist))
	}
	for _, c := range []struct {
		err  error
		want Kind
	}{
		{e, DiskFull},
		{fmt.Errorf("node: %w", Errorf(Conflict, "paused")), Conflict},
		{fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", Errorf(Invalid, "network").WithField("network"))), Invalid},
		{errors.New("runsc exploded"), 0},
		{nil, 0},
		{ErrNotSupported, Unsupported},
		{fmt.Errorf("list: %w", dbDown{}), Unavailable},
	} {
		if got := KindOf(c.err); got != c.want {
			t.Errorf("KindOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestKindsAreNamed(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range Kinds {
		s := k.String()
		if s == fmt.Sprintf("Kind(%d)", int(k)) || seen[s] {
			t.Errorf("kind %d has no name of its own: %q", int(k), s)
		}
		seen[s] = true
	}
}

// dbDown is an outage as the store reports one.
type dbDown struct{}

func (dbDown) Error() string         { return "the state database is out of reach" }
func (dbDown) Outage() time.Duration { return 5 * time.Second }

func TestRetryAfterOf(t *testing.T) {
	for _, c := range []struct {
		err  error
		want time.Duration
	}{
		{Errorf(Capacity, "full").WithRetryAfter(time.Second), time.Second},
		{fmt.Errorf("place: %w", Errorf(Unavailable, "draining").WithRetryAfter(2*time.Second)), 2 * time.Second},
		{Errorf(Conflict, "paused").WithRetryAfter(time.Second), 0},
		{fmt.Errorf("get: %w", dbDown{}), 5 * time.Second},
		{errors.New("runsc exploded"), 0},
	} {
		if got := RetryAfterOf(c.err); got != c.want {
			t.Errorf("RetryAfterOf(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
