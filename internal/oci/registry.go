package oci

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// ErrInsecureRegistry is wrapped when a registry answers in plain HTTP or
// with a certificate the server does not trust, and is not listed as
// insecure.
var ErrInsecureRegistry = errors.New("registry not trusted")

// RegistryHost returns the registry (host[:port]) a registry source pulls
// from, such as index.docker.io or localhost:5000.
func (s Source) RegistryHost() string {
	if s.Kind != KindRegistry {
		return ""
	}
	r, err := name.ParseReference(s.Ref)
	if err != nil {
		return ""
	}
	return r.Context().RegistryStr()
}

// InsecureAllowed reports whether host (host[:port]) is in list. An entry
// without a port matches the host on any port.
func InsecureAllowed(list []string, host string) bool {
	host = strings.ToLower(host)
	bare := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		bare = h
	}
	for _, e := range list {
		e = strings.ToLower(strings.TrimSpace(e))
		if e == host || strings.Trim(e, "[]") == strings.Trim(bare, "[]") {
			return true
		}
	}
	return false
}

// registryTransport speaks HTTPS with verified certificates to every host
// except the insecure ones. go-containerregistry by itself uses plain HTTP
// for loopback and private addresses; a request it would send that way to
// an unlisted host goes out as HTTPS instead, so a pull never silently
// loses transport security.
type registryTransport struct {
	insecure    []string
	secure, lax http.RoundTripper
}

func newRegistryTransport(insecure []string) http.RoundTripper {
	base := remote.DefaultTransport.(*http.Transport)
	lax := base.Clone()
	lax.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // only for listed registries
	return &registryTransport{insecure: insecure, secure: base.Clone(), lax: lax}
}

func (t *registryTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if InsecureAllowed(t.insecure, r.URL.Host) {
		return t.lax.RoundTrip(r)
	}
	if r.URL.Scheme == "http" {
		r = r.Clone(r.Context())
		r.URL.Scheme = "https"
	}
	return t.secure.RoundTrip(r)
}

// insecureError explains a TLS failure with an unlisted registry, or
// returns nil for any other error.
func insecureError(host string, err error) error {
	advice := fmt.Sprintf("if you trust it, start cube-server with --insecure-registry %s", host)
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w: %s speaks plain HTTP, which cube-server uses only with registries listed by --insecure-registry; %s", ErrInsecureRegistry, host, advice)
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname) || errors.As(err, &verify) {
		return fmt.Errorf("%w: the certificate of %s is not trusted (%v): install its CA on the server, or %s", ErrInsecureRegistry, host, err, advice)
	}
	return nil
}
