// Package oci turns OCI and Docker images into root filesystems for sandboxes.
//
// Images come from registries or from local archives and layout directories,
// always through go-containerregistry and never through a Docker daemon. Every
// blob is checked against its digest before anything built from it is put
// under its final name, so a corrupt download never becomes a template.
//
// A template build uses it like this:
//
//	src, err := oci.ParseSource(ref)                                       // bad input fails here
//	img, err := oci.Open(ctx, src, oci.PullOptions{CacheDir: dataDir + "/images"}) // manifest and config only
//	err = oci.Fetch(ctx, img, pullProgress)                                 // PULLING: layers into the cache
//	rf, err := oci.UnpackLimited(ctx, img, dataDir+"/rootfs", limits, unpackProgress) // UNPACKING: rootfs/<image ID>/
//
// Errors wrap ErrBadReference, ErrNotFound, ErrUnauthorized, ErrUnreachable,
// ErrInsecureRegistry, ErrTooLarge (as a *LimitError),
// ErrCorrupt or ErrUnsafeLayer, and their text says what to fix.
package oci

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Kind says where an image comes from.
type Kind string

const (
	KindRegistry      Kind = "registry"       // a reference such as docker.io/library/python:3.12-slim
	KindOCIArchive    Kind = "oci-archive"    // a tar of an OCI image layout
	KindOCILayout     Kind = "oci"            // an OCI image layout directory
	KindDockerArchive Kind = "docker-archive" // the output of `docker save`
)

// Source is a parsed image reference. Its String form parses back to itself.
type Source struct {
	Kind Kind
	// Ref is the registry reference (KindRegistry only), normalised by the
	// name package, e.g. index.docker.io/library/python:3.12-slim.
	Ref string
	// Path is the archive file or layout directory (local kinds only).
	Path string
	// Tag selects one image of an OCI layout, as a directory or archived,
	// that holds several (KindOCILayout and KindOCIArchive); empty means
	// the layout must hold exactly one.
	Tag string
}

func (s Source) String() string {
	switch s.Kind {
	case KindRegistry:
		return s.Ref
	case KindOCILayout, KindOCIArchive:
		if s.Tag != "" {
			return string(s.Kind) + ":" + s.Path + ":" + s.Tag
		}
		return string(s.Kind) + ":" + s.Path
	default:
		return string(s.Kind) + ":" + s.Path
	}
}

// ErrBadReference is wrapped by every ParseSource error.
var ErrBadReference = errors.New("bad image reference")

// ParseSource understands the reference forms operators already know from
// skopeo and podman: a bare registry reference, or a transport prefix
// (oci-archive:, oci:, docker-archive:) followed by a local path; oci: and
// oci-archive: may end in :TAG to pick one image of several.
func ParseSource(ref string) (Source, error) {
	ref = strings.TrimSpace(ref)
	if ref == "" {
		return Source{}, fmt.Errorf("%w: empty image reference", ErrBadReference)
	}
	if rest, ok := strings.CutPrefix(ref, "docker://"); ok {
		ref = rest
	}
	for _, k := range []Kind{KindOCIArchive, KindDockerArchive, KindOCILayout} {
		rest, ok := strings.CutPrefix(ref, string(k)+":")
		if !ok {
			continue
		}
		if rest == "" {
			return Source{}, fmt.Errorf("%w: %q names no path after %q", ErrBadReference, ref, k+":")
		}
		src := Source{Kind: k, Path: rest}
		if k == KindOCILayout || k == KindOCIArchive {
			src.Path, src.Tag = splitLayoutTag(rest)
		}
		return src, nil
	}
	if strings.Contains(ref, "://") {
		return Source{}, fmt.Errorf("%w: %q: unknown transport (use a registry reference, oci-archive:PATH, oci:DIR[:TAG] or docker-archive:PATH)", ErrBadReference, ref)
	}
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		// StrictValidation refuses an implied :latest; accept it, but keep
		// the stricter parser's message for anything else.
		r2, err2 := name.ParseReference(ref)
		if err2 != nil {
			return Source{}, fmt.Errorf("%w: %q: %v", ErrBadReference, ref, err2)
		}
		r = r2
	}
	return Source{Kind: KindRegistry, Ref: r.Name()}, nil
}

// splitLayoutTag separates "dir:tag". A colon followed by something that
// looks like a path (contains a slash) belongs to the directory name.
func splitLayoutTag(s string) (dir, tag string) {
	i := strings.LastIndex(s, ":")
	if i <= 0 || i == len(s)-1 || strings.Contains(s[i+1:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}
