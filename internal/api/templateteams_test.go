package api

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

const (
	tplTeamB    = "team-b"
	tplTeamBKey = "e2b_team_b"
)

// withTplTeamB gives the env's teams a second team, tplTeamB, whose key is
// tplTeamBKey (the env's own key, testKey, is the first team's).
func withTplTeamB(c *envConfig) { c.Teams.(*fakeTeams).addTeam(tplTeamB, tplTeamBKey) }

// asTplTeamB is the header that makes a request team B's.
var asTplTeamB = []string{"X-API-Key", tplTeamBKey}

// twoTeamTemplates gives the fake, beside its base (made without a team),
// the first team's private py and public shared, team B's own py, and a
// build of each py.
func twoTeamTemplates(b *fakeStepBuilder) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b.templates = append(b.templates,
		cube.Template{ID: "pya000", Team: cube.FirstTeam, Aliases: []string{"py"}, CreatedAt: at},
		cube.Template{ID: "shared00", Team: cube.FirstTeam, Aliases: []string{"shared"}, Public: true, CreatedAt: at},
		cube.Template{ID: "pyb000", Team: tplTeamB, Aliases: []string{"py"}, CreatedAt: at},
	)
	b.builds["builda"] = "pya000"
	b.builds["buildb"] = "pyb000"
}

// notFoundAsMissing checks that what team B is answered about the first
// team's private template is, word for word, what it is answered about a
// template that does not exist.
func notFoundAsMissing(t *testing.T, e *testEnv, method, path string, body any) {
	t.Helper()
	got := e.do(method, path, body, asTplTeamB...)
	got.wantError(t, http.StatusNotFound, "not found")
	missingPath := strings.ReplaceAll(path, "pya000", "nope00")
	var missingBody any = body
	if m, ok := body.(map[string]any); ok {
		mm := map[string]any{}
		for k, v := range m {
			if s, ok := v.(string); ok {
				v = strings.ReplaceAll(s, "pya000", "nope00")
			}
			mm[k] = v
		}
		missingBody = mm
	}
	missing := e.do(method, missingPath, missingBody, asTplTeamB...)
	if strings.ReplaceAll(string(got.body), "pya000", "nope00") != string(missing.body) {
		t.Errorf("%s %s: another team's template answers %s, a missing one %s", method, path, got.body, missing.body)
	}
}

// TestTemplateBuildsPerTeam: builds act for the caller's team; another
// team's private template is answered as a missing one by every build
// route, a public one is used and not changed.
func TestTemplateBuildsPerTeam(t *testing.T) {
	e, b := newStepEnv(t, withTplTeamB)
	twoTeamTemplates(b)

	// Each team builds its own py.
	var tk wire.TemplateRequestResponseV3
	e.do("POST", "/v3/templates", map[string]any{"name": "py"}).decode(t, http.StatusAccepted, &tk)
	if b.intent.Team != cube.FirstTeam {
		t.Errorf("the first team's request went to the builder for team %q", b.intent.Team)
	}
	e.do("POST", "/v3/templates", map[string]any{"name": "py"}, asTplTeamB...).decode(t, http.StatusAccepted, &tk)
	if b.intent.Team != tplTeamB {
		t.Errorf("team B's request went to the builder for team %q", b.intent.Team)
	}
	var got wire.TemplateWithBuilds
	e.do("GET", "/templates/py", nil).decode(t, http.StatusOK, &got)
	if got.TemplateID != "pya000" {
		t.Errorf("the first team's py is %s", got.TemplateID)
	}
	e.do("GET", "/templates/py", nil, asTplTeamB...).decode(t, http.StatusOK, &got)
	if got.TemplateID != "pyb000" {
		t.Errorf("team B's py is %s", got.TemplateID)
	}

	// The first team's private template, to team B: as if it did not exist.
	hash := sha("files")
	notFoundAsMissing(t, e, "GET", "/templates/pya000", nil)
	notFoundAsMissing(t, e, "GET", "/templates/pya000/builds/builda/status", nil)
	notFoundAsMissing(t, e, "GET", "/templates/pya000/builds/builda/logs", nil)
	notFoundAsMissing(t, e, "GET", "/templates/pya000/tags", nil)
	notFoundAsMissing(t, e, "POST", "/templates/tags", map[string]any{"target": "pya000", "tags": []string{"x"}})
	notFoundAsMissing(t, e, "DELETE", "/templates/tags", map[string]any{"name": "pya000", "tags": []string{"x"}})
	notFoundAsMissing(t, e, "PATCH", "/templates/pya000", map[string]any{"public": true})
	notFoundAsMissing(t, e, "GET", "/templates/pya000/files/"+hash, nil)
	notFoundAsMissing(t, e, "POST", "/v2/templates/pya000/builds/builda", map[string]any{"fromImage": "python:3.12"})
	notFoundAsMissing(t, e, "DELETE", "/templates/pya000", nil)
	// Its owner still has it all.
	e.do("GET", "/templates/pya000/builds/builda/status", nil).decode(t, http.StatusOK, nil)
	e.do("GET", "/templates/pya000/tags", nil).decode(t, http.StatusOK, nil)

	// A build from it is refused as from a template that does not exist;
	// from a public one, or its own py, it starts.
	e.do("POST", "/v2/templates/pyb000/builds/buildb", map[string]any{"fromTemplate": "pya000"}, asTplTeamB...).
		wantError(t, http.StatusBadRequest, "not found")
	for _, from := range []string{"shared", "shared:v1", "py"} {
		e.do("POST", "/v2/templates/pyb000/builds/buildb", map[string]any{"fromTemplate": from}, asTplTeamB...).decode(t, http.StatusAccepted, nil)
		if b.spec.FromTemplate != from {
			t.Errorf("spec %+v, want from %s", b.spec, from)
		}
	}

	// The public template: seen, its tags read, sandboxes made from it;
	// not changed, and its builds are its team's.
	e.do("GET", "/templates/shared", nil, asTplTeamB...).decode(t, http.StatusOK, nil)
	e.do("GET", "/templates/shared/tags", nil, asTplTeamB...).decode(t, http.StatusOK, nil)
	e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "shared"}, asTplTeamB...).decode(t, http.StatusCreated, nil)
	e.do("PATCH", "/templates/shared", map[string]any{"public": false}, asTplTeamB...).wantError(t, http.StatusForbidden, "public template")
	e.do("POST", "/templates/tags", map[string]any{"target": "shared", "tags": []string{"x"}}, asTplTeamB...).wantError(t, http.StatusForbidden, "public template")
	e.do("DELETE", "/templates/shared", nil, asTplTeamB...).wantError(t, http.StatusForbidden, "public template")
	e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "pya000"}, asTplTeamB...).wantError(t, http.StatusNotFound, "not found")

	// Every call reached the builder as the caller's team.
	for _, team := range b.teams {
		if team != cube.FirstTeam && team != tplTeamB {
			t.Fatalf("a call reached the builder for team %q", team)
		}
	}
}

// TestImageBuildsPerTeam: POST /templates builds for the caller's team,
// and another team's build job is not found.
func TestImageBuildsPerTeam(t *testing.T) {
	e, b := newBuilderEnv(t, withTplTeamB)
	var started wire.TemplateBuildStarted
	e.do("POST", "/templates", map[string]any{"image": "python:3.12", "templateID": "py"}, asTplTeamB...).decode(t, http.StatusAccepted, &started)
	if b.last.Team != tplTeamB {
		t.Errorf("team B's build went to the builder for team %q", b.last.Team)
	}
	e.do("GET", "/templates/jobs/"+started.JobID, nil, asTplTeamB...).decode(t, http.StatusOK, nil)
	e.do("GET", "/templates/jobs/"+started.JobID, nil).wantError(t, http.StatusNotFound, "not found")
	e.do("POST", "/templates", map[string]any{"image": "python:3.12", "templateID": "py2"}).decode(t, http.StatusAccepted, &started)
	if b.last.Team != cube.FirstTeam {
		t.Errorf("the first team's build went to the builder for team %q", b.last.Team)
	}
	e.do("GET", "/templates/jobs/"+started.JobID, nil, asTplTeamB...).wantError(t, http.StatusNotFound, "not found")
}
