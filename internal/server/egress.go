package server

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"

	"cube/internal/egress"
	"cube/internal/secrets"
)

// egressParts are the egress Filter and what network.rules need: the CA
// sandboxes trust for hosts with rules, the secrets rules insert, and the
// queue the Filter's audit events wait in for the node to log them.
type egressParts struct {
	filter  *egress.Filter
	events  *egress.Events
	ca      *egress.CA
	secrets *secrets.Store
}

// openEgress loads (or makes, on first start) the egress CA in
// <data>/egress-ca and the secret store, reads --egress-ca-bundle, and
// starts the Filter, with the slots' isolation settings. A server on
// Parts has no Filter (nil): its sandboxes have no network to filter.
func openEgress(o Options, hostCIDR netip.Prefix, log *slog.Logger, done *closers) (*egressParts, error) {
	ca, err := egress.OpenCA(filepath.Join(o.DataDir, "egress-ca"))
	if err != nil {
		return nil, err
	}
	sec, err := secrets.Open(o.DataDir, o.SecretsKey)
	if err != nil {
		return nil, err
	}
	if o.Parts != nil {
		return &egressParts{ca: ca, secrets: sec}, nil
	}
	var roots *x509.CertPool // nil: the host's trust store
	if o.EgressCABundle != "" {
		pem, err := os.ReadFile(o.EgressCABundle)
		if err != nil {
			return nil, fmt.Errorf("--egress-ca-bundle: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--egress-ca-bundle %s holds no PEM certificate", o.EgressCABundle)
		}
	}
	events := egress.NewEvents(0)
	filter, err := egress.NewFilter(egress.Config{AllowPrivate: o.AllowPrivate, HostCIDR: hostCIDR, Logger: log,
		CA: ca, UpstreamRoots: roots, Secrets: sec.Value, Audit: events.Add})
	if err != nil {
		return nil, fmt.Errorf("egress filter: %w", err)
	}
	done.push(func() { filter.Close() })
	return &egressParts{filter: filter, events: events, ca: ca, secrets: sec}, nil
}
