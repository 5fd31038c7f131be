package api

import (
	"net/http"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
)

// Teams, their keys and quotas: E2B's /teams, /api-keys and admin routes,
// and Cube's routes for what E2B's dashboard does (creating and deleting
// teams, setting quotas), which only the admin key may call.

func (s *Server) listTeams(w http.ResponseWriter, r *http.Request) error {
	c := callerOf(r)
	var teams []cube.Team
	if c.Admin {
		all, err := s.cfg.Teams.ListTeams(r.Context())
		if err != nil {
			return err
		}
		teams = all
	} else {
		t, err := s.cfg.Teams.GetTeam(r.Context(), c.Team)
		if err != nil {
			return err
		}
		teams = []cube.Team{t}
	}
	out := make([]wire.Team, 0, len(teams))
	for _, t := range teams {
		out = append(out, teamWire(t, r))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// teamWire is t as the caller of r sees it: the key it presented is shown
// for its own team only.
func teamWire(t cube.Team, r *http.Request) wire.Team {
	c := callerOf(r)
	out := wire.Team{TeamID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt, IsDefault: t.ID == c.Team, Quotas: quotasWire(t.Quotas)}
	if t.ID == c.Team {
		out.APIKey = presentedKey(r)
	}
	return out
}

func quotasWire(q cube.Quotas) wire.Quotas {
	return wire.Quotas{RunningSandboxes: q.RunningSandboxes, VCPUs: q.VCPUs, MemoryMB: q.MemoryMB,
		MaxTimeoutSeconds: int(q.MaxTimeout / time.Second), DiskBytes: q.DiskBytes, Builds: q.Builds,
		RequestsPerSecond: q.RequestsPerSecond}
}

func quotasOf(q wire.Quotas) cube.Quotas {
	return cube.Quotas{RunningSandboxes: q.RunningSandboxes, VCPUs: q.VCPUs, MemoryMB: q.MemoryMB,
		MaxTimeout: time.Duration(q.MaxTimeoutSeconds) * time.Second, DiskBytes: q.DiskBytes, Builds: q.Builds,
		RequestsPerSecond: q.RequestsPerSecond}
}

func (s *Server) createTeam(w http.ResponseWriter, r *http.Request) error {
	var body wire.NewTeam
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	var q cube.Quotas
	if body.Quotas != nil {
		q = quotasOf(*body.Quotas)
	}
	t, err := s.cfg.Teams.CreateTeam(r.Context(), body.Name, q)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, teamWire(t, r))
	return nil
}

// teamID is the {teamID} path value, which a team's own key may name only
// as itself (another team is answered 404, as if it did not exist).
func teamID(r *http.Request) (string, error) {
	v := r.PathValue("teamID")
	c := callerOf(r)
	if v == "" || len(v) > 64 || (!c.Admin && v != c.Team) {
		return "", httperr.Errorf(http.StatusNotFound, "team %q not found", v)
	}
	return v, nil
}

func (s *Server) getTeam(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	t, err := s.cfg.Teams.GetTeam(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, teamWire(t, r))
	return nil
}

func (s *Server) deleteTeam(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	if err := s.cfg.Teams.DeleteTeam(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) setQuotas(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	var body wire.Quotas
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	t, err := s.cfg.Teams.SetQuotas(r.Context(), id, quotasOf(body))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, teamWire(t, r))
	return nil
}

// Keys.

func keyWire(k cube.APIKey) wire.TeamAPIKey {
	out := wire.TeamAPIKey{ID: k.ID, Name: k.Name, CreatedAt: k.CreatedAt, Admin: k.Admin, Mask: maskWire(k.Mask)}
	if k.CreatedBy != "" {
		out.CreatedBy = &wire.TeamUser{ID: k.CreatedBy}
	}
	if !k.LastUsed.IsZero() {
		t := k.LastUsed
		out.LastUsed = &t
	}
	return out
}

func maskWire(m cube.KeyMask) wire.IdentifierMaskingDetails {
	return wire.IdentifierMaskingDetails{Prefix: m.Prefix, ValueLength: m.ValueLength, MaskedValuePrefix: m.MaskedPrefix, MaskedValueSuffix: m.MaskedSuffix}
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) error {
	keys, err := s.cfg.Teams.ListKeys(r.Context(), callerOf(r).Team)
	if err != nil {
		return err
	}
	out := make([]wire.TeamAPIKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, keyWire(k))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) error {
	return s.newKey(w, r, callerOf(r).Team)
}

func (s *Server) adminCreateKey(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	return s.newKey(w, r, id)
}

func (s *Server) newKey(w http.ResponseWriter, r *http.Request, team string) error {
	var body wire.NewTeamAPIKey
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	k, err := s.cfg.Teams.CreateKey(r.Context(), team, body.Name, callerOf(r).KeyID)
	if err != nil {
		return err
	}
	kw := keyWire(k.APIKey)
	writeJSON(w, http.StatusCreated, wire.CreatedTeamAPIKey{ID: kw.ID, Key: k.Key, Mask: kw.Mask, Name: kw.Name,
		CreatedAt: kw.CreatedAt, CreatedBy: kw.CreatedBy, LastUsed: kw.LastUsed})
	return nil
}

func (s *Server) renameKey(w http.ResponseWriter, r *http.Request) error {
	var body wire.NewTeamAPIKey
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	if err := s.cfg.Teams.RenameKey(r.Context(), callerOf(r).Team, r.PathValue("apiKeyID"), body.Name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) deleteKey(w http.ResponseWriter, r *http.Request) error {
	return s.revokeKey(w, r, callerOf(r).Team)
}

func (s *Server) adminDeleteKey(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	return s.revokeKey(w, r, id)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request, team string) error {
	if err := s.cfg.Teams.DeleteKey(r.Context(), team, r.PathValue("apiKeyID")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Admin routes over a team's sandboxes.

func (s *Server) adminKillSandboxes(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Teams.GetTeam(r.Context(), id); err != nil {
		return err
	}
	sbs, err := s.backend.ListSandboxes(r.Context(), cube.ListFilter{Team: id,
		States: []cube.SandboxState{cube.StateRunning, cube.StatePaused}})
	if err != nil {
		return err
	}
	var out wire.AdminSandboxKillResult
	for _, sb := range sbs {
		if err := s.backend.KillSandbox(r.Context(), sb.ID); err != nil && cube.KindOf(err) != cube.NotFound {
			s.log.Warn("admin kill of a team's sandbox failed", "team", id, "sandbox", sb.ID, "err", err)
			out.FailedCount++
			continue
		}
		out.KilledCount++
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// adminCancelBuilds stops every build of a team that has not ended: each
// ends FAILED, "cancelled by the admin".
func (s *Server) adminCancelBuilds(w http.ResponseWriter, r *http.Request) error {
	id, err := teamID(r)
	if err != nil {
		return err
	}
	if _, err := s.cfg.Teams.GetTeam(r.Context(), id); err != nil {
		return err
	}
	c, err := capability[cube.BuildCanceller](s, "cancelling builds is")
	if err != nil {
		return err
	}
	cancelled, failed, err := c.CancelBuilds(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.AdminBuildCancelResult{CancelledCount: cancelled, FailedCount: failed})
	return nil
}

func (s *Server) runningCounts(w http.ResponseWriter, r *http.Request) error {
	sbs, err := s.backend.ListSandboxes(r.Context(), cube.ListFilter{States: []cube.SandboxState{cube.StateRunning}})
	if err != nil {
		return err
	}
	out := map[string]int64{}
	for _, sb := range sbs {
		out[sb.Team]++
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// E2B's access tokens were user credentials for its dashboard, retired
// for API keys: creating one is Gone there, and Cube never made any.

func (s *Server) createAccessToken(w http.ResponseWriter, r *http.Request) error {
	return httperr.Errorf(http.StatusGone, "access tokens are retired: create an API key instead (POST /api-keys, or `cubemastercli key create NAME`)")
}

func (s *Server) deleteAccessToken(w http.ResponseWriter, r *http.Request) error {
	return httperr.Errorf(http.StatusNotFound, "access token %q not found: Cube has no access tokens, only API keys (DELETE /api-keys/{apiKeyID})", r.PathValue("accessTokenID"))
}
