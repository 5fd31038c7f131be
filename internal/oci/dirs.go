package oci

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// PrivateDir creates dir if needed and makes it mode 0700, also when an
// older version created it more open.
func PrivateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// Sweep removes temp directories that interrupted unpacks left in
// rootfsRoot. Call it only while no Unpack runs, e.g. at server start.
func Sweep(rootfsRoot string) error {
	ents, err := os.ReadDir(rootfsRoot)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			errs = append(errs, removeTree(filepath.Join(rootfsRoot, e.Name())))
		}
	}
	return errors.Join(errs...)
}

// removeTree is os.RemoveAll that also copes, when not root, with
// directories whose image mode denies writing.
func removeTree(dir string) error {
	if os.RemoveAll(dir) == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
