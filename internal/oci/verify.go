package oci

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// verifyReader hashes what passes through it and, at EOF, fails unless the
// content matched the expected digest and size. Callers act on the content
// only after a clean EOF, so a wrong byte never goes unnoticed.
type verifyReader struct {
	r    io.Reader
	want v1.Hash
	size int64 // -1 when unknown
	what string
	h    hash.Hash
	n    int64
	done bool
	// err is sticky: a reader such as io.ReadFull drops an error that
	// arrives with enough bytes, so the next Read must report it again.
	err error
}

func newVerifyReader(r io.Reader, want v1.Hash, size int64, what string) (*verifyReader, error) {
	if want.Algorithm != "sha256" {
		return nil, fmt.Errorf("%w: %s has digest %s: only sha256 is supported", ErrCorrupt, what, want)
	}
	return &verifyReader{r: r, want: want, size: size, what: what, h: sha256.New()}, nil
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.read(p)
	if err != nil && err != io.EOF {
		v.err = err
	}
	return n, err
}

func (v *verifyReader) read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if v.size >= 0 && v.n > v.size {
		return n, fmt.Errorf("%w: %s is larger than the %d bytes its descriptor says", ErrCorrupt, v.what, v.size)
	}
	if err != nil && err != io.EOF && v.size >= 0 && v.n == v.size {
		// The source failed at the very end (go-containerregistry's own
		// digest check does); with every byte in hand, judge them here so
		// the caller gets ErrCorrupt rather than a transport error.
		if got := v.sum(); got != v.want {
			v.done = true
			return n, fmt.Errorf("%w: %s should hash to %s but hashes to %s", ErrCorrupt, v.what, v.want, got)
		}
	}
	if err == io.EOF && !v.done {
		v.done = true
		if v.size >= 0 && v.n != v.size {
			return n, fmt.Errorf("%w: %s has %d bytes, its descriptor says %d", ErrCorrupt, v.what, v.n, v.size)
		}
		if got := v.sum(); got != v.want {
			return n, fmt.Errorf("%w: %s should hash to %s but hashes to %s", ErrCorrupt, v.what, v.want, got)
		}
	}
	return n, err
}

func (v *verifyReader) sum() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", v.h.Sum(nil))}
}
