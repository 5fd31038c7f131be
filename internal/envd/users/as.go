package users

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"
)

// Do runs f with the file-system identity of u, so the kernel checks
// permissions and assigns ownership exactly as it would for u's own
// processes. gVisor lacks setfsuid, so the effective ids of dedicated OS
// threads are changed instead (the raw syscalls act on the calling thread
// only, unlike syscall.Setresuid, which changes every thread).
//
// Those threads live as long as envd: a few per identity, each locked to
// its goroutine and fed work over a channel, so no other goroutine ever
// runs with u's identity and no thread ever exits. A thread exit is not
// harmless: children forked on that thread with a parent-death signal
// (Jupyter kernels) would receive it.
//
// When envd is not root, or u is root, f simply runs.
func (u *User) Do(f func() error) error {
	if !canSwitch() || u.UID == 0 {
		return f()
	}
	jobs, err := workersFor(u)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	jobs <- job{f: f, done: done}
	return <-done
}

type job struct {
	f    func() error
	done chan error
}

// workersPerIdentity bounds concurrent file operations of one user.
const workersPerIdentity = 4

var (
	workersMu sync.Mutex
	workers   = map[string]chan job{}
)

// workersFor returns the job queue of u's identity, starting its threads
// the first time.
func workersFor(u *User) (chan job, error) {
	key := fmt.Sprint(u.UID, u.GID, u.Groups)
	workersMu.Lock()
	defer workersMu.Unlock()
	if jobs, ok := workers[key]; ok {
		return jobs, nil
	}
	jobs := make(chan job)
	started := make(chan error, workersPerIdentity)
	for i := 0; i < workersPerIdentity; i++ {
		go func() {
			runtime.LockOSThread()
			// Never unlocked: this thread keeps u's identity for good.
			if err := u.becomeOnThisThread(); err != nil {
				started <- err
				return
			}
			started <- nil
			for j := range jobs {
				j.done <- run(u, j.f)
			}
		}()
	}
	for i := 0; i < workersPerIdentity; i++ {
		if err := <-started; err != nil {
			return nil, err
		}
	}
	workers[key] = jobs
	return jobs, nil
}

// run calls f, turning a panic into an error so the worker survives.
func run(u *User, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic while acting as %s: %v", u.Name, p)
		}
	}()
	return f()
}

func (u *User) becomeOnThisThread() error {
	groups := make([]uint32, 0, len(u.Groups)+1)
	groups = append(groups, u.GID)
	groups = append(groups, u.Groups...)
	_, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
	runtime.KeepAlive(groups)
	if e != 0 {
		return fmt.Errorf("setgroups for %s: %w", u.Name, e)
	}
	keep := ^uintptr(0) // -1: leave unchanged
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, keep, uintptr(u.GID), keep); e != 0 {
		return fmt.Errorf("setresgid for %s: %w", u.Name, e)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, uintptr(u.UID), keep); e != 0 {
		return fmt.Errorf("setresuid for %s: %w", u.Name, e)
	}
	return nil
}
