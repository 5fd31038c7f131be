package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// teamsAcrossNodes checks, on a running cluster, that a team made on one
// node is one team on all: its key works everywhere, its sandbox is
// invisible to another team through any node, its quota holds whichever
// node a create reaches, its changes are audited once, and its revoked key
// fails on every node within a second.
func teamsAcrossNodes(t *testing.T, a, b, c *daemon) {
	t.Helper()
	code, out := a.do(t, "POST", "/teams", map[string]any{"name": "cluster-team"}, nil)
	var team struct{ TeamID string }
	json.Unmarshal(out, &team)
	if code != 201 || team.TeamID == "" {
		t.Fatalf("create a team through node-a: %d %s", code, out)
	}
	code, out = b.do(t, "POST", "/admin/teams/"+team.TeamID+"/api-keys", map[string]any{"name": "fleet"}, nil)
	var key struct{ ID, Key string }
	json.Unmarshal(out, &key)
	if code != 201 || key.Key == "" {
		t.Fatalf("create the team's key through node-b: %d %s", code, out)
	}
	as := map[string]string{"X-API-Key": key.Key}
	// The first team's template, made public, is the team's to use.
	if code, out := a.do(t, "PATCH", "/templates/tiny-a", map[string]any{"public": true}, nil); code != 200 {
		t.Fatalf("make tiny-a public: %d %s", code, out)
	}
	code, out = c.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny-a", "timeout": 600}, as)
	var sb created
	json.Unmarshal(out, &sb)
	if code != 201 || sb.ClientID != "node-a" {
		t.Fatalf("the team's create through node-c: %d %s", code, out)
	}
	for _, via := range []*daemon{a, b, c} {
		if code, out := via.do(t, "GET", "/sandboxes/"+sb.SandboxID, nil, as); code != 200 {
			t.Fatalf("the team's sandbox to its key through %s: %d %s", via.url, code, out)
		}
		if code, out := via.do(t, "GET", "/sandboxes/"+sb.SandboxID, nil, nil); code != 404 {
			t.Fatalf("the team's sandbox to the first team's key through %s: %d %s", via.url, code, out)
		}
		if code, out := via.do(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); code != 404 {
			t.Fatalf("kill of the team's sandbox by another team through %s: %d %s", via.url, code, out)
		}
	}
	if code, out := b.do(t, "GET", "/sandboxes/"+sb.SandboxID, nil, map[string]string{"X-Team-ID": team.TeamID}); code != 200 {
		t.Fatalf("the admin key acting for the team: %d %s", code, out)
	}
	code, out = b.do(t, "GET", "/v2/sandboxes", nil, as)
	if n := strings.Count(string(out), `"sandboxID"`); code != 200 || n != 1 || !strings.Contains(string(out), sb.SandboxID) {
		t.Fatalf("the team's list through node-b: %d %s", code, out)
	}

	// A quota set through one node holds for a create through another.
	if code, out := b.do(t, "PUT", "/teams/"+team.TeamID+"/quotas", map[string]any{"runningSandboxes": 1}, nil); code != 200 {
		t.Fatalf("set the team's quota: %d %s", code, out)
	}
	within(t, 5*time.Second, func() bool {
		code, out := c.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny-a", "timeout": 600}, as)
		if code == 201 {
			var extra created
			json.Unmarshal(out, &extra)
			a.do(t, "DELETE", "/sandboxes/"+extra.SandboxID, nil, as)
			return false
		}
		return code == 429 && strings.Contains(string(out), "runningSandboxes") && strings.Contains(string(out), "1 in use")
	}, func() string { return "a create over the team's running-sandboxes quota was not refused with 429" })

	// Its create is audited (written off the request's path, so looked
	// for a while), with its key's name, whichever node reads.
	var trail string
	within(t, 5*time.Second, func() bool {
		code, out := a.do(t, "GET", "/audit", nil, as)
		trail = fmt.Sprintf("%d %s", code, out)
		var entries []struct {
			Route, KeyName, TeamID, Target string
			Status                         int
		}
		json.Unmarshal(out, &entries)
		for _, e := range entries {
			if e.TeamID != team.TeamID {
				t.Fatalf("the team's audit trail shows another team's entry: %s", out)
			}
			if e.Route == "POST /sandboxes" && e.Status == 201 && e.KeyName == "fleet" {
				return true
			}
		}
		return false
	}, func() string { return "the team's create is not in its audit trail through node-a: " + trail })

	// Revoked through node-a, the key fails on every node within a second.
	if code, out := a.do(t, "DELETE", "/admin/teams/"+team.TeamID+"/api-keys/"+key.ID, nil, nil); code != 204 {
		t.Fatalf("revoke the team's key: %d %s", code, out)
	}
	revokedAt := time.Now()
	for _, via := range []*daemon{a, b, c} {
		within(t, time.Second-time.Since(revokedAt)+100*time.Millisecond, func() bool {
			code, _ := via.do(t, "GET", "/v2/sandboxes", nil, as)
			return code == 401
		}, func() string { return fmt.Sprintf("the revoked key still works on %s", via.url) })
	}
	if code, out := a.do(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, map[string]string{"X-Team-ID": team.TeamID}); code != 204 {
		t.Fatalf("the admin kills the team's sandbox: %d %s", code, out)
	}
}
