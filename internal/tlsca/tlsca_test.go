package tlsca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source for renewal tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func testOptions() Options {
	return Options{
		Names: []string{"cube.localhost", "*.cube.localhost", "localhost"},
		IPs:   []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
	}
}

func open(t *testing.T, dir string, o Options) *Authority {
	t.Helper()
	a, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// handshake dials a TLS listener served by getCert, trusting only pool,
// and returns the client's error and the server's.
func handshake(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), pool *x509.CertPool, serverName string) (clientErr, serverErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: getCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		done <- c.(*tls.Conn).Handshake()
	}()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: serverName})
	if err == nil {
		c.Close()
	}
	return err, <-done
}

func TestHandshake(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), "tls"), testOptions())
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.CAPEM()) {
		t.Fatal("CAPEM holds no certificate")
	}
	for _, name := range []string{"8080-abc.cube.localhost", "cube.localhost", "API.Cube.Localhost.", "localhost", ""} {
		if cerr, serr := handshake(t, a.GetCertificate, pool, name); cerr != nil || serr != nil {
			t.Errorf("server name %q: client %v, server %v", name, cerr, serr)
		}
	}
	for _, name := range []string{"evil.example", "a.b.cube.localhost", "xcube.localhost"} {
		cerr, serr := handshake(t, a.GetCertificate, pool, name)
		if cerr == nil {
			t.Errorf("server name %q: handshake succeeded", name)
		}
		if serr == nil || !strings.Contains(serr.Error(), strings.ToLower(name)) || !strings.Contains(serr.Error(), "*.cube.localhost") {
			t.Errorf("server name %q: server error %v, want the host and the names served", name, serr)
		}
	}
	// The chain carries the CA after the leaf, so clients that trust the
	// CA through a bundle without it installed still build the path.
	c, err := a.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil || len(c.Certificate) != 2 {
		t.Fatalf("chain of %d (%v)", len(c.Certificate), err)
	}
	ca, _ := x509.ParseCertificate(c.Certificate[1])
	if ca == nil || !ca.IsCA || !ca.MaxPathLenZero || ca.MaxPathLen != 0 || !strings.HasPrefix(ca.Subject.CommonName, "Cube local CA (") {
		t.Errorf("chain's second certificate is no Cube CA: %+v", ca)
	}
	if ca.NotAfter.Sub(ca.NotBefore) < 9*365*24*time.Hour {
		t.Errorf("CA valid %v", ca.NotAfter.Sub(ca.NotBefore))
	}
	leaf := c.Leaf
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.SerialNumber.BitLen() < 64 {
		t.Errorf("leaf usage %v serial %v", leaf.ExtKeyUsage, leaf.SerialNumber)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("leaf key %T", leaf.PublicKey)
	}
}

func TestReopenKeepsCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	a := open(t, dir, testOptions())
	b := open(t, dir, testOptions())
	if string(a.CAPEM()) != string(b.CAPEM()) || !a.caCert.PublicKey.(*ecdsa.PublicKey).Equal(b.caCert.PublicKey) {
		t.Error("second Open made a different CA")
	}
	if a.CAPath() != filepath.Join(dir, "ca.pem") {
		t.Errorf("CAPath %s", a.CAPath())
	}
	onDisk, err := os.ReadFile(b.CAPath())
	if err != nil || string(onDisk) != string(a.CAPEM()) {
		t.Errorf("ca.pem differs from CAPEM (%v)", err)
	}
	// A leaf of the reopened CA verifies against the first one's PEM.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CAPEM())
	if cerr, serr := handshake(t, b.GetCertificate, pool, "1-x.cube.localhost"); cerr != nil || serr != nil {
		t.Errorf("reopened CA: client %v, server %v", cerr, serr)
	}
	for name, want := range map[string]os.FileMode{"": 0o700, "ca-key.pem": 0o600, "ca.pem": 0o644} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%q mode %v, want %v (%v)", name, fi.Mode().Perm(), want, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("CA directory holds %d entries, want ca.pem and ca-key.pem only", len(ents))
	}
}

func TestRenewal(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	o := testOptions()
	o.LeafLifetime = 30 * 24 * time.Hour
	o.Now = clk.now
	a := open(t, t.TempDir(), o)
	first, err := a.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	if !first.NotBefore.Equal(clk.now().Add(-time.Hour)) || !first.NotAfter.Equal(clk.now().Add(o.LeafLifetime)) {
		t.Errorf("leaf valid %v to %v", first.NotBefore, first.NotAfter)
	}
	// Renewal defaults to a third of the lifetime: 20 days in, still the same.
	clk.add(20*24*time.Hour - time.Minute)
	same, _ := a.Leaf()
	if same.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Error("leaf reissued before its renewal window")
	}
	clk.add(2 * time.Minute)
	renewed, err := a.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	if renewed.SerialNumber.Cmp(first.SerialNumber) == 0 || !renewed.NotAfter.After(first.NotAfter) {
		t.Errorf("inside the renewal window: serial %v→%v, NotAfter %v→%v", first.SerialNumber, renewed.SerialNumber, first.NotAfter, renewed.NotAfter)
	}
	if a.issued != 2 {
		t.Errorf("issued %d leaves, want 2", a.issued)
	}
}

func TestConcurrentIssuesOnce(t *testing.T) {
	a := open(t, t.TempDir(), testOptions())
	var wg sync.WaitGroup
	certs := make([]*tls.Certificate, 32)
	for i := range certs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: "49983-sb.cube.localhost"})
			if err != nil {
				t.Error(err)
			}
			certs[i] = c
		}()
	}
	wg.Wait()
	if a.issued != 1 {
		t.Errorf("issued %d leaves, want 1", a.issued)
	}
	for _, c := range certs {
		if c != certs[0] {
			t.Fatal("handshakes got different leaves")
		}
	}
}

func TestDamagedCA(t *testing.T) {
	dir := t.TempDir()
	a := open(t, dir, testOptions())
	keyPath := filepath.Join(dir, "ca-key.pem")
	orig, _ := os.ReadFile(keyPath)

	os.WriteFile(keyPath, []byte("-----BEGIN PRIVATE KEY-----\nbm9wZQ==\n-----END PRIVATE KEY-----\n"), 0o600)
	_, err := Open(dir, testOptions())
	if err == nil || !strings.Contains(err.Error(), keyPath) || !strings.Contains(err.Error(), "move") {
		t.Errorf("corrupted key: %v", err)
	}

	// A valid key of another CA is a mismatch, not a fresh start.
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(other)
	os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
	if _, err := Open(dir, testOptions()); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Errorf("mismatched key: %v", err)
	}

	os.WriteFile(keyPath, orig, 0o600)
	os.WriteFile(a.CAPath(), []byte("garbage"), 0o644)
	if _, err := Open(dir, testOptions()); err == nil || !strings.Contains(err.Error(), a.CAPath()) {
		t.Errorf("corrupted ca.pem: %v", err)
	}

	os.Remove(a.CAPath())
	if _, err := Open(dir, testOptions()); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("ca.pem missing: %v", err)
	}
	if b, _ := os.ReadFile(keyPath); string(b) != string(orig) {
		t.Error("a failed Open changed ca-key.pem")
	}
}

func TestOptions(t *testing.T) {
	for _, o := range []Options{
		{Names: []string{"*"}},
		{Names: []string{"a.*.b"}},
		{Names: []string{"x"}, LeafLifetime: time.Hour, RenewBefore: 2 * time.Hour},
	} {
		if _, err := Open(t.TempDir(), o); err == nil {
			t.Errorf("Open with %+v succeeded", o)
		}
	}
}

// writePair writes a self-signed certificate for name and its key.
func writePair(t *testing.T, certFile, keyFile, name string, mod time.Time) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := randSerial()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600)
	os.Chtimes(certFile, mod, mod)
	os.Chtimes(keyFile, mod, mod)
}

func TestFilesReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	writePair(t, certFile, keyFile, "one.example", t0)
	f, err := LoadFiles(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now()}
	f.now = clk.now
	cn := func() string {
		c, err := f.GetCertificate(&tls.ClientHelloInfo{ServerName: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Subject.CommonName
	}
	if cn() != "one.example" {
		t.Fatal("first pair not served")
	}

	writePair(t, certFile, keyFile, "two.example", t0.Add(time.Minute))
	if got := cn(); got != "one.example" {
		t.Errorf("files looked at again within a second: %s", got)
	}
	clk.add(time.Second)
	if got := cn(); got != "two.example" {
		t.Errorf("rotated pair not served after a second: %s", got)
	}
	if err := f.Reload(); err != nil {
		t.Errorf("Reload of a good pair: %v", err)
	}

	// A key that is not the certificate's: the old pair stays, Reload says why.
	other := filepath.Join(dir, "other")
	writePair(t, other+".crt", other+".key", "three.example", t0)
	kb, _ := os.ReadFile(other + ".key")
	os.WriteFile(keyFile, kb, 0o600)
	os.Chtimes(keyFile, t0.Add(2*time.Minute), t0.Add(2*time.Minute))
	clk.add(time.Second)
	if got := cn(); got != "two.example" {
		t.Errorf("bad pair replaced the good one: %s", got)
	}
	if err := f.Reload(); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Errorf("Reload of a bad pair: %v", err)
	}

	// Mid-rotation, a file is missing for a moment.
	os.Remove(keyFile)
	if err := f.Reload(); err == nil {
		t.Error("Reload with the key missing: no error")
	}
	writePair(t, certFile, keyFile, "four.example", t0.Add(3*time.Minute))
	if err := f.Reload(); err != nil || cn() != "four.example" {
		t.Errorf("after the rotation finished: %v, serving %s", err, cn())
	}

	if _, err := LoadFiles(certFile, other+".key"); err == nil {
		t.Error("LoadFiles of a mismatched pair succeeded")
	}
}

// An authority without names of its own issues a certificate per name it
// is asked for, chained to it and for that name only.
func TestIssueForNamesOnDemand(t *testing.T) {
	a, err := Open(t.TempDir(), Options{CAName: "Cube egress CA"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetCertificate(&tls.ClientHelloInfo{ServerName: "x.example"}); err == nil {
		t.Fatal("an authority without names served a leaf of its own")
	}
	leaf, err := a.IssueFor("API.Example.com.", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CAPEM())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "api.example.com"}); err != nil {
		t.Fatalf("the leaf does not verify for its name: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example.com"}); err == nil {
		t.Fatal("the leaf verifies for another name")
	}
	if d := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); d > 2*time.Hour+time.Minute {
		t.Fatalf("leaf valid for %v, asked for an hour", d)
	}
	ca, _ := x509.ParseCertificate(leaf.Certificate[1])
	if !strings.HasPrefix(ca.Subject.CommonName, "Cube egress CA (") {
		t.Fatalf("CA named %q", ca.Subject.CommonName)
	}
}

// Leaves of an authority for mutual TLS are client certificates too; the
// others are server certificates only.
func TestClientAuthLeaves(t *testing.T) {
	for _, clientAuth := range []bool{false, true} {
		a, err := Open(t.TempDir(), Options{IPs: []net.IP{net.IPv4(10, 0, 0, 5)}, ClientAuth: clientAuth})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := a.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(a.CAPEM())
		_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if (err == nil) != clientAuth {
			t.Errorf("ClientAuth %v: verified as a client certificate: %v", clientAuth, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "10.0.0.5"}); err != nil {
			t.Errorf("ClientAuth %v: not a server certificate for 10.0.0.5: %v", clientAuth, err)
		}
	}
}

// verifyLeaf checks a leaf of a for name against a alone.
func verifyLeaf(a *Authority, leaf *tls.Certificate, name string) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CAPEM())
	_, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: time.Now()})
	return err
}

// TestNameConstraints: a CA made with Constrain vouches only for its own
// names, so trusting it system-wide trusts nothing else; a CA made before
// keeps working, and one made for another domain says so at Open.
func TestNameConstraints(t *testing.T) {
	dir := t.TempDir()
	o := testOptions()
	o.Constrain = true
	a := open(t, dir, o)
	if !a.Constrained() {
		t.Fatal("a new CA is not constrained")
	}
	if got := a.caCert.PermittedDNSDomains; strings.Join(got, ",") != "cube.localhost,localhost" || !a.caCert.PermittedDNSDomainsCritical {
		t.Errorf("permitted DNS domains %v (critical %v)", got, a.caCert.PermittedDNSDomainsCritical)
	}
	leaf, err := a.current()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cube.localhost", "49983-abc.cube.localhost", "localhost", "127.0.0.1", "::1"} {
		if err := verifyLeaf(a, leaf, name); err != nil {
			t.Errorf("the server's own name %s: %v", name, err)
		}
	}
	// The CA's key can sign anything; the constraints are what make
	// clients refuse it.
	for _, name := range []string{"bank.example.com", "cube.localhost.example.com"} {
		out, err := a.IssueFor(name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		var inv x509.CertificateInvalidError
		if err := verifyLeaf(a, out, name); !errors.As(err, &inv) || inv.Reason != x509.CANotAuthorizedForThisName {
			t.Errorf("a leaf for %s outside the CA's domains: %v, want a name constraint violation", name, err)
		}
	}
	if a2 := open(t, dir, o); !a2.Constrained() || !a2.caCert.Equal(a.caCert) {
		t.Error("the constrained CA was not kept across Open")
	}
	// Another --domain under the same CA would serve certificates no
	// client accepts: Open says what to do instead.
	other := o
	other.Names = []string{"sandbox.example.com", "*.sandbox.example.com"}
	if _, err := Open(dir, other); err == nil || !strings.Contains(err.Error(), "sandbox.example.com") || !strings.Contains(err.Error(), "move") {
		t.Errorf("a CA opened for names outside its constraints: %v", err)
	}

	// A CA from before constraints loads as it is.
	old := t.TempDir()
	open(t, old, testOptions())
	b := open(t, old, o)
	if b.Constrained() {
		t.Error("an existing CA grew constraints")
	}
	if leaf, err := b.current(); err != nil || verifyLeaf(b, leaf, "49983-abc.cube.localhost") != nil {
		t.Errorf("an existing CA's leaf: %v", err)
	}
}
