package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Errors a caller can test with errors.Is to tell the operator what to fix.
var (
	ErrNotFound     = errors.New("image not found")
	ErrUnauthorized = errors.New("unauthorized")
	ErrUnreachable  = errors.New("registry unreachable")
	ErrCorrupt      = errors.New("corrupt image content")
	ErrUnsafeLayer  = errors.New("unsafe layer entry")
)

// registryError rewrites what go-containerregistry returns into one of the
// errors above, keeping the original text for detail.
func registryError(ref, host string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", ref, err)
	}
	if ie := insecureError(host, err); ie != nil {
		return fmt.Errorf("%s: %w", ref, ie)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%w: %s: the registry refused access (give --registry-username and --registry-password, or check them): %v", ErrUnauthorized, ref, err)
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s: check the repository name and tag: %v", ErrNotFound, ref, err)
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode, transport.BlobUnknownErrorCode:
				return fmt.Errorf("%w: %s: check the repository name and tag: %v", ErrNotFound, ref, err)
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return fmt.Errorf("%w: %s: the registry refused access (give --registry-username and --registry-password, or check them): %v", ErrUnauthorized, ref, err)
			}
		}
		return fmt.Errorf("registry %s: %s: %w", host, ref, err)
	}
	var ne net.Error
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &oe) || errors.As(err, &ue) || errors.As(err, &ne) {
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, host, err)
	}
	return fmt.Errorf("%s: %w", ref, err)
}
