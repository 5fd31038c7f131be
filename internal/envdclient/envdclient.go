// Package envdclient is the control plane's typed client of the envd
// inside each sandbox: handing it a sandbox's token and environment
// (/init), checking the token took, reading its resource sample
// (/metrics), asking whether it is up (/health), and running a command
// and following its output (the process service), which is how a
// template build's steps run. It keeps the wire details (ports, headers,
// bodies, retries) out of the sandbox lifecycle and build code, and
// speaks only envd's protocol packages, never the agent itself.
package envdclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"cube/internal/envd/protocol"
)

// initTimeout bounds Init's retries while a restored sandbox's network
// comes up.
const initTimeout = 15 * time.Second

// metricsTimeout bounds a /metrics call: the sample only adds detail to
// what the runtime reports, so a slow agent must not hold the answer up.
const metricsTimeout = 2 * time.Second

// Client talks to one sandbox's envd. It holds no state of its own, so
// one may be made for each call.
type Client struct {
	hc   *http.Client
	base string // "http://host:port"
	// initTimeout is initTimeout but for tests.
	initTimeout time.Duration
}

// New returns a client of the envd at addr, sending through hc.
func New(hc *http.Client, addr netip.AddrPort) *Client {
	return &Client{hc: hc, base: "http://" + addr.String(), initTimeout: initTimeout}
}

// NoKeepAlive is the HTTP client the node reaches envds with. Connections
// are not kept: a network slot, and with it its address, passes to the
// next sandbox, and a pooled connection would reach the wrong one.
var NoKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}

// At returns a client of the envd of the sandbox reached at host, on the
// port every sandbox serves it on.
func At(hc *http.Client, host netip.Addr) *Client {
	return New(hc, netip.AddrPortFrom(host, protocol.EnvdPort))
}

// Init hands envd in, authorised by oldToken (the token inside the image,
// empty when it had none), then confirms the new token, *in.AccessToken,
// took. It retries while the restored sandbox's network comes up; each
// attempt carries the current time as in.Timestamp, which envd requires
// to be newer than the last /init it applied.
func (c *Client) Init(ctx context.Context, in protocol.Init, oldToken string) error {
	c, done := c.session()
	defer done()
	var token string
	if in.AccessToken != nil {
		token = *in.AccessToken
	}
	deadline := time.Now().Add(c.initTimeout)
	var last error
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		now := time.Now().UTC()
		in.Timestamp = &now
		body, _ := json.Marshal(in)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/init", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if oldToken != "" {
			req.Header.Set(protocol.HeaderAccessToken, oldToken)
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return c.confirmToken(ctx, token, oldToken)
			}
			last = fmt.Errorf("envd /init answered %s: %s", resp.Status, bytes.TrimSpace(msg))
			if resp.StatusCode/100 == 4 {
				// Refused. An earlier attempt whose answer was lost may
				// have applied the token already; otherwise retrying the
				// same request cannot help.
				if c.confirmToken(ctx, token, oldToken) == nil {
					return nil
				}
				return fmt.Errorf("sandbox agent refused its new access token: %w", last)
			}
		} else {
			last = err
		}
		// Back off, but give up as soon as the caller does.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(min(5+attempt*5, 100)) * time.Millisecond):
		}
	}
	return fmt.Errorf("sandbox agent did not answer: %w", last)
}

// session returns a client like c whose requests share one connection,
// and a function that closes it. /init and the token checks after it are
// three requests; on one connection, they pay for one TCP handshake with
// the restored sandbox's network stack instead of three. Once done, no
// connection is left for the slot's next sandbox to be reached through.
// A client whose transport is not net/http's own is returned as it is.
func (c *Client) session() (*Client, func()) {
	tr, ok := c.hc.Transport.(*http.Transport)
	if !ok || !tr.DisableKeepAlives {
		return c, func() {}
	}
	kept := tr.Clone()
	kept.DisableKeepAlives = false
	kept.MaxIdleConnsPerHost = 1
	s := *c
	s.hc = &http.Client{Transport: kept, Timeout: c.hc.Timeout}
	return &s, kept.CloseIdleConnections
}

// confirmToken checks that envd serves requests with the sandbox's new
// token and refuses the one it replaced (or no token, for a sandbox that
// had none). An agent that answered /init but kept its old token, as one
// tampered with from inside the sandbox would, must not be handed out:
// its forks and clones would all answer to a token someone else knows.
func (c *Client) confirmToken(ctx context.Context, token, old string) error {
	if token == old {
		return nil
	}
	// With no token envd serves every request, whatever it carries.
	checkOld := token != ""
	status := func(tok string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/envs", nil)
		if tok != "" {
			req.Header.Set(protocol.HeaderAccessToken, tok)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := status(token); err != nil || code != http.StatusOK {
		return fmt.Errorf("sandbox agent does not accept its new access token (%d, %v)", code, err)
	}
	if !checkOld {
		return nil
	}
	if code, err := status(old); err != nil || code != http.StatusUnauthorized {
		return fmt.Errorf("sandbox agent still accepts the access token it had before (%d, %v)", code, err)
	}
	return nil
}

// Metrics reads envd's resource sample, authorised by token.
func (c *Client) Metrics(ctx context.Context, token string) (*protocol.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	req.Header.Set(protocol.HeaderAccessToken, token)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envd /metrics: %s", resp.Status)
	}
	var m protocol.Metrics
	// The sample is a few hundred bytes; whatever answers on envd's port
	// is the sandbox's to choose, so the server reads no more than this.
	return &m, json.NewDecoder(io.LimitReader(resp.Body, maxMetricsBytes)).Decode(&m)
}

// Health asks whether envd serves: nil on a 2xx answer. It tries once;
// waiting for an agent that is starting is the caller's to pace.
func (c *Client) Health(ctx context.Context) error {
	return Probe(ctx, c.hc, c.base+HealthPath)
}

// Probe GETs url once through hc: nil on a 2xx answer. The builder probes
// a template's other ports with it as envd's health is probed.
func Probe(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// HealthPath is envd's route that answers as soon as the agent runs,
// without a token.
const HealthPath = "/health"

// maxMetricsBytes bounds what Metrics reads of an answer.
const maxMetricsBytes = 64 << 10
