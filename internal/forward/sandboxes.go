package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// createPath is the internal route a node creates a sandbox on a peer
// by, once placement picked that peer: the request as the core has it,
// decoded once by the node the client called, and the sandbox as the
// core has it in answer.
const createPath = InternalPrefix + "sandboxes"

// ErrPeerTooOld is a peer's answer to a typed call it has no route for:
// a node of an older version, during a rolling upgrade.
var ErrPeerTooOld = errors.New("the peer does not take typed calls")

// CreateSandbox creates a sandbox on node. A failure the peer answered is
// returned as the peer's kind and words, so the client is told what it
// would have been told by that node itself.
func (c *Client) CreateSandbox(ctx context.Context, node string, req cube.CreateRequest) (*cube.Sandbox, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var sb cube.Sandbox
	if err := c.exchange(ctx, node, createPath, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// exchange posts body, signed whole, to an internal route of node and
// decodes its 2xx answer into out.
func (c *Client) exchange(ctx context.Context, node, path string, body []byte, out any) error {
	addr, _, err := c.cfg.Peers.Peer(ctx, node)
	if err != nil {
		return unavailable(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(addr, "/")+path, bytes.NewReader(body))
	if err != nil {
		return cube.Errorf(cube.Unavailable, "node %s's address %q: %v", node, addr, err)
	}
	if err := c.peerScheme(req.URL); err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sign(req, c.cfg.Peers.Self(), c.cfg.Secret, time.Now(), bodyDigest(body))
	resp, err := c.http.Do(req)
	if err != nil {
		return cube.Errorf(cube.Unavailable, "the node holding this could not be reached (%v); try again shortly", err).WithRetryAfter(2 * time.Second)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return fmt.Errorf("node %s's answer: %w", node, err)
		}
		return nil
	}
	return peerError(node, resp)
}

// peerError is a peer's failure as the core's error of the kind its
// status stands for, so that this node answers the same status, words and
// Retry-After; a status no kind answers with stays an HTTP error.
func peerError(node string, resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var b httperr.Body
	if json.Unmarshal(raw, &b) != nil || b.Code == 0 {
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("node %s: %w", node, ErrPeerTooOld)
		}
		return fmt.Errorf("node %s answered %s: %s", node, resp.Status, bytes.TrimSpace(raw))
	}
	var wait time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		wait = time.Duration(s) * time.Second
	}
	for kind, status := range httperr.KindStatuses() {
		if status == resp.StatusCode {
			return (&cube.Error{Kind: kind, Message: b.Message}).WithRetryAfter(wait)
		}
	}
	return httperr.Errorf(resp.StatusCode, "%s", b.Message).WithRetryAfter(wait)
}

// ServeSandboxes answers, on mux, the typed calls peers make on this
// node's sandboxes, through local: this node's own parts, never the
// cluster, as the calling node already chose this one.
func ServeSandboxes(mux *http.ServeMux, local cube.Backend, maxBody int64) {
	mux.HandleFunc("POST "+createPath, func(w http.ResponseWriter, r *http.Request) {
		var req cube.CreateRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "a peer's create: %v", err))
			return
		}
		sb, err := local.CreateSandbox(r.Context(), req)
		if err != nil {
			httperr.Write(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(sb)
	})
}
