package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"cube/internal/nodetest"
	"cube/internal/testenv"
)

// httpsClient trusts only caPEM and dials every name to addr, the way a
// client whose resolver maps the domain to this machine would.
func httpsClient(t *testing.T, caPEM []byte, addr string) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %q", caPEM)
	}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: dial, TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
	}}
}

// TestHTTPSListener serves the API over HTTPS at api.<domain> with a
// certificate from the local CA the server made, reports the domain with
// the HTTPS port, refuses names outside the domain, and keeps its CA
// across a restart.
func TestHTTPSListener(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := t.TempDir()
	prefix, cidr := nodetest.SlotRange()
	addr, tlsAddr := freeAddr(t), freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr, "--tls-listen", tlsAddr, "--domain", "test.localhost")

	code, caPEM := d.do(t, "GET", "/tls/ca.pem", nil, nil)
	if code != 200 || !strings.HasPrefix(string(caPEM), "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("GET /tls/ca.pem: %d %s", code, caPEM)
	}
	_, port, _ := net.SplitHostPort(tlsAddr)
	c := httpsClient(t, caPEM, tlsAddr)
	req, _ := http.NewRequest("GET", "https://api.test.localhost:"+port+"/templates", nil)
	req.Header.Set("X-API-Key", apiKey)
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("the API over HTTPS: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Proto != "HTTP/2.0" {
		t.Errorf("GET https://api.test.localhost/templates: %s over %s", res.Status, res.Proto)
	}
	// A sandbox host's name is covered too; with no such sandbox the
	// proxy answers, over TLS.
	if res, err := c.Get("https://49983-nosuchsandbox.test.localhost:" + port + "/health"); err != nil {
		t.Errorf("a sandbox host over HTTPS: %v", err)
	} else {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 502 || !strings.Contains(string(body), "not found") {
			t.Errorf("an unknown sandbox over HTTPS: %d %s", res.StatusCode, body)
		}
	}
	if _, err := c.Get("https://wrong.example:" + port + "/health"); err == nil {
		t.Error("a name outside the domain got a certificate")
	}

	// The domain sandboxes report carries the HTTPS port.
	code, body := d.do(t, "GET", "/health", nil, nil)
	if code != 200 {
		t.Fatalf("health: %d %s", code, body)
	}
	if got := regexp.MustCompile(`domain=(\S+)`).FindStringSubmatch(d.logs.String()); got == nil || got[1] != "test.localhost:"+port {
		t.Errorf("the server reports domain %v, want test.localhost:%s", got, port)
	}

	// A restart keeps the CA: clients that trust it go on trusting.
	d.stop(t)
	d = startDaemon(t, dataDir, prefix, cidr.String(), addr, "--tls-listen", tlsAddr, "--domain", "test.localhost")
	if _, again := d.do(t, "GET", "/tls/ca.pem", nil, nil); string(again) != string(caPEM) {
		t.Error("the CA changed across a restart")
	}
	if res, err := httpsClient(t, caPEM, tlsAddr).Get("https://api.test.localhost:" + port + "/health"); err != nil {
		t.Errorf("after a restart: %v", err)
	} else {
		var h map[string]any
		json.NewDecoder(res.Body).Decode(&h)
		res.Body.Close()
	}
}
