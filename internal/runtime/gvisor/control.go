package gvisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/container"
)

// Pause and resume of a running container are one request each to its
// sandbox's control socket. runsc's CLI makes it by starting a process of
// ≈100 MB that parses its flags, loads the container's state file and
// sends the request, ≈10 ms of CPU and latency; cube-server sends the same
// request itself through runsc's own Go packages, on the same state root
// (all that pause and resume take from runsc's flags), so a resume of a
// frozen sandbox is a request, not a process. Everything else stays with the CLI: runsc starts sandboxes by
// re-executing its own binary, and restore, checkpoint and delete sent
// from inside the server were tried and left sandboxes unreachable on
// their ports now and then (runsc's restore switches the calling thread
// into the sandbox's network namespace; the others were not looked into
// further). With Debug set pause and resume go through the CLI too, which
// writes runsc's debug logs.

// quietRunsc keeps runsc's library log (Info and below, to stderr by
// default) out of cube-server's output; failures come back as errors.
var quietRunsc = sync.OnceFunc(func() { log.SetLevel(log.Warning) })

// inProcess reports whether operations on existing containers are sent
// from this process.
func (r *Runtime) inProcess() bool { return !r.cfg.Debug }

// load opens container id's state under the runtime's root, as runsc's
// CLI does with --root.
func (r *Runtime) load(id string) (*container.Container, error) {
	quietRunsc()
	c, err := container.Load(r.cfg.Root, container.FullID{ContainerID: id}, container.LoadOpts{})
	if err != nil {
		return nil, fmt.Errorf("load container %s: %w", id, err)
	}
	return c, nil
}

// pauseIn and resumeIn are the in-process forms of runsc pause and
// resume. runsc's library takes no context, so the call runs on its own
// goroutine and the caller stops waiting when ctx ends or after
// controlTimeout (a wedged sandbox); the call is then left to finish.
func (r *Runtime) pauseIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "pause", (*container.Container).Pause)
}

func (r *Runtime) resumeIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "resume", (*container.Container).Resume)
}

// controlTimeout bounds an in-process request to a sandbox.
const controlTimeout = 30 * time.Second

func (r *Runtime) control(ctx context.Context, id, op string, call func(*container.Container) error) error {
	done := make(chan error, 1)
	go func() {
		c, err := r.load(id)
		if err == nil {
			err = call(c)
		}
		done <- err
	}()
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("runsc %s %s: %w", op, id, ctx.Err())
	}
}
