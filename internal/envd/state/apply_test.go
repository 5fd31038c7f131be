package state

import (
	"errors"
	"testing"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/envd/users"
)

// An /init that names the default user again is applied without looking
// the account up; one that names another account is refused if the
// account does not exist.
func TestApplyLooksUpOnlyANewDefaultUser(t *testing.T) {
	const ghost = "cube-no-such-account"
	if _, err := users.Lookup(ghost); !errors.Is(err, users.ErrUnknown) {
		t.Skipf("this machine has an account %q (%v)", ghost, err)
	}
	s := New(nil, ghost, "/")
	if err := s.Apply(protocol.Init{DefaultUser: ghost}, time.Now()); err != nil {
		t.Fatalf("/init naming the default user again: %v", err)
	}
	if err := s.Apply(protocol.Init{DefaultUser: ghost + "-2"}, time.Now()); !errors.Is(err, users.ErrUnknown) {
		t.Fatalf("/init naming an unknown account = %v, want ErrUnknown", err)
	}
	if err := s.Apply(protocol.Init{DefaultUser: users.RootName}, time.Now()); err != nil {
		t.Fatalf("/init naming root: %v", err)
	}
	// root is the default now; the ghost is looked up, and refused.
	if err := s.Apply(protocol.Init{DefaultUser: ghost}, time.Now()); !errors.Is(err, users.ErrUnknown) {
		t.Fatalf("/init naming the unknown former default = %v, want ErrUnknown", err)
	}
}
