package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"cube/internal/cluster"
	"cube/internal/tlsca"
)

// peerTLS is a node's mutual TLS with the other nodes of its cluster
// (--peer-listen): an authority of its own in <data-dir>/tls/peers whose
// leaf names the host peers reach it by and serves as both its server and
// its client certificate. The authority's certificate is recorded with the
// node, and each node trusts the authorities the nodes recorded (see
// cluster.Registry.VerifyPeer).
type peerTLS struct {
	ca             *tlsca.Authority
	server, client *tls.Config
}

// openPeerCA opens the authority of a node reached at advertise. It is
// recorded with the node when the registry opens, and the TLS made from it
// (peerTLS) verifies peers through that registry.
func openPeerCA(dataDir, advertise string) (*tlsca.Authority, error) {
	u, err := url.Parse(advertise)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" {
		return nil, fmt.Errorf("--advertise %q: with --peer-listen, peers reach this node at https://host:port", advertise)
	}
	opts := tlsca.Options{CAName: "Cube cluster node", ClientAuth: true}
	if ip := net.ParseIP(u.Hostname()); ip != nil {
		opts.IPs = []net.IP{ip}
	} else {
		opts.Names = []string{u.Hostname()}
	}
	return tlsca.Open(filepath.Join(dataDir, "tls", "peers"), opts)
}

// newPeerTLS makes the TLS of the peer listener and of the calls on peers,
// verifying peers through reg.
func newPeerTLS(ca *tlsca.Authority, reg *cluster.Registry) *peerTLS {
	verify := func(chain []*x509.Certificate, name string, usage x509.ExtKeyUsage) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return reg.VerifyPeer(ctx, chain, name, usage)
	}
	p := &peerTLS{ca: ca}
	p.server = &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: ca.GetCertificate,
		// Any certificate is asked for, and checked against the nodes'
		// authorities as they are now, not as they were at start.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verify(cs.PeerCertificates, "", x509.ExtKeyUsageClientAuth)
		},
	}
	p.client = &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return ca.GetCertificate(nil)
		},
		// Verified by VerifyConnection, against the nodes' authorities
		// rather than the host's.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verify(cs.PeerCertificates, cs.ServerName, x509.ExtKeyUsageServerAuth)
		},
	}
	return p
}
