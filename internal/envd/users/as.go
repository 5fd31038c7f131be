package users

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// Do runs f with the file-system identity of u, so the kernel checks
// permissions and assigns ownership exactly as it would for u's own
// processes. gVisor lacks setfsuid, so the effective ids of one dedicated OS
// thread are changed instead (the raw syscalls act on the calling thread
// only, unlike syscall.Setresuid, which changes every thread). That thread is
// never handed back to the Go scheduler: its goroutine exits still locked,
// which makes the runtime discard the thread, so no other goroutine ever runs
// with u's identity.
//
// When envd is not root, or u is root, f simply runs.
func (u *User) Do(f func() error) error {
	if !canSwitch() || u.UID == 0 {
		return f()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Deliberately no UnlockOSThread: see above.
		if err := u.becomeOnThisThread(); err != nil {
			done <- err
			return
		}
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("panic while acting as %s: %v", u.Name, p)
				}
			}()
			err = f()
		}()
		done <- err
	}()
	return <-done
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
