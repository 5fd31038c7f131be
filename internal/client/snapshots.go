package client

import (
	"context"
	"net/http"
	"net/url"

	"cube/internal/api/wire"
)

// SnapshotFilter narrows ListSnapshots. Empty fields match everything.
type SnapshotFilter struct {
	SandboxID string
	// Name matches a snapshot's id or one of its names.
	Name string
}

// CreateSnapshot snapshots a running sandbox, which keeps running. An empty
// name lets the server pick none.
func (c *Client) CreateSnapshot(ctx context.Context, sandboxID, name string) (*wire.SnapshotInfo, error) {
	var out wire.SnapshotInfo
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/snapshots"
	if _, err := c.Do(ctx, http.MethodPost, path, nil, wire.SnapshotRequest{Name: name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSnapshots returns every matching snapshot, newest first, following
// the pages the server hands out.
func (c *Client) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]wire.SnapshotInfo, error) {
	q := url.Values{"limit": {"100"}}
	if f.SandboxID != "" {
		q.Set("sandboxID", f.SandboxID)
	}
	if f.Name != "" {
		q.Set("name", f.Name)
	}
	var all []wire.SnapshotInfo
	for {
		var page []wire.SnapshotInfo
		h, err := c.Do(ctx, http.MethodGet, "/snapshots", q, nil, &page)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		next := h.Get("X-Next-Token")
		// An empty page ends the walk too, so a server that keeps
		// answering a token cannot loop us forever on nothing.
		if next == "" || len(page) == 0 || next == q.Get("nextToken") {
			return all, nil
		}
		q.Set("nextToken", next)
	}
}

// DeleteSnapshot deletes a snapshot. Snapshots are templates, so this is
// the template delete route; sandboxes created from it keep running.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	return c.DeleteTemplate(ctx, snapshotID)
}

// Rollback returns a sandbox in place to a snapshot it took itself.
func (c *Client) Rollback(ctx context.Context, sandboxID, snapshotID string) (*wire.RollbackResult, error) {
	var out wire.RollbackResult
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/rollback"
	if _, err := c.Do(ctx, http.MethodPost, path, nil, wire.RollbackRequest{SnapshotID: snapshotID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSandbox pauses a running sandbox. With memory false only its files
// are kept, and resuming it boots it afresh.
func (c *Client) PauseSandbox(ctx context.Context, sandboxID string, memory bool) error {
	var body any
	if !memory {
		body = wire.PauseRequest{Memory: &memory}
	}
	_, err := c.Do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(sandboxID)+"/pause", nil, body, nil)
	return err
}

// ConnectSandbox resumes a paused sandbox or, when it runs, extends its end
// time to at least now+timeoutSec. resumed tells the two apart (the server
// answers 201 for a resume and 200 otherwise).
func (c *Client) ConnectSandbox(ctx context.Context, sandboxID string, timeoutSec int) (sb *wire.Sandbox, resumed bool, err error) {
	var out wire.Sandbox
	rec := c.recordingStatus()
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/connect"
	if _, err := rec.client.Do(ctx, http.MethodPost, path, nil, wire.ConnectRequest{Timeout: &timeoutSec}, &out); err != nil {
		return nil, false, err
	}
	return &out, rec.status == http.StatusCreated, nil
}

// CloneOptions shape a clone. Zero Concurrency and Timeout leave the
// server's defaults.
type CloneOptions struct {
	Count       int
	Concurrency int
	TimeoutSec  int
}

// CloneSandbox checkpoints a sandbox once and starts Count children from
// it. A child that failed is an entry with Error set, not an error here.
func (c *Client) CloneSandbox(ctx context.Context, sandboxID string, o CloneOptions) ([]wire.ForkResult, error) {
	req := wire.CloneRequest{Count: &o.Count}
	if o.Concurrency > 0 {
		req.Concurrency = &o.Concurrency
	}
	if o.TimeoutSec > 0 {
		req.Timeout = &o.TimeoutSec
	}
	var out []wire.ForkResult
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/clone"
	if _, err := c.Do(ctx, http.MethodPost, path, nil, req, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ForkSandbox is E2B's fork: count children of a running sandbox, for
// servers without the clone route. Failed children are entries with Error
// set, as in CloneSandbox.
func (c *Client) ForkSandbox(ctx context.Context, sandboxID string, count int) ([]wire.ForkResult, error) {
	var out []wire.ForkResult
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/fork"
	if _, err := c.Do(ctx, http.MethodPost, path, nil, wire.ForkRequest{Count: &count}, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// statusRecorder is a copy of a client that remembers the status of the
// last answer, for the few calls whose meaning is in the status alone.
type statusRecorder struct {
	client *Client
	next   http.RoundTripper
	status int
}

func (c *Client) recordingStatus() *statusRecorder {
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	rec := &statusRecorder{next: hc.Transport}
	if rec.next == nil {
		rec.next = http.DefaultTransport
	}
	hc.Transport = rec
	cc := *c
	cc.HTTP = &hc
	rec.client = &cc
	return rec
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := r.next.RoundTrip(req)
	if res != nil {
		r.status = res.StatusCode
	}
	return res, err
}
