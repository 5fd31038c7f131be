package api

import (
	"net/http"
	"strings"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
)

// MaxForkCount bounds the children of one fork or clone.
const MaxForkCount = 100

func (s *Server) snapshotter() (cube.Snapshotter, error) {
	return capability[cube.Snapshotter](s, "snapshots are")
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.SnapshotRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	if len(body.Name) > 128 || strings.ContainsAny(body.Name, "\x00\n\r") {
		return badRequest("invalid snapshot name %q", body.Name)
	}
	sn, err := s.snapshotter()
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	snap, err := sn.CreateSnapshot(r.Context(), id, body.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wireSnapshot(snap))
	return nil
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	limit, token, err := pageParams(r)
	if err != nil {
		return err
	}
	sn, err := s.snapshotter()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	p, err := pageAt(limit, token)
	if err != nil {
		return err
	}
	items, next, err := sn.ListSnapshots(r.Context(), cube.SnapshotFilter{Team: callerOf(r).Team, SandboxID: q.Get("sandboxID"), Name: q.Get("name")}, p)
	if err != nil {
		return err
	}
	out := make([]wire.SnapshotInfo, 0, len(items))
	for i := range items {
		out = append(out, wireSnapshot(&items[i]))
	}
	setNextTokenAt(w, next)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request) error {
	// The body first: a count out of range is the caller's mistake
	// whatever the sandbox, and E2B answers it with 400.
	var body wire.ForkRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	req, err := s.forkRequest(body.Count, body.Timeout, nil, defaultTimeoutV1)
	if err != nil {
		return err
	}
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	return s.answerFork(w, r, id, req)
}

// clone is CubeSandbox's name for fork, with a bound on concurrency.
func (s *Server) clone(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.CloneRequest
	if err := decodeBody(r, &body, false); err != nil {
		return err
	}
	req, err := s.forkRequest(body.Count, body.Timeout, body.Concurrency, defaultTimeoutV2)
	if err != nil {
		return err
	}
	return s.answerFork(w, r, id, req)
}

func (s *Server) forkRequest(count, timeout, concurrency *int, def time.Duration) (cube.ForkRequest, error) {
	req := cube.ForkRequest{Count: 1}
	if count != nil {
		if *count < 1 || *count > MaxForkCount {
			return req, badRequest("count must be between 1 and %d, got %d", MaxForkCount, *count)
		}
		req.Count = *count
	}
	if concurrency != nil {
		if *concurrency < 0 || *concurrency > MaxForkCount {
			return req, badRequest("concurrency must be between 0 and %d, got %d", MaxForkCount, *concurrency)
		}
		req.Concurrency = *concurrency
	}
	d, err := seconds("timeout", timeout, def, time.Second, s.cfg.MaxTimeout)
	req.Timeout = d
	return req, err
}

func (s *Server) answerFork(w http.ResponseWriter, r *http.Request, id string, req cube.ForkRequest) error {
	sn, err := s.snapshotter()
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	results, err := sn.ForkSandbox(r.Context(), id, req)
	if err != nil {
		return err
	}
	out := make([]wire.ForkResult, 0, len(results))
	for _, res := range results {
		switch {
		case res.Err != nil:
			code := httperr.StatusOf(res.Err)
			out = append(out, wire.ForkResult{Error: &wire.Error{Code: code, Message: res.Err.Error()}})
		case res.Sandbox != nil:
			sb := s.wireSandbox(res.Sandbox)
			out = append(out, wire.ForkResult{Sandbox: &sb})
		default:
			out = append(out, wire.ForkResult{Error: &wire.Error{Code: http.StatusInternalServerError, Message: "child did not start"}})
		}
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request) error {
	id, err := sandboxID(r)
	if err != nil {
		return err
	}
	var body wire.RollbackRequest
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if strings.TrimSpace(body.SnapshotID) == "" {
		return badRequest("snapshotID is required")
	}
	sn, err := s.snapshotter()
	if err != nil {
		return err
	}
	if err := s.mine(r, id); err != nil {
		return err
	}
	rb, err := sn.RollbackSandbox(r.Context(), id, body.SnapshotID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.RollbackResult{SandboxID: id, SnapshotID: body.SnapshotID, OperationID: rb.OperationID, Status: rb.Status})
	return nil
}
