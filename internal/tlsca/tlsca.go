// Package tlsca is Cube's local certificate authority and the source of the
// HTTPS listener's certificates.
//
// It exists so that the official E2B SDKs work against Cube unchanged over
// HTTPS: they reach a sandbox at https://<port>-<sandboxID>.<domain> and the
// API at https://api.<domain>, and a self-hosted server has no public
// certificate for those names. Cube keeps its own CA in the data directory
// and issues the listener a short-lived leaf for the configured names
// (wildcards included); a client trusts Cube by pointing SSL_CERT_FILE
// (Python, curl, OpenSSL) or NODE_EXTRA_CA_CERTS (Node) at ca.pem, with no
// code change and no certificate check turned off. Operators with
// certificates of their own use Files instead.
package tlsca

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// File names inside the CA directory.
const (
	CertFile = "ca.pem"
	KeyFile  = "ca-key.pem"
)

const (
	caLifetime          = 10 * 365 * 24 * time.Hour
	defaultLeafLifetime = 30 * 24 * time.Hour
	// backdate covers clients whose clocks run a little behind the server's.
	backdate = time.Hour
)

// Authority is a local CA kept in dir, issuing the server's leaf certificates.
type Authority struct {
	dir    string
	opts   Options
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte

	// mu serialises issuance: concurrent handshakes that find no valid
	// leaf wait for one issuance instead of each minting its own.
	mu     sync.Mutex
	leaf   *tls.Certificate
	issued int // leaves issued so far; tests read it
}

// Options: Names are the DNS names the leaf covers (e.g. "cube.localhost", "*.cube.localhost", "localhost"),
// IPs the IP addresses (e.g. 127.0.0.1, ::1). LeafLifetime defaults to 30 days; RenewBefore to a third of it.
// Now defaults to time.Now (tests inject a clock).
// CAName heads the CA's CommonName (default "Cube local CA"; the host's
// name follows it). An authority without Names and IPs issues only
// through IssueFor. ClientAuth: see the field.
type Options struct {
	Names        []string
	IPs          []net.IP
	LeafLifetime time.Duration
	RenewBefore  time.Duration
	Now          func() time.Time
	CAName       string
	// ClientAuth makes the leaves client certificates too, for mutual
	// TLS between the nodes of a cluster.
	ClientAuth bool
	// Constrain gives a CA this Open creates X.509 name constraints: it
	// may sign only for the domains of Names (a wildcard's parent; each
	// covers its subdomains too) and for IPs. A CA users are told to
	// trust system-wide then vouches for this server's names and nothing
	// else, even if its key leaks. A CA made without them is loaded as it
	// is (Constrained says which); one whose constraints leave out Names
	// or IPs is an error at Open.
	Constrain bool
}

func (o *Options) setDefaults() error {
	if o.LeafLifetime == 0 {
		o.LeafLifetime = defaultLeafLifetime
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = o.LeafLifetime / 3
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LeafLifetime < 0 || o.RenewBefore < 0 || o.RenewBefore >= o.LeafLifetime {
		return fmt.Errorf("tls: leaf lifetime %v and renewal %v before expiry: want 0 < renewal < lifetime", o.LeafLifetime, o.RenewBefore)
	}
	if o.CAName == "" {
		o.CAName = "Cube local CA"
	}
	names := make([]string, 0, len(o.Names))
	for _, n := range o.Names {
		n = normalize(n)
		rest, _ := strings.CutPrefix(n, "*.")
		if rest == "" || strings.Contains(rest, "*") {
			return fmt.Errorf("tls: DNS name %q: want a host name, or *. and a domain", n)
		}
		names = append(names, n)
	}
	o.Names = names
	return nil
}

// Open loads the CA from dir (ca.pem, ca-key.pem), creating both at first use: ECDSA P-256, 10 years,
// CommonName "Cube local CA (<hostname>)", MaxPathLen 0, KeyUsageCertSign|CRLSign. dir is created 0700;
// ca-key.pem is 0600 and written atomically (temp file + rename) so a crash never leaves half a key;
// ca.pem 0644. A damaged or mismatched pair is an error that says which file and what to do (move it away
// to make a new CA, knowing clients must trust the new one), never silently replaced: replacing it would
// break every client that trusts the old CA without telling anyone why.
func Open(dir string, o Options) (*Authority, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls: CA directory: %w", err)
	}
	a := &Authority{dir: dir, opts: o}
	certPath, keyPath := a.CAPath(), filepath.Join(dir, KeyFile)
	_, certErr := os.Stat(certPath)
	_, keyErr := os.Stat(keyPath)
	switch {
	case errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist):
		if err := a.create(); err != nil {
			return nil, err
		}
		return a, nil
	case errors.Is(certErr, os.ErrNotExist):
		return nil, damaged(keyPath, fmt.Errorf("its certificate %s is missing", certPath))
	case errors.Is(keyErr, os.ErrNotExist):
		return nil, damaged(certPath, fmt.Errorf("its key %s is missing", keyPath))
	}
	if err := a.load(); err != nil {
		return nil, err
	}
	return a, nil
}

// damaged words every CA load failure the same way: which file, what is
// wrong, and the way out with its cost.
func damaged(path string, err error) error {
	return fmt.Errorf("tls: CA file %s: %w; to make a new CA move %s and %s in %s away and restart, then make every client trust the new ca.pem (the old one no longer works)",
		path, err, CertFile, KeyFile, filepath.Dir(path))
}

func (a *Authority) load() error {
	certPath, keyPath := a.CAPath(), filepath.Join(a.dir, KeyFile)
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return damaged(certPath, err)
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return damaged(certPath, errors.New("no PEM CERTIFICATE block"))
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return damaged(certPath, err)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return damaged(certPath, errors.New("not a CA certificate"))
	}
	if now := a.opts.Now(); now.After(cert.NotAfter) {
		return damaged(certPath, fmt.Errorf("the CA expired on %s", cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return damaged(keyPath, err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return damaged(keyPath, err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return damaged(keyPath, fmt.Errorf("the key does not belong to the certificate in %s", certPath))
	}
	if err := a.permits(cert); err != nil {
		return err
	}
	a.caCert, a.caKey = cert, key
	a.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
	return nil
}

// permits checks that a constrained CA may sign for the names and IPs
// asked for: leaves it may not sign for would fail at every client.
func (a *Authority) permits(cert *x509.Certificate) error {
	if !constrained(cert) {
		return nil
	}
	var outside []string
	for _, n := range a.opts.Names {
		if d := strings.TrimPrefix(n, "*."); !inDomains(d, cert.PermittedDNSDomains) {
			outside = append(outside, n)
		}
	}
	for _, ip := range a.opts.IPs {
		if !inRanges(ip, cert.PermittedIPRanges) {
			outside = append(outside, ip.String())
		}
	}
	if len(outside) == 0 {
		return nil
	}
	var allowed []string
	allowed = append(allowed, cert.PermittedDNSDomains...)
	for _, r := range cert.PermittedIPRanges {
		allowed = append(allowed, r.String())
	}
	return fmt.Errorf("tls: the CA in %s may sign only for %s (its name constraints), not for %s: with another --domain, move %s and %s in %s away and restart to make a CA for it, then make every client trust the new ca.pem",
		a.dir, strings.Join(allowed, ", "), strings.Join(outside, ", "), CertFile, KeyFile, a.dir)
}

// Constrained reports whether the CA carries name constraints: false for a
// CA made before Cube added them, or without Options.Constrain.
func (a *Authority) Constrained() bool { return constrained(a.caCert) }

func constrained(cert *x509.Certificate) bool {
	return len(cert.PermittedDNSDomains) > 0 || len(cert.PermittedIPRanges) > 0
}

// inDomains reports whether name is one of domains or under one, the
// way X.509 DNS name constraints match.
func inDomains(name string, domains []string) bool {
	for _, d := range domains {
		d = normalize(d)
		if name == d || strings.HasSuffix(name, "."+d) {
			return true
		}
	}
	return false
}

func inRanges(ip net.IP, ranges []*net.IPNet) bool {
	for _, r := range ranges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// constraints are the permitted subtrees of a new constrained CA: the
// domain of each name (a constraint covers its subdomains too) and each
// IP alone.
func (o *Options) constraints() (domains []string, ips []*net.IPNet) {
	for _, n := range o.Names {
		if d := strings.TrimPrefix(n, "*."); !slices.Contains(domains, d) {
			domains = append(domains, d)
		}
	}
	for _, ip := range o.IPs {
		bits := 8 * net.IPv6len
		if v4 := ip.To4(); v4 != nil {
			ip, bits = v4, 8*net.IPv4len
		}
		ips = append(ips, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
	}
	return domains, ips
}

func parseKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var (
		k   any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is no private key", block.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key of type %T cannot sign", k)
	}
	return s, nil
}

// create makes a new CA. The key is renamed into place before the
// certificate, so a crash in between leaves a key without a certificate,
// which Open reports, never a certificate whose key is lost.
func (a *Authority) create() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("tls: CA key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown host"
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	ski := sha1.Sum(spki)
	now := a.opts.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("%s (%s)", a.opts.CAName, host), Organization: []string{"Cube"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caLifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski[:],
	}
	if a.opts.Constrain {
		// RFC 5280 has name constraints critical, so a client that cannot
		// apply them refuses the CA rather than trusting it for any name.
		tmpl.PermittedDNSDomains, tmpl.PermittedIPRanges = a.opts.constraints()
		tmpl.PermittedDNSDomainsCritical = true
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("tls: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	a.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := writeAtomic(filepath.Join(a.dir, KeyFile), keyPEM, 0o600); err != nil {
		return fmt.Errorf("tls: CA key: %w", err)
	}
	if err := writeAtomic(a.CAPath(), a.caPEM, 0o644); err != nil {
		return fmt.Errorf("tls: CA certificate: %w", err)
	}
	a.caCert, a.caKey = cert, key
	return nil
}

// writeAtomic puts data at path through a synced temporary file in the
// same directory and a rename, so path holds either nothing or all of it.
func writeAtomic(path string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func randSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("tls: serial number: %w", err)
	}
	return n, nil
}

// CAPath is the path of ca.pem (what clients trust).
func (a *Authority) CAPath() string { return filepath.Join(a.dir, CertFile) }

// CAPEM returns the CA certificate in PEM.
func (a *Authority) CAPEM() []byte { return bytes.Clone(a.caPEM) }

// GetCertificate is tls.Config.GetCertificate: it refuses (returns an error naming the host and the names it
// serves) a ClientHello whose ServerName is set and not covered by Names (wildcards match exactly one label,
// as browsers do; compare case-insensitively, ignore a trailing dot); it serves the current leaf otherwise
// (also for an empty ServerName, e.g. a client connecting by IP). The leaf is issued in memory on first use
// and reissued when fewer than RenewBefore remain, safe for concurrent handshakes (one issuance at a time).
//
// Refusing unknown names makes a misconfigured domain fail loudly at the
// handshake instead of as a certificate error every client words differently.
func (a *Authority) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello != nil && hello.ServerName != "" && !a.covers(hello.ServerName) {
		served := append([]string(nil), a.opts.Names...)
		for _, ip := range a.opts.IPs {
			served = append(served, ip.String())
		}
		return nil, fmt.Errorf("tls: no certificate for %q: this server serves %s", hello.ServerName, strings.Join(served, ", "))
	}
	return a.current()
}

// Leaf returns the current leaf (issuing or renewing it as GetCertificate does), for tests and diagnostics.
func (a *Authority) Leaf() (*x509.Certificate, error) {
	c, err := a.current()
	if err != nil {
		return nil, err
	}
	return c.Leaf, nil
}

// covers reports whether host is one of the names (or IPs) the leaf holds.
func (a *Authority) covers(host string) bool {
	host = normalize(host)
	if ip := net.ParseIP(host); ip != nil {
		for _, o := range a.opts.IPs {
			if o.Equal(ip) {
				return true
			}
		}
		return false
	}
	for _, n := range a.opts.Names {
		if n == host {
			return true
		}
		if rest, ok := strings.CutPrefix(n, "*."); ok {
			label, parent, found := strings.Cut(host, ".")
			if found && label != "" && parent == rest {
				return true
			}
		}
	}
	return false
}

func normalize(name string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimSpace(name), "."))
}

// current returns the leaf, issuing a new one when there is none or the
// one there is inside its renewal window.
func (a *Authority) current() (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.opts.Now()
	if a.leaf != nil && now.Before(a.leaf.Leaf.NotAfter.Add(-a.opts.RenewBefore)) {
		return a.leaf, nil
	}
	leaf, err := a.issue(now)
	if err != nil {
		return nil, err
	}
	a.leaf = leaf
	a.issued++
	return leaf, nil
}

func (a *Authority) issue(now time.Time) (*tls.Certificate, error) {
	if len(a.opts.Names) == 0 && len(a.opts.IPs) == 0 {
		return nil, errors.New("tls: the certificate needs at least one DNS name or IP address")
	}
	return a.issueLeaf(now, a.opts.Names, a.opts.IPs, a.opts.LeafLifetime)
}

// IssueFor issues a certificate for one host name, valid for lifetime (or
// until the CA ends): for an authority that answers many names, each as it
// is asked for (the egress filter's interception). The caller keeps it.
func (a *Authority) IssueFor(name string, lifetime time.Duration) (*tls.Certificate, error) {
	return a.issueLeaf(a.opts.Now(), []string{normalize(name)}, nil, lifetime)
}

func (a *Authority) extKeyUsage() []x509.ExtKeyUsage {
	if a.opts.ClientAuth {
		return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
}

func (a *Authority) issueLeaf(now time.Time, names []string, ips []net.IP, lifetime time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("tls: leaf key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(lifetime)
	if notAfter.After(a.caCert.NotAfter) {
		// A leaf outliving its CA would fail verification anyway; the
		// short leaf at least works until the CA ends.
		notAfter = a.caCert.NotAfter
	}
	cn := ""
	if len(names) > 0 {
		cn = names[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"Cube"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  a.extKeyUsage(),
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.caCert, &key.PublicKey, a.caKey)
	if err != nil {
		return nil, fmt.Errorf("tls: leaf certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, a.caCert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}
