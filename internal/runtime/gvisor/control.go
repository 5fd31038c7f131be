package gvisor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/container"
)

// Pause, resume and stats of a running container are one request each to
// its sandbox's control socket. runsc's CLI makes them by starting a
// process of ≈100 MB that parses its flags, loads the container's state
// file and sends the request: 7 ms (8.5 ms of CPU) before it does
// anything. cube-server sends the same request itself through runsc's own
// Go packages, on the same state root (all that these operations take from
// runsc's flags), so a resume of a frozen sandbox or a metrics read is a
// request, not a process. Everything else stays with the CLI: runsc starts
// and restores sandboxes by re-executing its own binary, and restore,
// checkpoint and delete sent from inside the server have each been tried
// and were followed by sandboxes unreachable on their ports now and then
// (runsc's restore switches the calling thread into the sandbox's network
// namespace; for checkpoint and delete the cause was not found, and a
// template build's sandbox that never answered its probe was the last
// sign). With Debug set every operation goes through the CLI, which writes
// runsc's debug logs.

// quietRunsc keeps runsc's library log (Info and below, to stderr by
// default) out of cube-server's output; failures come back as errors.
var quietRunsc = sync.OnceFunc(func() { log.SetLevel(log.Warning) })

// inProcess reports whether operations on existing containers are sent
// from this process.
func (r *Runtime) inProcess() bool { return !r.cfg.Debug }

// load opens container id's state under the runtime's root, as runsc's
// CLI does with --root. The ID is matched exactly (the CLI would take a
// prefix of another container's): Cube's containers are all roots of
// their sandboxes, which share their IDs.
func (r *Runtime) load(id string) (*container.Container, error) {
	quietRunsc()
	c, err := container.Load(r.cfg.Root, container.FullID{SandboxID: id, ContainerID: id}, container.LoadOpts{Exact: true})
	if err != nil {
		return nil, fmt.Errorf("load container %s: %w", id, err)
	}
	return c, nil
}

// pauseIn and resumeIn are the in-process forms of runsc pause and
// resume.
func (r *Runtime) pauseIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "pause", (*container.Container).Pause)
}

func (r *Runtime) resumeIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "resume", (*container.Container).Resume)
}

// eventIn is the in-process form of runsc events --stats: the sandbox's
// resource usage, CPU from its cgroup where runsc keeps one.
func (r *Runtime) eventIn(ctx context.Context, id string) (boot.Event, error) {
	var ev boot.Event
	err := r.control(ctx, id, "events", func(c *container.Container) error {
		out, err := c.Event()
		if err == nil {
			ev = out.Event
		}
		return err
	})
	if err != nil {
		return boot.Event{}, err
	}
	return ev, nil
}

// controlTimeout bounds an in-process request to a sandbox.
const controlTimeout = 30 * time.Second

// control runs call on container id on its own goroutine, since runsc's
// library takes no context: the caller stops waiting when ctx ends or
// after controlTimeout (a wedged sandbox); the call is then left to finish.
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
