package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"cube/internal/api/wire"
)

// Teams, their API keys and quotas, and E2B's admin routes over them.
// Creating, deleting and setting quotas of teams, the /admin routes and
// acting for another team (ForTeam) need an admin key.

// TeamHeader names the team an admin key acts for; the server answers 403
// when a key that is not an admin's names another team in it.
const TeamHeader = "X-Team-ID"

// ForTeam returns a copy of c whose requests act for team (sent in
// TeamHeader), for an admin key to list, make, rename or revoke another
// team's keys, or to touch its sandboxes, templates and volumes. team ""
// returns c itself. c is left as it was.
func (c *Client) ForTeam(team string) *Client {
	if team == "" {
		return c
	}
	cp := *c
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	base := hc.Transport
	if tt, ok := base.(teamTransport); ok {
		base = tt.base // a second ForTeam replaces the first one's team
	}
	hc.Transport = teamTransport{team: team, base: base}
	cp.HTTP = &hc
	return &cp
}

// teamTransport adds TeamHeader to every request it carries.
type teamTransport struct {
	team string
	base http.RoundTripper
}

func (t teamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set(TeamHeader, t.team)
	base := t.base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// ListTeams is GET /teams: every team for an admin key, the key's own team
// for any other.
func (c *Client) ListTeams(ctx context.Context) ([]wire.Team, error) {
	var out []wire.Team
	_, err := c.Do(ctx, http.MethodGet, "/teams", nil, nil, &out)
	return out, err
}

// CreateTeam is POST /teams; q nil leaves the team without limits.
func (c *Client) CreateTeam(ctx context.Context, name string, q *wire.Quotas) (*wire.Team, error) {
	var out wire.Team
	if _, err := c.Do(ctx, http.MethodPost, "/teams", nil, wire.NewTeam{Name: name, Quotas: q}, &out); err != nil {
		return nil, err
	}
	if out.TeamID == "" {
		return nil, fmt.Errorf("POST /teams: answer has no teamID")
	}
	return &out, nil
}

// GetTeam is GET /teams/{teamID}.
func (c *Client) GetTeam(ctx context.Context, id string) (*wire.Team, error) {
	var out wire.Team
	if _, err := c.Do(ctx, http.MethodGet, teamPath(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteTeam is DELETE /teams/{teamID}; a team that still owns sandboxes,
// templates, snapshots or volumes is kept (409).
func (c *Client) DeleteTeam(ctx context.Context, id string) error {
	_, err := c.Do(ctx, http.MethodDelete, teamPath(id), nil, nil, nil)
	return err
}

// SetQuotas is PUT /teams/{teamID}/quotas: q replaces every quota (0 is no
// limit) and the answer is the team with its new quotas.
func (c *Client) SetQuotas(ctx context.Context, id string, q wire.Quotas) (*wire.Team, error) {
	var out wire.Team
	if _, err := c.Do(ctx, http.MethodPut, teamPath(id)+"/quotas", nil, q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListKeys is GET /api-keys: the keys of the team c acts for.
func (c *Client) ListKeys(ctx context.Context) ([]wire.TeamAPIKey, error) {
	var out []wire.TeamAPIKey
	_, err := c.Do(ctx, http.MethodGet, "/api-keys", nil, nil, &out)
	return out, err
}

// CreateKey is POST /api-keys: a key of the team c acts for. The answer
// is the only one that carries the key.
func (c *Client) CreateKey(ctx context.Context, name string) (*wire.CreatedTeamAPIKey, error) {
	return c.newKey(ctx, "/api-keys", name)
}

// AdminCreateKey is POST /admin/teams/{teamID}/api-keys: a key of any team.
func (c *Client) AdminCreateKey(ctx context.Context, team, name string) (*wire.CreatedTeamAPIKey, error) {
	return c.newKey(ctx, "/admin"+teamPath(team)+"/api-keys", name)
}

func (c *Client) newKey(ctx context.Context, path, name string) (*wire.CreatedTeamAPIKey, error) {
	var out wire.CreatedTeamAPIKey
	if _, err := c.Do(ctx, http.MethodPost, path, nil, wire.NewTeamAPIKey{Name: name}, &out); err != nil {
		return nil, err
	}
	if out.Key == "" {
		return nil, fmt.Errorf("POST %s: answer has no key", path)
	}
	return &out, nil
}

// RenameKey is PATCH /api-keys/{apiKeyID}.
func (c *Client) RenameKey(ctx context.Context, keyID, name string) error {
	_, err := c.Do(ctx, http.MethodPatch, keyPath(keyID), nil, wire.NewTeamAPIKey{Name: name}, nil)
	return err
}

// DeleteKey is DELETE /api-keys/{apiKeyID}: it revokes a key of the team
// c acts for. The last admin key cannot go (409).
func (c *Client) DeleteKey(ctx context.Context, keyID string) error {
	_, err := c.Do(ctx, http.MethodDelete, keyPath(keyID), nil, nil, nil)
	return err
}

// AdminDeleteKey is DELETE /admin/teams/{teamID}/api-keys/{apiKeyID}.
func (c *Client) AdminDeleteKey(ctx context.Context, team, keyID string) error {
	_, err := c.Do(ctx, http.MethodDelete, "/admin"+teamPath(team)+keyPath(keyID), nil, nil, nil)
	return err
}

// AdminKillSandboxes is POST /admin/teams/{teamID}/sandboxes/kill: it
// kills every sandbox of a team, running or paused.
func (c *Client) AdminKillSandboxes(ctx context.Context, team string) (*wire.AdminSandboxKillResult, error) {
	var out wire.AdminSandboxKillResult
	if _, err := c.Do(ctx, http.MethodPost, "/admin"+teamPath(team)+"/sandboxes/kill", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// AdminCancelBuilds is POST /admin/teams/{teamID}/builds/cancel: it
// cancels every build of a team that has not ended.
func (c *Client) AdminCancelBuilds(ctx context.Context, team string) (*wire.AdminBuildCancelResult, error) {
	var out wire.AdminBuildCancelResult
	if _, err := c.Do(ctx, http.MethodPost, "/admin"+teamPath(team)+"/builds/cancel", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunningCounts is GET /admin/sandboxes/running-counts: running sandboxes
// by team ID; teams running none are left out.
func (c *Client) RunningCounts(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	if _, err := c.Do(ctx, http.MethodGet, "/admin/sandboxes/running-counts", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func teamPath(id string) string { return "/teams/" + url.PathEscape(id) }

func keyPath(id string) string { return "/api-keys/" + url.PathEscape(id) }
