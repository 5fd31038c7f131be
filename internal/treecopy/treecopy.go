// Package treecopy streams directory trees between hosts as one tar
// archive, keeping what a root filesystem needs kept: owners, modes
// (setuid included), times, symbolic and hard links, device nodes and
// FIFOs. A template's files move between the nodes of a cluster this way.
//
// Extract writes only beneath its directory: entry names and hard-link
// targets must be local paths, and nothing is written through a symbolic
// link the archive made.
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

// Write writes trees to w as a tar archive, each under its name. A file
// linked several times within the trees is written once and linked after.
func Write(w io.Writer, trees ...Tree) error {
	tw := tar.NewWriter(w)
	seen := map[[2]uint64]string{}
	for _, t := range trees {
		err := filepath.WalkDir(t.Path, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(t.Path, p)
			if err != nil {
				return err
			}
			name := path.Join(t.Name, filepath.ToSlash(rel))
			fi, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if fi.Mode()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			hdr, err := tar.FileInfoHeader(fi, link)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			// FileInfoHeader keeps the numeric owner; names would be
			// this host's, not the tree's.
			hdr.Name = name
			hdr.Uname, hdr.Gname = "", ""
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
				key := [2]uint64{st.Dev, st.Ino}
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = name
				}
			}
			if fi.IsDir() {
				hdr.Name += "/"
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
	}
	return tw.Close()
}

// Extract writes the archive read from r beneath dir, which must exist,
// and returns the bytes of file content it wrote.
func Extract(r io.Reader, dir string) (int64, error) {
	tr := tar.NewReader(r)
	var written int64
	type dirTime struct {
		path string
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
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return written, fmt.Errorf("archive entry %q leaves the directory", hdr.Name)
		}
		p := filepath.Join(dir, name)
		if err := noLinkIn(dir, filepath.Dir(p)); err != nil {
			return written, err
		}
		// A tree written as a single file comes without its parents.
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return written, err
		}
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return written, err
			}
			dirs = append(dirs, dirTime{p, hdr.ModTime})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return written, err
			}
			n, err := io.Copy(f, tr)
			written += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return written, err
			}
		case tar.TypeLink:
			target := path.Clean(hdr.Linkname)
			if !filepath.IsLocal(target) {
				return written, fmt.Errorf("archive link %q → %q leaves the directory", hdr.Name, hdr.Linkname)
			}
			if err := os.Link(filepath.Join(dir, target), p); err != nil {
				return written, err
			}
			continue // the first name set the file's owner, mode and times
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return written, err
			}
			if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
				return written, err
			}
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
			if err := unix.Mknod(p, kind|0o600, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return written, err
			}
		default:
			return written, fmt.Errorf("archive entry %q has type %q, which a root filesystem copy does not hold", hdr.Name, hdr.Typeflag)
		}
		// Owner before mode: a chown clears setuid and setgid.
		if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return written, err
		}
		if err := os.Chmod(p, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return written, err
		}
		if hdr.Typeflag != tar.TypeDir {
			if err := os.Chtimes(p, hdr.ModTime, hdr.ModTime); err != nil {
				return written, err
			}
		}
	}
	// A directory's time changes as entries are made in it: set them last,
	// deepest first.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := os.Chtimes(d.path, d.at, d.at); err != nil {
			return written, err
		}
	}
	return written, nil
}

// noLinkIn fails when a directory between dir and p is a symbolic link,
// so an archive cannot write through a link it made.
func noLinkIn(dir, p string) error {
	rel, err := filepath.Rel(dir, p)
	if err != nil || rel == "." {
		return err
	}
	cur := dir
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("archive writes through the symbolic link %s", cur)
		}
	}
	return nil
}
