package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// fakeTeams puts teams and their keys in front of fakeAPI: a team key's
// create waits quotaDelay (its quota check), and its sandboxes are the
// team's, which keep the team from being deleted.
type fakeTeams struct {
	f          *fakeAPI
	api        http.Handler
	quotaDelay time.Duration
	// failTeamCreates makes every create with a team key answer 429.
	failTeamCreates bool
	// adminQuotas are the quotas of the admin key's team.
	adminQuotas wire.Quotas

	mu      sync.Mutex
	teams   map[string]wire.Quotas
	keys    map[string]string // key → team
	owner   map[string]string // sandbox → team
	deleted []string
	// inFlight and maxFlight count the team creates in flight.
	inFlight, maxFlight int
}

func newFakeTeams(t *testing.T) (*fakeTeams, *httptest.Server) {
	f, inner := newFakeAPI(t)
	ft := &fakeTeams{f: f, api: inner.Config.Handler, teams: map[string]wire.Quotas{}, keys: map[string]string{}, owner: map[string]string{}}
	srv := httptest.NewServer(ft)
	t.Cleanup(srv.Close)
	return ft, srv
}

func (ft *fakeTeams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("X-API-Key")
	ft.mu.Lock()
	team, isTeam := ft.keys[key]
	ft.mu.Unlock()
	admin := key == fakeKey
	switch {
	case r.Method == "GET" && r.URL.Path == "/teams" && admin:
		out := []wire.Team{{TeamID: "first", Name: "default", IsDefault: true, Quotas: ft.adminQuotas}}
		ft.mu.Lock()
		for id, q := range ft.teams {
			out = append(out, wire.Team{TeamID: id, Quotas: q})
		}
		ft.mu.Unlock()
		json.NewEncoder(w).Encode(out)
	case r.Method == "POST" && r.URL.Path == "/teams" && admin:
		var body wire.NewTeam
		json.NewDecoder(r.Body).Decode(&body)
		if body.Quotas == nil || body.Quotas.RunningSandboxes == 0 {
			fail(w, 400, "the benchmark's team has no quotas")
			return
		}
		ft.mu.Lock()
		id := fmt.Sprintf("team-%d", len(ft.teams)+1)
		ft.teams[id] = *body.Quotas
		ft.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(wire.Team{TeamID: id, Name: body.Name, Quotas: *body.Quotas})
	case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/admin/teams/") && strings.HasSuffix(r.URL.Path, "/api-keys") && admin:
		id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/admin/teams/"), "/api-keys")
		ft.mu.Lock()
		k := "e2b_key_of_" + id
		ft.keys[k] = id
		ft.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(wire.CreatedTeamAPIKey{ID: "k-" + id, Key: k, Name: "cube-bench"})
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/teams/") && admin:
		id := strings.TrimPrefix(r.URL.Path, "/teams/")
		ft.mu.Lock()
		defer ft.mu.Unlock()
		ft.f.mu.Lock()
		defer ft.f.mu.Unlock()
		for sb, t := range ft.owner {
			if t == id && ft.f.live[sb] {
				fail(w, http.StatusConflict, "team %s still owns sandbox(es)", id)
				return
			}
		}
		delete(ft.teams, id)
		for k, t := range ft.keys {
			if t == id {
				delete(ft.keys, k)
			}
		}
		ft.deleted = append(ft.deleted, id)
		w.WriteHeader(http.StatusNoContent)
	case isTeam:
		if r.Method == "POST" && r.URL.Path == "/sandboxes" {
			if ft.failTeamCreates {
				fail(w, http.StatusTooManyRequests, "team quota runningSandboxes reached")
				return
			}
			ft.mu.Lock()
			ft.inFlight++
			ft.maxFlight = max(ft.maxFlight, ft.inFlight)
			ft.mu.Unlock()
			time.Sleep(ft.quotaDelay)
			ft.mu.Lock()
			ft.inFlight--
			ft.mu.Unlock()
			rec := httptest.NewRecorder()
			r.Header.Set("X-API-Key", fakeKey)
			ft.api.ServeHTTP(rec, r)
			var sb wire.Sandbox
			json.Unmarshal(rec.Body.Bytes(), &sb)
			ft.mu.Lock()
			ft.owner[sb.SandboxID] = team
			ft.mu.Unlock()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		r.Header.Set("X-API-Key", fakeKey)
		ft.api.ServeHTTP(w, r)
	default:
		ft.api.ServeHTTP(w, r)
	}
}

// The team's quota check (here a 5 ms wait on its creates) shows as the
// added p50 of creates and not of reads; the run leaves no sandbox, team
// or key behind, and reports the creates of two teams at once.
func TestTeamsMeasuresTheQuotaCheck(t *testing.T) {
	ft, srv := newFakeTeams(t)
	ft.quotaDelay = 5 * time.Millisecond
	admin := fakeClient(t, srv, fakeKey)
	cfg := TeamsConfig{Template: "base", Rounds: 4, Warmup: 1, Gets: 3, Background: 2, Concurrency: 2, Total: 3, Passes: 2}
	steps := 0
	rep, err := RunTeams(context.Background(), admin, cfg, func(done, total int) {
		steps = done
		if total != 1+4+3*2 {
			t.Errorf("progress total %d", total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	live, _, creates, _, _ := ft.f.counts()
	// 2 background + 5 rounds × 2 keys + 2 passes × (3 + 3+3 + 6).
	if steps != 11 || live != 0 || creates != 2+10+2*15 {
		t.Fatalf("steps %d, live %d, creates %d", steps, live, creates)
	}
	if len(ft.teams) != 0 || len(ft.keys) != 0 || len(ft.deleted) != 2 {
		t.Fatalf("teams left %v, keys left %v, deleted %v", ft.teams, ft.keys, ft.deleted)
	}
	if len(rep.Rows) != 6 || rep.row("create", pathTeam).Count != 4 || rep.row("get", pathAdmin).Count != 12 || rep.Background != 2 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	if rep.AddedCreateP50 < 4 || rep.AddedGetP50 > 2 {
		t.Fatalf("the 5 ms check added %.2f ms to creates, %.2f ms to reads", rep.AddedCreateP50, rep.AddedGetP50)
	}
	want := map[string]int{"alone/A": 6, "together/A": 6, "together/B": 6, "alone-2xc/A": 12}
	if len(rep.AtOnce) != len(want) {
		t.Fatalf("at once: %+v", rep.AtOnce)
	}
	for _, r := range rep.AtOnce {
		if r.Create.Count != want[r.Case+"/"+r.Team] || r.Failed != 0 {
			t.Errorf("%s/%s: %d creates, %d failed", r.Case, r.Team, r.Create.Count, r.Failed)
		}
	}
	if ft.maxFlight != 4 {
		t.Errorf("at most %d team creates were in flight at once; two teams at c=2 each, or one at 2c, make 4", ft.maxFlight)
	}
	var out strings.Builder
	WriteTeamsTable(&out, rep)
	if rep.TogetherMinusAloneCI == [2]float64{} || rep.AddedCreateCI == [2]float64{} {
		t.Errorf("no confidence intervals: %+v", rep)
	}
	for _, want := range []string{"create   admin", "create   team", "get      team", "added at p50 (team - admin)", "two teams at once, team B", "two teams at once minus one team"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// A run that fails half-way still removes its sandboxes and its team.
func TestTeamsCleansUpAfterAFailure(t *testing.T) {
	ft, srv := newFakeTeams(t)
	ft.failTeamCreates = true
	admin := fakeClient(t, srv, fakeKey)
	_, err := RunTeams(context.Background(), admin, TeamsConfig{Template: "base", Rounds: 2, Gets: 1, Background: 3, Concurrency: 2, Total: 2, Passes: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "create with the team key") || !strings.Contains(err.Error(), "429") {
		t.Fatalf("err = %v", err)
	}
	if live, _, _, _, _ := ft.f.counts(); live != 0 || len(ft.teams) != 0 || len(ft.deleted) != 1 {
		t.Fatalf("left %d sandboxes, teams %v", live, ft.teams)
	}
}

// An admin key whose own team has quotas would have its creates checked
// too: the run refuses it before it makes anything.
func TestTeamsNeedsAnUncheckedAdminTeam(t *testing.T) {
	ft, srv := newFakeTeams(t)
	ft.adminQuotas = wire.Quotas{RunningSandboxes: 5}
	_, err := RunTeams(context.Background(), fakeClient(t, srv, fakeKey), TeamsConfig{Template: "base", Rounds: 1, Gets: 1, Background: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "has quotas on running sandboxes") {
		t.Fatalf("err = %v", err)
	}
	if _, _, creates, _, _ := ft.f.counts(); creates != 0 || len(ft.deleted) != 0 {
		t.Fatalf("made %d sandboxes, teams %v", creates, ft.deleted)
	}
}

func TestTeamsConfigChecks(t *testing.T) {
	for _, c := range []TeamsConfig{{Rounds: 1, Gets: 1}, {Template: "base", Gets: 1, Rounds: 0}, {Template: "base", Rounds: 1}, {Template: "base", Rounds: 1, Gets: 1, Background: -1}} {
		if c.validate() == nil {
			t.Errorf("%+v passed", c)
		}
	}
}

const teamsGoTxt = `# go test -run x -bench . -benchtime 2000x ./internal/teams ./internal/quota
goos: linux
goarch: amd64
pkg: cube/internal/teams
cpu: AMD EPYC
BenchmarkAuthenticateCached-2     	    2000	       261.9 ns/op	     176 B/op	       3 allocs/op
BenchmarkAuthenticateUncached-2   	    2000	     22040 ns/op	    4016 B/op	      69 allocs/op
PASS
ok  	cube/internal/teams	1.818s
pkg: cube/internal/quota
BenchmarkStart/records=100-2         	    2000	    500000 ns/op	  168755 B/op	    2198 allocs/op
BenchmarkStart/records=1000-2        	    2000	   5000000 ns/op	 1678120 B/op	   21776 allocs/op
BenchmarkStartParallel/eight-teams-2 	    2000	   5000000 ns/op	 1678502 B/op	   21781 allocs/op
`

// The page gains the teams section from teams.json and teams-go.txt, with
// its targets' verdicts.
func TestReportTeamsSection(t *testing.T) {
	dir := t.TempDir()
	rep := TeamsReport{Command: "teams", Args: TeamsConfig{Template: "base", Rounds: 30, Warmup: 3, Gets: 20, Background: 20, Concurrency: 4, Total: 20, Passes: 2}.args(),
		Config: TeamsConfig{Rounds: 30, Warmup: 3, Gets: 20, Passes: 2}, Background: 20, AddedCreateP50: 0.4, AddedGetP50: 0.25,
		AddedCreateCI: [2]float64{-3.1, 4.2}, AddedGetCI: [2]float64{0.22, 0.28},
		Rows: []TeamsRow{{"create", pathAdmin, Stats{Count: 30, P50: 40}}, {"create", pathTeam, Stats{Count: 30, P50: 40.4}},
			{"get", pathAdmin, Stats{Count: 600, P50: 0.5}}, {"get", pathTeam, Stats{Count: 600, P50: 0.75}}},
		AtOnce: []AtOnceRow{{Case: caseAlone, Team: "A", Teams: 1, Concurrency: 4, Create: Stats{Count: 40, P50: 200}},
			{Case: caseTogether, Team: "A", Teams: 2, Concurrency: 4, Create: Stats{Count: 40, P50: 390}},
			{Case: caseTogether, Team: "B", Teams: 2, Concurrency: 4, Create: Stats{Count: 40, P50: 410}},
			{Case: caseAloneX2, Team: "A", Teams: 1, Concurrency: 8, Create: Stats{Count: 80, P50: 400}}},
		TogetherMinusAlone: 5, TogetherMinusAloneCI: [2]float64{-20, 30}}
	b, _ := json.Marshal(rep)
	os.WriteFile(filepath.Join(dir, "teams.json"), b, 0o644)
	os.WriteFile(filepath.Join(dir, "teams-go.txt"), []byte(teamsGoTxt), 0o644)
	var md strings.Builder
	if err := WriteReport(&md, ReportOptions{Dir: dir, ChartPath: "bench", Machine: Machine{Cores: 2}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## 10. Teams: what authorisation and quota checks cost",
		"./bin/cube-bench teams -t base --rounds 30 --warmup 3 --gets 20 --background 20 -c 4 -n 20 --passes 2",
		"| create | team (quotas set) | 30 | 40.40 |",
		"add ≤ 1 ms to a create (p50) | +0.40 (-3.10 … +4.20) | ❔ not resolved: the 95 % CI (-3.10 … +4.20 ms) spans the 1 ms target; this host's noise is larger than the target |",
		"≤ 0.2 ms to a read (p50) | +0.250 (+0.220 … +0.280) | ❌ 0.25 ms > 0.20 (over by 0.05, 1.2×), and so is the whole 95 % CI |",
		"| +5.0 (-20.0 … +30.0) | ✅ not slower than one team with as many in flight",
		"with the 20 running records this run's store held; two teams at once ✅ no slower than one (+5.0 ms).",
		"**Verdict:** read ❌ +0.250 ms (target ≤ 0.2 ms); create ❔ not resolved by this run: +0.40 ms (target ≤ 1 ms); the Go benchmarks below put the check at ≈ 133.3 µs with the 20 running records",
		"| two teams at once, team B | 8 | 40 | 0 | 410.0 |",
		"# go test -run x -bench . -benchtime 2000x ./internal/teams ./internal/quota"[2:],
		"| `AuthenticateCached` | a key checked again within 500 ms",
		"| 262 ns | 3 |",
		"| `Start/records=1000` | the same, 1000 records | 2000 | 5.00 ms |",
		"5.0 µs more per record in the store",
		"from about 200 records on",
		"1.0× the throughput of one at a time with GOMAXPROCS 2",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md.String())
	}
	// Without the files, no section; with the step's error, the error.
	os.Remove(filepath.Join(dir, "teams.json"))
	os.Remove(filepath.Join(dir, "teams-go.txt"))
	md.Reset()
	WriteReport(&md, ReportOptions{Dir: dir, ChartPath: "bench", Now: time.Now()})
	if strings.Contains(md.String(), "Teams:") {
		t.Error("a section without results")
	}
	os.WriteFile(filepath.Join(dir, "teams.err"), []byte("teams: create team x: POST /teams: 404 Not Found\n"), 0o644)
	md.Reset()
	WriteReport(&md, ReportOptions{Dir: dir, ChartPath: "bench", Now: time.Now()})
	if !strings.Contains(md.String(), "**teams did not run:** teams: create team x") {
		t.Errorf("the failure is not shown:\n%s", md.String())
	}
}

// The bootstrap interval holds a clear shift and excludes 0; between two
// halves of one sample it includes 0.
func TestMedianDiffCI(t *testing.T) {
	var a, b []float64
	for i := range 40 {
		a = append(a, 10+float64(i%7))
		b = append(b, 20+float64(i%7))
	}
	if ci := medianDiffCI(b, a); ci[0] < 5 || ci[1] > 15 {
		t.Errorf("a shift of 10: CI %v", ci)
	}
	if ci := medianDiffCI(a[:20], a[20:]); ci[0] > 0 || ci[1] < 0 {
		t.Errorf("one sample's halves: CI %v", ci)
	}
	if ci := medianDiffCI(nil, a); ci != [2]float64{} {
		t.Errorf("no samples: CI %v", ci)
	}
}
