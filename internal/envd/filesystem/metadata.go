package filesystem

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// xattrPrefix namespaces user metadata among a file's extended attributes.
// Keys are limited so prefix+key fits the 255-byte attribute-name limit.
const (
	xattrPrefix    = "user.e2b."
	MaxKeyLen      = 255 - len(xattrPrefix)
	MaxMetadataLen = 4096
)

// ValidateMetadata checks keys and values are printable ASCII and fit the
// limits extended attributes impose.
func ValidateMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		if k == "" || len(k) > MaxKeyLen {
			return fmt.Errorf("metadata key %q must have 1 to %d bytes", k, MaxKeyLen)
		}
		if !printable(k) || !printable(v) {
			return fmt.Errorf("metadata %q must be printable ASCII", k)
		}
		total += len(xattrPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataLen {
		return fmt.Errorf("metadata takes %d bytes, more than the %d a file can hold", total, MaxMetadataLen)
	}
	return nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// SetMetadata replaces the metadata of path with md.
func SetMetadata(path string, md map[string]string) error {
	old, err := Metadata(path)
	if err != nil && len(md) > 0 {
		return err
	}
	for k := range old {
		if _, keep := md[k]; !keep {
			if err := syscall.Removexattr(path, xattrPrefix+k); err != nil && !errors.Is(err, syscall.ENODATA) {
				return fmt.Errorf("remove metadata %q: %w", k, err)
			}
		}
	}
	for k, v := range md {
		if err := syscall.Setxattr(path, xattrPrefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("store metadata %q: %w", k, err)
		}
	}
	return nil
}

// Metadata reads the metadata of path.
func Metadata(path string) (map[string]string, error) {
	size, err := syscall.Listxattr(path, nil)
	if err != nil || size == 0 {
		if errors.Is(err, syscall.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	n, err := syscall.Listxattr(path, buf)
	if err != nil {
		return nil, err
	}
	md := map[string]string{}
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		key, ok := strings.CutPrefix(string(name), xattrPrefix)
		if !ok || key == "" {
			continue
		}
		vsize, err := syscall.Getxattr(path, string(name), nil)
		if err != nil {
			continue
		}
		val := make([]byte, vsize)
		vn, err := syscall.Getxattr(path, string(name), val)
		if err != nil {
			continue
		}
		md[key] = string(val[:vn])
	}
	return md, nil
}
