package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

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
func writeImage(ctx context.Context, sb runtime.Sandbox, dir string, leaveRunning bool, op string) (string, string, error) {
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	fail := func(err error) (string, string, error) {
		os.RemoveAll(tmp)
		return "", "", err
	}
	if err := sb.Checkpoint(ctx, tmp, leaveRunning); err != nil {
		return fail(diskError(op, err))
	}
	sum, err := imageChecksum(tmp)
	if err != nil {
		return fail(fmt.Errorf("%s: fingerprint image: %w", op, err))
	}
	if err := fsyncTree(tmp); err != nil {
		return fail(diskError(op, err))
	}
	return tmp, sum, nil
}

// publishImage renames a synced image from tmp to dir, replacing what was
// there, and syncs the directories that now name it (the parent, which
// holds the rename, and the grandparent, which may have gained the parent
// with this image).
func publishImage(tmp, dir string) error {
	os.RemoveAll(dir)
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
	if dir == "" || sum == "" {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint.img")); err != nil {
		return false
	}
	got, err := imageChecksum(dir)
	return err == nil && got == sum
}
