package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"sync"
	"time"
)

// Nodes that talk over TLS trust each other's certificates through the
// state database: each node records the certificate of the authority that
// issues its own (Config.CACert), and a peer's certificate is good when one
// of the recorded authorities issued it. The database is trusted with the
// cluster's whole state already, and a node that joins needs nothing copied
// by hand.

// trustTTL is how long a read of the recorded authorities is used: a new
// node is trusted by the others within it.
const trustTTL = 5 * time.Second

// trust caches the pool of the nodes' authorities.
type trust struct {
	mu   sync.Mutex
	pool *x509.CertPool
	at   time.Time
}

// NodeCAs returns the authorities the nodes of the cluster recorded.
func (r *Registry) NodeCAs(ctx context.Context) (*x509.CertPool, error) {
	r.trust.mu.Lock()
	defer r.trust.mu.Unlock()
	if r.trust.pool != nil && time.Since(r.trust.at) < trustTTL {
		return r.trust.pool, nil
	}
	recs, err := r.cfg.Store.Nodes().List(ctx)
	if err != nil {
		if r.trust.pool != nil {
			// The database is out of reach: the nodes known a moment
			// ago still are.
			return r.trust.pool, nil
		}
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for _, rec := range recs {
		if rec.CACert != "" && pool.AppendCertsFromPEM([]byte(rec.CACert)) {
			n++
		}
	}
	if n == 0 {
		return nil, errors.New("no node of the cluster recorded a certificate authority")
	}
	r.trust.pool, r.trust.at = pool, time.Now()
	return pool, nil
}

// VerifyPeer checks a certificate a node presents (as a server, or as a
// client with usage) against the nodes' authorities; name is the host it
// was reached by, empty when it connected to this one.
func (r *Registry) VerifyPeer(ctx context.Context, chain []*x509.Certificate, name string, usage x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return errors.New("the peer presented no certificate: only nodes of this cluster connect here")
	}
	pool, err := r.NodeCAs(ctx)
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err = chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: name, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}
