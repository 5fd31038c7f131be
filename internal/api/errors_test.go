package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"testing"

	"cube/internal/cube"
)

func TestErrorStatus(t *testing.T) {
	e := Errorf(http.StatusInsufficientStorage, "snapshot of %s: %w", "sb1", fs.ErrExist)
	if e.Error() != "snapshot of sb1: file already exists" || !errors.Is(e, fs.ErrExist) {
		t.Errorf("Errorf = %q, unwraps to ErrExist: %v", e, errors.Is(e, fs.ErrExist))
	}
	cases := []struct {
		err  error
		want int
	}{
		{e, 507},
		{fmt.Errorf("node: %w", Errorf(http.StatusConflict, "paused")), 409},
		{fmt.Errorf("boot: %w", context.DeadlineExceeded), 504},
		{errors.New("runsc exploded"), 500},
		{&Error{Status: 42, Message: "nonsense"}, 500},
		{cube.ErrNotSupported, 501},
	}
	for _, c := range cases {
		if got := StatusOf(c.err); got != c.want {
			t.Errorf("StatusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestBackendErrorsReachTheUser(t *testing.T) {
	fake := newFake()
	e := newEnvWith(t, fake, failing{fake})
	e.do("POST", "/v2/sandboxes", `{"templateID":"base"}`).wantError(t, 500, "runsc: exit status 1")
	e.do("GET", "/sandboxes/abc", nil).wantError(t, 504, "deadline")
}

// failing is a backend whose create fails with a plain error and whose get
// runs out of time.
type failing struct{ *fakeBackend }

func (failing) CreateSandbox(context.Context, cube.CreateRequest) (*cube.Sandbox, error) {
	return nil, errors.New("runsc: exit status 1")
}

func (failing) GetSandbox(context.Context, string) (*cube.Sandbox, error) {
	return nil, fmt.Errorf("waiting for envd: %w", context.DeadlineExceeded)
}
