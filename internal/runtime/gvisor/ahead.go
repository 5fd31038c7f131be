package gvisor

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"cube/internal/runtime"
)

// Restores started ahead. A restore into a prepared container spent
// ≈8 ms in runsc before the sandbox had its image (a debug log of one
// rollback): the start of a ≈100 MB binary (3.9 ms of Go runtime start-up
// alone), loading the container, scraping the sandbox's network namespace
// and handing the sandbox its links. None of it depends on the image, so
// Prepare starts that restore at once with --await-image
// (scripts/runsc-patches/0009-restore-await-image.patch):
// runsc does all of it and waits on its stdin. The restore writes the
// image there and waits for runsc to finish; a container killed unused
// closes stdin, and runsc exits leaving it as it is. A server that dies
// closes stdin too, so nothing waits on for good.

// awaiting is a runsc restore started ahead, waiting for its image.
type awaiting struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// done is closed once runsc has exited, with err its exit.
	done chan struct{}
	err  error
}

// restoreAhead starts the restore of the prepared container spec.ID, with
// bundle dir, ahead of its image. Its output goes to the container's
// console, as that of the restore would. Prepared in the background, it
// runs with the background scheduling until promoted.
func (r *Runtime) restoreAhead(ctx context.Context, spec runtime.Spec, dir string) (*awaiting, error) {
	w, err := consoleWriter(dir, spec.ID)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	// Its life is the container's, not the caller's.
	cmd := r.runscFor(spec.ID).Command(context.Background(), &spec,
		"restore", "--await-image", "--detach", "--background", "--bundle", dir, spec.ID)
	cmd.Stdout, cmd.Stderr = w, w
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := r.startCmd(ctx, cmd); err != nil {
		stdin.Close()
		return nil, err
	}
	a := &awaiting{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		a.err = cmd.Wait()
		close(a.done)
	}()
	return a, nil
}

// restore names image and its parents to runsc and waits until it has
// restored the container, or failed to, or ctx ends (runsc is killed
// then). runsc's own failure is its exit; its words are on the console.
func (a *awaiting) restore(ctx context.Context, image string, parents []string) error {
	lines := append([]string{image}, parents...)
	for _, l := range lines {
		if l == "" || strings.ContainsRune(l, '\n') {
			a.cancel()
			return fmt.Errorf("image directory %q cannot be named to runsc", l)
		}
	}
	_, werr := io.WriteString(a.stdin, strings.Join(lines, "\n")+"\n")
	a.stdin.Close()
	select {
	case <-a.done:
	case <-ctx.Done():
		a.cmd.Process.Kill()
		<-a.done
		return ctx.Err()
	}
	// A runsc that failed before it read its stdin failed the write too;
	// its exit says why.
	if a.err != nil {
		return a.err
	}
	return werr
}

// cancelWait bounds how long a restore started ahead takes to notice that
// no image comes before it is killed.
const cancelWait = 5 * time.Second

// cancel ends a restore that no image came for: runsc reads EOF and
// exits, leaving the container as it is.
func (a *awaiting) cancel() {
	a.stdin.Close()
	select {
	case <-a.done:
	case <-time.After(cancelWait):
		a.cmd.Process.Kill()
		<-a.done
	}
}

// exited reports whether runsc has exited already: killed, or failed
// before it could wait for an image.
func (a *awaiting) exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// promote schedules every thread of the waiting runsc normally, as
// Runtime.promote does for the container's: runsc is not in the
// container's cgroup, where those are found, so its threads are read from
// /proc.
func (a *awaiting) promote() error {
	pid := strconv.Itoa(a.cmd.Process.Pid)
	err := promoteThreads("runsc restore "+pid, func() ([]string, error) {
		tasks, err := os.ReadDir("/proc/" + pid + "/task")
		tids := make([]string, len(tasks))
		for i, t := range tasks {
			tids[i] = t.Name()
		}
		return tids, err
	})
	if err != nil && a.exited() {
		return nil // the restore says how it ended
	}
	return err
}
