package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"golang.org/x/sys/unix"
)

// Rootfs is an unpacked image.
type Rootfs struct {
	// Dir is rootfsRoot/<Digest.Hex>. Treat it as read-only: every template
	// built from the same image shares it.
	Dir string
	// Digest is the image ID, the digest of the image config. It names the
	// content rather than one encoding of it, so the same image read from a
	// registry, an OCI archive or a docker-save archive shares one rootfs.
	Digest v1.Hash
	Config ImageConfig
}

const tmpPrefix = ".tmp-"

// unpackLocks serialises unpacks of the same image within the process; the
// rename at the end of Unpack settles races between processes.
var unpackLocks sync.Map // image ID hex -> *sync.Mutex

// Unpack is UnpackLimited with the default Limits.
func Unpack(ctx context.Context, img v1.Image, rootfsRoot string, progress func(done, total int64)) (Rootfs, error) {
	return UnpackLimited(ctx, img, rootfsRoot, Limits{}, progress)
}

// UnpackLimited applies img's layers in order into rootfsRoot/<image ID hex>/
// and returns it; when that directory already exists it is reused untouched.
//
// The layers go into a temp directory beside the final one, which is renamed
// into place only after every layer matched its diffID, so the final name
// never holds a partial or unverified tree, whatever fails or crashes.
// An unpack that would exceed lim stops with a *LimitError before writing
// the file that would cross it. rootfsRoot is kept at mode 0700: image
// trees hold setuid binaries and files of any owner, which no host user
// should reach; sandboxes reach them through gVisor's gofer, as root.
// progress, if not nil, receives layer bytes read so far against the total.
func UnpackLimited(ctx context.Context, img v1.Image, rootfsRoot string, lim Limits, progress func(done, total int64)) (Rootfs, error) {
	id, err := img.ConfigName()
	if err != nil {
		return Rootfs{}, fmt.Errorf("reading image config: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Rootfs{}, fmt.Errorf("reading image config: %w", err)
	}
	rf := Rootfs{Dir: filepath.Join(rootfsRoot, id.Hex), Digest: id, Config: imageConfig(cf)}

	mu, _ := unpackLocks.LoadOrStore(id.Hex, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()

	if st, err := os.Lstat(rf.Dir); err == nil && st.IsDir() {
		return rf, nil
	}
	layers, err := img.Layers()
	if err != nil {
		return Rootfs{}, fmt.Errorf("listing layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return Rootfs{}, fmt.Errorf("%w: image has %d layers but its config lists %d", ErrCorrupt, len(layers), len(cf.RootFS.DiffIDs))
	}
	var total int64
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return Rootfs{}, fmt.Errorf("layer size: %w", err)
		}
		total += n
	}

	if err := PrivateDir(rootfsRoot); err != nil {
		return Rootfs{}, err
	}
	// The temp directory is created 0700 and keeps that mode until the
	// tree is complete (finishDirs gives it the image's root mode).
	tmp, err := os.MkdirTemp(rootfsRoot, tmpPrefix+id.Hex[:12]+"-")
	if err != nil {
		return Rootfs{}, err
	}
	ok := false
	defer func() {
		if !ok {
			removeTree(tmp)
		}
	}()

	u := newUnpacker(tmp, lim)
	pr := &progressReader{ctx: ctx, total: total, fn: progress}
	for i, l := range layers {
		if err := u.applyLayer(l, cf.RootFS.DiffIDs[i], pr); err != nil {
			return Rootfs{}, fmt.Errorf("layer %d of %d: %w", i+1, len(layers), err)
		}
	}
	if err := u.finishDirs(); err != nil {
		return Rootfs{}, err
	}
	if u.skippedXattrs > 0 {
		slog.Info("skipped extended attributes of the image outside user.*", "image", id.String(), "count", u.skippedXattrs, "first", u.firstSkipped)
	}
	if progress != nil {
		progress(total, total)
	}
	if err := os.Rename(tmp, rf.Dir); err != nil {
		if st, serr := os.Lstat(rf.Dir); serr == nil && st.IsDir() {
			return rf, nil // another process finished first; its tree is as good
		}
		return Rootfs{}, err
	}
	ok = true
	return rf, nil
}

type unpacker struct {
	root   string
	asRoot bool
	// dirs holds each directory's header; its mode and times are applied
	// last, because writing into a directory changes its mtime and a
	// read-only mode would stop later layers (and non-root cleanup).
	dirs map[string]*tar.Header
	// written and parents hold, for the current layer only, the paths it
	// created and their ancestors, which an opaque marker must keep.
	written, parents map[string]bool
	budget           *budget
	// skippedXattrs counts extended attributes not applied (appliedXattr);
	// firstSkipped names one, for the log.
	skippedXattrs int
	firstSkipped  string
}

func newUnpacker(root string, lim Limits) *unpacker {
	return &unpacker{root: root, dirs: map[string]*tar.Header{}, asRoot: os.Geteuid() == 0, budget: &budget{lim: lim.withDefaults()}}
}

func (u *unpacker) applyLayer(l v1.Layer, diffID v1.Hash, pr *progressReader) error {
	digest, _ := l.Digest()
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("fetching %s: %w", digest, err)
	}
	defer rc.Close()
	pr.r = rc
	counted := struct {
		io.Reader
		io.Closer
	}{pr, rc}
	cl, err := partial.CompressedToLayer(streamLayer{l: l, rc: counted})
	if err != nil {
		return err
	}
	ur, err := cl.Uncompressed()
	if err != nil {
		return fmt.Errorf("%s: %w", digest, err)
	}
	defer ur.Close()
	vr, err := newVerifyReader(ur, diffID, -1, "layer "+digest.String()+" (uncompressed)")
	if err != nil {
		return err
	}
	if err := u.applyTar(vr); err != nil {
		streams := []io.Reader{vr, pr}
		if errors.Is(err, ErrTooLarge) {
			// The rest of a decompression bomb is not worth inflating: the
			// compressed bytes alone tell whether the blob is damaged.
			streams = streams[1:]
		}
		if c := corruption(err, streams...); c != err {
			return c
		}
		return fmt.Errorf("%s: %w", digest, err)
	}
	if _, err := io.Copy(io.Discard, pr); err != nil {
		return fmt.Errorf("%s: %w", digest, err)
	}
	return nil
}

// applyTar applies one layer's uncompressed tar stream.
func (u *unpacker) applyTar(layer io.Reader) error {
	u.written, u.parents = map[string]bool{}, map[string]bool{}
	r := &meter{r: layer, b: u.budget}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading tar: %w", err)
		}
		if err := u.entry(tr, h); err != nil {
			return err
		}
	}
	// Read to the end so the layer's digests are checked, tar padding
	// included, but no further than the budget allows: data after the end
	// of the archive costs decompression like any other.
	left := u.budget.remaining()
	if n, err := io.CopyN(io.Discard, r, left+1); err == nil || n > left {
		return fmt.Errorf("data after the end of the layer: %w", &LimitError{Limit: LimitImage, Max: u.budget.lim.MaxBytes})
	} else if err != io.EOF {
		return err
	}
	return nil
}

// corruption explains a failure part-way through a layer: when the bytes do
// not match their digests, that is the real problem (a damaged blob also
// makes garbage tar headers or gzip errors), so report it instead.
func corruption(err error, streams ...io.Reader) error {
	if errors.Is(err, ErrCorrupt) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, r := range streams {
		if _, derr := io.Copy(io.Discard, r); errors.Is(derr, ErrCorrupt) {
			return derr
		}
	}
	return err
}

func (u *unpacker) entry(tr *tar.Reader, h *tar.Header) error {
	rel, err := entryPath(h.Name)
	if err != nil {
		return err
	}
	if err := u.budget.take(rel, h); err != nil {
		return err
	}
	if sparse(h) {
		return fmt.Errorf("%w: /%s is a sparse file, which Cube does not unpack (its holes would be written out in full): rebuild the image without sparse files (GNU tar: without --sparse)", ErrUnsafeLayer, rel)
	}
	if rel == "" {
		if h.Typeflag == tar.TypeDir {
			u.dirs[""] = h
		}
		return nil
	}
	base := path.Base(rel)
	if base == ".wh..wh..opq" {
		dir, err := u.resolveDir(path.Dir(rel))
		if err != nil {
			return err
		}
		return u.opaque(dir)
	}
	if victim, ok := strings.CutPrefix(base, ".wh."); ok {
		if victim == "" || victim == "." || victim == ".." {
			return fmt.Errorf("%w: whiteout %q names nothing", ErrUnsafeLayer, h.Name)
		}
		dir, err := u.resolveDir(path.Dir(rel))
		if err != nil {
			return err
		}
		if err := os.RemoveAll(u.host(path.Join(dir, victim))); err != nil {
			return fmt.Errorf("whiteout %s: %w", h.Name, err)
		}
		u.forget(path.Join(dir, victim))
		return nil
	}

	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		slog.Info("skipping special file in image layer", "path", "/"+rel, "type", string(h.Typeflag))
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	case tar.TypeXGlobalHeader:
		return nil
	default:
		slog.Info("skipping unsupported tar entry in image layer", "path", "/"+rel, "type", string(h.Typeflag))
		return nil
	}

	real, err := u.locate(rel)
	if err != nil {
		return err
	}
	if real == "" {
		return nil // a non-directory entry naming "/" through symlinks
	}
	u.markWritten(real)
	p := u.host(real)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	existing, lerr := os.Lstat(p)
	if lerr == nil && !(h.Typeflag == tar.TypeDir && existing.IsDir()) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
		if existing.IsDir() {
			u.forget(real)
		}
	}

	switch h.Typeflag {
	case tar.TypeDir:
		if lerr != nil || !existing.IsDir() {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
		}
		u.dirs[real] = h
		return u.owner(p, h)
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return fmt.Errorf("writing /%s: %w", real, err)
		}
		if err := f.Close(); err != nil {
			return err
		}
		if err := u.owner(p, h); err != nil {
			return err
		}
		if err := syscall.Chmod(p, uint32(h.Mode&0o7777)); err != nil {
			return err
		}
		return setTimes(p, h)
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
		if err := u.owner(p, h); err != nil {
			return err
		}
		return setTimes(p, h)
	case tar.TypeLink:
		trel, err := entryPath(h.Linkname)
		if err != nil {
			return fmt.Errorf("hard link /%s: %w", rel, err)
		}
		treal, err := u.locate(trel)
		if err != nil {
			return err
		}
		st, err := os.Lstat(u.host(treal))
		if err != nil {
			return fmt.Errorf("hard link /%s: target /%s: %w", rel, trel, err)
		}
		if st.IsDir() {
			return fmt.Errorf("%w: hard link /%s points to directory /%s", ErrUnsafeLayer, rel, trel)
		}
		return os.Link(u.host(treal), p)
	}
	return nil
}

// forget drops the deferred directory metadata of a removed subtree.
func (u *unpacker) forget(rel string) {
	for d := range u.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			delete(u.dirs, d)
		}
	}
}

func (u *unpacker) markWritten(real string) {
	u.written[real] = true
	for d := path.Dir(real); d != "." && d != "/" && !u.parents[d]; d = path.Dir(d) {
		u.parents[d] = true
	}
}

// opaque empties dir of everything lower layers put there, keeping what the
// current layer wrote (a tar may list the marker after the directory's
// new contents).
func (u *unpacker) opaque(dir string) error {
	p := u.host(dir)
	st, err := os.Lstat(p)
	if err != nil || !st.IsDir() {
		return nil
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		child := path.Join(dir, e.Name())
		switch {
		case u.parents[child]:
			if err := u.opaque(child); err != nil {
				return err
			}
		case u.written[child]:
		default:
			if err := os.RemoveAll(u.host(child)); err != nil {
				return err
			}
			u.forget(child)
		}
	}
	return nil
}

// owner applies ownership and extended attributes. Both need root; without
// it the tree is still usable by the unpacking user, so they are skipped.
func (u *unpacker) owner(p string, h *tar.Header) error {
	if !u.asRoot {
		return nil
	}
	if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
		return err
	}
	for k, v := range h.PAXRecords {
		attr, ok := strings.CutPrefix(k, xattrPrefix)
		if !ok {
			continue
		}
		if !appliedXattr(attr) {
			if u.skippedXattrs++; u.firstSkipped == "" {
				u.firstSkipped = attr + " on " + strings.TrimPrefix(p, u.root)
			}
			continue
		}
		if err := unix.Lsetxattr(p, attr, []byte(v), 0); err != nil {
			slog.Debug("cannot set extended attribute from image layer", "path", p, "attr", attr, "err", err)
		}
	}
	return nil
}

func setTimes(p string, h *tar.Header) error {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
	if h.ModTime.Before(time.Unix(0, 0)) {
		ts[1] = unix.Timespec{}
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// finishDirs applies directory modes and times, deepest first so setting a
// parent's mtime comes after every change inside it.
func (u *unpacker) finishDirs() error {
	rels := make([]string, 0, len(u.dirs))
	for r := range u.dirs {
		rels = append(rels, r)
	}
	depth := func(r string) int {
		if r == "" {
			return -1
		}
		return strings.Count(r, "/")
	}
	slices.SortFunc(rels, func(a, b string) int { return depth(b) - depth(a) })
	if _, ok := u.dirs[""]; !ok {
		// No entry for the root: give it the usual mode of "/".
		if err := os.Chmod(u.root, 0o755); err != nil {
			return err
		}
	}
	for _, r := range rels {
		h := u.dirs[r]
		p := u.host(r)
		st, err := os.Lstat(p)
		if err != nil || !st.IsDir() {
			continue
		}
		if err := syscall.Chmod(p, uint32(h.Mode&0o7777)); err != nil {
			return err
		}
		if err := setTimes(p, h); err != nil {
			return err
		}
	}
	return nil
}
