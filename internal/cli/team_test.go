package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// teamServer plays the team and key routes over team "t1" (quotas set)
// and key "k1" of it; other teams and keys are 404, and removing team
// "busy" is 409.
type teamServer struct {
	mu   sync.Mutex
	reqs []string
	t1   wire.Team
}

func newTeamServer(t *testing.T) *teamServer {
	f := &teamServer{t1: wire.Team{TeamID: "t1", Name: "one", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Quotas: wire.Quotas{RunningSandboxes: 5, MemoryMB: 2048, MaxTimeoutSeconds: 3600, RequestsPerSecond: 2.5}}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")
	return f
}

// take returns the requests seen since the last take, each as "METHOD
// PATH [BODY]", with " team=ID" when X-Team-ID was sent.
func (f *teamServer) take() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := strings.Join(f.reqs, "\n")
	f.reqs = nil
	return out
}

func (f *teamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	line := r.Method + " " + r.URL.Path
	if b := strings.TrimSpace(string(body)); b != "" {
		line += " " + b
	}
	if team := r.Header.Get("X-Team-ID"); team != "" {
		line += " team=" + team
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, line)
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	created := time.Date(2026, 2, 3, 4, 5, 6, 0, time.UTC)
	used := created.Add(time.Hour)
	switch r.Method + " " + r.URL.Path {
	case "GET /teams":
		reply(200, []wire.Team{f.t1, {TeamID: "t2", Name: "two", CreatedAt: created}})
	case "POST /teams":
		var nt wire.NewTeam
		json.Unmarshal(body, &nt)
		t := wire.Team{TeamID: "t3", Name: nt.Name, CreatedAt: created}
		if nt.Quotas != nil {
			t.Quotas = *nt.Quotas
		}
		reply(201, t)
	case "GET /teams/t1":
		reply(200, f.t1)
	case "PUT /teams/t1/quotas":
		json.Unmarshal(body, &f.t1.Quotas)
		reply(200, f.t1)
	case "DELETE /teams/t1":
		reply(204, nil)
	case "DELETE /teams/busy":
		reply(409, wire.Error{Code: 409, Message: "team busy still owns 2 sandboxes: delete them first"})
	case "GET /api-keys":
		mask := wire.IdentifierMaskingDetails{Prefix: "e2b_", ValueLength: 40, MaskedValuePrefix: "ab", MaskedValueSuffix: "wxyz"}
		reply(200, []wire.TeamAPIKey{
			{ID: "k0", Name: "server", Mask: mask, CreatedAt: created, Admin: true, LastUsed: &used},
			{ID: "k1", Name: "ci", Mask: mask, CreatedAt: created, CreatedBy: &wire.TeamUser{ID: "k0"}},
		})
	case "POST /api-keys", "POST /admin/teams/t1/api-keys":
		var nk wire.NewTeamAPIKey
		json.Unmarshal(body, &nk)
		reply(201, wire.CreatedTeamAPIKey{ID: "k2", Key: "e2b_0123456789abcdef", Name: nk.Name, CreatedAt: created})
	case "PATCH /api-keys/k1":
		reply(200, nil)
	case "DELETE /api-keys/k1", "DELETE /admin/teams/t1/api-keys/k1":
		reply(204, nil)
	default:
		reply(404, wire.Error{Code: 404, Message: "not found"})
	}
}

func TestTeamCommands(t *testing.T) {
	f := newTeamServer(t)

	out, _, err := run(t, "team", "create", "ml", "--running", "10", "--vcpus", "40", "--memory-mb", "8192",
		"--max-timeout", "2h", "--disk-bytes", "1073741824", "--builds", "2", "--rps", "1.5")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), `POST /teams {"name":"ml","quotas":{"runningSandboxes":10,"vcpus":40,"memoryMB":8192,"maxTimeoutSeconds":7200,"diskBytes":1073741824,"builds":2,"requestsPerSecond":1.5}}`; got != want {
		t.Errorf("team create sent %s", got)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TEAM_ID") || strings.Join(strings.Fields(lines[1]), " ") != "t3 ml 10 40 8.0 GiB 2h0m0s 1.0 GiB 2 1.5 2026-02-03T04:05:06Z" ||
		lines[2] != "Make its first API key with: cubemastercli key create NAME --team t3" {
		t.Errorf("team create printed:\n%s", out)
	}

	if _, _, err := run(t, "team", "create", "bare"); err != nil || f.take() != `POST /teams {"name":"bare"}` {
		t.Errorf("team create without quotas: %v", err)
	}
	for _, bad := range [][]string{{"--running", "-1"}, {"--max-timeout", "1500ms"}, {"--rps", "-0.5"}} {
		if _, _, err := run(t, append([]string{"team", "create", "x"}, bad...)...); err == nil {
			t.Errorf("team create %v accepted", bad)
		}
	}
	if got := f.take(); got != "" {
		t.Errorf("bad quotas reached the server: %s", got)
	}

	out, _, err = run(t, "team", "list")
	if err != nil || f.take() != "GET /teams" {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[1]), " ") != "t1 one 5 - 2.0 GiB 1h0m0s - - 2.5 2026-01-02T03:04:05Z" ||
		strings.Join(strings.Fields(lines[2]), " ") != "t2 two - - - - - - - 2026-02-03T04:05:06Z" {
		t.Errorf("team list:\n%s", out)
	}
	if out, _, err := run(t, "team", "list", "--json"); err != nil || !strings.Contains(out, `"teamID": "t2"`) {
		t.Errorf("team list --json: %v\n%s", err, out)
	}
	f.take()

	// quota with no flag shows; with flags it changes only those given.
	if out, _, err := run(t, "team", "quota", "t1"); err != nil || f.take() != "GET /teams/t1" || !strings.Contains(out, "1h0m0s") {
		t.Errorf("team quota without flags: %v\n%s", err, out)
	}
	out, _, err = run(t, "team", "quota", "t1", "--vcpus", "4", "--max-timeout", "0")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.take(), "GET /teams/t1\n"+`PUT /teams/t1/quotas {"runningSandboxes":5,"vcpus":4,"memoryMB":2048,"maxTimeoutSeconds":0,"diskBytes":0,"builds":0,"requestsPerSecond":2.5}`; got != want {
		t.Errorf("team quota sent\n%s", got)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || strings.Join(strings.Fields(lines[1]), " ") != "t1 one 5 4 2.0 GiB - - - 2.5 2026-01-02T03:04:05Z" {
		t.Errorf("team quota printed:\n%s", out)
	}
	if _, _, err := run(t, "team", "quota", "t9", "--vcpus", "1"); err == nil || f.take() != "GET /teams/t9" {
		t.Errorf("quota of an unknown team: %v", err)
	}

	out, stderr, err := run(t, "team", "rm", "t1", "busy")
	if err == nil || err.Error() != "1 team not removed" || out != "t1\n" || !strings.Contains(stderr, "busy: server answered 409: team busy still owns 2 sandboxes") {
		t.Errorf("team rm: %v\nstdout %q\nstderr %q", err, out, stderr)
	}
	if got := f.take(); got != "DELETE /teams/t1\nDELETE /teams/busy" {
		t.Errorf("team rm sent\n%s", got)
	}
}

func TestKeyCommands(t *testing.T) {
	f := newTeamServer(t)
	const notice = "This key will not be shown again: keep it now."

	out, _, err := run(t, "key", "create", "ci")
	if err != nil || f.take() != `POST /api-keys {"name":"ci"}` {
		t.Fatal(err)
	}
	if out != "key_id: k2\nname: ci\nkey: e2b_0123456789abcdef\n"+notice+"\n" {
		t.Errorf("key create printed:\n%s", out)
	}
	out, stderr, err := run(t, "key", "create", "ops", "--team", "t1", "--json")
	if err != nil || f.take() != `POST /admin/teams/t1/api-keys {"name":"ops"}` {
		t.Fatal(err)
	}
	var k wire.CreatedTeamAPIKey
	if json.Unmarshal([]byte(out), &k) != nil || k.Key != "e2b_0123456789abcdef" || strings.TrimSpace(stderr) != notice {
		t.Errorf("key create --json: stdout %q stderr %q", out, stderr)
	}

	out, _, err = run(t, "key", "list", "--team", "t1")
	if err != nil || f.take() != "GET /api-keys team=t1" {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY_ID") ||
		strings.Join(strings.Fields(lines[1]), " ") != "k0 server e2b_ab...wxyz yes 2026-02-03T04:05:06Z 2026-02-03T05:05:06Z -" ||
		strings.Join(strings.Fields(lines[2]), " ") != "k1 ci e2b_ab...wxyz no 2026-02-03T04:05:06Z - k0" {
		t.Errorf("key list:\n%s", out)
	}
	if _, _, err := run(t, "key", "list"); err != nil || f.take() != "GET /api-keys" {
		t.Errorf("key list of the key's own team: %v", err)
	}

	if out, _, err := run(t, "key", "rename", "k1", "deploy", "--team", "t1"); err != nil || out != "k1: renamed to deploy\n" {
		t.Errorf("key rename: %v %q", err, out)
	}
	if got := f.take(); got != `PATCH /api-keys/k1 {"name":"deploy"} team=t1` {
		t.Errorf("key rename sent %s", got)
	}

	if out, _, err := run(t, "key", "revoke", "k1"); err != nil || out != "k1\n" || f.take() != "DELETE /api-keys/k1" {
		t.Errorf("key revoke: %v %q", err, out)
	}
	out, stderr, err = run(t, "key", "revoke", "k1", "k9", "--team", "t1")
	if err == nil || err.Error() != "1 key not revoked" || out != "k1\n" || !strings.Contains(stderr, "k9: server answered 404") {
		t.Errorf("key revoke --team: %v\nstdout %q\nstderr %q", err, out, stderr)
	}
	if got := f.take(); got != "DELETE /admin/teams/t1/api-keys/k1\nDELETE /admin/teams/t1/api-keys/k9" {
		t.Errorf("key revoke --team sent\n%s", got)
	}
}
