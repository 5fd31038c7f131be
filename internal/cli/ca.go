package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cube/internal/client"
)

// caPath is where the server's CA certificate is served, without an API
// key: it is public, and a client needs it before it can talk HTTPS.
const caPath = "/tls/ca.pem"

// newCACmd is `cubemastercli ca`: the one step a user takes so the SDKs
// reach https://<port>-<id>.<domain> without turning certificate checks
// off. It needs no API key, so anyone who may reach the server can run it.
func newCACmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ca [--out FILE]",
		Short: "Fetch Cube's CA certificate and print how to trust it",
		Long: `Fetch the certificate of Cube's local CA (GET $CUBE_API_URL/tls/ca.pem, or
<data-dir>/tls/ca.pem when the server does not answer), save it, and print its
SHA-256 fingerprint, the names it may sign for, and the lines that make the SDKs,
curl and the system trust it. A CA made before Cube gave its CAs name constraints
(which limit it to the server's own domain, localhost and loopback addresses) is
named as such, with how to replace it.

Without --out the certificate is left where it is found in the data directory,
or else saved as ca.pem in the user's configuration directory (~/.config/cube).`,
		Args: cobra.NoArgs,
	}
	dataDir := cmd.Flags().String("data-dir", client.DefaultDataDir, "data directory of a local server, read when the server does not answer")
	out := cmd.Flags().String("out", "", "write the CA certificate to this file (mode 0644)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		local := filepath.Join(*dataDir, "tls", "ca.pem")
		pemBytes, fromLocal, err := findCA(cmd.Context(), local)
		if err != nil {
			return err
		}
		cert, err := parseCA(pemBytes)
		if err != nil {
			// Only the local file can get here: fetchCA checks what it got.
			return fmt.Errorf("%s: %w", local, err)
		}
		path, err := placeCA(pemBytes, *out, local, fromLocal)
		if err != nil {
			return err
		}
		printTrust(cmd.OutOrStdout(), path, cert)
		return nil
	}
	return cmd
}

// findCA asks the server first (the CA of the server the user talks to,
// wherever it runs) and reads the data directory only when that fails.
// fromLocal says which one answered.
func findCA(ctx context.Context, local string) (pemBytes []byte, fromLocal bool, err error) {
	base := os.Getenv(client.EnvURL)
	if base == "" {
		base = client.DefaultURL
	}
	fetched, fetchErr := fetchCA(ctx, base)
	if fetchErr == nil {
		return fetched, false, nil
	}
	b, readErr := os.ReadFile(local)
	if readErr == nil {
		return b, true, nil
	}
	hint := ""
	if strings.HasPrefix(base, "https:") {
		// The CA cannot be fetched over a connection only it can verify.
		hint = fmt.Sprintf("; over https the CA cannot be checked before it is trusted: set %s to the server's http address, or copy ca.pem from the server", client.EnvURL)
	}
	return nil, false, fmt.Errorf("no CA certificate: %w; %w%s", fetchErr, readErr, hint)
}

func fetchCA(ctx context.Context, base string) ([]byte, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q is not an http(s) URL", client.EnvURL, base)
	}
	target := strings.TrimRight(base, "/") + caPath
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err // names the method and URL already
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", target, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", target, resp.Status)
	}
	// A proxy's or an older server's page is no reason to stop: the data
	// directory may still hold the CA.
	if _, err := parseCA(b); err != nil {
		return nil, fmt.Errorf("GET %s: %w", target, err)
	}
	return b, nil
}

// parseCA checks that b is a PEM CA certificate, so nothing else is ever
// written out as one, and returns it.
func parseCA(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certificate %q is no CA", cert.Subject.CommonName)
	}
	return cert, nil
}

// placeCA returns the absolute path of a file holding pemBytes, the one
// the trust lines name: --out when given; else the data directory's copy
// when it is the same CA (nothing to write); else ca.pem in the user's
// configuration directory, which outlives the shell that exports it.
func placeCA(pemBytes []byte, out, local string, fromLocal bool) (string, error) {
	if out == "" && !fromLocal {
		if b, err := os.ReadFile(local); err == nil && bytes.Equal(b, pemBytes) {
			fromLocal = true
		}
	}
	if out == "" && fromLocal {
		return filepath.Abs(local)
	}
	if out == "" {
		cfg, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("nowhere to save the CA certificate (%w): give --out FILE", err)
		}
		if err := os.MkdirAll(filepath.Join(cfg, "cube"), 0o755); err != nil {
			return "", err
		}
		out = filepath.Join(cfg, "cube", "ca.pem")
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(abs, pemBytes, 0o644); err != nil {
		return "", err
	}
	// WriteFile keeps the mode of a file that already exists.
	if err := os.Chmod(abs, 0o644); err != nil {
		return "", err
	}
	return abs, nil
}

func printTrust(w io.Writer, path string, cert *x509.Certificate) {
	sum := sha256.Sum256(cert.Raw)
	hexes := make([]string, len(sum))
	for i, b := range sum {
		hexes[i] = fmt.Sprintf("%02X", b)
	}
	p := shellQuote(path)
	fmt.Fprintf(w, "CA certificate: %s\n", path)
	fmt.Fprintf(w, "Subject: %s (valid until %s)\n", cert.Subject.CommonName, cert.NotAfter.UTC().Format("2006-01-02"))
	fmt.Fprintf(w, "SHA-256 fingerprint: %s\n", strings.Join(hexes, ":"))
	permitted := permittedNames(cert)
	if len(permitted) > 0 {
		fmt.Fprintf(w, "Signs only for: %s (name constraints)\n", strings.Join(permitted, ", "))
	}
	fmt.Fprintf(w, "\nTrust it in a shell:\n")
	fmt.Fprintf(w, "  # Node SDKs (added to the default trust store)\n")
	fmt.Fprintf(w, "  export NODE_EXTRA_CA_CERTS=%s\n", p)
	fmt.Fprintf(w, "  # Python SDK, OpenSSL (replaces the default store: other HTTPS sites fail in that shell)\n")
	fmt.Fprintf(w, "  export SSL_CERT_FILE=%s\n", p)
	// Debian's curl 7.88 reads its compiled-in bundle and ignores
	// SSL_CERT_FILE (measured); CURL_CA_BUNDLE is the variable it honours.
	fmt.Fprintf(w, "  # curl (replaces its default store too)\n")
	fmt.Fprintf(w, "  export CURL_CA_BUNDLE=%s\n", p)
	if len(permitted) == 0 {
		// Such a CA, trusted by the whole system, could vouch for any
		// site; the server makes constrained CAs since, but never
		// replaces one by itself.
		fmt.Fprintf(w, "\nThis CA predates name constraints: whoever holds its key can make certificates\n")
		fmt.Fprintf(w, "for any site that a client trusting it accepts. Prefer the per-shell lines above,\n")
		fmt.Fprintf(w, "or have the server make a new CA: stop it, move ca.pem and ca-key.pem out of\n")
		fmt.Fprintf(w, "<data-dir>/tls, start it and run this command again.\n")
	}
	fmt.Fprintf(w, "\nOr in the system store (Debian, Ubuntu; as root):\n")
	fmt.Fprintf(w, "  cp %s /usr/local/share/ca-certificates/cube.crt && update-ca-certificates\n", p)
}

// permittedNames lists what a CA's name constraints let it sign for;
// none for a CA without them.
func permittedNames(cert *x509.Certificate) []string {
	names := slices.Clone(cert.PermittedDNSDomains)
	for _, r := range cert.PermittedIPRanges {
		names = append(names, r.String())
	}
	return names
}

// shellQuote makes path safe to paste into a POSIX shell.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@%,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
