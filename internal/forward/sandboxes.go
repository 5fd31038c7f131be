package forward

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

// ErrUnreachable is in the chain of a typed call's failure to reach its
// peer at all (as opposed to the peer's answer): a read may then be
// answered from the shared store instead.
var ErrUnreachable = errors.New("the peer could not be reached")

// ErrNotDelivered is an ErrUnreachable whose request never left this node
// (the connection to the peer could not be made): the peer did nothing,
// and a create may be placed elsewhere.
var ErrNotDelivered = fmt.Errorf("%w: the request was not delivered", ErrUnreachable)

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
	addr, ok := knownAddress(ctx, node)
	if !ok {
		var err error
		if addr, _, err = c.cfg.Peers.Peer(ctx, node); err != nil {
			return unavailable(err)
		}
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
		e := cube.Errorf(cube.Unavailable, "the node holding this could not be reached (%v); try again shortly", err).WithRetryAfter(2 * time.Second)
		e.Err = ErrUnreachable
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" {
			e.Err = ErrNotDelivered
		}
		return e
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

// addressKey carries the address of a node its caller just looked up.
type addressKey struct{}

type knownPeer struct{ node, addr string }

// AtAddress tells the typed calls made with the context it returns that
// node is at addr, which its caller just read with the node's heartbeat
// (Peers.Peer): they do not read it again.
func AtAddress(ctx context.Context, node, addr string) context.Context {
	return context.WithValue(ctx, addressKey{}, knownPeer{node, addr})
}

// knownAddress is the address AtAddress gave node, if it gave one.
func knownAddress(ctx context.Context, node string) (string, bool) {
	p, ok := ctx.Value(addressKey{}).(knownPeer)
	if !ok || p.node != node || p.addr == "" {
		return "", false
	}
	return p.addr, true
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

// sandboxCall is the internal route of the typed calls on one sandbox a
// peer holds: POST with the call's arguments as JSON, the answer as JSON.
// Every call is a POST, so that its arguments are signed with it.
const sandboxCall = InternalPrefix + "sandboxes/{id}/calls/{op}"

// The calls on one sandbox, by the {op} of sandboxCall.
const (
	opGet      = "get"
	opKill     = "kill"
	opTimeout  = "timeout"
	opConnect  = "connect"
	opPause    = "pause"
	opNetwork  = "network"
	opMetrics  = "metrics"
	opLogs     = "logs"
	opSnapshot = "snapshot"
	opFork     = "fork"
	opRollback = "rollback"
)

// The arguments and answers of the calls that are not core types.
type (
	timeoutArgs struct {
		Timeout    time.Duration `json:"timeout"`
		ExtendOnly bool          `json:"extendOnly"`
	}
	connectAnswer struct {
		Sandbox *cube.Sandbox `json:"sandbox"`
		Resumed bool          `json:"resumed"`
	}
	pauseArgs struct {
		KeepMemory bool `json:"keepMemory"`
	}
	metricsArgs struct {
		Start time.Time `json:"start"`
		End   time.Time `json:"end"`
	}
	snapshotArgs struct {
		Name string `json:"name"`
	}
	rollbackArgs struct {
		SnapshotID string `json:"snapshotID"`
	}
	// forkChild is one child of a fork: its sandbox, or its failure as
	// the core's kind and words.
	forkChild struct {
		Sandbox    *cube.Sandbox `json:"sandbox,omitempty"`
		Error      string        `json:"error,omitempty"`
		Kind       cube.Kind     `json:"kind,omitempty"`
		RetryAfter time.Duration `json:"retryAfter,omitempty"`
	}
	none struct{}
)

// call makes the typed call op on sandbox id of node.
func (c *Client) call(ctx context.Context, node, id, op string, args, out any) error {
	body, err := json.Marshal(args)
	if err != nil {
		return err
	}
	path := strings.Replace(strings.Replace(sandboxCall, "{id}", url.PathEscape(id), 1), "{op}", op, 1)
	return c.exchange(ctx, node, path, body, out)
}

// GetSandbox reads sandbox id as node, which holds it, sees it.
func (c *Client) GetSandbox(ctx context.Context, node, id string) (*cube.Sandbox, error) {
	var sb cube.Sandbox
	if err := c.call(ctx, node, id, opGet, none{}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// KillSandbox kills sandbox id on node.
func (c *Client) KillSandbox(ctx context.Context, node, id string) error {
	return c.call(ctx, node, id, opKill, none{}, &none{})
}

// SetTimeout sets the time sandbox id on node has left.
func (c *Client) SetTimeout(ctx context.Context, node, id string, timeout time.Duration, extendOnly bool) error {
	return c.call(ctx, node, id, opTimeout, timeoutArgs{timeout, extendOnly}, &none{})
}

// ConnectSandbox connects to, and resumes if need be, sandbox id on node;
// with req.MoveFrom set, node takes the sandbox over from that node first.
func (c *Client) ConnectSandbox(ctx context.Context, node, id string, req cube.ConnectRequest) (*cube.Sandbox, bool, error) {
	var out connectAnswer
	if err := c.call(ctx, node, id, opConnect, req, &out); err != nil {
		return nil, false, err
	}
	if out.Sandbox == nil {
		return nil, false, fmt.Errorf("node %s's answer to a connect names no sandbox", node)
	}
	return out.Sandbox, out.Resumed, nil
}

// PauseSandbox pauses sandbox id on node.
func (c *Client) PauseSandbox(ctx context.Context, node, id string, keepMemory bool) error {
	return c.call(ctx, node, id, opPause, pauseArgs{keepMemory}, &none{})
}

// UpdateNetwork replaces the network settings of sandbox id on node.
func (c *Client) UpdateNetwork(ctx context.Context, node, id string, n cube.Network) error {
	return c.call(ctx, node, id, opNetwork, n, &none{})
}

// SandboxMetrics reads the metrics of sandbox id on node.
func (c *Client) SandboxMetrics(ctx context.Context, node, id string, start, end time.Time) ([]cube.Metric, error) {
	var out []cube.Metric
	err := c.call(ctx, node, id, opMetrics, metricsArgs{start, end}, &out)
	return out, err
}

// SandboxLogs reads the logs of sandbox id on node.
func (c *Client) SandboxLogs(ctx context.Context, node, id string) ([]cube.LogEntry, error) {
	var out []cube.LogEntry
	err := c.call(ctx, node, id, opLogs, none{}, &out)
	return out, err
}

// CreateSnapshot snapshots sandbox id on node.
func (c *Client) CreateSnapshot(ctx context.Context, node, id, name string) (*cube.Snapshot, error) {
	var out cube.Snapshot
	if err := c.call(ctx, node, id, opSnapshot, snapshotArgs{name}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ForkSandbox forks sandbox id on node, which starts the children where
// it would for a fork asked of it.
func (c *Client) ForkSandbox(ctx context.Context, node, id string, req cube.ForkRequest) ([]cube.ForkResult, error) {
	var out []forkChild
	if err := c.call(ctx, node, id, opFork, req, &out); err != nil {
		return nil, err
	}
	results := make([]cube.ForkResult, len(out))
	for i, ch := range out {
		results[i].Sandbox = ch.Sandbox
		if ch.Error != "" {
			if ch.Kind == 0 {
				results[i].Err = errors.New(ch.Error)
			} else {
				results[i].Err = (&cube.Error{Kind: ch.Kind, Message: ch.Error}).WithRetryAfter(ch.RetryAfter)
			}
		}
	}
	return results, nil
}

// RollbackSandbox rolls sandbox id on node back to a snapshot.
func (c *Client) RollbackSandbox(ctx context.Context, node, id, snapshotID string) (*cube.Rollback, error) {
	var out cube.Rollback
	if err := c.call(ctx, node, id, opRollback, rollbackArgs{snapshotID}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Local is what a node answers its peers' typed calls with: its own
// parts, never the cluster, as the calling node already chose this one.
type Local interface {
	cube.Backend
	cube.Pauser
	cube.Snapshotter
	cube.NetworkUpdater
	cube.Volumes
	cube.StepBuilder
}

// ServeSandboxes answers, on mux, the typed calls peers make on this
// node's sandboxes, volumes and templates (and the creates they place
// here), through local.
func ServeSandboxes(mux *http.ServeMux, local Local, maxBody int64) {
	serveVolumes(mux, local, maxBody)
	serveTemplates(mux, local, maxBody)
	mux.HandleFunc("POST "+createPath, func(w http.ResponseWriter, r *http.Request) {
		var req cube.CreateRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
			httperr.Write(w, cube.Errorf(cube.Invalid, "a peer's create: %v", err))
			return
		}
		sb, err := local.CreateSandbox(r.Context(), req)
		answer(w, http.StatusCreated, sb, err)
	})
	mux.HandleFunc("POST "+sandboxCall, func(w http.ResponseWriter, r *http.Request) {
		serve := sandboxCalls[r.PathValue("op")]
		if serve == nil {
			// A call of a later version: the caller takes this node for
			// an older one, as it is.
			http.NotFound(w, r)
			return
		}
		dec := json.NewDecoder(io.LimitReader(r.Body, maxBody))
		out, err := serve(r.Context(), local, r.PathValue("id"), func(args any) error {
			if err := dec.Decode(args); err != nil {
				return cube.Errorf(cube.Invalid, "a peer's %s call: %v", r.PathValue("op"), err)
			}
			return nil
		})
		answer(w, http.StatusOK, out, err)
	})
}

// answer is a typed call's answer to its peer: out as JSON with status,
// or err as the core's error, which the calling node reads back as the
// same kind and words (peerError).
func answer(w http.ResponseWriter, status int, out any, err error) {
	if err != nil {
		httperr.Write(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(out)
}

// sandboxCalls answer each typed call on a sandbox through a node's own
// service; args decodes the call's arguments.
var sandboxCalls = map[string]func(ctx context.Context, local Local, id string, args func(any) error) (any, error){
	opGet: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		return local.GetSandbox(ctx, id)
	},
	opKill: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		return none{}, local.KillSandbox(ctx, id)
	},
	opTimeout: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var a timeoutArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return none{}, local.SetTimeout(ctx, id, a.Timeout, a.ExtendOnly)
	},
	opConnect: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var req cube.ConnectRequest
		if err := args(&req); err != nil {
			return nil, err
		}
		sb, resumed, err := local.ConnectSandbox(ctx, id, req)
		return connectAnswer{sb, resumed}, err
	},
	opPause: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var a pauseArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return none{}, local.PauseSandbox(ctx, id, a.KeepMemory)
	},
	opNetwork: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var n cube.Network
		if err := args(&n); err != nil {
			return nil, err
		}
		return none{}, local.UpdateNetwork(ctx, id, n)
	},
	opMetrics: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var a metricsArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return local.SandboxMetrics(ctx, id, a.Start, a.End)
	},
	opLogs: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		return local.SandboxLogs(ctx, id)
	},
	opSnapshot: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var a snapshotArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return local.CreateSnapshot(ctx, id, a.Name)
	},
	opFork: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var req cube.ForkRequest
		if err := args(&req); err != nil {
			return nil, err
		}
		results, err := local.ForkSandbox(ctx, id, req)
		if err != nil {
			return nil, err
		}
		out := make([]forkChild, len(results))
		for i, res := range results {
			out[i].Sandbox = res.Sandbox
			if res.Err != nil {
				out[i].Error, out[i].Kind, out[i].RetryAfter = res.Err.Error(), cube.KindOf(res.Err), cube.RetryAfterOf(res.Err)
			}
		}
		return out, nil
	},
	opRollback: func(ctx context.Context, local Local, id string, args func(any) error) (any, error) {
		var a rollbackArgs
		if err := args(&a); err != nil {
			return nil, err
		}
		return local.RollbackSandbox(ctx, id, a.SnapshotID)
	},
}
