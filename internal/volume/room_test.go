package volume

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
)

// smallDisk mounts a tmpfs of sizeMiB (it keeps files sparse, like the
// data disk) and returns the volumes on it.
func smallDisk(t *testing.T, sizeMiB int) *Disks {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(sizeMiB)+"m"); err != nil {
		t.Skipf("tmpfs: %v", err)
	}
	d, err := NewDisks(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ids, _ := d.List()
		for _, id := range ids {
			d.Remove(id)
		}
		unix.Unmount(dir, unix.MNT_DETACH)
	})
	return d
}

// Volumes created at once on a 64 MiB disk, 24 MiB each, are together
// never promised more than the disk had free: each image is sparse and
// holds a few MiB after mkfs, so without counting what the images may
// still take, all four would fit. The refused ones are DiskFull and
// leave nothing behind.
func TestCreateCountsPromisedSpace(t *testing.T) {
	d := smallDisk(t, 64)
	var st unix.Statfs_t
	if err := unix.Statfs(d.dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	const size = 24 << 20
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		made    []string
		refused []error
	)
	for range 4 {
		wg.Go(func() {
			id := NewID()
			err := d.Create(id, size)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				made = append(made, id)
			} else {
				refused = append(refused, err)
			}
		})
	}
	wg.Wait()
	if int64(len(made))*size > free {
		t.Errorf("%d volumes of %d MiB made on a disk with %d MiB free", len(made), size>>20, free>>20)
	}
	if len(made) == 0 || len(refused) == 0 {
		t.Fatalf("made %d, refused %v: want some of each", len(made), refused)
	}
	t.Logf("made %d, refused %v", len(made), refused)
	for _, err := range refused {
		var e *cube.Error
		if !errors.As(err, &e) || e.Kind != cube.DiskFull {
			t.Errorf("refused with %v, want a DiskFull error", err)
			continue
		}
		for _, want := range []string{"24 MiB", "free", "promised"} {
			if !strings.Contains(e.Message, want) {
				t.Errorf("message %q does not say %q", e.Message, want)
			}
		}
	}
	if ids, _ := d.List(); len(ids) != len(made) {
		t.Errorf("volume directories %v, want only %v", ids, made)
	}
}

// The room for a volume is the free space less what existing images
// may still take: an image's size beyond its allocated blocks. The
// error names the size asked for, the free space and the promise.
func TestRoom(t *testing.T) {
	d, err := NewDisks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d.free = func(string) (int64, error) { return 100 << 20, nil }
	// Two sparse images promising 30 MiB each, one 4 MiB of it written,
	// and a directory without an image (a create half done).
	for _, written := range []int{0, 4 << 20} {
		id := NewID()
		if err := os.MkdirAll(filepath.Join(d.dir, id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d.image(id), make([]byte, written), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(d.image(id), 30<<20); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(d.dir, NewID()), 0o700)

	// Promised: 30 + 26 (or a little less where the filesystem allocated
	// more than was written), so 44 MiB or a little more is left.
	if err := d.room(40 << 20); err != nil {
		t.Errorf("40 MiB: %v", err)
	}
	err = d.room(50 << 20)
	var e *cube.Error
	if !errors.As(err, &e) || e.Kind != cube.DiskFull {
		t.Fatalf("50 MiB: %v, want a DiskFull error", err)
	}
	for _, want := range []string{"50 MiB", "100 MiB free", "56 MiB", "promised"} {
		if !strings.Contains(e.Message, want) {
			t.Errorf("message %q does not say %q", e.Message, want)
		}
	}
}
