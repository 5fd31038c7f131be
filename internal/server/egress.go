package server

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"

	"cube/internal/egress"
	"cube/internal/secrets"
)

// egressParts are what network.rules need: the CA sandboxes trust for
// hosts with rules, the roots the Filter verifies those hosts with, and
// the secrets rules insert.
type egressParts struct {
	ca      *egress.CA
	roots   *x509.CertPool // nil: the host's trust store
	secrets *secrets.Store
}

// openEgress loads (or makes, on first start) the egress CA in
// <data>/egress-ca and the secret store, and reads --egress-ca-bundle.
func openEgress(o Options) (*egressParts, error) {
	ca, err := egress.OpenCA(filepath.Join(o.DataDir, "egress-ca"))
	if err != nil {
		return nil, err
	}
	sec, err := secrets.Open(o.DataDir, o.SecretsKey)
	if err != nil {
		return nil, err
	}
	p := &egressParts{ca: ca, secrets: sec}
	if o.EgressCABundle != "" {
		pem, err := os.ReadFile(o.EgressCABundle)
		if err != nil {
			return nil, fmt.Errorf("--egress-ca-bundle: %w", err)
		}
		p.roots = x509.NewCertPool()
		if !p.roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--egress-ca-bundle %s holds no PEM certificate", o.EgressCABundle)
		}
	}
	return p, nil
}
