package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cube/internal/cube"
)

// ClientConfig configures a Client: what Config says of the same fields.
type ClientConfig struct {
	Peers        Peers
	Secret       []byte
	PeerTLS      *tls.Config
	PeersOverTLS bool
}

// Client makes this node's own signed calls on its peers' internal
// routes. It needs only the peers' addresses and the cluster's secret and
// TLS, so it exists before the node that fetches files through it.
type Client struct {
	cfg       ClientConfig
	transport http.RoundTripper
	http      *http.Client
}

// NewClient returns the client of cfg.Peers.
func NewClient(cfg ClientConfig) *Client {
	c := &Client{cfg: cfg, transport: http.DefaultTransport, http: http.DefaultClient}
	if cfg.PeerTLS != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = cfg.PeerTLS
		c.transport, c.http = t, &http.Client{Transport: t}
	}
	return c
}

// Get calls an internal route (path under InternalPrefix) on node, signed,
// and returns its 200 or 204 answer, whose body the caller closes.
func (c *Client) Get(ctx context.Context, node, path string) (*http.Response, error) {
	return c.Call(ctx, http.MethodGet, node, path)
}

// Call is Get with another method (and no body).
func (c *Client) Call(ctx context.Context, method, node, path string) (*http.Response, error) {
	addr, _, err := c.cfg.Peers.Peer(ctx, node)
	if err != nil {
		return nil, err
	}
	return c.callAt(ctx, method, node, addr, path)
}

// callAt is Call on node at addr.
func (c *Client) callAt(ctx context.Context, method, node, addr, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(addr, "/")+path, nil)
	if err != nil {
		return nil, fmt.Errorf("node %s's address %q: %w", node, addr, err)
	}
	if err := c.peerScheme(req.URL); err != nil {
		return nil, err
	}
	sign(req, c.cfg.Peers.Self(), c.cfg.Secret, time.Now(), emptyBody)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("node %s answered %s: %s", node, resp.Status, bytes.TrimSpace(msg))
	}
	return resp, nil
}

// peerScheme refuses a peer's plain HTTP address on a node that talks to
// its peers over mutual TLS: what it forwards carries clients' API keys
// and sandbox tokens, which go between nodes only encrypted (a node
// started with --cluster-insecure-transport has such an address).
func (c *Client) peerScheme(u *url.URL) error {
	if !c.cfg.PeersOverTLS || u.Scheme == "https" {
		return nil
	}
	return cube.Errorf(cube.Unavailable, "a peer's address %s is not https, and this node sends its peers requests only over mutual TLS: restart that node with --peer-listen", u.Redacted()).WithRetryAfter(10 * time.Second)
}
