package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// zerosLayer is a gzip layer holding files of n zero bytes each: a few
// kilobytes on the wire for any n, the shape of a decompression bomb.
func zerosLayer(t *testing.T, n int64, names ...string) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(zw)
	for _, name := range names {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: n, ModTime: testMtime}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(tw, zeroReader{}, n); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// wantLimit checks that err is a LimitError for limit at path, and that
// nothing of the image was left under roots.
func wantLimit(t *testing.T, err error, roots, limit, path string) {
	t.Helper()
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Unpack = %v, want a LimitError", err)
	}
	if le.Limit != limit || le.Path != path {
		t.Errorf("LimitError = %+v, want limit %s at %s", le, limit, path)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if got := dirEntries(t, roots); len(got) != 0 {
		t.Errorf("rootfs directory holds %v after a refused image", got)
	}
}

func TestGzipBombStopsAtFileLimit(t *testing.T) {
	// 256 MiB of zeros in about 250 KB of gzip.
	img := imageOf(t, []v1.Layer{zerosLayer(t, 256<<20, "bomb")}, v1.Config{})
	roots := rootsDir(t)
	_, err := UnpackLimited(context.Background(), img, roots, Limits{MaxFileBytes: 1 << 20}, nil)
	wantLimit(t, err, roots, LimitFile, "/bomb")
	if !strings.Contains(err.Error(), "256 MiB, over the per-file limit of 1 MiB") {
		t.Errorf("error %q does not give the size and the limit", err)
	}
}

func TestImageLimitCountsEveryLayer(t *testing.T) {
	// Four files of 1 MiB, two per layer: each is allowed, the third
	// crosses the 2.5 MiB image limit.
	img := imageOf(t, []v1.Layer{zerosLayer(t, 1<<20, "a", "b"), zerosLayer(t, 1<<20, "c", "d")}, v1.Config{})
	roots := rootsDir(t)
	_, err := UnpackLimited(context.Background(), img, roots, Limits{MaxBytes: 5 << 19, MaxFileBytes: 1 << 20}, nil)
	wantLimit(t, err, roots, LimitImage, "/c")

	// Within the limits the same image unpacks.
	rf, err := UnpackLimited(context.Background(), img, rootsDir(t), Limits{MaxBytes: 5 << 20, MaxFileBytes: 1 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(rf.Dir, "d")); err != nil || st.Size() != 1<<20 {
		t.Fatalf("d: %v %v", st, err)
	}
}

func TestManyEmptyFilesCountAgainstImageLimit(t *testing.T) {
	var ents []ent
	for i := range 300 {
		ents = append(ents, file(fmt.Sprintf("f%03d", i), 0o644, ""))
	}
	img := imageOf(t, []v1.Layer{gzipLayer(t, tarOf(t, ents...))}, v1.Config{})
	roots := rootsDir(t)
	_, err := UnpackLimited(context.Background(), img, roots, Limits{MaxBytes: 100 * 512}, nil)
	wantLimit(t, err, roots, LimitImage, "/f100") // 100 headers fill the limit exactly
}

func TestTrailingDataCountsAgainstImageLimit(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(tarOf(t, file("a", 0o644, "a")))
	io.CopyN(&buf, zeroReader{}, 1<<20) // past the end-of-archive blocks
	img := imageOf(t, []v1.Layer{gzipLayer(t, buf.Bytes())}, v1.Config{})
	roots := rootsDir(t)
	_, err := UnpackLimited(context.Background(), img, roots, Limits{MaxBytes: 64 << 10}, nil)
	wantLimit(t, err, roots, LimitImage, "")
}

// Extended headers carry no member size, but reading them costs like any
// data: a layer of empty files with large PAX records is stopped too.
func TestExtendedHeadersCountAgainstImageLimit(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range 20 {
		h := &tar.Header{Name: fmt.Sprintf("f%02d", i), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"comment": strings.Repeat("x", 200<<10)}}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	img := imageOf(t, []v1.Layer{gzipLayer(t, buf.Bytes())}, v1.Config{})
	roots := rootsDir(t)
	_, err := UnpackLimited(context.Background(), img, roots, Limits{MaxBytes: 64 << 10}, nil)
	wantLimit(t, err, roots, LimitImage, "")
}

// Raw tar building, for the sparse encodings archive/tar cannot write.

func octal(b []byte, v int64) { copy(b, fmt.Sprintf("%0*o\x00", len(b)-1, v)) }

// rawHeader is a ustar (or, with gnu, old GNU) header block.
func rawHeader(name string, typ byte, size int64, gnu bool) []byte {
	b := make([]byte, 512)
	copy(b, name)
	octal(b[100:108], 0o644)
	octal(b[108:116], 0)
	octal(b[116:124], 0)
	octal(b[124:136], size)
	octal(b[136:148], testMtime.Unix())
	b[156] = typ
	if gnu {
		copy(b[257:], "ustar  \x00")
	} else {
		copy(b[257:], "ustar\x0000")
	}
	return b
}

func checksum(b []byte) {
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
}

func padded(b []byte) []byte {
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

func paxRecord(k, v string) string {
	rec := " " + k + "=" + v + "\n"
	n := len(rec) + 1
	for len(fmt.Sprint(n))+len(rec) != n {
		n++
	}
	return fmt.Sprint(n) + rec
}

// sparseTar is a layer with one sparse file of 256 MiB that stores only 4
// bytes, in GNU tar's PAX 1.0 encoding or its old GNU one.
func sparseTar(kind string) []byte {
	const real = 256 << 20
	var out []byte
	switch kind {
	case "pax":
		recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
			paxRecord("GNU.sparse.name", "holes") + paxRecord("GNU.sparse.realsize", fmt.Sprint(real))
		x := rawHeader("PaxHeaders/holes", tar.TypeXHeader, int64(len(recs)), false)
		checksum(x)
		sparseMap := padded([]byte(fmt.Sprintf("1\n%d\n4\n", real-4)))
		h := rawHeader("GNUSparseFile.0/holes", tar.TypeReg, int64(len(sparseMap)+4), false)
		checksum(h)
		out = append(append(append(append(out, x...), padded([]byte(recs))...), h...), sparseMap...)
	case "gnu":
		h := rawHeader("holes", tar.TypeGNUSparse, 4, true)
		octal(h[386:398], real-4) // first sparse entry: offset
		octal(h[398:410], 4)      // and length
		octal(h[483:495], real)   // real size
		checksum(h)
		out = append(out, h...)
	}
	out = append(out, padded([]byte("data"))...)
	return append(out, make([]byte, 1024)...)
}

func TestSparseFilesRefused(t *testing.T) {
	for _, kind := range []string{"pax", "gnu"} {
		t.Run(kind, func(t *testing.T) {
			raw := sparseTar(kind)
			// archive/tar reads it as a 256 MiB file: the fixture is right.
			h, err := tar.NewReader(bytes.NewReader(raw)).Next()
			if err != nil || h.Name != "holes" || h.Size != 256<<20 {
				t.Fatalf("fixture reads as %+v, %v", h, err)
			}
			img := imageOf(t, []v1.Layer{gzipLayer(t, raw)}, v1.Config{})
			roots := rootsDir(t)
			_, err = Unpack(context.Background(), img, roots, nil)
			if !errors.Is(err, ErrUnsafeLayer) || !strings.Contains(err.Error(), "/holes is a sparse file") {
				t.Fatalf("Unpack = %v, want a refused sparse file", err)
			}
			if got := dirEntries(t, roots); len(got) != 0 {
				t.Errorf("rootfs directory holds %v after a refused image", got)
			}
		})
	}
}

func TestOnlyUserXattrsApplied(t *testing.T) {
	if !isRoot() {
		t.Skip("extended attributes are applied only as root")
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: testMtime})
	tw.WriteHeader(&tar.Header{Name: "bin/tool", Typeflag: tar.TypeReg, Mode: 0o755, Size: 2, ModTime: testMtime, Format: tar.FormatPAX,
		PAXRecords: map[string]string{
			xattrPrefix + "user.origin":         "layer",
			xattrPrefix + "security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", // cap_net_raw+ep
			xattrPrefix + "trusted.overlay":     "y",
		}})
	tw.Write([]byte("#!"))
	tw.Close()
	img := imageOf(t, []v1.Layer{gzipLayer(t, buf.Bytes())}, v1.Config{})
	// As an older version left it: readable by everyone.
	roots := filepath.Join(rootsDir(t), "rootfs")
	if err := os.Mkdir(roots, 0o755); err != nil {
		t.Fatal(err)
	}
	rf, err := Unpack(context.Background(), img, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(rf.Dir, "bin/tool")
	if v, err := getxattr(p, "user.origin"); err != nil || string(v) != "layer" {
		t.Errorf("user.origin = %q, %v; want it applied", v, err)
	}
	for _, attr := range []string{"security.capability", "trusted.overlay"} {
		if v, err := getxattr(p, attr); !errors.Is(err, unix.ENODATA) {
			t.Errorf("%s = %q, %v; want it not applied", attr, v, err)
		}
	}
	// The tree is not reachable by other host users; the image's root
	// keeps its usual mode inside it.
	for p, want := range map[string]os.FileMode{roots: 0o700, rf.Dir: 0o755} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
}
