package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/acme/autocert"

	"cube/internal/api"
	"cube/internal/forward"
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

// listeners are the server's open listeners: the API and sandbox traffic
// in plain HTTP and, with --tls-listen, HTTPS (with their certificates),
// and with --peer-listen the peers' own. They are opened before the
// cluster's parts, which advertise their addresses.
type listeners struct {
	plain, tls, peer []net.Listener
	certs            *certificates
	// reported is the domain sandboxes report (reportedDomain).
	reported string
}

func openListeners(o Options, st *store.Store, log *slog.Logger, done *closers) (*listeners, error) {
	ls := &listeners{}
	done.push(func() {
		for _, ln := range slices.Concat(ls.plain, ls.tls, ls.peer) {
			ln.Close()
		}
	})
	var err error
	if ls.plain, err = listen(o.Listen); err != nil {
		return nil, fmt.Errorf("listen on %s: %v: is another cube-server running? choose another address with --listen", o.Listen, err)
	}
	ls.reported = reportedDomain(o.Domain, false, ls.plain[0])
	if o.TLSListen != "" {
		if ls.certs, err = loadCertificates(o, liveSandbox(st), log); err != nil {
			return nil, err
		}
		if ls.tls, err = listen(o.TLSListen); err != nil {
			return nil, fmt.Errorf("listen on %s: %v: choose another address with --tls-listen (or --tls-listen '' for no HTTPS)", o.TLSListen, err)
		}
		ls.reported = reportedDomain(o.Domain, true, ls.tls[0])
	}
	if o.PeerListen != "" {
		if ls.peer, err = listen(o.PeerListen); err != nil {
			return nil, fmt.Errorf("listen on %s: %v: choose another address with --peer-listen", o.PeerListen, err)
		}
	}
	return ls, nil
}

// caPEM is the local CA clients are told to trust, when it is the HTTPS
// listener's.
func (ls *listeners) caPEM() []byte {
	if ls.certs != nil && ls.certs.ca != nil {
		return ls.certs.ca.CAPEM()
	}
	return nil
}

// advertise is the base URL peers reach this node's API at: --advertise,
// else the peer listener over TLS, else the plain listener.
func (ls *listeners) advertise(o Options) string {
	switch {
	case o.Advertise != "":
		return o.Advertise
	case len(ls.peer) > 0:
		return "https://" + ls.peer[0].Addr().String()
	}
	return "http://" + ls.plain[0].Addr().String()
}

// serve serves handler on every listener until ctx ends or one fails,
// then shuts the servers down.
func serve(ctx context.Context, o Options, ls *listeners, handler http.Handler, peerTLS *tls.Config, log *slog.Logger) error {
	srv := api.NewHTTPServer(o.Listen, handler)
	if ls.certs != nil && ls.certs.acme != nil {
		// ACME's HTTP challenges arrive on the plain listener.
		srv.Handler = ls.certs.acme.HTTPHandler(handler)
	}
	tlsSrv := api.NewHTTPServer(o.TLSListen, handler)
	if ls.certs != nil {
		tlsSrv.TLSConfig = ls.certs.tlsConfig()
	}
	peerSrv := api.NewHTTPServer(o.PeerListen, forward.PeerListener(handler))
	peerSrv.TLSConfig = peerTLS
	errc := make(chan error, len(ls.plain)+len(ls.tls)+len(ls.peer))
	for _, ln := range ls.peer {
		go func() { errc <- peerSrv.ServeTLS(ln, "", "") }()
	}
	for _, ln := range ls.plain {
		go func() { errc <- srv.Serve(ln) }()
	}
	for _, ln := range ls.tls {
		// ServeTLS sets HTTP/2 up; the certificates come from TLSConfig.
		go func() { errc <- tlsSrv.ServeTLS(ln, "", "") }()
	}
	attrs := []any{"addr", ls.plain[0].Addr().String(), "data_dir", o.DataDir, "domain", ls.reported}
	if len(ls.tls) > 0 {
		attrs = append(attrs, "https", ls.tls[0].Addr().String())
	}
	if len(ls.peer) > 0 {
		attrs = append(attrs, "peers", ls.peer[0].Addr().String())
	}
	log.Info("cube-server listening", attrs...)
	if o.Ready != nil {
		o.Ready(ls.plain[0].Addr().String())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []*http.Server{srv, tlsSrv, peerSrv} {
		if err := s.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Close()
		}
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
