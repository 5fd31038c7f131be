package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
	"cube/internal/runtime"
)

// Images that outlive the server (pause images, snapshots, templates) are
// written to "<dir>.tmp", fingerprinted and synced, then renamed to dir
// and the rename synced, and only then does a record say they exist. A
// crash or power loss therefore leaves either a complete image under its
// final name or a .tmp the reconciler removes, never a record that names
// a half-written image.

// fsyncTree flushes every file under dir and every directory (dir
// included) to disk: a rename of dir is durable only with its contents.
func fsyncTree(dir string) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		return fsyncPath(path)
	})
}

// fsyncPath flushes one file or directory.
func fsyncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// writeImage checkpoints sb into dir+".tmp", fingerprints the image and
// syncs it; publishImage then gives it its final name. op names the
// operation in errors. On failure the .tmp is removed.
func (h *host) writeImage(ctx context.Context, sb runtime.Sandbox, dir string, leaveRunning bool, op string) (string, string, error) {
	return h.writeImageWith(ctx, dir, op, func(tmp string) error { return sb.Checkpoint(ctx, tmp, leaveRunning) })
}

// writeImageWith is writeImage with save writing the image into the
// directory it is given: a checkpoint, or a sandbox's files alone.
func (h *host) writeImageWith(ctx context.Context, dir, op string, save func(tmp string) error) (string, string, error) {
	tmp := dir + ".tmp"
	// What an attempt that failed or crashed left.
	if err := os.RemoveAll(tmp); err != nil {
		return "", "", diskError(op, err)
	}
	var c cleanup
	defer h.cleanUp(&c, op, "dir", tmp)
	c.Add(func() error { return os.RemoveAll(tmp) })
	at := time.Now()
	if err := save(tmp); err != nil {
		return "", "", diskError(op, err)
	}
	at = h.tel.phase(op, "checkpoint", at)
	sum, err := imageChecksum(tmp)
	if err != nil {
		return "", "", fmt.Errorf("%s: fingerprint image: %w", op, err)
	}
	at = h.tel.phase(op, "checksum", at)
	if err := fsyncTree(tmp); err != nil {
		return "", "", diskError(op, err)
	}
	h.tel.phase(op, "fsync", at)
	c.Release()
	return tmp, sum, nil
}

// publishImage renames a synced image from tmp to dir, replacing what was
// there, and syncs the directories that now name it (the parent, which
// holds the rename, and the grandparent, which may have gained the parent
// with this image).
func publishImage(tmp, dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := fsyncPath(parent); err != nil {
		return err
	}
	return fsyncPath(filepath.Dir(parent))
}

// imageIntact reports whether dir holds a complete image whose checksum
// is sum.
func imageIntact(dir, sum string) bool {
	if dir == "" || sum == "" || !imageComplete(dir) {
		return false
	}
	got, err := imageChecksum(dir)
	return err == nil && got == sum
}

// imageComplete reports whether dir holds an image's last-written file:
// a checkpoint's kernel state, or a files image (runtime.FilesImage).
func imageComplete(dir string) bool {
	if dir == "" {
		return false
	}
	for _, name := range []string{"checkpoint.img", runtime.FilesImage} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// imageChecksum fingerprints a checkpoint image: the kernel state and
// page metadata in full, and every file's size, the parent images an
// incremental image carries (parents/<ID>/) included. It is cheap enough
// to check before each restore, and catches truncated or replaced images.
func imageChecksum(dir string) (string, error) {
	h := sha256.New()
	if err := hashImageDir(h, dir, ""); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashImageDir adds the files under dir to h, each named by prefix and
// its name, in name order.
func hashImageDir(h io.Writer, dir, prefix string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil {
			return err
		}
		if info.IsDir() {
			if err := hashImageDir(h, path, prefix+name+"/"); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(h, "%s%s %d\n", prefix, name, info.Size())
		if name == "pages.img" {
			continue // large; covered by its size and pages_meta
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// removeDir removes a directory the node no longer needs, logging a
// failure: what stays is found and removed again by the next reconcile.
func (h *host) removeDir(dir string) {
	if err := os.RemoveAll(dir); err != nil {
		h.log.Warn("remove directory", "dir", dir, "err", err)
	}
}

// DefaultDiskReserveMB is Config.DiskReserveMB's default.
const DefaultDiskReserveMB = 512

// checkReserve refuses an operation that adds an image to the data
// directory (op names it) while less than the configured reserve is free.
func (h *host) checkReserve(op string) error {
	reserve := int64(h.cfg.DiskReserveMB)
	if reserve == 0 {
		reserve = DefaultDiskReserveMB
	}
	if reserve < 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(h.cfg.DataDir, &st); err != nil {
		return nil // the write itself reports what is wrong with the disk
	}
	if free := int64(st.Bavail) * st.Bsize >> 20; free < reserve {
		return cube.Errorf(cube.DiskFull, "%s: the data directory has %d MB free, less than the %d MB kept free so that paused sandboxes can be written to disk: delete snapshots or templates, or free space on the host", op, free, reserve)
	}
	return nil
}
