package api

import (
	"context"
	"net/http"

	"cube/internal/cube"
)

// A team sees only its own sandboxes: another team's is answered exactly
// as one that does not exist, at the same point of the request, so that
// nothing (not even which check fails first) tells the two apart.

// sandboxGone is the answer for a sandbox the caller may not know of.
func sandboxGone(id string) error {
	return cube.Errorf(cube.NotFound, "Sandbox %q doesn't exist or you don't have access to it", id)
}

// ownSandbox returns the sandbox id names, if it is the caller's team's.
func (s *Server) ownSandbox(r *http.Request, id string) (*cube.Sandbox, error) {
	return s.teamSandbox(r.Context(), callerOf(r).Team, id)
}

func (s *Server) teamSandbox(ctx context.Context, team, id string) (*cube.Sandbox, error) {
	sb, err := s.backend.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Team != team {
		return nil, sandboxGone(id)
	}
	return sb, nil
}

// mine checks, just before an operation on the sandbox, that it is the
// caller's team's.
func (s *Server) mine(r *http.Request, id string) error {
	_, err := s.ownSandbox(r, id)
	return err
}
