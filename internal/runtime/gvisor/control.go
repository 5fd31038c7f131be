package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/control/client"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/state/checkpointfiles"
	"gvisor.dev/gvisor/pkg/state/statefile"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/container"
	runscsandbox "gvisor.dev/gvisor/runsc/sandbox"
)

// Pause, resume, checkpoint and stats of a container are a request to
// its sandbox's control socket (and, for a checkpoint, the image's files).
// runsc's CLI makes them by starting a process of ≈100 MB that parses its
// flags, loads the container's state file and sends the request: 7 ms
// (8.5 ms of CPU) before it does anything. cube-server sends the same
// request itself through runsc's own Go packages, on the same state root
// (all that these operations take from runsc's flags), so a resume of a
// frozen sandbox, a snapshot or a metrics read is a request, not a
// process. Sandboxes are started and restored by the CLI: runsc starts
// them by re-executing its own binary, and its restore switches the
// calling thread into the sandbox's network namespace, which left the
// server's own sockets in the wrong one when tried in-process; a restore
// into a prepared container does that part ahead instead (ahead.go). Deletes
// stay with the CLI too: sent from here they answered 13–25 ms sooner,
// but in create → delete loops the next create was slower in three rounds
// of four (average 31–36 → 47–58 ms), which Cube's create targets
// (docs/BENCHMARKS.md) do not allow. With Debug set every operation goes
// through the CLI, which writes runsc's debug logs.

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
	// runsc's exact load takes the container's lock file, creating it,
	// before it reads the state: a container it has no state for (one
	// deleted already) would be left a lock file for good.
	state := r.stateFile(id)
	if _, err := state.Stat(); err != nil {
		return nil, fmt.Errorf("load container %s: %w", id, err)
	}
	c, err := container.Load(r.cfg.Root, state.ID, container.LoadOpts{Exact: true})
	if err != nil {
		return nil, fmt.Errorf("load container %s: %w", id, err)
	}
	return c, nil
}

// stateFile is runsc's state file of container id, the root of its own
// sandbox.
func (r *Runtime) stateFile(id string) container.StateFile { return stateFileIn(r.cfg.Root, id) }

// stateFileIn is container id's state file under the state root root.
func stateFileIn(root, id string) container.StateFile {
	return container.StateFile{RootDir: root, ID: container.FullID{SandboxID: id, ContainerID: id}}
}

// pauseIn and resumeIn are the in-process forms of runsc pause and
// resume, bounded by controlTimeout: a frozen or running sandbox answers
// them at once, or is wedged.
func (r *Runtime) pauseIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "pause", controlTimeout, (*container.Container).Pause)
}

func (r *Runtime) resumeIn(ctx context.Context, id string) error {
	return r.control(ctx, id, "resume", controlTimeout, (*container.Container).Resume)
}

// eventIn is the in-process form of runsc events --stats: the sandbox's
// resource usage, CPU from its cgroup where runsc keeps one.
func (r *Runtime) eventIn(ctx context.Context, id string) (boot.Event, error) {
	var ev boot.Event
	err := r.control(ctx, id, "events", controlTimeout, func(c *container.Container) error {
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

// checkpointIn is the in-process form of runsc checkpoint
// --compression=none --exclude-committed-zero-pages, with --leave-running
// when leaveRunning and --cow-incremental when incremental: the image's
// three files are created in dir and handed to the sandbox, which writes
// them. Its duration is the size of the sandbox's memory, so only ctx
// bounds it.
func (r *Runtime) checkpointIn(ctx context.Context, id, dir string, leaveRunning, incremental bool) error {
	return r.control(ctx, id, "checkpoint", 0, func(c *container.Container) error {
		switch c.Status {
		case container.Created, container.Running, container.Paused:
		default:
			return fmt.Errorf("cannot checkpoint container %q in state %v", id, c.Status)
		}
		files, err := createImageFiles(dir)
		if err != nil {
			return err
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
		req := saveRequest{
			SaveOpts: control.SaveOpts{
				Metadata:                       statefile.CompressionLevelNone.ToMetadata(),
				AppMFExcludeCommittedZeroPages: true,
				HavePagesFile:                  true,
				Resume:                         leaveRunning,
				ExecOpts:                       control.SaveRestoreExecOpts{ContainerID: id},
			},
			CowIncremental: incremental,
		}
		req.FilePayload.Files = files
		var res checkpointResult
		if err := call(c.Sandbox, boot.ContMgrCheckpoint, &req, &res); err != nil {
			return err
		}
		if r.cfg.PrivateMemory {
			return nil
		}
		// As runsc's checkpoint command does for an image a restore may
		// map: what the sandbox copied, then the image's identity.
		if err := writeCopied(dir, res.CowCopied); err != nil {
			return err
		}
		return writeImageID(dir, res.CowParents)
	})
}

// saveRequest is runsc's checkpoint request with the field Cube's runsc
// patches add (scripts/runsc-patches/0002-cow-incremental.patch); the
// request travels as JSON, with the image's files beside it.
type saveRequest struct {
	control.SaveOpts
	CowIncremental bool `json:"cow_incremental"`
}

// checkpointResult is a patched sandbox's answer to a checkpoint.
type checkpointResult struct {
	// CowParents are the IDs of the images an incremental checkpoint
	// references (0002); CowCopied, by image ID, the [start, end) ranges
	// of those images that the sandbox's writes copied since its restore
	// (0003-cow-eager.patch).
	CowParents []string               `json:"cow_parents"`
	CowCopied  map[string][][2]uint64 `json:"cow_copied,omitempty"`
}

// createImageFiles creates an uncompressed checkpoint's files in dir, in
// the order the sandbox takes them: the kernel's state, the pages'
// metadata, the pages.
func createImageFiles(dir string) ([]*os.File, error) {
	var files []*os.File
	for _, name := range []string{checkpointfiles.StateFileName, checkpointfiles.PagesMetadataFileName, checkpointfiles.PagesFileName} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// call sends one request to sb's control socket. The socket's path is
// reached through an O_PATH descriptor, which connects whatever the
// path's length (a Unix socket address holds at most 107 bytes).
func call(sb *runscsandbox.Sandbox, method string, arg, result any) error {
	if sb == nil {
		return fmt.Errorf("%s: the container has no sandbox", method)
	}
	fd, err := unix.Open(sb.ControlSocketPath, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: control socket of sandbox %s: %w", method, sb.ID, err)
	}
	defer unix.Close(fd)
	conn, err := client.ConnectTo(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return fmt.Errorf("%s: connect to sandbox %s: %w", method, sb.ID, err)
	}
	defer conn.Close()
	return conn.Call(method, arg, result)
}

// controlTimeout bounds an in-process request that a sandbox answers at
// once.
const controlTimeout = 30 * time.Second

// control runs call on container id on its own goroutine, since runsc's
// library takes no context: the caller stops waiting when ctx ends or,
// if timeout is not 0, after it; the call is then left to finish.
func (r *Runtime) control(ctx context.Context, id, op string, timeout time.Duration, call func(*container.Container) error) error {
	done := make(chan error, 1)
	go func() {
		c, err := r.load(id)
		if err == nil {
			err = call(c)
		}
		done <- err
	}()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("runsc %s %s: %w", op, id, ctx.Err())
	}
}
