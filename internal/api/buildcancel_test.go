package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// fakeCanceller adds build cancels to the in-memory backend: it answers
// two cancelled and one failed, and records the teams it was asked for.
type fakeCanceller struct {
	*fakeBackend
	mu    sync.Mutex
	teams []string
}

func (f *fakeCanceller) CancelBuilds(_ context.Context, team string) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.teams = append(f.teams, team)
	return 2, 1, nil
}

// TestAdminCancelBuilds: POST /admin/teams/{teamID}/builds/cancel answers
// the admin key with E2B's AdminBuildCancelResult for the team named; a
// team's own key is refused (403), an unknown team is 404, and a backend
// that cannot cancel builds says so (501).
func TestAdminCancelBuilds(t *testing.T) {
	fake := newFake()
	c := &fakeCanceller{fakeBackend: fake}
	e := newEnvWith(t, fake, c, withTplTeamB)

	r := e.do(http.MethodPost, "/admin/teams/"+tplTeamB+"/builds/cancel", nil)
	if r.status != http.StatusOK {
		t.Fatalf("admin cancel: %d %s", r.status, r.body)
	}
	var out map[string]int
	if err := json.Unmarshal(r.body, &out); err != nil || len(out) != 2 || out["cancelledCount"] != 2 || out["failedCount"] != 1 {
		t.Errorf("admin cancel answered %s (%v), want cancelledCount 2, failedCount 1", r.body, err)
	}
	var typed wire.AdminBuildCancelResult
	if err := json.Unmarshal(r.body, &typed); err != nil || typed.CancelledCount != 2 || typed.FailedCount != 1 {
		t.Errorf("as the wire type: %+v %v", typed, err)
	}

	e.do(http.MethodPost, "/admin/teams/"+tplTeamB+"/builds/cancel", nil, asTplTeamB...).wantError(t, http.StatusForbidden, "admin")
	e.do(http.MethodPost, "/admin/teams/"+cube.FirstTeam+"/builds/cancel", nil, asTplTeamB...).wantError(t, http.StatusForbidden, "admin")
	e.do(http.MethodPost, "/admin/teams/no-such-team/builds/cancel", nil).wantError(t, http.StatusNotFound, "not found")
	c.mu.Lock()
	if len(c.teams) != 1 || c.teams[0] != tplTeamB {
		t.Errorf("the backend was asked to cancel the builds of %q, want only %s", c.teams, tplTeamB)
	}
	c.mu.Unlock()

	plain := newEnv(t, withTplTeamB)
	plain.do(http.MethodPost, "/admin/teams/"+tplTeamB+"/builds/cancel", nil).wantError(t, http.StatusNotImplemented, "cancelling builds")
}
