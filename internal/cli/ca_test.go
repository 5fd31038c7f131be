package cli

import (
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/tlsca"
)

// testCA makes a CA in dir/tls, where the server keeps it, and returns its
// PEM and the fingerprint as the command prints it.
func testCA(t *testing.T, dataDir string) (pemBytes []byte, fingerprint string) {
	t.Helper()
	a, err := tlsca.Open(filepath.Join(dataDir, "tls"), tlsca.Options{Names: []string{"cube.localhost", "*.cube.localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(a.CAPEM())
	sum := sha256.Sum256(block.Bytes)
	var hexes []string
	for _, b := range sum {
		hexes = append(hexes, fmt.Sprintf("%02X", b))
	}
	return a.CAPEM(), strings.Join(hexes, ":")
}

// caServer serves body at /tls/ca.pem and records whether an API key came.
func caServer(t *testing.T, status int, body []byte) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/tls/ca.pem" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("X-API-Key") != "" {
			t.Errorf("ca sent an API key")
		}
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	return srv
}

func checkTrustLines(t *testing.T, out, path, fingerprint string) {
	t.Helper()
	for _, want := range []string{
		"CA certificate: " + path + "\n",
		"SHA-256 fingerprint: " + fingerprint + "\n",
		"export NODE_EXTRA_CA_CERTS=" + path + "\n",
		"export SSL_CERT_FILE=" + path + "\n",
		"export CURL_CA_BUNDLE=" + path + "\n",
		"cp " + path + " /usr/local/share/ca-certificates/cube.crt && update-ca-certificates\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "E2B_DOMAIN") {
		t.Errorf("output names E2B_DOMAIN:\n%s", out)
	}
}

func TestCAFromServer(t *testing.T) {
	serverPEM, fp := testCA(t, t.TempDir())
	caServer(t, http.StatusOK, serverPEM)
	// The local data dir holds another CA: the server's answer wins.
	dataDir := t.TempDir()
	testCA(t, dataDir)
	out := filepath.Join(t.TempDir(), "cube-ca.pem")
	os.WriteFile(out, []byte("old"), 0o600)
	stdout, _, err := run(t, "ca", "--out", out, "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || string(b) != string(serverPEM) {
		t.Fatalf("--out holds %q (%v)", b, err)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o644 {
		t.Errorf("--out mode %v", fi.Mode().Perm())
	}
	checkTrustLines(t, stdout, out, fp)
}

func TestCAWithoutOut(t *testing.T) {
	dataDir := t.TempDir()
	localPEM, fp := testCA(t, dataDir)
	local := filepath.Join(dataDir, "tls", "ca.pem")

	// The server's CA is the one in the data dir: nothing is written.
	caServer(t, http.StatusOK, localPEM)
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	stdout, _, err := run(t, "ca", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	checkTrustLines(t, stdout, local, fp)

	// A remote server's CA is saved in the user's configuration directory.
	otherPEM, otherFP := testCA(t, t.TempDir())
	caServer(t, http.StatusOK, otherPEM)
	stdout, _, err = run(t, "ca", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	saved := filepath.Join(cfg, "cube", "ca.pem")
	if b, err := os.ReadFile(saved); err != nil || string(b) != string(otherPEM) {
		t.Errorf("%s holds %q (%v)", saved, b, err)
	}
	checkTrustLines(t, stdout, saved, otherFP)
}

func TestCAFallsBackToDataDir(t *testing.T) {
	dataDir := t.TempDir()
	localPEM, fp := testCA(t, dataDir)
	local := filepath.Join(dataDir, "tls", "ca.pem")

	// A server without the route (404), one answering something that is
	// no certificate, and no server at all.
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for _, setURL := range []func(){
		func() { caServer(t, http.StatusNotFound, []byte("404 page not found")) },
		func() { caServer(t, http.StatusOK, []byte("<html>captive portal</html>")) },
		func() { t.Setenv("CUBE_API_URL", down.URL) },
	} {
		setURL()
		out := filepath.Join(t.TempDir(), "ca.pem")
		stdout, _, err := run(t, "ca", "--data-dir", dataDir, "--out", out)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(out); string(b) != string(localPEM) {
			t.Errorf("--out holds %q", b)
		}
		checkTrustLines(t, stdout, out, fp)

		stdout, _, err = run(t, "ca", "--data-dir", dataDir)
		if err != nil {
			t.Fatal(err)
		}
		checkTrustLines(t, stdout, local, fp)
	}

	// Neither: the error names both places.
	empty := t.TempDir()
	_, _, err := run(t, "ca", "--data-dir", empty)
	if err == nil || !strings.Contains(err.Error(), down.URL+"/tls/ca.pem") || !strings.Contains(err.Error(), filepath.Join(empty, "tls", "ca.pem")) {
		t.Errorf("no CA anywhere: %v", err)
	}

	// A damaged local file is not passed on as a certificate.
	os.MkdirAll(filepath.Join(empty, "tls"), 0o700)
	os.WriteFile(filepath.Join(empty, "tls", "ca.pem"), []byte("junk"), 0o644)
	if _, _, err := run(t, "ca", "--data-dir", empty, "--out", filepath.Join(empty, "x.pem")); err == nil {
		t.Error("junk ca.pem accepted")
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/cube/tls/ca.pem": "/var/lib/cube/tls/ca.pem",
		"/home/a b/ca.pem":         "'/home/a b/ca.pem'",
		"/tmp/it's.pem":            `'/tmp/it'\''s.pem'`,
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestCANameConstraints: the command says what a CA may sign for, and
// warns before the system-store lines when it predates name constraints.
func TestCANameConstraints(t *testing.T) {
	dataDir := t.TempDir()
	a, err := tlsca.Open(filepath.Join(dataDir, "tls"), tlsca.Options{Names: []string{"cube.localhost", "*.cube.localhost", "localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Constrain: true})
	if err != nil {
		t.Fatal(err)
	}
	caServer(t, http.StatusOK, a.CAPEM())
	stdout, _, err := run(t, "ca", "--data-dir", dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Signs only for: cube.localhost, localhost, 127.0.0.1/32 (name constraints)\n"; !strings.Contains(stdout, want) || strings.Contains(stdout, "predates") {
		t.Errorf("a constrained CA: output lacks %q:\n%s", want, stdout)
	}

	old, _ := testCA(t, t.TempDir())
	caServer(t, http.StatusOK, old)
	stdout, _, err = run(t, "ca", "--out", filepath.Join(t.TempDir(), "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	warn, store := strings.Index(stdout, "predates name constraints"), strings.Index(stdout, "update-ca-certificates")
	if warn < 0 || warn > store {
		t.Errorf("an unconstrained CA: no warning before the system store lines:\n%s", stdout)
	}
}
