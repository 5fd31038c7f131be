package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"

	"golang.org/x/crypto/acme/autocert"

	"cube/internal/proxy"
	"cube/internal/store"
	"cube/internal/tlsca"
)

// DefaultDomain is the sandbox domain when none is given: names under
// localhost resolve to this machine without any DNS set-up (through
// nss-myhostname, which make deps installs), so getHost() works for
// clients on this machine out of the box.
const DefaultDomain = "cube.localhost"

// listen opens addr, and when addr is on 127.0.0.1 also the same port on
// ::1 where it can: names under localhost resolve to either, and a client
// may try ::1 first.
func listen(addr string) ([]net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{ln}
	if host, _, _ := net.SplitHostPort(addr); host == "127.0.0.1" {
		port := ln.Addr().(*net.TCPAddr).Port
		if ln6, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", port)); err == nil {
			lns = append(lns, ln6)
		}
	}
	return lns, nil
}

// reportedDomain is the domain sandboxes report, which the SDKs put after
// "<port>-<id>." to reach them: the sandbox domain with the port of the
// listener clients reach it on, unless that port is the scheme's own.
func reportedDomain(domain string, https bool, ln net.Listener) string {
	port := ln.Addr().(*net.TCPAddr).Port
	if (https && port == 443) || (!https && port == 80) {
		return domain
	}
	return fmt.Sprintf("%s:%d", domain, port)
}

// certificates is where the HTTPS listener's certificates come from: the
// operator's files, ACME, or Cube's own local CA in <data-dir>/tls.
type certificates struct {
	get func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// ca is the local CA, when it is the source; acme answers ACME's
	// HTTP challenges, when ACME is.
	ca   *tlsca.Authority
	acme *autocert.Manager
}

// loadCertificates opens the listener's certificate source. live says
// whether a sandbox ID names a sandbox of this server (or cluster); ACME
// orders certificates only for those.
func loadCertificates(o Options, live func(context.Context, string) bool, log *slog.Logger) (*certificates, error) {
	switch {
	case o.TLSCert != "" || o.TLSKey != "":
		if o.TLSCert == "" || o.TLSKey == "" {
			return nil, errors.New("--tls-cert and --tls-key go together")
		}
		f, err := tlsca.LoadFiles(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
		log.Info("HTTPS with the operator's certificate", "cert", o.TLSCert)
		return &certificates{get: f.GetCertificate}, nil
	case o.ACME:
		m := &autocert.Manager{
			Prompt: autocert.AcceptTOS, Email: o.ACMEEmail,
			Cache:      autocert.DirCache(filepath.Join(o.DataDir, "tls", "acme")),
			HostPolicy: acmePolicy(o.Domain, live),
		}
		log.Info("HTTPS with ACME certificates", "domain", o.Domain)
		return &certificates{get: m.GetCertificate, acme: m}, nil
	}
	ca, err := tlsca.Open(filepath.Join(o.DataDir, "tls"), tlsca.Options{
		Names: []string{o.Domain, "*." + o.Domain, "localhost"},
		IPs:   []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		// Users are told to trust this CA system-wide: it must not be
		// able to vouch for any other name.
		Constrain: true,
	})
	if err != nil {
		return nil, err
	}
	if !ca.Constrained() {
		log.Warn("the local CA predates name constraints: a client trusting it would accept its certificate for any name; to replace it, move ca.pem and ca-key.pem away and restart, then trust the new ca.pem", "ca", ca.CAPath())
	}
	log.Info("HTTPS with Cube's local CA; trust it with `cubemastercli ca`", "ca", ca.CAPath())
	return &certificates{get: ca.GetCertificate, ca: ca}, nil
}

// acmePolicy lets ACME issue certificates only for the API's name and
// the hosts of sandboxes live says exist: one certificate per sandbox
// port, since HTTP challenges cannot prove a wildcard. Any other name is
// refused before the CA is asked, so a client making up names cannot
// spend the domain's weekly certificate limit. Only the canonical
// "<port>-<id>" spelling is allowed: the proxy also routes a leading-zero
// port or an "-suffix" after the ID, but each spelling would be one more
// certificate for the same sandbox port.
func acmePolicy(domain string, live func(ctx context.Context, sandboxID string) bool) autocert.HostPolicy {
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")
	return func(ctx context.Context, host string) error {
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if host == "api."+domain || host == domain {
			return nil
		}
		rt, ok, err := proxy.MatchHost(host, domain)
		if !ok || err != nil {
			return fmt.Errorf("acme: %s is not a name of this server", host)
		}
		if host != fmt.Sprintf("%d-%s.%s", rt.Port, rt.SandboxID, domain) {
			return fmt.Errorf("acme: %s: certificates are ordered only for <port>-<sandbox id>.%s", host, domain)
		}
		if !live(ctx, rt.SandboxID) {
			return fmt.Errorf("acme: %s: no sandbox %s on this server", host, rt.SandboxID)
		}
		return nil
	}
}

// liveSandbox reports whether the store holds a sandbox id that is not
// being killed. A store that cannot answer refuses: a certificate can be
// ordered on the next handshake.
func liveSandbox(st *store.Store) func(context.Context, string) bool {
	return func(ctx context.Context, id string) bool {
		sb, err := st.Sandboxes().Get(ctx, id)
		return err == nil && sb.State != store.Killing
	}
}

// tlsConfig is the HTTPS listener's TLS: 1.2 and later, HTTP/2 offered.
func (c *certificates) tlsConfig() *tls.Config {
	return &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}
