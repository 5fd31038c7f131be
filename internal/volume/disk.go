package volume

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/id"
)

// OwnerUID and OwnerGID own a new volume's root: the sandboxes' user.
const (
	OwnerUID = 1000
	OwnerGID = 1000
)

// MinBytes is the smallest volume mkfs.ext4 makes with room to spare.
const MinBytes = 8 << 20

// Disks keeps the volumes of one data directory: <dir>/<id>/disk.img,
// loop-mounted on <dir>/<id>/mnt.
type Disks struct {
	dir string
	// mu makes Create one at a time: its room check counts the images on
	// disk, so no create may check before the one ahead has sized its.
	mu sync.Mutex
	// free is the space left to unprivileged writers on dir's
	// filesystem; tests replace it.
	free func(dir string) (int64, error)
}

// NewDisks returns the disks under dir, creating it.
func NewDisks(dir string) (*Disks, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	return &Disks{dir: dir, free: freeBytes}, nil
}

// NewID returns a fresh volume ID.
func NewID() string { return id.New("vol-", 20) }

func (d *Disks) image(id string) string { return filepath.Join(d.dir, id, "disk.img") }

// Path is the host directory where volume id's filesystem is mounted:
// what sandboxes bind and what the content API opens.
func (d *Disks) Path(id string) string { return filepath.Join(d.dir, id, "mnt") }

// Create makes volume id's disk: a sparse file of sizeBytes, formatted
// ext4 with its root owned by the sandboxes' user, and mounts it. A disk
// that would not fit beside what the other volumes are promised is a
// cube.DiskFull error. On failure nothing of it remains.
func (d *Disks) Create(id string, sizeBytes int64) (err error) {
	if !ValidID(id) {
		return fmt.Errorf("volume id %q is malformed", id)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.room(sizeBytes); err != nil {
		return err
	}
	dir := filepath.Join(d.dir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.Remove(id)
		}
	}()
	f, err := os.OpenFile(d.image(id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("size the disk image: %w", err)
	}
	// No reserved blocks (every byte is the user's), no lost+found
	// listing in the user's root, no lazy init work left running.
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0",
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=0,lazy_journal_init=0", OwnerUID, OwnerGID),
		d.image(id)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mkfs.ext4 (install e2fsprogs): %w: %s", err, bytes.TrimSpace(out))
	}
	if err := os.Mkdir(d.Path(id), 0o755); err != nil {
		return err
	}
	if err := d.Mount(id); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.Path(id), "lost+found")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Mount loop-mounts volume id's disk on its Path unless it is mounted
// already (it stays mounted across server restarts).
func (d *Disks) Mount(id string) error {
	mounted, err := d.Mounted(id)
	if err != nil || mounted {
		return err
	}
	if err := os.MkdirAll(d.Path(id), 0o755); err != nil {
		return err
	}
	// mount(8) sets the loop device up with autoclear: unmounting
	// releases it.
	out, err := exec.Command("mount", "-t", "ext4", "-o", "loop,nosuid,nodev", d.image(id), d.Path(id)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount volume %s: %w: %s", id, err, bytes.TrimSpace(out))
	}
	return nil
}

// Mounted reports whether volume id's Path is a mount point.
func (d *Disks) Mounted(id string) (bool, error) {
	points, err := mountPoints()
	if err != nil {
		return false, err
	}
	return points[d.Path(id)], nil
}

// Remove unmounts volume id, lets go of its loop device and deletes its
// directory, disk included. A volume half made or already gone is no
// error.
func (d *Disks) Remove(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("volume id %q is malformed", id)
	}
	for {
		mounted, err := d.Mounted(id)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(d.Path(id), 0); err != nil {
			return fmt.Errorf("unmount volume %s: %w", id, err)
		}
	}
	if err := detachLoops(d.image(id)); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(d.dir, id))
}

// List returns the IDs of every volume directory on disk.
func (d *Disks) List() ([]string, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Usage returns the bytes used and the bytes the volume holds in all.
func (d *Disks) Usage(id string) (used, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(d.Path(id), &st); err != nil {
		return 0, 0, err
	}
	total = int64(st.Blocks) * st.Bsize
	return total - int64(st.Bfree)*st.Bsize, total, nil
}

// room returns a cube.DiskFull error unless a disk of sizeBytes fits
// on the data directory's filesystem beside the existing volumes. Their
// images are sparse: each holds only the blocks written to it so far,
// and the rest of its size is promised, space the filesystem must keep
// for it or a full host disk ends up inside a sandbox's volume. Without
// counting the promise, volumes created one after another would each
// see the same free space and together overcommit the disk.
func (d *Disks) room(sizeBytes int64) error {
	free, err := d.free(d.dir)
	if err != nil {
		return fmt.Errorf("free space under %s: %w", d.dir, err)
	}
	promised, err := d.promised()
	if err != nil {
		return err
	}
	if sizeBytes > free-promised {
		return cube.Errorf(cube.DiskFull, "a volume of %d MiB does not fit: the data directory's disk has %d MiB free, of which %d MiB is promised to existing volumes (their disk images are sparse and take space as they fill); ask for less (sizeMB), delete volumes or free space",
			sizeBytes>>20, free>>20, promised>>20)
	}
	return nil
}

// promised is the space the volumes' images may still take: each one's
// size less its allocated blocks.
func (d *Disks) promised() (int64, error) {
	ids, err := d.List()
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, id := range ids {
		fi, err := os.Stat(d.image(id))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a create or remove half done
		}
		if err != nil {
			return 0, err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			sum += max(0, fi.Size()-st.Blocks*512)
		}
	}
	return sum, nil
}

// freeBytes is the space left to unprivileged writers on dir's
// filesystem.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// detachLoops releases any loop device still backed by image: one that
// a crash between losetup and mount left behind.
func detachLoops(image string) error {
	if _, err := os.Stat(image); err != nil {
		return nil
	}
	out, err := exec.Command("losetup", "-j", image).Output()
	if err != nil {
		return fmt.Errorf("losetup -j %s: %w", image, err)
	}
	for line := range strings.Lines(string(out)) {
		dev, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if err := detachLoop(dev); err != nil {
			return err
		}
	}
	return nil
}

// detachLoop lets go of loop device dev, as losetup -d does, and counts
// a device already let go of as done: a device mount set up with
// autoclear is released by the kernel on its last close, which can fall
// between losetup -j naming it and this call. The ioctl is made here,
// not by losetup, so that case is an errno rather than a message to
// parse.
func detachLoop(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		err = unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0)
		unix.Close(fd)
	}
	if err != nil && !loopGone(err) {
		return fmt.Errorf("detach loop device %s: %w", dev, err)
	}
	return nil
}

// loopGone reports whether err, from opening or detaching a loop device,
// says there is nothing left to detach: no device node (ENOENT), or a
// device bound to no file (ENXIO).
func loopGone(err error) bool {
	return errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT)
}

// mountPoints returns the mount points of this mount namespace.
func mountPoints() (map[string]bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	points := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			points[unescapeMount(fields[4])] = true
		}
	}
	return points, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
