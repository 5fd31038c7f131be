package volume

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A loop device that is gone by the time it is detached (the kernel
// cleared it on its last close, between the lookup and the detach) is
// what the detach wanted: Remove goes on. losetup here lists a device
// that no longer exists, and fails to detach it as the real one does.
func TestDetachLoopsGoneBetweenLookupAndDetach(t *testing.T) {
	bin := t.TempDir()
	script := `#!/bin/sh
case "$1" in
-j) echo "/dev/cube-test-loop-gone: []: ($2)" ;;
*) echo "losetup: $2: detach failed: No such device or address" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "losetup"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(image, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := detachLoops(image); err != nil {
		t.Fatalf("detachLoops: %v, want nil: the device is gone already", err)
	}
}

// Only a device that is not there, or no longer bound to a file, counts
// as detached; other failures are reported.
func TestLoopGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		gone bool
	}{
		{unix.ENXIO, true},
		{&os.PathError{Op: "open", Path: "/dev/loop7", Err: unix.ENOENT}, true},
		{fmt.Errorf("detach /dev/loop7: %w", unix.ENXIO), true},
		{unix.EBUSY, false},
		{unix.EPERM, false},
		{&os.PathError{Op: "open", Path: "/dev/loop7", Err: unix.EACCES}, false},
	} {
		if got := loopGone(c.err); got != c.gone {
			t.Errorf("loopGone(%v) = %v, want %v", c.err, got, c.gone)
		}
	}
}

// A real loop device detached twice: the second detach finds it unbound
// and succeeds.
func TestDetachLoopTwice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(image, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "-f", "--show", image).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device to attach: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	for i := range 2 {
		if err := detachLoop(dev); err != nil {
			t.Fatalf("detach %d of %s: %v", i+1, dev, err)
		}
	}
	if out, _ := exec.Command("losetup", "-j", image).Output(); len(out) != 0 {
		t.Fatalf("still attached: %s", out)
	}
}
