package egress

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/netslot"
)

// The rules tests' outside: HTTPS and HTTP servers with certificates from
// a CA of the test's own (which the Filter is told to trust, as
// --egress-ca-bundle does), and one with a certificate from nowhere.
var (
	rulesHost    = netip.MustParseAddr("203.0.113.30")
	rulesBadHost = netip.MustParseAddr("203.0.113.40")
)

const testSecret = "sk-test-4f1c9a7d2b-never-in-the-sandbox"

// outsideCA is the test servers' CA.
type outsideCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newOutsideCA(t *testing.T) *outsideCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outside test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &outsideCA{cert: cert, key: key, pool: pool}
}

// issue makes a server certificate for names, signed by the CA or, with
// self set, by nobody anyone trusts.
func (c *outsideCA) issue(t *testing.T, self bool, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		DNSNames: names, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	parent, signer := c.cert, c.key
	if self {
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveEcho answers on a:80 and a:443 with what the request carried, so a
// test sees what reached the destination.
func serveEcho(t *testing.T, w *world, a netip.Addr, cert tls.Certificate) {
	t.Helper()
	peer := netip.AddrFrom4(w.hostSide.As4()).Next()
	run(t, "ip", "-n", w.prefix+"-inet", "addr", "add", a.String()+"/32", "dev", "eth0")
	run(t, "ip", "route", "add", a.String()+"/32", "via", peer.String())
	t.Cleanup(func() { run(t, "ip", "route", "del", a.String()+"/32") })
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if special(rw, r) {
			return
		}
		fmt.Fprintf(rw, "host=%s path=%s auth=%s x-team=%s", r.Host, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("X-Team"))
	})
	for _, port := range []int{80, 443} {
		ln := listenTest(t, w.inet, "tcp4", netip.AddrPortFrom(a, uint16(port)).String())
		if port == 443 {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		srv := &http.Server{Handler: h}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// auditLog collects the Filter's events.
type auditLog struct {
	mu     sync.Mutex
	events []Event
}

func (l *auditLog) add(e Event) { l.mu.Lock(); l.events = append(l.events, e); l.mu.Unlock() }

func (l *auditLog) find(fn func(Event) bool) (Event, bool) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		for _, e := range l.events {
			if fn(e) {
				l.mu.Unlock()
				return e, true
			}
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			return Event{}, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type rulesWorld struct {
	*world
	box     sandbox
	slot    *sandboxSlot
	filter  *Filter
	netslot *netslot.Slot
	ca      *CA
	outside *outsideCA
	audit   *auditLog
	secrets map[secretKey]string
	mu      sync.Mutex
}

// secretKey is a secret as the Filter asks for it: a ref within a team.
// The world's own secret is of the team "", that of policies naming none.
type secretKey struct{ team, ref string }

type sandboxSlot = struct{ apply func(Policy) }

func newRulesWorld(t *testing.T) *rulesWorld {
	w := newWorld(t)
	rw := &rulesWorld{world: w, outside: newOutsideCA(t), audit: &auditLog{}, secrets: map[secretKey]string{{"", "api-key"}: testSecret}}
	serveEcho(t, w, rulesHost, rw.outside.issue(t, false, "api.rules.example", "plain.rules.example"))
	serveEcho(t, w, rulesBadHost, rw.outside.issue(t, true, "bad.rules.example"))
	ca, err := OpenCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rw.ca = ca
	pool, cidr := w.pool(t, "r")
	f, err := NewFilter(Config{Resolver: w.resolver, HostCIDR: cidr, CA: ca, UpstreamRoots: rw.outside.pool,
		Audit: rw.audit.add,
		Secrets: func(team, ref string) (string, error) {
			rw.mu.Lock()
			defer rw.mu.Unlock()
			if v, ok := rw.secrets[secretKey{team, ref}]; ok {
				return v, nil
			}
			return "", errSecretMissing
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := acquire(t, pool)
	rw.filter, rw.netslot = f, s
	rw.box = sb(t, s)
	rw.slot = &sandboxSlot{apply: func(p Policy) { setPolicy(t, f, s, p) }}
	return rw
}

// fetch is a client in the sandbox trusting roots (nil: the egress CA).
// It returns the status, body and the issuer of the certificate it saw.
func (rw *rulesWorld) fetch(method, url string, roots *x509.CertPool, hdr ...string) (int, string, string, error) {
	if roots == nil {
		roots = x509.NewCertPool()
		roots.AppendCertsFromPEM(rw.ca.CertPEM())
	}
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			ips, err := rw.box.lookup(host)
			if err != nil {
				return nil, err
			}
			return rw.box.dial("tcp4", net.JoinHostPort(ips[0].String(), port))
		},
	}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(method, url, strings.NewReader("body"))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	issuer := ""
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		issuer = resp.TLS.PeerCertificates[0].Issuer.CommonName
	}
	return resp.StatusCode, string(b), issuer, nil
}

func authRule(value string) map[string][]Rule {
	return map[string][]Rule{"*.rules.example": {{Headers: map[string]string{"X-Team": "wild"}}},
		"api.rules.example": {{Headers: map[string]string{"Authorization": value}}}}
}

func TestRulesInjectSecretOnTheWayOut(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Owner: "sbx1", Rules: authRule("Bearer ${e2b.secrets.api-key}")})

	// HTTPS: the Filter answers with the egress CA and sets the header.
	code, body, issuer, err := rw.fetch("POST", "https://api.rules.example/v1/chat?token=q", nil, "Authorization", "Bearer from-the-sandbox")
	if err != nil || code != 200 {
		t.Fatalf("HTTPS with a rule: %d %q %v", code, body, err)
	}
	if !strings.Contains(body, "auth=Bearer "+testSecret) || !strings.Contains(body, "path=/v1/chat?token=q") || !strings.Contains(body, "x-team= ") && !strings.HasSuffix(body, "x-team=") {
		t.Errorf("the destination saw %q", body)
	}
	if !strings.HasPrefix(issuer, "Cube egress CA (") {
		t.Errorf("certificate issued by %q, want the egress CA", issuer)
	}
	// Plain HTTP: a rule with a secret is refused, never sent in clear;
	// one without is applied in flight.
	if code, body, _, err := rw.fetch("GET", "http://api.rules.example/plain", nil); err != nil || code != http.StatusForbidden || strings.Contains(body, testSecret) || !strings.Contains(body, "only over HTTPS") {
		t.Errorf("HTTP with a secret rule: %d %q %v, want 403 saying HTTPS only", code, body, err)
	}
	if code, body, _, err := rw.fetch("GET", "http://plain.rules.example/plain", nil); err != nil || code != 200 || !strings.Contains(body, "x-team=wild") {
		t.Errorf("HTTP with a rule without secrets: %d %q %v", code, body, err)
	}
	// The wildcard's rule set applies below it, not merged with the exact one.
	if _, body, _, err := rw.fetch("GET", "https://plain.rules.example/", nil); err != nil || !strings.Contains(body, "x-team=wild") || !strings.Contains(body, "auth= ") {
		t.Errorf("wildcard rule: %q %v", body, err)
	}

	e, ok := rw.audit.find(func(e Event) bool { return e.Method == "POST" && e.Name == "api.rules.example" })
	if !ok {
		t.Fatalf("no audit event for the POST; have %v", rw.audit.events)
	}
	if e.Decision != Transformed || e.Owner != "sbx1" || e.Rule != "api.rules.example" || e.Path != "/v1/chat" ||
		e.Status != 200 || e.BytesOut != 4 || e.BytesIn == 0 || strings.Join(e.Headers, ",") != "Authorization" {
		t.Errorf("audit event %+v", e)
	}
	rw.audit.mu.Lock()
	for _, e := range rw.audit.events {
		if s := fmt.Sprintf("%+v %s", e, e); strings.Contains(s, testSecret) || strings.Contains(s, "token=q") {
			t.Errorf("audit event carries the secret or the query: %s", s)
		}
	}
	rw.audit.mu.Unlock()
}

func TestRulesKeepOtherHostsEndToEnd(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: map[string][]Rule{"api.rules.example": {{Headers: map[string]string{"Authorization": "x"}}}}})
	// No rule for this host: the sandbox talks to the server itself and
	// sees its certificate.
	code, body, issuer, err := rw.fetch("GET", "https://plain.rules.example/", rw.outside.pool, "Authorization", "mine")
	if err != nil || code != 200 || issuer != "outside test CA" || !strings.Contains(body, "auth=mine") {
		t.Errorf("unruled host: %d %q issuer %q %v", code, body, issuer, err)
	}
	if _, ok := rw.audit.find(func(e Event) bool { return e.Name == "plain.rules.example" && e.Decision == Allowed && e.BytesIn > 0 }); !ok {
		t.Error("no audit event for the pass-through connection")
	}
}

func TestRulesRefuseBadUpstreamCertificate(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: map[string][]Rule{"bad.rules.example": {{Headers: map[string]string{"Authorization": "${e2b.secrets.api-key}"}}}}})
	code, body, _, err := rw.fetch("GET", "https://bad.rules.example/", nil)
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("bad certificate upstream: %d %q %v, want 502 naming the certificate", code, body, err)
	}
	if e, ok := rw.audit.find(func(e Event) bool { return e.Name == "bad.rules.example" && e.Method != "" }); !ok || e.Decision != Failed {
		t.Errorf("audit: %+v %v", e, ok)
	}
	// A client that does not trust the egress CA is refused, not fooled.
	if _, _, _, err := rw.fetch("GET", "https://bad.rules.example/", rw.outside.pool); err == nil {
		t.Error("a client not trusting the egress CA completed a request to an intercepted host")
	}
}

func TestRulesLiveChangeAndMissingSecret(t *testing.T) {
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer one")})
	if _, body, _, _ := rw.fetch("GET", "https://api.rules.example/", nil); !strings.Contains(body, "auth=Bearer one") {
		t.Fatalf("first rule: %q", body)
	}
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer two")})
	if _, body, _, _ := rw.fetch("GET", "https://api.rules.example/", nil); !strings.Contains(body, "auth=Bearer two") {
		t.Errorf("after the change: %q", body)
	}
	// A rule naming a secret that is gone fails the request; nothing is
	// sent without the header.
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("${e2b.secrets.gone}")})
	if code, body, _, err := rw.fetch("GET", "https://api.rules.example/", nil); err != nil || code != http.StatusBadGateway || !strings.Contains(body, `"gone"`) {
		t.Errorf("missing secret: %d %q %v", code, body, err)
	}
	// Rules removed: end to end again.
	rw.slot.apply(Policy{AllowInternet: true})
	if _, _, issuer, err := rw.fetch("GET", "https://api.rules.example/", rw.outside.pool); err != nil || issuer != "outside test CA" {
		t.Errorf("without rules: issuer %q %v", issuer, err)
	}
	// Rules grant no access.
	rw.slot.apply(Policy{AllowInternet: false, Rules: authRule("x")})
	if _, _, _, err := rw.fetch("GET", "https://api.rules.example/", nil); err == nil {
		t.Error("a rule opened a host the policy denies")
	}
}

// TestRulesFillOnlyTheSandboxTeamsSecrets: a placeholder is filled only
// with a secret of the policy's team. A sandbox of team B whose rule names
// a secret of team A gets nothing filled: the request fails as for a
// secret that does not exist, and A's value goes nowhere.
func TestRulesFillOnlyTheSandboxTeamsSecrets(t *testing.T) {
	const valueOfA = "sk-team-a-4b2e-only-for-team-a"
	rw := newRulesWorld(t)
	rw.mu.Lock()
	rw.secrets[secretKey{"team-a", "vendor-key"}] = valueOfA
	rw.mu.Unlock()

	rw.slot.apply(Policy{AllowInternet: true, Owner: "sbx-b", Team: "team-b", Rules: authRule("Bearer ${e2b.secrets.vendor-key}")})
	code, body, _, err := rw.fetch("GET", "https://api.rules.example/b", nil)
	if err != nil || code != http.StatusBadGateway || !strings.Contains(body, `"vendor-key"`) || strings.Contains(body, valueOfA) {
		t.Errorf("team B naming team A's secret: %d %q %v, want 502 naming the secret as missing", code, body, err)
	}
	if e, ok := rw.audit.find(func(e Event) bool { return e.Owner == "sbx-b" && e.Method == "GET" }); !ok || e.Decision != Failed {
		t.Errorf("audit of team B's request: %+v %v, want Failed", e, ok)
	}
	// Nor does a policy of no team find a team's secret.
	rw.slot.apply(Policy{AllowInternet: true, Rules: authRule("Bearer ${e2b.secrets.vendor-key}")})
	if code, body, _, err := rw.fetch("GET", "https://api.rules.example/none", nil); err != nil || code != http.StatusBadGateway || strings.Contains(body, valueOfA) {
		t.Errorf("a policy without a team naming team A's secret: %d %q %v, want 502", code, body, err)
	}

	// Team A's own sandbox gets it.
	rw.slot.apply(Policy{AllowInternet: true, Owner: "sbx-a", Team: "team-a", Rules: authRule("Bearer ${e2b.secrets.vendor-key}")})
	if code, body, _, err := rw.fetch("GET", "https://api.rules.example/a", nil); err != nil || code != 200 || !strings.Contains(body, "auth=Bearer "+valueOfA) {
		t.Errorf("team A naming its own secret: %d %q %v", code, body, err)
	}
}

// TestRulesRequestCost reports (with CUBE_MEASURE=1) the time of a
// keep-alive HTTPS GET from a sandbox netns to an outside host passed
// through end to end and to one with a rule (intercepted, re-originated).
// It asserts nothing about speed.
func TestRulesRequestCost(t *testing.T) {
	if os.Getenv("CUBE_MEASURE") == "" {
		t.Skip("a measurement: set CUBE_MEASURE=1")
	}
	rw := newRulesWorld(t)
	rw.slot.apply(Policy{AllowInternet: true, Rules: map[string][]Rule{"api.rules.example": {{Headers: map[string]string{"Authorization": "${e2b.secrets.api-key}"}}}}})
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rw.ca.CertPEM())
	roots.AddCert(rw.outside.cert)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			return rw.box.dial("tcp4", net.JoinHostPort(rulesHost.String(), port))
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, host := range []string{"plain.rules.example", "api.rules.example"} {
		const n = 200
		get := func() {
			resp, err := c.Get("https://" + host + "/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		get() // the connection and handshake
		start := time.Now()
		for range n {
			get()
		}
		per := time.Since(start) / n
		fresh := time.Now()
		tr.CloseIdleConnections()
		get()
		t.Logf("%s: %v per keep-alive request, %v with a new connection", host, per, time.Since(fresh))
	}
}
