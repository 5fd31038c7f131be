package teams

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnsureKeyFile returns the API key stored at path, creating the file (mode
// 0600, with a fresh NewKey) when it does not exist.
func EnsureKeyFile(path string) (key string, created bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil {
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", false, fmt.Errorf("API key file %s is empty", path)
		}
		return key, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, err
	}
	key = NewKey()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			// Another process made it first; use theirs.
			return EnsureKeyFile(path)
		}
		return "", false, err
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return "", false, err
	}
	if err := f.Close(); err != nil {
		return "", false, err
	}
	return key, true, nil
}
