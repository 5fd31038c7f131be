package netslot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// prepareNetnsDir makes /run/netns a shared mount point, as iproute2 does,
// so named namespaces created here are visible to `ip netns` and to
// processes in other mount namespaces.
func prepareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("netslot: %w", err)
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself first.
		if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("netslot: make %s a shared mount: %w", netnsDir, err)
	}
	return nil
}

func netnsPath(name string) string { return filepath.Join(netnsDir, name) }

// createNetns makes a new network namespace pinned at /run/netns/<name>.
// The unshare happens on a thread that is thrown away afterwards, so no
// goroutine of the process ever runs in the wrong namespace.
func createNetns(name string) error {
	path := netnsPath(name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("netslot: create netns %s: %w", name, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread exits with the goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		errc <- unix.Mount(self, path, "none", unix.MS_BIND, "")
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return fmt.Errorf("netslot: create netns %s: %w", name, err)
	}
	return nil
}

// deleteNetns unpins a named namespace. The kernel frees it once no
// process is left in it. A missing name is not an error.
func deleteNetns(name string) error {
	path := netnsPath(name)
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netslot: unmount netns %s: %w", name, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netslot: remove netns %s: %w", name, err)
	}
	return nil
}

func netnsExists(name string) bool {
	_, err := os.Stat(netnsPath(name))
	return err == nil
}

// listNetns returns the names pinned under /run/netns.
func listNetns() ([]string, error) {
	ents, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netslot: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names, nil
}

// inNetns runs fn on a thread switched into the namespace open at fd; the
// thread is discarded afterwards.
func inNetns(fd int, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// writeSysctl sets a /proc/sys value for the calling thread's netns
// (net.* sysctls are per namespace, resolved when the file is opened).
func writeSysctl(key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// netnsUsers returns the processes whose network namespace is the one
// pinned at path (none when path is gone). It reads every process's
// /proc/<pid>/ns/net, which costs well under a millisecond for the few
// hundred processes of a busy node.
func netnsUsers(path string) []int {
	var pinned unix.Stat_t
	if err := unix.Stat(path, &pinned); err != nil {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Ino == pinned.Ino && st.Dev == pinned.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}
