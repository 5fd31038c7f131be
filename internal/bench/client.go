package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"cube/internal/api/wire"
	"cube/internal/client"
)

// Client is the control plane as a benchmark drives it: the shared client
// on a transport sized for the run's concurrency, with errors that say
// what a status means for the run.
type Client struct {
	api *client.Client
	// base is the server's URL, for GET /metrics.
	base string
	// settle is how long a measured window waits for the host to go quiet.
	settle settlePolicy
}

// newMeter returns an unopened measured window on c's server.
func (c *Client) newMeter() *meter { return &meter{c: c} }

// NewClient returns a client for baseURL sized for concurrency parallel
// requests: with net/http's default of two idle connections per host,
// most requests at c=20 would pay a TCP handshake and skew the latencies.
func NewClient(baseURL, apiKey string, concurrency int) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("API URL %q is not an http(s) URL (set --api-url or E2B_API_URL)", baseURL)
	}
	if concurrency < 1 {
		concurrency = 1
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4 * concurrency,
		MaxIdleConnsPerHost: 4 * concurrency,
		IdleConnTimeout:     90 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	api := client.New(baseURL, apiKey)
	api.HTTP = &http.Client{Transport: tr, Timeout: 10 * time.Minute}
	return &Client{api: api, base: baseURL, settle: defaultSettle}, nil
}

// callError is a failed call as a benchmark reports it: a bare "404" after
// minutes of setup helps nobody, so it says what the status means.
type callError struct {
	*client.APIError
}

func (e *callError) Unwrap() error { return e.APIError }

func (e *callError) Error() string {
	what := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	var hint string
	switch {
	case e.Status == http.StatusUnauthorized:
		hint = "the API key was refused; set --api-key or E2B_API_KEY to the server's key"
	case e.Status == http.StatusNotImplemented:
		hint = "the server does not implement this operation yet"
	case e.RouteMissing():
		hint = "the server has no such route; it does not implement this operation"
	}
	msg := e.Message
	if e.Raw && len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	switch {
	case hint != "" && msg != "":
		return what + ": " + hint + " (" + msg + ")"
	case hint != "":
		return what + ": " + hint
	case msg != "":
		return what + ": " + msg
	}
	return what
}

// explain gives an API error of the shared client the benchmark's words;
// other errors pass unchanged.
func explain(err error) error {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return &callError{ae}
	}
	return err
}

// isNotFound reports whether the sandbox or template of a call is gone
// (not a route the server lacks).
func isNotFound(err error) bool {
	var ae *client.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound && !ae.RouteMissing()
}

// CreateSandbox is POST /sandboxes. Its round trip is the create latency:
// the server answers once the sandbox's agent answers.
func (c *Client) CreateSandbox(ctx context.Context, templateID string, timeout int) (*wire.Sandbox, error) {
	req := wire.NewSandbox{TemplateID: templateID}
	if timeout > 0 {
		req.Timeout = &timeout
	}
	sb, err := c.api.CreateSandbox(ctx, req)
	return sb, explain(err)
}

// DeleteSandbox is DELETE /sandboxes/{id}.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return explain(c.api.KillSandbox(ctx, id))
}

// Snapshot is POST /sandboxes/{id}/snapshots.
func (c *Client) Snapshot(ctx context.Context, id string) (*wire.SnapshotInfo, error) {
	s, err := c.api.CreateSnapshot(ctx, id, "")
	if err != nil {
		return nil, explain(err)
	}
	if s.SnapshotID == "" {
		return nil, fmt.Errorf("POST /sandboxes/%s/snapshots: answer has no snapshotID", id)
	}
	return s, nil
}

// DeleteTemplate is DELETE /templates/{id}; snapshots are templates.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	return explain(c.api.DeleteTemplate(ctx, id))
}

// Rollback is POST /sandboxes/{id}/rollback.
func (c *Client) Rollback(ctx context.Context, id, snapshotID string) error {
	_, err := c.api.Rollback(ctx, id, snapshotID)
	return explain(err)
}

// Clone is POST /sandboxes/{id}/clone; when the server has no clone route
// it falls back to E2B's fork with the same count. It returns the children
// that started and an error naming how many did not.
func (c *Client) Clone(ctx context.Context, id string, count, concurrency int) ([]string, error) {
	res, err := c.api.CloneSandbox(ctx, id, client.CloneOptions{Count: count, Concurrency: concurrency})
	if client.Unsupported(err) {
		res, err = c.api.ForkSandbox(ctx, id, count)
	}
	if err != nil {
		return nil, explain(err)
	}
	var ids []string
	var failed []string
	for _, r := range res {
		switch {
		case r.Sandbox != nil:
			ids = append(ids, r.Sandbox.SandboxID)
		case r.Error != nil:
			failed = append(failed, r.Error.Message)
		}
	}
	if len(failed) > 0 {
		return ids, fmt.Errorf("clone of %s: %d of %d children failed: %s", id, len(failed), count, failed[0])
	}
	if len(ids) != count {
		return ids, fmt.Errorf("clone of %s: asked for %d children, got %d", id, count, len(ids))
	}
	return ids, nil
}

// Pause is POST /sandboxes/{id}/pause, with its memory or its files only.
func (c *Client) Pause(ctx context.Context, id string, memory bool) error {
	return explain(c.api.PauseSandbox(ctx, id, memory))
}

// Connect is POST /sandboxes/{id}/connect, which resumes a paused sandbox.
func (c *Client) Connect(ctx context.Context, id string, timeout int) error {
	_, _, err := c.api.ConnectSandbox(ctx, id, timeout)
	return explain(err)
}

// Template is GET /templates/{id} with the build facts Cube adds.
func (c *Client) Template(ctx context.Context, id string) (*wire.TemplateDetail, error) {
	t, err := c.api.GetTemplate(ctx, id)
	return t, explain(err)
}

// Execute runs Python code in the sandbox's code interpreter through the
// server's proxy and returns its stdout; an exception of the kernel is a
// *client.KernelError.
func (c *Client) Execute(ctx context.Context, sb *wire.Sandbox, code string) (string, error) {
	out, err := c.api.RunCode(ctx, sb, code)
	return out, explain(err)
}
