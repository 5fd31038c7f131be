package users

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// MakeDirs creates dir and whichever of its ancestors are missing, top
// down, each with mode 0755 (less the umask) and given to u (its uid and
// primary gid). It runs with envd's own identity, not u's: E2B's agent,
// which runs as root too, creates missing parents this way, and SDK code
// relies on it (a default user writing "/data/x.txt" into a fresh
// sandbox). Only directories are created here; files below them are
// still opened as u.
//
// Directories that already exist are left exactly as they are. A
// directory that appears meanwhile, created by a concurrent request, is
// fine: that request gives it to its own user. An ancestor that is not a
// directory is an error wrapping ENOTDIR.
func (u *User) MakeDirs(dir string) error {
	for _, p := range ancestors(dir) {
		if err := u.makeDir(p); err != nil {
			return err
		}
	}
	return nil
}

// ancestors lists the absolute path dir and the directories above it,
// outermost first, without the root directory.
func ancestors(dir string) []string {
	var out []string
	for p := filepath.Clean(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		out = append(out, p)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// makeDir makes sure p is a directory, creating it for u when missing.
func (u *User) makeDir(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err == nil:
		return isDir(p, fi)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		// Lost a race: whoever created it owns it.
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		return isDir(p, fi)
	}
	// Lchown: should p be swapped for a link in the meantime, the link,
	// not what it points at, changes owner.
	if err := u.Chown(p); err != nil {
		return fmt.Errorf("give new directory %s to %s: %w", p, u.Name, err)
	}
	return nil
}

func isDir(p string, fi fs.FileInfo) error {
	if fi.IsDir() {
		return nil
	}
	return fmt.Errorf("%s is not a directory, so nothing can be created below it: %w", p, syscall.ENOTDIR)
}
