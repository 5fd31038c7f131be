package api

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"

	"cube/internal/cube"
	"cube/internal/httperr"
)

// HashAPIKey is the digest a rate limit bucket is kept under for key.
// Surrounding white space (a trailing newline in a key file) is not part
// of the key.
func HashAPIKey(key string) [sha256.Size]byte {
	return sha256.Sum256([]byte(strings.TrimSpace(key)))
}

// TeamHeader names the team an admin key acts for (E2B's AdminTeamAuth);
// other keys act for their own team and may not send it.
const TeamHeader = "X-Team-ID"

// presentedKey is the key a request carries in X-API-Key, X-Admin-Token
// (E2B's admin header) or as a bearer token, or "".
func presentedKey(r *http.Request) string {
	if k := r.Header.Get("X-API-Key"); k != "" {
		return k
	}
	if k := r.Header.Get("X-Admin-Token"); k != "" {
		return k
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// callerKey carries the authenticated caller of an API request from admit
// to the handler, inside this package: handlers hand its team to the core
// as an argument.
type callerKey struct{}

// callerOf is the caller admit found for r; a public route has none (the
// zero Caller, of no team).
func callerOf(r *http.Request) cube.Caller {
	c, _ := r.Context().Value(callerKey{}).(cube.Caller)
	return c
}

// authenticate returns who the request's key stands for: 401 without a
// key the service knows. An admin key naming a team in TeamHeader acts for
// that team.
func (s *Server) authenticate(r *http.Request) (cube.Caller, error) {
	key := presentedKey(r)
	if key == "" {
		return cube.Caller{}, unauthorized()
	}
	c, err := s.cfg.Teams.Authenticate(r.Context(), key)
	if cube.KindOf(err) == cube.Forbidden {
		return cube.Caller{}, unauthorized()
	}
	if err != nil {
		return cube.Caller{}, err
	}
	if team := r.Header.Get(TeamHeader); team != "" && team != c.Team {
		if !c.Admin {
			return cube.Caller{}, httperr.Errorf(http.StatusForbidden, "%s is for admin keys: this key acts only for its own team", TeamHeader)
		}
		if _, err := s.cfg.Teams.GetTeam(r.Context(), team); err != nil {
			return cube.Caller{}, err
		}
		c.Team = team
	}
	return c, nil
}

func unauthorized() error {
	return httperr.Errorf(http.StatusUnauthorized, "missing or invalid API key: send it in the X-API-Key header")
}

// IsAPIKey reports whether key is an API key of any team. The proxy asks
// it (proxy.Config.IsAPIKey), to keep keys away from sandboxes, and the
// forwarder, to refuse requests without a key before anything is done.
// When the keys cannot be read (the state database is out of reach) it
// says yes: the proxy then drops the credential rather than pass on what
// may be a key, and the forwarder lets the API answer, which says 503 with
// Retry-After instead of calling a valid key invalid.
func (s *Server) IsAPIKey(key string) bool {
	_, err := s.cfg.Teams.Authenticate(context.Background(), key)
	return err == nil || cube.KindOf(err) != cube.Forbidden
}
