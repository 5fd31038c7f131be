package template

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
)

// A build by steps keeps what each filesystem step changed as a layer: the
// upper directory of the host overlay mount the step's sandbox wrote
// through. A layer is named by a key that hashes everything before it and
// the step itself, so a rebuild takes every step up to the first changed
// one from the cache. Layers live in <DataDir>/layers/<key>/fs, with the
// step that made them in meta.json, written last: a layer without it is
// unfinished and never used.

// maxLowerLayers bounds the layers under one step: overlayfs takes its
// lower directories in one mount option of at most a page.
const maxLowerLayers = 48

type layerMeta struct {
	Key       string    `json:"key"`
	Step      string    `json:"step"`
	Bytes     int64     `json:"bytes"`
	CreatedAt time.Time `json:"createdAt"`
}

func (b *Builder) layersDir() string { return filepath.Join(b.cfg.DataDir, "layers") }

func (b *Builder) layerDir(key string) string { return filepath.Join(b.layersDir(), key) }

// haveLayer reports whether the layer key is finished.
func (b *Builder) haveLayer(key string) bool {
	_, err := os.Stat(filepath.Join(b.layerDir(key), "meta.json"))
	return err == nil
}

// chainKey is the key of the state after step, given the key before it.
func chainKey(parent string, step cube.BuildStep) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", parent, step.Type, len(step.Args))
	for _, a := range step.Args {
		fmt.Fprintf(h, "%d:%s\x00", len(a), a)
	}
	h.Write([]byte(step.FilesHash))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// baseKey is the key of a build's starting filesystem: an unpacked image
// or another template's rootfs, both content-addressed directories.
func baseKey(rootfs string) string {
	sum := sha256.Sum256([]byte("base\x00" + filepath.Base(rootfs)))
	return hex.EncodeToString(sum[:])[:32]
}

// overlay is a host overlay mount: lower directories (top first) under
// an upper one that collects the writes.
type overlay struct {
	root, upper, work string
}

// mountOverlay mounts lower (top first) with upper at dir/root, making
// dir/work and dir/root; upper must exist.
func mountOverlay(dir, upper string, lower []string) (*overlay, error) {
	opts := "lowerdir=" + strings.Join(lower, ":")
	if len(lower) > maxLowerLayers || len(opts) > 3500 {
		return nil, fmt.Errorf("the build has too many filesystem steps (%d) for one overlay mount: join RUN steps with && (runCmd takes a list), or give cube-server a shorter --data-dir", len(lower)-1)
	}
	o := &overlay{root: filepath.Join(dir, "root"), upper: upper, work: filepath.Join(dir, "work")}
	for _, d := range []string{o.root, o.work} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	// Redirects and index stay off: a renamed lower directory is copied,
	// so every layer is a plain tree that flattening can read.
	opts += ",upperdir=" + upper + ",workdir=" + o.work + ",redirect_dir=off,index=off"
	if err := unix.Mount("overlay", o.root, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("mount the build's overlay: %w (template builds by steps need root and the kernel's overlay filesystem; is the data directory on a filesystem overlayfs takes as upper, such as ext4 or xfs?)", err)
	}
	return o, nil
}

// unmount lets go of the mount, lazily if something still holds it.
func (o *overlay) unmount() error {
	err := unix.Unmount(o.root, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(o.root, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", o.root, err)
	}
	os.RemoveAll(o.work)
	return nil
}

// unmountStale unmounts what an earlier process left mounted under dir.
func unmountStale(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	for _, p := range points {
		unix.Unmount(p, unix.MNT_DETACH)
	}
}

// finishLayer records the layer in tmp as key: its meta written last, then
// renamed into place. A layer of the same key that another build finished
// meanwhile is kept (builds may be using it) and tmp is dropped.
func (b *Builder) finishLayer(tmp, key, step string, bytes int64) error {
	data, _ := json.Marshal(layerMeta{Key: key, Step: step, Bytes: bytes, CreatedAt: time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(tmp, "meta.json"), data, 0o600); err != nil {
		return err
	}
	b.layerMu.Lock()
	defer b.layerMu.Unlock()
	if b.haveLayer(key) {
		return nil
	}
	final := b.layerDir(key)
	os.RemoveAll(final) // an unfinished one, from before a crash
	return os.Rename(tmp, final)
}

// flatten makes dst a plain tree of base with layers (bottom first)
// applied the way overlayfs shows them: whiteouts delete, opaque
// directories hide what is under them. Files are hard links, never
// copies: the base and the layers are never written once made, and
// sandboxes see the tree through their own writable overlay.
func flatten(dst, base string, layers []string) error {
	if err := linkTree(base, dst, false); err != nil {
		return err
	}
	for _, l := range layers {
		if err := linkTree(l, dst, true); err != nil {
			return err
		}
	}
	return nil
}

// linkTree links every entry of src into dst. With overlay set, src is an
// overlay upper directory and its whiteouts and opaque directories apply.
// src is Cube's own (an unpacked image or a layer); dst is only ever
// reached through directories linkTree made, never through a symbolic
// link.
func linkTree(src, dst string, overlay bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := new(unix.Stat_t)
		if err := unix.Lstat(p, st); err != nil {
			return err
		}
		if rel == "." {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
			return setAttrs(target, st, false)
		}
		mode := info.Mode()
		isWhiteout := overlay && mode&fs.ModeCharDevice != 0 && st.Rdev == 0
		if isWhiteout {
			return os.RemoveAll(target)
		}
		old, lerr := os.Lstat(target)
		if mode.IsDir() {
			opaque := overlay && isOpaque(p)
			if lerr == nil && (!old.IsDir() || opaque) {
				if err := os.RemoveAll(target); err != nil {
					return err
				}
				lerr = fs.ErrNotExist
			}
			if lerr != nil {
				if err := os.Mkdir(target, 0o700); err != nil {
					return err
				}
			}
			return setAttrs(target, st, false)
		}
		if lerr == nil {
			if err := os.RemoveAll(target); err != nil {
				return err
			}
		}
		switch {
		case mode.IsRegular():
			return os.Link(p, target)
		case mode&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(to, target); err != nil {
				return err
			}
			return setAttrs(target, st, true)
		default:
			if err := unix.Mknod(target, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
			return setAttrs(target, st, false)
		}
	})
}

func isOpaque(dir string) bool {
	buf := make([]byte, 4)
	n, err := unix.Lgetxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// setAttrs gives target the owner, mode and times of st.
func setAttrs(target string, st *unix.Stat_t, link bool) error {
	if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if link {
		return nil
	}
	if err := unix.Chmod(target, st.Mode&07777); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// holdLayer counts one more running build of a layer, which keeps it
// from collection, and reports whether the layer is finished.
func (b *Builder) holdLayer(key string) bool {
	b.layerMu.Lock()
	defer b.layerMu.Unlock()
	b.layerUse[key]++
	return b.haveLayer(key)
}

// dropLayer counts one less running build of a layer.
func (b *Builder) dropLayer(key string) {
	b.layerMu.Lock()
	defer b.layerMu.Unlock()
	if b.layerUse[key]--; b.layerUse[key] <= 0 {
		delete(b.layerUse, key)
	}
}
