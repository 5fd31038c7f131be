package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// blobCache keeps compressed layers as dir/blobs/sha256/<hex>, the same shape
// as an OCI layout. A blob only appears under its name after its content was
// verified, and a cached blob is verified again on every read, so neither an
// interrupted download nor a damaged disk can feed bad bytes to an unpack.
type blobCache struct{ dir string }

func newBlobCache(dir string) blobCache { return blobCache{dir: filepath.Join(dir, "blobs")} }

func (c blobCache) path(h v1.Hash) string { return filepath.Join(c.dir, h.Algorithm, h.Hex) }

func cachedImage(img v1.Image, c blobCache) v1.Image { return &cacheImage{Image: img, c: c} }

type cacheImage struct {
	v1.Image
	c blobCache
}

func (i *cacheImage) Layers() ([]v1.Layer, error) {
	ls, err := i.Image.Layers()
	if err != nil {
		return nil, err
	}
	out := make([]v1.Layer, len(ls))
	for j, l := range ls {
		out[j] = &cacheLayer{Layer: l, c: i.c}
	}
	return out, nil
}

type cacheLayer struct {
	v1.Layer
	c blobCache
}

func (l *cacheLayer) Compressed() (io.ReadCloser, error) {
	d, err := l.Digest()
	if err != nil {
		return nil, err
	}
	if _, err := v1.NewHash(d.String()); err != nil || d.Algorithm != "sha256" {
		return nil, fmt.Errorf("%w: layer digest %q", ErrCorrupt, d)
	}
	size, err := l.Size()
	if err != nil {
		return nil, err
	}
	p := l.c.path(d)
	if f, err := os.Open(p); err == nil {
		vr, err := newVerifyReader(f, d, size, "cached layer "+d.String())
		if err != nil {
			f.Close()
			return nil, err
		}
		return &cachedReader{vr: vr, f: f, path: p}, nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("blob cache: %w", err)
	}
	rc, err := l.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	vr, err := newVerifyReader(rc, d, size, "layer "+d.String())
	if err != nil {
		rc.Close()
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+d.Hex+"-")
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("blob cache: %w", err)
	}
	return &fillReader{vr: vr, src: rc, tmp: tmp, final: p}, nil
}

func (l *cacheLayer) Uncompressed() (io.ReadCloser, error) {
	cl, err := partial.CompressedToLayer(compressedOnly{l})
	if err != nil {
		return nil, err
	}
	return cl.Uncompressed()
}

// compressedOnly hides every method but the CompressedLayer ones, so partial
// decompresses what our Compressed returns.
type compressedOnly struct{ l v1.Layer }

func (c compressedOnly) Digest() (v1.Hash, error)            { return c.l.Digest() }
func (c compressedOnly) DiffID() (v1.Hash, error)            { return c.l.DiffID() }
func (c compressedOnly) Compressed() (io.ReadCloser, error)  { return c.l.Compressed() }
func (c compressedOnly) Size() (int64, error)                { return c.l.Size() }
func (c compressedOnly) MediaType() (types.MediaType, error) { return c.l.MediaType() }

// cachedReader reads a cached blob and drops it from the cache if it no
// longer matches its digest, so the next pull downloads it again.
type cachedReader struct {
	vr   *verifyReader
	f    *os.File
	path string
}

func (r *cachedReader) Read(p []byte) (int, error) {
	n, err := r.vr.Read(p)
	if errors.Is(err, ErrCorrupt) {
		os.Remove(r.path)
		err = fmt.Errorf("%w (removed it from the cache; pull again)", err)
	}
	return n, err
}

func (r *cachedReader) Close() error { return r.f.Close() }

// fillReader passes a download through while writing it to a temp file that
// is renamed into the cache only once the whole blob verified.
type fillReader struct {
	vr    *verifyReader
	src   io.Closer
	tmp   *os.File
	final string
	err   error
	done  bool
}

func (r *fillReader) Read(p []byte) (int, error) {
	n, err := r.vr.Read(p)
	if n > 0 && r.err == nil {
		if _, werr := r.tmp.Write(p[:n]); werr != nil {
			r.err = werr // the cache is best effort; the pull goes on
		}
	}
	if err == io.EOF && r.err == nil && !r.done {
		r.done = true
		if cerr := r.tmp.Close(); cerr == nil {
			if os.Rename(r.tmp.Name(), r.final) == nil {
				return n, err
			}
		}
		os.Remove(r.tmp.Name())
	}
	return n, err
}

func (r *fillReader) Close() error {
	if !r.done {
		r.done = true
		r.tmp.Close()
		os.Remove(r.tmp.Name())
	}
	return r.src.Close()
}

// Fetch downloads the layers of an image opened with PullOptions.CacheDir
// into the cache, so a build can show pulling and unpacking as separate
// phases with their own progress. Layers already cached count as done at
// once. For images from local sources Fetch returns at once: their layers
// are on disk already, and Unpack reads them in place.
func Fetch(ctx context.Context, img v1.Image, progress func(done, total int64)) error {
	ci, ok := img.(*cacheImage)
	if !ok {
		return nil
	}
	ls, err := ci.Layers()
	if err != nil {
		return fmt.Errorf("listing layers: %w", err)
	}
	var total int64
	for _, l := range ls {
		n, err := l.Size()
		if err != nil {
			return err
		}
		total += n
	}
	pr := &progressReader{ctx: ctx, total: total, fn: progress}
	for i, l := range ls {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if _, err := os.Stat(ci.c.path(d)); err == nil {
			n, _ := l.Size()
			pr.done += n
			continue
		}
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("layer %d of %d (%s): %w", i+1, len(ls), d, err)
		}
		pr.r = rc
		_, err = io.Copy(io.Discard, pr)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d of %d (%s): %w", i+1, len(ls), d, err)
		}
	}
	if progress != nil {
		progress(total, total)
	}
	return nil
}
