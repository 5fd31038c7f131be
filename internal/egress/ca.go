package egress

import (
	"crypto/tls"
	"fmt"
	"sync"
	"time"

	"cube/internal/tlsca"
)

// CA is the node's egress certificate authority: the Filter answers a
// sandbox's TLS with a certificate it issues when the destination has
// rules, so it can read and change the requests. Sandboxes trust its
// certificate (CertPEM); its key stays in the host's data directory, mode
// 0600, and never enters a sandbox. It is a tlsca authority of its own,
// issuing one certificate per host name as the names are asked for.
type CA struct {
	auth *tlsca.Authority

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host name
}

const (
	egressLeafLifetime = 7 * 24 * time.Hour
	maxCachedLeaves    = 4096
)

// OpenCA loads the CA kept in dir, creating it on first use.
func OpenCA(dir string) (*CA, error) {
	a, err := tlsca.Open(dir, tlsca.Options{CAName: "Cube egress CA"})
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return &CA{auth: a, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA certificate sandboxes trust.
func (c *CA) CertPEM() []byte { return c.auth.CAPEM() }

// leaf returns a certificate for name, issued once and reused until near
// its end.
func (c *CA) leaf(name string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leaves[name]; l != nil && time.Now().Before(l.Leaf.NotAfter.Add(-time.Hour)) {
		return l, nil
	}
	if len(c.leaves) >= maxCachedLeaves {
		clear(c.leaves)
	}
	l, err := c.auth.IssueFor(name, egressLeafLifetime)
	if err != nil {
		return nil, err
	}
	c.leaves[name] = l
	return l, nil
}
