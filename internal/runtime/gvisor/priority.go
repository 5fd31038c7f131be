package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"cube/internal/runtime"
)

// backgroundSched is the scheduling of the runsc commands run for
// background work (runtime.Background) and of every process they leave
// behind: SCHED_IDLE, which runs only on a core nothing else wants and
// gives way at once to a thread of a request that wakes up. On a host
// busy with requests, pools fill later; they cannot help one that is
// short of CPU anyway. Niceness is left alone: gVisor runs its systrap
// stub threads one step nicer than the sentry, and keeps that step.
var backgroundSched = unix.SchedAttr{Policy: unix.SCHED_IDLE}

// cgroupRoot is where the host mounts its cgroup filesystems.
const cgroupRoot = "/sys/fs/cgroup"

// threadsFile returns a function naming the file that lists every thread
// of a container, or nil when the host has no cgroup hierarchy to find
// them in. runsc puts a container's sandbox and gofer, and every process
// they start, in the cgroup ociSpec names (/cube/<id>): under cgroup v2
// its cgroup.threads; under v1 the tasks of its pids hierarchy, which
// exists because Cube always limits pids.
func threadsFile(root string) func(id string) string {
	var fs unix.Statfs_t
	if unix.Statfs(root, &fs) == nil && fs.Type == unix.CGROUP2_SUPER_MAGIC {
		return func(id string) string { return filepath.Join(root, "cube", id, "cgroup.threads") }
	}
	if _, err := os.Stat(filepath.Join(root, "pids")); err == nil {
		return func(id string) string { return filepath.Join(root, "pids", "cube", id, "tasks") }
	}
	return nil
}

// run runs cmd, a runsc command for the container whose threads r finds.
// For background work it runs with backgroundSched, which the sandbox and
// gofer processes runsc starts inherit; a host where they could not be
// promoted again (no cgroups) runs everything with the normal scheduling.
func (r *Runtime) run(ctx context.Context, cmd *exec.Cmd) error {
	if err := r.startCmd(ctx, cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

// startCmd starts cmd as run does, without waiting for it.
func (r *Runtime) startCmd(ctx context.Context, cmd *exec.Cmd) error {
	if !runtime.InBackground(ctx) || r.threads == nil {
		return cmd.Start()
	}
	return startWith(cmd, backgroundSched)
}

// startWith starts cmd with scheduling sched. Linux schedules each thread
// on its own and a child starts with the scheduling of the thread that
// forked it, so cmd is started from a thread locked to a goroutine that
// changed its own first. The thread is never unlocked: it ends with the
// goroutine instead of running others so.
func startWith(cmd *exec.Cmd, sched unix.SchedAttr) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		// Lowering one's own priority needs no privilege; should it
		// fail, cmd merely runs with the normal scheduling.
		unix.SchedSetAttr(0, &sched, 0)
		errc <- cmd.Start()
	}()
	return <-errc
}

// promote schedules every thread of container id normally (SCHED_NORMAL,
// its niceness kept), undoing backgroundSched before the container serves
// a request. It reads the container's threads twice: a thread started
// during the first pass by one not promoted yet is promoted in the
// second, and those started later start from promoted ones.
func (r *Runtime) promote(id string) error {
	if r.threads == nil {
		return nil // nothing was run in the background
	}
	path := r.threads(id)
	return promoteThreads(id, func() ([]string, error) {
		data, err := os.ReadFile(path)
		return strings.Fields(string(data)), err
	})
}

// promoteThreads schedules normally every thread that list names (by TID)
// of what, in two passes, as promote describes.
func promoteThreads(what string, list func() ([]string, error)) error {
	for range 2 {
		tids, err := list()
		if err != nil {
			return fmt.Errorf("threads of %s: %w", what, err)
		}
		for _, f := range tids {
			tid, err := strconv.Atoi(f)
			if err != nil {
				return fmt.Errorf("threads of %s: %q is no thread ID", what, f)
			}
			if err := scheduleNormally(tid); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("promote thread %d of %s: %w", tid, what, err)
			}
		}
	}
	return nil
}

// scheduleNormally gives thread tid SCHED_NORMAL at the niceness it has.
func scheduleNormally(tid int) error {
	attr, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return err
	}
	if attr.Policy == unix.SCHED_NORMAL {
		return nil
	}
	attr.Policy, attr.Flags = unix.SCHED_NORMAL, 0
	return unix.SchedSetAttr(tid, attr, 0)
}
