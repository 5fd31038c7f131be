// Package client is a small client of the Cube control plane for the CLI
// and tools: it knows where the server is, how to authenticate, and how to
// turn error answers into Go errors. Verbs add their own typed calls on top
// of Do.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cube/internal/api/wire"
)

// Defaults and environment variables that locate the server and key.
const (
	DefaultURL     = "http://127.0.0.1:3000"
	DefaultDataDir = "/var/lib/cube"
	EnvURL         = "CUBE_API_URL"
	EnvKey         = "CUBE_API_KEY"
	EnvE2BKey      = "E2B_API_KEY"
	// KeyFile is the file in the data directory holding the server's key.
	KeyFile = "api-key"
)

// Client talks to one Cube server.
type Client struct {
	BaseURL string
	APIKey  string
	HTTP    *http.Client
}

// New returns a client for baseURL (no trailing slash needed).
func New(baseURL, apiKey string) *Client {
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		APIKey:  apiKey,
		HTTP:    &http.Client{Timeout: 5 * time.Minute},
	}
}

// FromEnv builds a client the way every cubemastercli verb does: the URL
// from CUBE_API_URL (default DefaultURL); the key from CUBE_API_KEY, then
// <dataDir>/api-key (dataDir "" means DefaultDataDir), then E2B_API_KEY.
// E2B_API_KEY comes last because in an E2B user's shell it is usually the
// key of their E2B cloud account, which must not be sent to a Cube server
// when a key of Cube's own is at hand.
func FromEnv(dataDir string) (*Client, error) {
	base := os.Getenv(EnvURL)
	if base == "" {
		base = DefaultURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s=%q is not an http(s) URL", EnvURL, base)
	}
	key, err := findKey(dataDir)
	if err != nil {
		return nil, err
	}
	return New(base, key), nil
}

func findKey(dataDir string) (string, error) {
	if k := strings.TrimSpace(os.Getenv(EnvKey)); k != "" {
		return k, nil
	}
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	k := strings.TrimSpace(string(b))
	if err == nil && k != "" {
		return k, nil
	}
	if k := strings.TrimSpace(os.Getenv(EnvE2BKey)); k != "" {
		return k, nil
	}
	if err == nil {
		err = errors.New("the file is empty")
	}
	return "", fmt.Errorf("no API key: set %s, make %s readable, or set %s: %w", EnvKey, path, EnvE2BKey, err)
}

// APIError is a non-2xx answer of the server.
type APIError struct {
	// Method and Path name the request, so a tool can say which of many
	// calls failed.
	Method, Path string
	Status       int
	// Message is the server's JSON error message or, with Raw, the answer
	// as text.
	Message string
	// Raw is set when the answer was no JSON error of the server: a
	// router's "404 page not found", or a page of a proxy in between.
	Raw bool
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("server answered %d: %s", e.Status, msg)
}

// RouteMissing reports whether the server does not know the route at all
// (a plain-text 404 or 405 of its router), which is an older or other
// server rather than a missing sandbox.
func (e *APIError) RouteMissing() bool {
	return e.Raw && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed)
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// Unsupported reports whether err means the server lacks the operation
// (501, or a route it does not know), as opposed to a failure of it.
func Unsupported(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status == http.StatusNotImplemented || ae.RouteMissing())
}

// answerError turns a non-2xx answer into an APIError.
func answerError(method, path string, status int, data []byte) *APIError {
	e := &APIError{Method: method, Path: path, Status: status}
	var we wire.Error
	if json.Unmarshal(data, &we) == nil && we.Message != "" {
		e.Message = we.Message
		return e
	}
	e.Message = strings.TrimSpace(string(data))
	e.Raw = true
	return e
}

// Do sends in (JSON, unless nil) to method path (with query q) and decodes a
// 2xx answer into out (unless nil). It returns the answer's headers.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	target := c.BaseURL + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", c.APIKey)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return res.Header, answerError(method, path, res.StatusCode, data)
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return res.Header, fmt.Errorf("%s %s: decoding answer: %w", method, path, err)
		}
	}
	return res.Header, nil
}

// ListOptions filter ListSandboxes. Empty fields match everything.
type ListOptions struct {
	// States among "running" and "paused"; none means both.
	States   []string
	Metadata map[string]string
}

// ListSandboxes returns every matching sandbox, following the pages.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]wire.ListedSandbox, error) {
	q := url.Values{"limit": {"100"}}
	if len(opts.States) > 0 {
		q.Set("state", strings.Join(opts.States, ","))
	}
	if len(opts.Metadata) > 0 {
		md := url.Values{}
		for k, v := range opts.Metadata {
			md.Set(k, v)
		}
		q.Set("metadata", md.Encode())
	}
	var all []wire.ListedSandbox
	for {
		var page []wire.ListedSandbox
		h, err := c.Do(ctx, http.MethodGet, "/v2/sandboxes", q, nil, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		next := h.Get("X-Next-Token")
		if next == "" || len(page) == 0 {
			return all, nil
		}
		q.Set("nextToken", next)
	}
}

// GetSandbox returns one sandbox's details.
func (c *Client) GetSandbox(ctx context.Context, id string) (*wire.SandboxDetail, error) {
	var d wire.SandboxDetail
	if _, err := c.Do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// CreateSandbox starts a sandbox. The server answers once the sandbox's
// agent answers, so the call's round trip is the sandbox's start time.
func (c *Client) CreateSandbox(ctx context.Context, req wire.NewSandbox) (*wire.Sandbox, error) {
	var sb wire.Sandbox
	if _, err := c.Do(ctx, http.MethodPost, "/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	if sb.SandboxID == "" {
		return nil, fmt.Errorf("POST /sandboxes: answer has no sandboxID")
	}
	return &sb, nil
}

// KillSandbox destroys a sandbox.
func (c *Client) KillSandbox(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil)
	return err
}
