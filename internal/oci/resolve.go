package oci

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// entryPath checks a member name and returns it cleaned and relative to the
// root ("" for the root itself).
func entryPath(name string) (string, error) {
	n := strings.TrimLeft(name, "/")
	if strings.ContainsRune(n, 0) {
		return "", fmt.Errorf("%w: entry %q has a NUL byte", ErrUnsafeLayer, name)
	}
	c := path.Clean(n)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: entry %q points outside the root filesystem; the image is broken or hostile", ErrUnsafeLayer, name)
	}
	if c == "." {
		return "", nil
	}
	return c, nil
}

// resolveDir follows rel inside the root the way the kernel would if the root
// were "/": symlinks, absolute or relative, never lead outside it. Missing
// components are kept as they are, to be created by the caller.
func (u *unpacker) resolveDir(rel string) (string, error) {
	resolved, todo, hops := "", rel, 0
	for todo != "" {
		var part string
		part, todo, _ = strings.Cut(todo, "/")
		switch part {
		case "", ".":
			continue
		case "..":
			resolved = path.Dir(resolved)
			if resolved == "." || resolved == "/" {
				resolved = ""
			}
			continue
		}
		next := path.Join(resolved, part)
		st, err := os.Lstat(u.host(next))
		if err != nil || st.Mode()&fs.ModeSymlink == 0 {
			resolved = next
			continue
		}
		if hops++; hops > 255 {
			return "", fmt.Errorf("%w: too many levels of symbolic links in %q", ErrUnsafeLayer, rel)
		}
		target, err := os.Readlink(u.host(next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			resolved = ""
		}
		todo = target + "/" + todo
	}
	return resolved, nil
}

func (u *unpacker) host(rel string) string { return filepath.Join(u.root, filepath.FromSlash(rel)) }

// locate returns the real relative path of an entry: its parent resolved
// inside the root, its last component taken literally.
func (u *unpacker) locate(rel string) (string, error) {
	dir, base := path.Split(rel)
	pd, err := u.resolveDir(dir)
	if err != nil {
		return "", err
	}
	return path.Join(pd, base), nil
}
