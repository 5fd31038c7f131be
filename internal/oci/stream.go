package oci

import (
	"context"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// progressReader counts compressed bytes for progress and stops the unpack
// when the context ends.
type progressReader struct {
	ctx      context.Context
	r        io.Reader
	done     int64
	reported int64
	total    int64
	fn       func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.done += int64(n)
	if p.fn != nil && (p.done-p.reported >= 1<<20 || err != nil) {
		p.reported = p.done
		p.fn(min(p.done, p.total), p.total)
	}
	return n, err
}

// streamLayer lets partial pick the decompressor for a stream we already
// opened (and count).
type streamLayer struct {
	l  v1.Layer
	rc io.ReadCloser
}

func (s streamLayer) Compressed() (io.ReadCloser, error)  { return s.rc, nil }
func (s streamLayer) Digest() (v1.Hash, error)            { return s.l.Digest() }
func (s streamLayer) Size() (int64, error)                { return s.l.Size() }
func (s streamLayer) MediaType() (types.MediaType, error) { return s.l.MediaType() }
