package api

import (
	"net/http"
	"testing"

	"cube/internal/api/wire"
)

// TestAccessTokensAreRetired: E2B's access tokens answer as E2B's do
// today (410 to a create) and Cube holds none to delete.
func TestAccessTokensAreRetired(t *testing.T) {
	e := newEnv(t)
	e.do("POST", "/access-tokens", map[string]any{"name": "x"}).wantError(t, http.StatusGone, "API key")
	e.do("DELETE", "/access-tokens/abc", nil).wantError(t, http.StatusNotFound, "no access tokens")
}

// TestTeamsAndKeysRoutes drives E2B's /teams and /api-keys routes and the
// admin routes with an admin key and two teams' keys.
func TestTeamsAndKeysRoutes(t *testing.T) {
	keys := adminKeys(testKey)
	keys.addTeam("team-a", "e2b_a")
	keys.addTeam("team-b", "e2b_b")
	e := newEnv(t, func(c *envConfig) { c.Teams = keys })
	asA, asB := []string{"X-API-Key", "e2b_a"}, []string{"X-API-Key", "e2b_b"}

	// The admin sees every team; a team key only its own, with its key.
	var all []wire.Team
	e.do("GET", "/teams", nil).decode(t, http.StatusOK, &all)
	if len(all) != 3 {
		t.Fatalf("the admin lists %d teams, want 3", len(all))
	}
	var own []wire.Team
	e.do("GET", "/teams", nil, asA...).decode(t, http.StatusOK, &own)
	if len(own) != 1 || own[0].TeamID != "team-a" || own[0].APIKey != "e2b_a" || !own[0].IsDefault {
		t.Fatalf("team A's /teams: %+v", own)
	}
	e.do("GET", "/teams/team-b", nil, asA...).wantError(t, http.StatusNotFound, "not found")

	// Admin routes refuse team keys.
	e.do("POST", "/teams", map[string]any{"name": "x"}, asA...).wantError(t, http.StatusForbidden, "admin key")
	e.do("PUT", "/teams/team-a/quotas", map[string]any{"runningSandboxes": 9}, asA...).wantError(t, http.StatusForbidden, "admin key")
	e.do("GET", "/admin/sandboxes/running-counts", nil, asA...).wantError(t, http.StatusForbidden, "admin key")
	e.do("GET", "/nodes", nil, asA...).wantError(t, http.StatusForbidden, "admin key")
	// A team key may not act for another team.
	e.do("GET", "/v2/sandboxes", nil, append(asA, TeamHeader, "team-b")...).wantError(t, http.StatusForbidden, TeamHeader)

	// Keys: a team's own, made, renamed and revoked; another team's is 404.
	var made wire.CreatedTeamAPIKey
	e.do("POST", "/api-keys", map[string]any{"name": "ci"}, asA...).decode(t, http.StatusCreated, &made)
	if made.Key == "" || made.Name != "ci" {
		t.Fatalf("created key: %+v", made)
	}
	e.do("PATCH", "/api-keys/"+made.ID, map[string]any{"name": "ci-2"}, asB...).wantError(t, http.StatusNotFound, "not found")
	e.do("DELETE", "/api-keys/"+made.ID, nil, asB...).wantError(t, http.StatusNotFound, "not found")
	if r := e.do("PATCH", "/api-keys/"+made.ID, map[string]any{"name": "ci-2"}, asA...); r.status != http.StatusOK {
		t.Fatalf("rename: %d %s", r.status, r.body)
	}
	var listed []wire.TeamAPIKey
	e.do("GET", "/api-keys", nil, asA...).decode(t, http.StatusOK, &listed)
	names := map[string]bool{}
	for _, k := range listed {
		names[k.Name] = true
	}
	if !names["ci-2"] || len(listed) != 2 {
		t.Fatalf("team A's keys: %+v", listed)
	}
	if r := e.do("DELETE", "/api-keys/"+made.ID, nil, asA...); r.status != http.StatusNoContent {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", made.Key).wantError(t, http.StatusUnauthorized, "API key")

	// The admin makes a key for a team and acts for it.
	var forB wire.CreatedTeamAPIKey
	e.do("POST", "/admin/teams/team-b/api-keys", map[string]any{"name": "svc"}).decode(t, http.StatusCreated, &forB)
	e.do("POST", "/admin/teams/nope/api-keys", map[string]any{"name": "svc"}).wantError(t, http.StatusNotFound, "not found")

	// A sandbox of team B: counted for B, killed by the admin for B.
	var sb wire.Sandbox
	e.do("POST", "/sandboxes", map[string]any{"templateID": "base"}, asB...).decode(t, http.StatusCreated, &sb)
	e.do("GET", "/sandboxes/"+sb.SandboxID, nil, asA...).wantError(t, http.StatusNotFound, "doesn't exist")
	e.do("GET", "/sandboxes/"+sb.SandboxID, nil).wantError(t, http.StatusNotFound, "doesn't exist")
	if r := e.do("GET", "/sandboxes/"+sb.SandboxID, nil, TeamHeader, "team-b"); r.status != http.StatusOK {
		t.Fatalf("the admin acting for team B: %d %s", r.status, r.body)
	}
	var counts map[string]int64
	e.do("GET", "/admin/sandboxes/running-counts", nil).decode(t, http.StatusOK, &counts)
	if counts["team-b"] != 1 || counts["team-a"] != 0 {
		t.Fatalf("running counts: %v", counts)
	}
	var killed wire.AdminSandboxKillResult
	e.do("POST", "/admin/teams/team-b/sandboxes/kill", nil).decode(t, http.StatusOK, &killed)
	if killed.KilledCount != 1 || killed.FailedCount != 0 {
		t.Fatalf("admin kill: %+v", killed)
	}
	e.do("GET", "/sandboxes/"+sb.SandboxID, nil, asB...).wantError(t, http.StatusNotFound, sb.SandboxID)
}
