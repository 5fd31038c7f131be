// Package reap collects the exit status of every child of envd. As PID 1 of
// a sandbox envd inherits every orphaned process, whose zombies only it can
// clear; but a blanket wait4(-1) would also swallow the statuses of the
// processes envd started on purpose. The Reaper therefore owns all waiting:
// children envd starts are registered under the same lock the reaping loop
// takes, so a status is always either delivered to its starter or, for an
// orphan, discarded.
package reap

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
)

// Reaper waits for children. A nil *Reaper is valid and leaves waiting to
// os/exec, which is what envd does when it is an ordinary process (tests).
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan syscall.WaitStatus
}

// New returns a Reaper; call Run to start reaping.
func New() *Reaper {
	return &Reaper{waiters: map[int]chan syscall.WaitStatus{}}
}

// BecomeSubreaper makes orphaned descendants of envd its children, as they
// would be if envd were PID 1, so that envd started under another init still
// reaps everything it spawned.
func BecomeSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// Run reaps children until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	r.reapAll()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			r.reapAll()
		}
	}
}

func (r *Reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- ws
		}
	}
}

// Child is a started process whose exit status can be awaited once.
type Child struct {
	cmd    *exec.Cmd
	status chan syscall.WaitStatus
}

// Start starts cmd. The caller must not call cmd.Wait; it calls Wait on
// the returned Child instead.
func (r *Reaper) Start(cmd *exec.Cmd) (*Child, error) {
	if r == nil {
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return &Child{cmd: cmd}, nil
	}
	// Hold the lock from fork to registration so the reaping loop cannot
	// collect this child before its waiter exists.
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiters[cmd.Process.Pid] = ch
	return &Child{cmd: cmd, status: ch}, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Wait blocks until the child exits and returns its status.
func (c *Child) Wait() syscall.WaitStatus {
	if c.status == nil {
		c.cmd.Wait()
		if c.cmd.ProcessState == nil {
			return syscall.WaitStatus(255 << 8)
		}
		return c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	}
	ws := <-c.status
	c.cmd.Process.Release()
	return ws
}

// SignalAll sends sig to the process groups of every child started through
// r that is still running (and to the child itself, for one that shares
// envd's group).
func (r *Reaper) SignalAll(sig syscall.Signal) {
	if r == nil {
		return
	}
	r.mu.Lock()
	pids := make([]int, 0, len(r.waiters))
	for pid := range r.waiters {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	for _, pid := range pids {
		syscall.Kill(-pid, sig)
		syscall.Kill(pid, sig)
	}
}

// Running is the number of started children that have not exited.
func (r *Reaper) Running() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiters)
}
