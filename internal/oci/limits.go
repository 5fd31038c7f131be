package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits bound what unpacking one image may write. A layer is small on the
// wire but can expand without bound (a gzip of zeros, a sparse file whose
// holes would be written out densely), and every byte lands on the disk
// that also holds the server's state, so both totals are capped.
type Limits struct {
	// MaxBytes bounds the uncompressed data of all layers together: file
	// contents, tar headers and anything skipped, counted as read (a file
	// replaced by a later layer counts twice). 0 means DefaultMaxImageBytes.
	MaxBytes int64
	// MaxFileBytes bounds one file. 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
}

// Defaults of Limits. An image is far larger than a sandbox's 2 GiB of
// memory or its 1 GiB writable layer only when something is wrong, and the
// largest common base images unpack to a few GiB; a single file larger than
// the memory of the default template could not be loaded by it anyway.
const (
	DefaultMaxImageBytes int64 = 8 << 30
	DefaultMaxFileBytes  int64 = 2 << 30
)

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxImageBytes
	}
	if l.MaxFileBytes <= 0 {
		l.MaxFileBytes = DefaultMaxFileBytes
	}
	return l
}

// ErrTooLarge is wrapped by a LimitError.
var ErrTooLarge = errors.New("image too large")

// Which limit a LimitError hit.
const (
	LimitImage = "image"
	LimitFile  = "file"
)

// LimitError says which limit an unpack hit and where, so the caller can
// name the setting that raises it.
type LimitError struct {
	Limit string // LimitImage or LimitFile
	Max   int64
	// Path is the file being unpacked, absolute inside the image; empty
	// when the excess was data outside any file (such as after a layer's
	// end).
	Path string
	// Size is the file's size (LimitFile only).
	Size int64
}

func (e *LimitError) Error() string {
	if e.Limit == LimitFile {
		return fmt.Sprintf("%v: file %s is %s, over the per-file limit of %s", ErrTooLarge, e.Path, HumanBytes(e.Size), HumanBytes(e.Max))
	}
	if e.Path == "" {
		return fmt.Sprintf("%v: its layers unpack to more than the limit of %s", ErrTooLarge, HumanBytes(e.Max))
	}
	return fmt.Sprintf("%v: its layers unpack to more than the limit of %s (reached at file %s)", ErrTooLarge, HumanBytes(e.Max), e.Path)
}

func (e *LimitError) Unwrap() error { return ErrTooLarge }

// HumanBytes prints n in the largest binary unit that keeps it at least 1.
func HumanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/1024, 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %ciB", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

// budget tracks an unpack's use of its Limits.
type budget struct {
	lim  Limits
	used int64 // charged by take: headers and member sizes
	read int64 // read by meter: every uncompressed byte of the layers
}

// headerBytes is what every tar member costs at least: its header block.
// Counting it bounds a layer of millions of empty files too.
const headerBytes = 512

// take charges one tar member, before anything of it is written.
func (b *budget) take(rel string, h *tar.Header) error {
	size := int64(0)
	if carriesData(h.Typeflag) {
		size = max(h.Size, 0)
	}
	if h.Typeflag == tar.TypeReg && size > b.lim.MaxFileBytes {
		return &LimitError{Limit: LimitFile, Max: b.lim.MaxFileBytes, Path: "/" + rel, Size: size}
	}
	if size > b.lim.MaxBytes-b.used-headerBytes {
		return &LimitError{Limit: LimitImage, Max: b.lim.MaxBytes, Path: "/" + rel}
	}
	b.used += headerBytes + size
	return nil
}

// remaining is what may still be read of uncompressed data.
func (b *budget) remaining() int64 { return max(b.lim.MaxBytes-max(b.used, b.read), 0) }

// meter counts the uncompressed bytes of layers as they are read, and
// stops a little past the image limit. take charges each member before it
// is written and names the file that crossed the limit; this catches what
// no member's size covers: PAX records and long names (up to 1 MiB a
// header), which compress as well as zeros. The slack of one such header
// lets take speak first wherever it can.
type meter struct {
	r io.Reader
	b *budget
}

// meterSlack is one maximal extended header (archive/tar reads up to 1 MiB
// of PAX records or long names) and its blocks.
const meterSlack = 1<<20 + 2*headerBytes

func (m *meter) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	m.b.read += int64(n)
	if m.b.read > m.b.lim.MaxBytes+meterSlack {
		return n, &LimitError{Limit: LimitImage, Max: m.b.lim.MaxBytes}
	}
	return n, err
}

// carriesData reports whether archive/tar reads a data section for a member
// of this type; links, directories and device nodes have none whatever
// their header says.
func carriesData(typ byte) bool {
	switch typ {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return false
	}
	return true
}

// sparse reports whether a member is a sparse file in any of GNU tar's
// encodings. archive/tar would hand back its holes as zeros, to be written
// out densely: a few bytes of layer could fill the disk.
func sparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// xattrPrefix marks the PAX records that carry extended attributes.
const xattrPrefix = "SCHILY.xattr."

// appliedXattr reports whether an image's extended attribute is applied.
// Only user.* ones are: security.* (capabilities, SELinux labels),
// trusted.* and system.* (ACLs) grant or change privileges on the host's
// copy of the file, which an image must not decide.
func appliedXattr(attr string) bool { return strings.HasPrefix(attr, "user.") }
