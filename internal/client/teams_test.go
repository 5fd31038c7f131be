package client

import (
	"context"
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

// teamCall is one request the fake team server saw.
type teamCall struct {
	line, team, key string
}

// teamServer plays the team, key and admin routes: team "t1" exists, key
// "k1" of it exists, anything else is 404; a key named "nokey" is
// answered without its key.
type teamServer struct {
	mu    sync.Mutex
	calls []teamCall
}

func (s *teamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	line := r.Method + " " + r.URL.EscapedPath()
	if b := strings.TrimSpace(string(body)); b != "" {
		line += " " + b
	}
	s.mu.Lock()
	s.calls = append(s.calls, teamCall{line, r.Header.Get(TeamHeader), r.Header.Get("X-API-Key")})
	s.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := wire.Team{TeamID: "t1", Name: "one", CreatedAt: created, Quotas: wire.Quotas{RunningSandboxes: 5}}
	mask := wire.IdentifierMaskingDetails{Prefix: "e2b_", ValueLength: 44, MaskedValuePrefix: "ab", MaskedValueSuffix: "yz"}
	var newKey wire.NewTeamAPIKey
	json.Unmarshal(body, &newKey)
	switch line := r.Method + " " + r.URL.EscapedPath(); line {
	case "GET /teams":
		reply(200, []wire.Team{t1})
	case "POST /teams":
		var nt wire.NewTeam
		json.Unmarshal(body, &nt)
		t := wire.Team{TeamID: "t2", Name: nt.Name, CreatedAt: created}
		if nt.Quotas != nil {
			t.Quotas = *nt.Quotas
		}
		if nt.Name == "anonymous" {
			t.TeamID = ""
		}
		reply(201, t)
	case "GET /teams/t1":
		reply(200, t1)
	case "DELETE /teams/t1":
		reply(204, nil)
	case "PUT /teams/t1/quotas":
		json.Unmarshal(body, &t1.Quotas)
		reply(200, t1)
	case "GET /api-keys":
		reply(200, []wire.TeamAPIKey{{ID: "k1", Name: "ci", Mask: mask, CreatedAt: created}})
	case "POST /api-keys", "POST /admin/teams/t1/api-keys":
		k := wire.CreatedTeamAPIKey{ID: "k2", Key: "e2b_secret", Name: newKey.Name, Mask: mask, CreatedAt: created}
		if newKey.Name == "nokey" {
			k.Key = ""
		}
		reply(201, k)
	case "PATCH /api-keys/k1":
		reply(200, nil)
	case "DELETE /api-keys/k1", "DELETE /admin/teams/t1/api-keys/k1":
		reply(204, nil)
	case "POST /admin/teams/t1/sandboxes/kill":
		reply(200, wire.AdminSandboxKillResult{KilledCount: 3, FailedCount: 1})
	case "GET /admin/sandboxes/running-counts":
		reply(200, map[string]int64{"t1": 2, "t2": 7})
	case "DELETE /teams/t9":
		reply(403, wire.Error{Code: 403, Message: "DELETE /teams/{teamID} needs the admin key"})
	default:
		reply(404, wire.Error{Code: 404, Message: "not found"})
	}
}

func (s *teamServer) take() []teamCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.calls
	s.calls = nil
	return out
}

func TestTeamAndKeyCalls(t *testing.T) {
	f := &teamServer{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := New(srv.URL, "e2b_admin")
	ctx := context.Background()
	expect := func(what string, want ...string) {
		t.Helper()
		var got []string
		for _, call := range f.take() {
			got = append(got, call.line)
			if call.key != "e2b_admin" || call.team != "" {
				t.Errorf("%s: %q sent key %q team %q", what, call.line, call.key, call.team)
			}
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s sent\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	teams, err := c.ListTeams(ctx)
	if err != nil || len(teams) != 1 || teams[0].TeamID != "t1" || teams[0].Quotas.RunningSandboxes != 5 {
		t.Fatalf("ListTeams = %+v, %v", teams, err)
	}
	expect("ListTeams", "GET /teams")

	tm, err := c.CreateTeam(ctx, "two", &wire.Quotas{VCPUs: 8, MaxTimeoutSeconds: 3600})
	if err != nil || tm.TeamID != "t2" || tm.Quotas.VCPUs != 8 {
		t.Fatalf("CreateTeam = %+v, %v", tm, err)
	}
	if _, err := c.CreateTeam(ctx, "bare", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateTeam(ctx, "anonymous", nil); err == nil || !strings.Contains(err.Error(), "no teamID") {
		t.Errorf("an answer without a team ID: %v", err)
	}
	expect("CreateTeam",
		`POST /teams {"name":"two","quotas":{"runningSandboxes":0,"vcpus":8,"memoryMB":0,"maxTimeoutSeconds":3600,"diskBytes":0,"builds":0,"requestsPerSecond":0}}`,
		`POST /teams {"name":"bare"}`, `POST /teams {"name":"anonymous"}`)

	if tm, err := c.GetTeam(ctx, "t1"); err != nil || tm.Name != "one" {
		t.Fatalf("GetTeam = %+v, %v", tm, err)
	}
	if _, err := c.GetTeam(ctx, "a/b"); !IsNotFound(err) {
		t.Errorf("GetTeam of an unknown team: %v", err)
	}
	expect("GetTeam", "GET /teams/t1", "GET /teams/a%2Fb")

	if tm, err := c.SetQuotas(ctx, "t1", wire.Quotas{DiskBytes: 1 << 30, RequestsPerSecond: 2.5}); err != nil || tm.Quotas.DiskBytes != 1<<30 || tm.Quotas.RunningSandboxes != 0 {
		t.Fatalf("SetQuotas = %+v, %v", tm, err)
	}
	expect("SetQuotas", `PUT /teams/t1/quotas {"runningSandboxes":0,"vcpus":0,"memoryMB":0,"maxTimeoutSeconds":0,"diskBytes":1073741824,"builds":0,"requestsPerSecond":2.5}`)

	if err := c.DeleteTeam(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTeam(ctx, "t9"); err == nil || !strings.Contains(err.Error(), "403: DELETE /teams/{teamID} needs the admin key") {
		t.Errorf("DeleteTeam refused: %v", err)
	}
	expect("DeleteTeam", "DELETE /teams/t1", "DELETE /teams/t9")

	keys, err := c.ListKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Mask.MaskedValueSuffix != "yz" {
		t.Fatalf("ListKeys = %+v, %v", keys, err)
	}
	k, err := c.CreateKey(ctx, "ci")
	if err != nil || k.Key != "e2b_secret" || k.Name != "ci" {
		t.Fatalf("CreateKey = %+v, %v", k, err)
	}
	if _, err := c.CreateKey(ctx, "nokey"); err == nil || !strings.Contains(err.Error(), "POST /api-keys: answer has no key") {
		t.Errorf("an answer without the key: %v", err)
	}
	if k, err := c.AdminCreateKey(ctx, "t1", "ops"); err != nil || k.Key != "e2b_secret" {
		t.Fatalf("AdminCreateKey = %+v, %v", k, err)
	}
	if err := c.RenameKey(ctx, "k1", "deploy"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteKey(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.AdminDeleteKey(ctx, "t1", "k1"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteKey(ctx, "k9"); !IsNotFound(err) {
		t.Errorf("DeleteKey of an unknown key: %v", err)
	}
	expect("keys", "GET /api-keys", `POST /api-keys {"name":"ci"}`, `POST /api-keys {"name":"nokey"}`,
		`POST /admin/teams/t1/api-keys {"name":"ops"}`, `PATCH /api-keys/k1 {"name":"deploy"}`,
		"DELETE /api-keys/k1", "DELETE /admin/teams/t1/api-keys/k1", "DELETE /api-keys/k9")

	res, err := c.AdminKillSandboxes(ctx, "t1")
	if err != nil || res.KilledCount != 3 || res.FailedCount != 1 {
		t.Fatalf("AdminKillSandboxes = %+v, %v", res, err)
	}
	counts, err := c.RunningCounts(ctx)
	if err != nil || len(counts) != 2 || counts["t2"] != 7 {
		t.Fatalf("RunningCounts = %v, %v", counts, err)
	}
	expect("admin", "POST /admin/teams/t1/sandboxes/kill", "GET /admin/sandboxes/running-counts")
}

// TestForTeam: the copy sends X-Team-ID on every request, the original
// never; a second ForTeam replaces the team rather than stacking, and the
// client's own transport and timeout still carry the requests.
func TestForTeam(t *testing.T) {
	f := &teamServer{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	var viaOwn int
	c := New(srv.URL, "e2b_admin")
	c.HTTP.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		viaOwn++
		return http.DefaultTransport.RoundTrip(r)
	})
	if c.ForTeam("") != c {
		t.Error("ForTeam(\"\") is not the client itself")
	}
	other := c.ForTeam("t1")
	if other == c || other.HTTP == c.HTTP || other.HTTP.Timeout != c.HTTP.Timeout || other.APIKey != c.APIKey {
		t.Fatalf("ForTeam copy: %+v of %+v", other, c)
	}
	if _, err := other.ListKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if err := other.RenameKey(ctx, "k1", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListKeys(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ForTeam("t2").ListKeys(ctx); err != nil {
		t.Fatal(err)
	}
	var teams []string
	for _, call := range f.take() {
		teams = append(teams, call.team)
	}
	if strings.Join(teams, ",") != "t1,t1,,t2" {
		t.Errorf("X-Team-ID sent: %q", teams)
	}
	if viaOwn != 4 {
		t.Errorf("%d of 4 requests went through the client's own transport", viaOwn)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
