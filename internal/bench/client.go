package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"cube/internal/api/wire"
)

// Client drives the E2B-compatible control plane. It keeps its own
// transport so that C concurrent workers each reuse a kept-alive
// connection: with net/http's default of two idle connections per host,
// most requests at c=20 would pay a TCP handshake and skew the latencies.
type Client struct {
	BaseURL string
	APIKey  string
	HTTP    *http.Client
}

// NewClient returns a client for baseURL sized for concurrency parallel
// requests.
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
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		APIKey:  apiKey,
		HTTP:    &http.Client{Transport: tr, Timeout: 10 * time.Minute},
	}, nil
}

// APIError is a non-2xx answer. Its message says what the status means for
// a benchmark run, because a bare "404" after minutes of setup helps nobody.
type APIError struct {
	Method, Path string
	Status       int
	Message      string
	// RouteMissing is set when the server does not know the route at all
	// (a plain-text 404/405 from the router rather than a JSON error).
	RouteMissing bool
}

func (e *APIError) Error() string {
	what := fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, http.StatusText(e.Status))
	var hint string
	switch {
	case e.Status == http.StatusUnauthorized:
		hint = "the API key was refused; set --api-key or E2B_API_KEY to the server's key"
	case e.Status == http.StatusNotImplemented:
		hint = "the server does not implement this operation yet"
	case e.RouteMissing:
		hint = "the server has no such route; it does not implement this operation"
	}
	msg := e.Message
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

// Unsupported reports whether err means the server lacks the operation
// (501, or a route it does not know), as opposed to a failure of it.
func Unsupported(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusNotImplemented || ae.RouteMissing
	}
	return false
}

// do sends one request with a JSON body (in may be nil) and decodes a JSON
// answer into out (may be nil). Only 2xx answers are successes.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	return c.doHeaders(ctx, method, path, nil, in, out)
}

func (c *Client) doHeaders(ctx context.Context, method, path string, hdr http.Header, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("X-API-Key", c.APIKey)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, apiError(method, path, resp, data)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: answer is not the expected JSON: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func apiError(method, path string, resp *http.Response, data []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
	var we wire.Error
	if json.Unmarshal(data, &we) == nil && (we.Message != "" || we.Code != 0) {
		e.Message = we.Message
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "…"
	}
	// Go's router answers unknown routes in plain text.
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		e.RouteMissing = true
	}
	return e
}

// CreateSandbox is POST /sandboxes. Its round trip is the create latency:
// the server answers once the sandbox's agent answers.
func (c *Client) CreateSandbox(ctx context.Context, templateID string, timeout int) (*wire.Sandbox, error) {
	var sb wire.Sandbox
	body := wire.NewSandbox{TemplateID: templateID}
	if timeout > 0 {
		body.Timeout = &timeout
	}
	if _, err := c.do(ctx, http.MethodPost, "/sandboxes", body, &sb); err != nil {
		return nil, err
	}
	if sb.SandboxID == "" {
		return nil, fmt.Errorf("POST /sandboxes: answer has no sandboxID")
	}
	return &sb, nil
}

// DeleteSandbox is DELETE /sandboxes/{id}.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil)
	return err
}

// Snapshot is POST /sandboxes/{id}/snapshots.
func (c *Client) Snapshot(ctx context.Context, id string) (*wire.SnapshotInfo, error) {
	var s wire.SnapshotInfo
	if _, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/snapshots", struct{}{}, &s); err != nil {
		return nil, err
	}
	if s.SnapshotID == "" {
		return nil, fmt.Errorf("POST /sandboxes/%s/snapshots: answer has no snapshotID", id)
	}
	return &s, nil
}

// DeleteTemplate is DELETE /templates/{id}; snapshots are templates.
func (c *Client) DeleteTemplate(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/templates/"+url.PathEscape(id), nil, nil)
	return err
}

// Rollback is POST /sandboxes/{id}/rollback.
func (c *Client) Rollback(ctx context.Context, id, snapshotID string) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/rollback", wire.RollbackRequest{SnapshotID: snapshotID}, nil)
	return err
}

// Clone is POST /sandboxes/{id}/clone; when the server has no clone route
// it falls back to E2B's fork with the same count. It returns the children
// that started and an error naming how many did not.
func (c *Client) Clone(ctx context.Context, id string, count, concurrency int) ([]string, error) {
	var res []wire.ForkResult
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/clone", wire.CloneRequest{Count: &count, Concurrency: &concurrency}, &res)
	if Unsupported(err) {
		res = nil
		_, err = c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/fork", wire.ForkRequest{Count: &count}, &res)
	}
	if err != nil {
		return nil, err
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

// Pause is POST /sandboxes/{id}/pause.
func (c *Client) Pause(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", struct{}{}, nil)
	return err
}

// Connect is POST /sandboxes/{id}/connect, which resumes a paused sandbox.
func (c *Client) Connect(ctx context.Context, id string, timeout int) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", wire.ConnectRequest{Timeout: &timeout}, nil)
	return err
}

// Template is GET /templates/{id} with the build facts Cube adds.
func (c *Client) Template(ctx context.Context, id string) (*wire.TemplateDetail, error) {
	var t wire.TemplateDetail
	if _, err := c.do(ctx, http.MethodGet, "/templates/"+url.PathEscape(id), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// KernelError is an exception raised by code run in the sandbox's kernel.
type KernelError struct {
	SandboxID, Name, Value string
}

func (e *KernelError) Error() string {
	return fmt.Sprintf("execute in %s: %s: %s", e.SandboxID, e.Name, e.Value)
}

// Execute runs Python code in the sandbox's code interpreter (port 49999)
// through the server's proxy and returns its stdout. An error line of the
// kernel is returned as an error.
func (c *Client) Execute(ctx context.Context, sb *wire.Sandbox, code string) (string, error) {
	hdr := http.Header{}
	hdr.Set("E2b-Sandbox-Id", sb.SandboxID)
	hdr.Set("E2b-Sandbox-Port", "49999")
	if sb.EnvdAccessToken != "" {
		hdr.Set("X-Access-Token", sb.EnvdAccessToken)
	}
	body, err := json.Marshal(map[string]string{"code": code})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+"/execute", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header = hdr
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("execute in %s: %w", sb.SandboxID, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("execute in %s: %w", sb.SandboxID, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", apiError(http.MethodPost, "/execute (sandbox "+sb.SandboxID+", port 49999)", resp, data)
	}
	var out strings.Builder
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Text  string `json:"text"`
			Name  string `json:"name"`
			Value string `json:"value"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "stdout":
			out.WriteString(ev.Text)
		case "error":
			return out.String(), &KernelError{SandboxID: sb.SandboxID, Name: ev.Name, Value: ev.Value}
		}
	}
	return out.String(), nil
}
