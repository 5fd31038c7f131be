package server_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	_ "modernc.org/sqlite"

	"cube/internal/nodetest"
	"cube/internal/store"
)

// TestUpgradeToTeams: a data directory from before teams (one key, records
// without a team, no teams or keys tables) with sandboxes running and
// paused is upgraded by the next start with nothing lost: every sandbox
// and snapshot is the first team's, answers the same key, runs on (or
// resumes) with its files, and another team sees none of it.
func TestUpgradeToTeams(t *testing.T) {
	dataDir := tinyDataDir(t)
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr)

	var ids []string
	var tokens []string
	for range 3 {
		code, sb, out := createOn(t, d, map[string]any{"templateID": "tiny", "timeout": 600})
		if code != 201 {
			t.Fatalf("create: %d %s", code, out)
		}
		if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "POST", "/files?path=/var/mine.txt", []byte(sb.SandboxID)); code != 200 {
			t.Fatalf("write: %d %s", code, out)
		}
		ids, tokens = append(ids, sb.SandboxID), append(tokens, sb.EnvdAccessToken)
	}
	// One paused in memory, one written out to disk, one running.
	if code, out := d.do(t, "POST", "/sandboxes/"+ids[1]+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, out)
	}
	if code, out := d.do(t, "POST", "/sandboxes/"+ids[2]+"/pause", map[string]any{"memory": false}, nil); code != 204 {
		t.Fatalf("pause to files: %d %s", code, out)
	}
	code, out := d.do(t, "POST", "/sandboxes/"+ids[0]+"/snapshots", map[string]any{"name": "kept"}, nil)
	if code != 201 {
		t.Fatalf("snapshot: %d %s", code, out)
	}

	// The server stops (its sandboxes stay), and the directory is made to
	// look as a server from before teams left it.
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	toSingleKeyLayout(t, filepath.Join(dataDir, "state.db"))

	d = startDaemon(t, dataDir, prefix, cidr.String(), addr)
	code, out = d.do(t, "GET", "/v2/sandboxes?state=running,paused", nil, nil)
	for _, id := range ids {
		if code != 200 || !strings.Contains(string(out), id) {
			t.Fatalf("sandbox %s not listed after the upgrade: %d %s", id, code, out)
		}
	}
	if code, got := d.envd(t, ids[0], tokens[0], "GET", "/files?path=/var/mine.txt", nil); code != 200 || got != ids[0] {
		t.Fatalf("the running sandbox after the upgrade: %d %q", code, got)
	}
	for i := 1; i < 3; i++ {
		if code, out := d.do(t, "POST", "/sandboxes/"+ids[i]+"/connect", map[string]any{"timeout": 600}, nil); code != 200 && code != 201 {
			t.Fatalf("resume of paused sandbox %d after the upgrade: %d %s", i, code, out)
		}
		if code, got := d.envd(t, ids[i], tokens[i], "GET", "/files?path=/var/mine.txt", nil); code != 200 || got != ids[i] {
			t.Fatalf("paused sandbox %d's files after the upgrade: %d %q", i, code, got)
		}
	}
	code, out = d.do(t, "GET", "/teams", nil, nil)
	if code != 200 || !strings.Contains(string(out), `"name":"default"`) {
		t.Fatalf("GET /teams after the upgrade: %d %s", code, out)
	}
	if code, out := d.do(t, "GET", "/templates/kept", nil, nil); code != 200 {
		t.Fatalf("the snapshot after the upgrade: %d %s", code, out)
	}

	// A new team sees none of it.
	code, out = d.do(t, "POST", "/teams", map[string]any{"name": "newcomer"}, nil)
	var team struct{ TeamID string }
	json.Unmarshal(out, &team)
	if code != 201 {
		t.Fatalf("create a team: %d %s", code, out)
	}
	code, out = d.do(t, "POST", "/admin/teams/"+team.TeamID+"/api-keys", map[string]any{"name": "k"}, nil)
	var key struct{ Key string }
	json.Unmarshal(out, &key)
	if code != 201 {
		t.Fatalf("create a key: %d %s", code, out)
	}
	as := map[string]string{"X-API-Key": key.Key}
	if code, out := d.do(t, "GET", "/v2/sandboxes?state=running,paused", nil, as); code != 200 || strings.TrimSpace(string(out)) != "[]" {
		t.Fatalf("the new team's list: %d %s", code, out)
	}
	for _, id := range ids {
		if code, _ := d.do(t, "GET", "/sandboxes/"+id, nil, as); code != 404 {
			t.Fatalf("the new team reads the first team's sandbox %s: %d", id, code)
		}
	}
	if code, _ := d.do(t, "GET", "/templates/kept", nil, as); code != 404 {
		t.Fatalf("the new team reads the first team's snapshot: %d", code)
	}
}

// toSingleKeyLayout rewrites a state database as a server from before
// teams wrote it: no teams, names, keys or usage, and records without a
// team.
func toSingleKeyLayout(t *testing.T, path string) {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	strip := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	sbs, err := st.Sandboxes().List(ctx)
	strip(err)
	for _, r := range sbs {
		r.Team = ""
		if r.Boot != nil {
			r.Boot.Team, r.Boot.Public = "", false
		}
		strip(st.Sandboxes().Put(ctx, r))
	}
	tpls, err := st.Templates().List(ctx)
	strip(err)
	for _, r := range tpls {
		r.Team, r.Public = "", false
		strip(st.Templates().Put(ctx, r))
	}
	jobs, err := st.Jobs().List(ctx)
	strip(err)
	for _, r := range jobs {
		r.Team = ""
		strip(st.Jobs().Put(ctx, r))
	}
	st.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"teams", "teamnames", "apikeys", "audit", "usage"} {
		if _, err := db.Exec(`DROP TABLE IF EXISTS ` + table); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	db.QueryRow(`SELECT COUNT(*) FROM sandboxes WHERE data LIKE '%"team"%'`).Scan(&n)
	if n != 0 {
		t.Fatalf("%d sandbox records still name a team", n)
	}
}
