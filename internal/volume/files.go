package volume

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/cube"
)

// Default modes of what the content API creates without one.
const (
	DefaultFileMode = 0o644
	DefaultDirMode  = 0o755
	// MaxDepth bounds a recursive listing.
	MaxDepth = 10
)

// Files is the content of one mounted volume, opened as an os.Root: every
// operation resolves its path inside the volume's root, and neither ".."
// nor a symlink (made inside a sandbox, say) leads out of it; such a path
// fails instead of reaching the host.
type Files struct {
	root *os.Root
}

// OpenFiles opens the content of the volume mounted at dir.
func OpenFiles(dir string) (*Files, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Files{root: r}, nil
}

// Close releases the volume's root.
func (f *Files) Close() error { return f.root.Close() }

// rel turns an API path into a path relative to the root ("." for the
// root itself). A path that climbs out with ".." is refused here, before
// anything is opened.
func rel(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", cube.Errorf(cube.Invalid, "path holds a NUL byte").WithField("path")
	}
	clean := path.Clean("/" + p)
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", cube.Errorf(cube.Invalid, "path %q leaves the volume through '..': give a path inside the volume, such as /dir/file", p).WithField("path")
		}
	}
	if clean == "/" {
		return ".", nil
	}
	return clean[1:], nil
}

// apiPath is the path the API reports for r.
func apiPath(r string) string {
	if r == "." {
		return "/"
	}
	return "/" + r
}

// Stat describes the entry at p without following a final symlink.
func (f *Files) Stat(p string) (*cube.VolumeEntry, error) {
	r, err := rel(p)
	if err != nil {
		return nil, err
	}
	return f.entry(r, p)
}

func (f *Files) entry(r, asked string) (*cube.VolumeEntry, error) {
	fi, err := f.root.Lstat(r)
	if err != nil {
		return nil, fileError(asked, err)
	}
	e := toEntry(apiPath(r), fi)
	if fi.Mode()&fs.ModeSymlink != 0 {
		e.Target, _ = f.root.Readlink(r)
	}
	return &e, nil
}

// List returns the entries of the directory p, and of its subdirectories
// down to depth levels (1: the directory's own entries).
func (f *Files) List(p string, depth int) ([]cube.VolumeEntry, error) {
	if depth == 0 {
		depth = 1
	}
	if depth < 1 || depth > MaxDepth {
		return nil, cube.Errorf(cube.Invalid, "depth %d is out of range: give 1 to %d", depth, MaxDepth).WithField("depth")
	}
	r, err := rel(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.root.Lstat(r)
	if err != nil {
		return nil, fileError(p, err)
	}
	if !fi.IsDir() {
		return nil, cube.Errorf(cube.Invalid, "path %q is not a directory", p).WithField("path")
	}
	out := []cube.VolumeEntry{}
	return out, f.list(r, depth, &out)
}

func (f *Files) list(r string, depth int, out *[]cube.VolumeEntry) error {
	d, err := f.root.Open(r)
	if err != nil {
		return fileError(apiPath(r), err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fileError(apiPath(r), err)
	}
	for _, name := range names {
		child := path.Join(r, name)
		e, err := f.entry(child, apiPath(child))
		if cube.KindOf(err) == cube.NotFound {
			continue // removed while listing
		}
		if err != nil {
			return err
		}
		*out = append(*out, *e)
		if e.Type == "directory" && depth > 1 {
			if err := f.list(child, depth-1, out); err != nil && cube.KindOf(err) != cube.NotFound {
				return err
			}
		}
	}
	return nil
}

// MakeDir creates the directory p; with w.Force its missing parents too,
// and an existing directory is then no error.
func (f *Files) MakeDir(p string, w cube.VolumeWrite) (*cube.VolumeEntry, error) {
	r, err := rel(p)
	if err != nil {
		return nil, err
	}
	if r == "." {
		return nil, cube.Errorf(cube.Conflict, "the volume's root exists already")
	}
	mode := modeOr(w.Mode, DefaultDirMode)
	if w.Force {
		if err := f.makeParents(path.Dir(r), w); err != nil {
			return nil, err
		}
	}
	if err := f.root.Mkdir(r, mode); err != nil {
		if w.Force && errors.Is(err, fs.ErrExist) {
			if fi, serr := f.root.Lstat(r); serr == nil && fi.IsDir() {
				return f.entry(r, p)
			}
		}
		return nil, fileError(p, err)
	}
	if err := f.own(r, w, mode); err != nil {
		return nil, err
	}
	return f.entry(r, p)
}

// makeParents creates the missing directories of r, owned as w says.
func (f *Files) makeParents(r string, w cube.VolumeWrite) error {
	if r == "." {
		return nil
	}
	if fi, err := f.root.Stat(r); err == nil {
		if !fi.IsDir() {
			return cube.Errorf(cube.Invalid, "%s is not a directory", apiPath(r)).WithField("path")
		}
		return nil
	}
	if err := f.makeParents(path.Dir(r), w); err != nil {
		return err
	}
	if err := f.root.Mkdir(r, DefaultDirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return fileError(apiPath(r), err)
	}
	return f.own(r, cube.VolumeWrite{UID: w.UID, GID: w.GID}, DefaultDirMode)
}

// own sets r's owner and mode (Mkdir and OpenFile apply the umask).
func (f *Files) own(r string, w cube.VolumeWrite, mode os.FileMode) error {
	if err := f.root.Lchown(r, int(idOr(w.UID, OwnerUID)), int(idOr(w.GID, OwnerGID))); err != nil {
		return fileError(apiPath(r), err)
	}
	if err := f.root.Chmod(r, mode); err != nil {
		return fileError(apiPath(r), err)
	}
	return nil
}

// WriteFile writes body to the file p, which must not exist unless
// w.Force (then it is replaced, and missing parents are made). The data
// is synced before the entry is returned.
func (f *Files) WriteFile(p string, body io.Reader, w cube.VolumeWrite) (*cube.VolumeEntry, error) {
	r, err := rel(p)
	if err != nil {
		return nil, err
	}
	if r == "." {
		return nil, cube.Errorf(cube.Invalid, "path %q is the volume's root, not a file", p).WithField("path")
	}
	mode := modeOr(w.Mode, DefaultFileMode)
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if w.Force {
		if err := f.makeParents(path.Dir(r), w); err != nil {
			return nil, err
		}
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	file, err := f.root.OpenFile(r, flags|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return nil, fileError(p, err)
	}
	_, err = io.Copy(file, body)
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fileError(p, err)
	}
	if err := f.own(r, w, mode); err != nil {
		return nil, err
	}
	return f.entry(r, p)
}

// ReadFile opens the regular file p. A symlink is followed only while
// it stays inside the volume.
func (f *Files) ReadFile(p string) (io.ReadCloser, *cube.VolumeEntry, error) {
	r, err := rel(p)
	if err != nil {
		return nil, nil, err
	}
	file, err := f.root.Open(r)
	if err != nil {
		return nil, nil, fileError(p, err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, nil, fileError(p, err)
	}
	if !fi.Mode().IsRegular() {
		file.Close()
		return nil, nil, cube.Errorf(cube.Invalid, "path %q is not a regular file", p).WithField("path")
	}
	e := toEntry(apiPath(r), fi)
	return file, &e, nil
}

// Remove deletes the entry at p, a directory with everything in it. A
// symlink is removed itself, never what it points to.
func (f *Files) Remove(p string) error {
	r, err := rel(p)
	if err != nil {
		return err
	}
	if r == "." {
		return cube.Errorf(cube.Invalid, "the volume's root cannot be removed: remove what is in it, or delete the volume").WithField("path")
	}
	if _, err := f.root.Lstat(r); err != nil {
		return fileError(p, err)
	}
	if err := f.root.RemoveAll(r); err != nil {
		return fileError(p, err)
	}
	return nil
}

// SetAttr changes the owner and mode of the entry at p (of a symlink's
// own owner; a symlink has no mode to change).
func (f *Files) SetAttr(p string, a cube.VolumeAttr) (*cube.VolumeEntry, error) {
	r, err := rel(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.root.Lstat(r)
	if err != nil {
		return nil, fileError(p, err)
	}
	if a.UID != nil || a.GID != nil {
		st := fi.Sys().(*syscall.Stat_t)
		uid, gid := idOr(a.UID, st.Uid), idOr(a.GID, st.Gid)
		if err := f.root.Lchown(r, int(uid), int(gid)); err != nil {
			return nil, fileError(p, err)
		}
	}
	if a.Mode != nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil, cube.Errorf(cube.Invalid, "path %q is a symlink, which has no mode of its own", p).WithField("mode")
		}
		if err := f.root.Chmod(r, modeOr(a.Mode, 0)); err != nil {
			return nil, fileError(p, err)
		}
	}
	return f.entry(r, p)
}

func idOr(v *uint32, def uint32) uint32 {
	if v == nil {
		return def
	}
	return *v
}

// modeOr turns a numeric mode (permission and setuid/setgid/sticky bits)
// into an os.FileMode.
func modeOr(v *uint32, def uint32) os.FileMode {
	m := idOr(v, def)
	mode := os.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= os.ModeSticky
	}
	return mode
}

func toEntry(p string, fi fs.FileInfo) cube.VolumeEntry {
	e := cube.VolumeEntry{Name: path.Base(p), Path: p, Size: fi.Size(), Mode: fi.Mode(), Mtime: fi.ModTime().UTC()}
	if p == "/" {
		e.Name = "/"
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
	default:
		e.Type = "unknown"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	return e
}

// fileError turns a failed operation on p into an error of the kind the
// user can act on.
func fileError(p string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cube.Errorf(cube.NotFound, "path %q not found in the volume", p)
	case errors.Is(err, fs.ErrExist):
		return cube.Errorf(cube.Conflict, "path %q exists already: pass force=true to replace a file", p)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return cube.Errorf(cube.DiskFull, "the volume is full: remove files from it or create a larger volume")
	case errors.Is(err, syscall.ENOTDIR):
		return cube.Errorf(cube.Invalid, "a component of path %q is not a directory", p).WithField("path")
	case errors.Is(err, syscall.EISDIR):
		return cube.Errorf(cube.Invalid, "path %q is a directory", p).WithField("path")
	case errors.Is(err, syscall.ELOOP):
		return cube.Errorf(cube.Invalid, "path %q is a symlink, which is not followed here", p).WithField("path")
	case errors.Is(err, syscall.ENAMETOOLONG):
		return cube.Errorf(cube.Invalid, "path %q is too long", p).WithField("path")
	case isEscape(err):
		return cube.Errorf(cube.Invalid, "path %q resolves outside the volume (through a symlink or '..'); only paths inside the volume are served", p).WithField("path")
	}
	return fmt.Errorf("volume path %q: %w", p, err)
}

// isEscape reports whether err is os.Root refusing a path that leaves it.
func isEscape(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}
