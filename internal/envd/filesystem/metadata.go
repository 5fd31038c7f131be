package filesystem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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

// SetMetadata replaces the metadata of the open file f with md. It works
// on the descriptor, so it changes the file that was opened even when its
// path has since been made to lead elsewhere (a directory swapped for a
// symlink), and the kernel checks the permissions of whoever calls it.
func SetMetadata(f *os.File, md map[string]string) error {
	fd := int(f.Fd())
	names, err := fileXattrNames(fd)
	if err != nil && len(md) > 0 {
		return err
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, xattrPrefix)
		if !ok || key == "" {
			continue
		}
		if _, keep := md[key]; keep {
			continue
		}
		if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
			return fmt.Errorf("remove metadata %q: %w", key, err)
		}
	}
	for k, v := range md {
		if err := unix.Fsetxattr(fd, xattrPrefix+k, []byte(v), 0); err != nil {
			return fmt.Errorf("store metadata %q: %w", k, err)
		}
	}
	return nil
}

// fileXattrNames lists the extended attributes of an open file; none when
// its file system has no support for them.
func fileXattrNames(fd int) ([]string, error) {
	for {
		size, err := unix.Flistxattr(fd, nil)
		if errors.Is(err, unix.ENOTSUP) || (err == nil && size == 0) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		n, err := unix.Flistxattr(fd, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // attributes were added meanwhile
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, name := range bytes.Split(buf[:n], []byte{0}) {
			if len(name) > 0 {
				names = append(names, string(name))
			}
		}
		return names, nil
	}
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
