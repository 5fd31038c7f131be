// Package treecopy streams directory trees between hosts as one tar
// archive, keeping what a root filesystem needs kept: owners, modes
// (setuid included), times, symbolic and hard links, device nodes and
// FIFOs. A template's files move between the nodes of a cluster this way,
// and the CLI sends the files of a build's COPY step so.
//
// Extract writes only beneath its directory: entry names and hard-link
// targets must be relative paths without "..", and no path it creates,
// changes or links to is resolved through a symbolic link.
package treecopy

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Tree is one directory (or file) to write, under Name in the archive.
type Tree struct {
	Name string
	Path string
}

// Walk calls fn for every file of trees, the trees' roots included, with
// the name Write gives it in the archive, its path and its description.
// It follows no symbolic link. Whatever lists what an archive of trees
// holds (a manifest) walks them with it, so its names are the archive's.
func Walk(trees []Tree, fn func(name, p string, fi fs.FileInfo) error) error {
	for _, t := range trees {
		err := filepath.WalkDir(t.Path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(t.Path, p)
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			return fn(path.Join(t.Name, filepath.ToSlash(rel)), p, fi)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Write writes trees to w as a tar archive, each under its name. A file
// linked several times within the trees is written once and linked after.
func Write(w io.Writer, trees ...Tree) error {
	tw := tar.NewWriter(w)
	seen := map[[2]uint64]string{}
	err := Walk(trees, func(name, p string, fi fs.FileInfo) error {
		hdr, err := header(p, name, fi)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				seen[key] = hdr.Name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// WritePaths writes the files at paths, each relative to dir and with
// everything beneath it, to w as a tar archive whose names are relative
// to dir. The archive is named by its hash (a build's COPY files are),
// so its bytes depend only on the files: entries come in lexical order,
// owners are numbers, and every name of a file linked several times is
// written in full, since how files happen to be linked on one machine
// must not change the hash. A file is written at the size it had when
// its entry began, however it changes meanwhile.
func WritePaths(w io.Writer, dir string, paths ...string) error {
	tw := tar.NewWriter(w)
	for _, src := range paths {
		err := filepath.WalkDir(filepath.Join(dir, src), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			hdr, err := header(p, filepath.ToSlash(rel), fi)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if !fi.Mode().IsRegular() {
				return nil
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
				return fmt.Errorf("%s changed while being read: %w", p, err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return tw.Close()
}

// header is the entry of the file at p, which fi describes, under name.
func header(p, name string, fi fs.FileInfo) (*tar.Header, error) {
	link := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(p); err != nil {
			return nil, err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	// FileInfoHeader keeps the numeric owner; names would be this host's,
	// not the tree's.
	hdr.Name = name
	hdr.Uname, hdr.Gname = "", ""
	if fi.IsDir() {
		hdr.Name += "/"
	}
	return hdr, nil
}

// Extract writes the archive read from r beneath dir, which must exist,
// and returns the bytes of file content it wrote.
//
// The archive comes from another host and is not trusted. Each path is
// walked one element at a time from a descriptor of dir with O_NOFOLLOW,
// and each change (create, owner, mode, times, link) is made relative to
// the descriptor of the entry's own directory, never through a path the
// kernel resolves: a symbolic link, wherever the archive put it, is never
// followed, so no entry reaches outside dir through one. Names and link
// targets that are absolute or hold ".." are refused.
func Extract(r io.Reader, dir string) (int64, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(root)
	// Entries come grouped by directory, so a walker keeping the chain of
	// directories it opened last reopens little; link targets get their
	// own, which never creates.
	w := &walker{root: root, create: true}
	defer w.close()
	targets := &walker{root: root}
	defer targets.close()

	tr := tar.NewReader(r)
	var written int64
	type dirTime struct {
		name string
		path []string
		at   time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return written, err
		}
		elems, err := split(hdr.Name)
		if err != nil {
			return written, fmt.Errorf("archive entry %q %w", hdr.Name, err)
		}
		n, err := extract(tr, hdr, elems, w, targets)
		written += n
		if err != nil {
			return written, fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{hdr.Name, elems, hdr.ModTime})
		}
	}
	// A directory's time changes as entries are made in it: set them last,
	// deepest first.
	slices.Reverse(dirs)
	for _, d := range dirs {
		at, err := w.dir(d.path[:len(d.path)-1])
		if err == nil {
			err = setTimes(at, d.path[len(d.path)-1], d.at)
		}
		if err != nil {
			return written, fmt.Errorf("archive entry %q: %w", d.name, err)
		}
	}
	return written, nil
}

// extract makes one entry, named by elems, and returns the bytes of
// content it wrote.
func extract(tr *tar.Reader, hdr *tar.Header, elems []string, w, targets *walker) (int64, error) {
	// A tree written as a single file comes without its parents.
	at, err := w.dir(elems[:len(elems)-1])
	if err != nil {
		return 0, err
	}
	base := elems[len(elems)-1]
	// The mode bits tar keeps are chmod's: permissions, setuid, setgid,
	// sticky.
	mode := uint32(hdr.Mode) & 0o7777
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := unix.Mkdirat(at, base, 0o700); err != nil && err != unix.EEXIST {
			return 0, err
		}
		// An existing name must be a directory itself, not a link to one.
		fd, err := unix.Openat(at, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, notDir(at, base, err)
		}
		defer unix.Close(fd)
		return 0, ownAndMode(fd, hdr, mode)
	case tar.TypeReg:
		// O_EXCL: a name that exists, a symbolic link included, is an
		// error rather than something to open.
		fd, err := unix.Openat(at, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return 0, err
		}
		f := os.NewFile(uintptr(fd), hdr.Name)
		n, err := io.Copy(f, tr)
		if err == nil {
			err = ownAndMode(fd, hdr, mode)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return n, err
		}
		return n, setTimes(at, base, hdr.ModTime)
	case tar.TypeLink:
		telems, err := split(hdr.Linkname)
		if err != nil {
			return 0, fmt.Errorf("links to %q, which %w", hdr.Linkname, err)
		}
		tat, err := targets.dir(telems[:len(telems)-1])
		if err != nil {
			return 0, fmt.Errorf("links to %q: %w", hdr.Linkname, err)
		}
		// No AT_SYMLINK_FOLLOW: a target that is a symbolic link is
		// linked as the link itself.
		if err := unix.Linkat(tat, telems[len(telems)-1], at, base, 0); err != nil {
			return 0, fmt.Errorf("link to %q: %w", hdr.Linkname, err)
		}
		return 0, nil // the first name set the file's owner, mode and times
	case tar.TypeSymlink:
		if err := unix.Symlinkat(hdr.Linkname, at, base); err != nil {
			return 0, err
		}
		return 0, unix.Fchownat(at, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
		if err := unix.Mknodat(at, base, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return 0, err
		}
		// Opening a device or FIFO to change it by descriptor would act
		// on it, so these go by name. The name is the node just made,
		// which nothing in the archive can replace (no entry removes
		// one), so Linux's fchmodat, which has no AT_SYMLINK_NOFOLLOW,
		// finds no link to follow.
		if err := unix.Fchownat(at, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, err
		}
		if err := unix.Fchmodat(at, base, mode, 0); err != nil {
			return 0, err
		}
		return 0, setTimes(at, base, hdr.ModTime)
	default:
		return 0, fmt.Errorf("has type %q, which a root filesystem copy does not hold", hdr.Typeflag)
	}
}

// ownAndMode sets the owner, then the mode, of the open file fd: a chown
// clears setuid and setgid, so the mode comes after.
func ownAndMode(fd int, hdr *tar.Header, mode uint32) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// setTimes sets name's access and modification times, in the directory
// at, to t without following a symbolic link; a zero t leaves them.
func setTimes(at int, name string, t time.Time) error {
	ts := unix.Timespec{Sec: t.Unix(), Nsec: int64(t.Nanosecond())}
	if t.IsZero() {
		ts = unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	if err := unix.UtimesNanoAt(at, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// split returns the elements of an archive path, "." alone for the
// directory itself. Absolute paths and ".." elements are refused outright
// rather than cleaned: an archive holding them was not made by Write.
func split(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, errors.New("is absolute; archive paths are relative to the directory")
	}
	var elems []string
	for e := range strings.SplitSeq(name, "/") {
		switch e {
		case "", ".":
			continue
		case "..":
			return nil, errors.New(`holds "..", which an archive path may not`)
		}
		elems = append(elems, e)
	}
	if len(elems) == 0 {
		elems = []string{"."}
	}
	return elems, nil
}

// walker opens directories beneath a root descriptor one element at a
// time, never following a symbolic link, and keeps the chain it opened
// last: path[i] is open as fds[i].
type walker struct {
	root   int
	create bool // make missing directories (0755) instead of failing
	path   []string
	fds    []int
}

// dir returns a descriptor of the directory at elems beneath the root,
// which stays open until the next call. It fails, naming the element,
// when one is a symbolic link or not a directory.
func (w *walker) dir(elems []string) (int, error) {
	k := 0
	for k < len(elems) && k < len(w.path) && elems[k] == w.path[k] {
		k++
	}
	w.drop(k)
	for _, e := range elems[k:] {
		at := w.top()
		fd, err := unix.Openat(at, e, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && w.create {
			if err = unix.Mkdirat(at, e, 0o755); err == nil || err == unix.EEXIST {
				fd, err = unix.Openat(at, e, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			err = notDir(at, e, err)
			return -1, fmt.Errorf("%s: %w", path.Join(strings.Join(w.path, "/"), e), err)
		}
		w.path = append(w.path, e)
		w.fds = append(w.fds, fd)
	}
	return w.top(), nil
}

func (w *walker) top() int {
	if len(w.fds) == 0 {
		return w.root
	}
	return w.fds[len(w.fds)-1]
}

// drop closes the chain from its k-th directory on.
func (w *walker) drop(k int) {
	for _, fd := range w.fds[k:] {
		unix.Close(fd)
	}
	w.path, w.fds = w.path[:k], w.fds[:k]
}

func (w *walker) close() { w.drop(0) }

// errSymlink is a path element that is a symbolic link where the archive
// needs a directory.
var errSymlink = errors.New("is a symbolic link, which extraction never follows")

// notDir explains a failure to open name in at as a directory: a
// symbolic link there says so.
func notDir(at int, name string, err error) error {
	if err != unix.ENOTDIR && err != unix.ELOOP {
		return err
	}
	var st unix.Stat_t
	if unix.Fstatat(at, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errSymlink
	}
	return errors.New("is not a directory")
}
