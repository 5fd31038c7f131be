package volume

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDiskLifecycle makes a real 16 MiB volume (mkfs.ext4, a loop mount),
// fills it, remounts it and removes it, and checks nothing is left:
// no mount, no loop device, no directory.
func TestDiskLifecycle(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop mounts need root")
	}
	d, err := NewDisks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	id := NewID()
	if err := d.Create(id, 16<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Remove(id) })
	mnt := d.Path(id)
	if ok, err := d.Mounted(id); err != nil || !ok {
		t.Fatalf("mounted after Create: %v, %v", ok, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil || st.Uid != OwnerUID || st.Gid != OwnerGID {
		t.Fatalf("root owner %d:%d (%v), want %d:%d", st.Uid, st.Gid, err, OwnerUID, OwnerGID)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Fatalf("a new volume holds %v", entries)
	}

	// The cap is the filesystem's: writing past it is ENOSPC.
	f, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 32 && werr == nil; i++ {
		_, werr = f.Write(buf)
	}
	if werr == nil {
		werr = f.Sync()
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("writing 32 MiB into 16 MiB: %v, want ENOSPC", werr)
	}
	used, total, err := d.Usage(id)
	if err != nil || total > 16<<20 || used < total/2 {
		t.Fatalf("usage %d of %d (%v)", used, total, err)
	}

	// Unmounted behind its back (a host reboot), Mount brings it back
	// with its data; mounting a mounted volume changes nothing.
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := d.Mount(id); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(filepath.Join(mnt, "fill")); err != nil || fi.Size() == 0 {
		t.Fatalf("data after a remount: %v, %v", fi, err)
	}
	if n := strings.Count(mountinfo(t), " "+mnt+" "); n != 1 {
		t.Fatalf("%s mounted %d times", mnt, n)
	}

	image := d.image(id)
	if err := d.Remove(id); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(mountinfo(t), mnt) {
		t.Fatal("still mounted after Remove")
	}
	if out, _ := exec.Command("losetup", "-j", image).Output(); len(out) != 0 {
		t.Fatalf("loop device left after Remove: %s", out)
	}
	if _, err := os.Stat(filepath.Dir(mnt)); !os.IsNotExist(err) {
		t.Fatalf("volume directory left after Remove: %v", err)
	}
	if ids, _ := d.List(); len(ids) != 0 {
		t.Fatalf("List after Remove: %v", ids)
	}
}

func mountinfo(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
