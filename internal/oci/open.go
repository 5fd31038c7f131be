package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PullOptions says how to reach an image. The zero value pulls anonymously
// over HTTPS for linux/amd64 without caching.
type PullOptions struct {
	Username, Password string
	// InsecureRegistries may be reached over plain HTTP or with untrusted
	// certificates (host[:port]; an entry without a port matches any).
	// Every other registry is reached over verified HTTPS, loopback and
	// private addresses included.
	InsecureRegistries []string
	// Platform picks the image out of a multi-platform index; zero means
	// linux/amd64, the only platform sandboxes run on today.
	Platform v1.Platform
	// CacheDir holds registry layers by digest (<data-dir>/images), so
	// pulling the same image twice downloads its layers once. Empty: no cache.
	CacheDir string
}

func (o PullOptions) platform() v1.Platform {
	if o.Platform.OS == "" && o.Platform.Architecture == "" {
		return v1.Platform{OS: "linux", Architecture: "amd64"}
	}
	return o.Platform
}

// Open resolves src to a single image without downloading its layers; they
// are read (and verified) when the image is unpacked.
func Open(ctx context.Context, src Source, opts PullOptions) (v1.Image, error) {
	img, err := open(ctx, src, opts)
	if err != nil {
		return nil, err
	}
	// A single-platform reference is taken as it is; make sure it can run.
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s: reading image config: %w", src, err)
	}
	want := opts.platform()
	if (cf.OS != "" && cf.OS != want.OS) || (cf.Architecture != "" && cf.Architecture != want.Architecture) {
		return nil, fmt.Errorf("%w: %s is built for %s/%s, not %s", ErrNotFound, src, cf.OS, cf.Architecture, want.String())
	}
	return img, nil
}

func open(ctx context.Context, src Source, opts PullOptions) (v1.Image, error) {
	plat := opts.platform()
	switch src.Kind {
	case KindRegistry:
		return openRegistry(ctx, src, opts, plat)
	case KindOCILayout:
		if err := checkLocal(src.Path, true); err != nil {
			return nil, err
		}
		return openLayout(dirStore{dir: src.Path}, src.Tag, plat)
	case KindOCIArchive, KindDockerArchive:
		if err := checkLocal(src.Path, false); err != nil {
			return nil, err
		}
		st, err := openTarStore(src.Path)
		if err != nil {
			return nil, err
		}
		if src.Kind == KindOCIArchive {
			return openLayout(st, src.Tag, plat)
		}
		return openDockerArchive(st)
	default:
		return nil, fmt.Errorf("%w: unknown source kind %q", ErrBadReference, src.Kind)
	}
}

func checkLocal(p string, wantDir bool) error {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s does not exist", ErrNotFound, p)
	}
	if err != nil {
		return err
	}
	if wantDir && !st.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (an OCI layout is a directory; use oci-archive: for a tar)", ErrNotFound, p)
	}
	if !wantDir && st.IsDir() {
		return fmt.Errorf("%w: %s is a directory, not an archive (use oci:%s for a layout directory)", ErrNotFound, p, p)
	}
	return nil
}

func openRegistry(ctx context.Context, src Source, opts PullOptions, plat v1.Platform) (v1.Image, error) {
	var nopts []name.Option
	if InsecureAllowed(opts.InsecureRegistries, src.RegistryHost()) {
		nopts = append(nopts, name.Insecure)
	}
	ref, err := name.ParseReference(src.Ref, nopts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrBadReference, src.Ref, err)
	}
	host := ref.Context().RegistryStr()
	// Every request of this image, layers included, goes through it.
	rt := newRegistryTransport(opts.InsecureRegistries)
	var auth authn.Authenticator = authn.Anonymous
	if opts.Username != "" || opts.Password != "" {
		auth = &authn.Basic{Username: opts.Username, Password: opts.Password}
	}
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuth(auth),
		remote.WithPlatform(plat),
		remote.WithTransport(rt),
		// A few quick retries ride out a flaky link without making an
		// operator wait long for "unreachable".
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3}),
	}
	desc, err := remote.Get(ref, ropts...)
	if err != nil {
		return nil, registryError(ref.Name(), host, err)
	}
	img, err := desc.Image()
	if err != nil {
		if strings.Contains(err.Error(), "no child with platform") {
			return nil, fmt.Errorf("%w: %s has no image for %s: %v", ErrNotFound, ref.Name(), plat.String(), err)
		}
		return nil, registryError(ref.Name(), host, err)
	}
	if opts.CacheDir != "" {
		img = cachedImage(img, newBlobCache(opts.CacheDir))
	}
	return img, nil
}
