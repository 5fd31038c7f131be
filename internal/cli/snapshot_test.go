package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// request is what the fake server was sent.
type request struct {
	Method, Path, Query, Body string
}

func (r request) String() string {
	s := r.Method + " " + r.Path
	if r.Query != "" {
		s += "?" + r.Query
	}
	if r.Body != "" {
		s += " " + r.Body
	}
	return s
}

// snapServer plays the snapshot, pause, connect, rollback and clone routes
// for sandbox "run" (running) and "zzz" (paused), and snapshots snap-1 to
// snap-3 of which snap-3 was taken by another sandbox.
type snapServer struct {
	mu   sync.Mutex
	reqs []request
}

func (s *snapServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, request{r.Method, r.URL.Path, r.URL.RawQuery, strings.TrimSpace(string(body))})
	s.mu.Unlock()
	fail := func(code int, format string, args ...any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(wire.Error{Code: code, Message: fmt.Sprintf(format, args...)})
	}
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	created := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	snaps := []wire.SnapshotInfo{
		{SnapshotID: "snap-3", Names: []string{}, SandboxID: "other", CreatedAt: ptr(created.Add(2 * time.Hour)), SizeBytes: 512},
		{SnapshotID: "snap-2", Names: []string{"before-pip", "v2"}, SandboxID: "run", CreatedAt: ptr(created.Add(time.Hour)), SizeBytes: 5 << 30},
		{SnapshotID: "snap-1", Names: []string{"clean"}, SandboxID: "run", CreatedAt: ptr(created), SizeBytes: 4*1024*1024 + 512*1024},
	}
	sandboxes := map[string]string{"run": "running", "zzz": "paused"}

	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if r.Method == "GET" && r.URL.Path == "/snapshots" {
		// Two items per page, whatever limit says, so the CLI must follow
		// the cursor to see all of them.
		q := r.URL.Query()
		var match []wire.SnapshotInfo
		for _, sn := range snaps {
			if sb := q.Get("sandboxID"); sb != "" && sn.SandboxID != sb {
				continue
			}
			if n := q.Get("name"); n != "" && sn.SnapshotID != n && !slices.Contains(sn.Names, n) {
				continue
			}
			match = append(match, sn)
		}
		start := 0
		if tok := q.Get("nextToken"); tok != "" {
			fmt.Sscanf(tok, "at-%d", &start)
		}
		end := min(start+2, len(match))
		if end < len(match) {
			w.Header().Set("X-Next-Token", fmt.Sprintf("at-%d", end))
		}
		reply(200, match[start:end])
		return
	}
	if r.Method == "DELETE" && len(parts) == 2 && parts[0] == "templates" {
		for _, sn := range snaps {
			if sn.SnapshotID == parts[1] {
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		fail(404, "template %q not found", parts[1])
		return
	}
	if r.Method != "POST" || len(parts) != 3 || parts[0] != "sandboxes" {
		fail(404, "no route %s %s", r.Method, r.URL.Path)
		return
	}
	id, op := parts[1], parts[2]
	state, ok := sandboxes[id]
	if !ok {
		fail(404, "sandbox %q not found", id)
		return
	}
	switch op {
	case "snapshots":
		var in wire.SnapshotRequest
		json.Unmarshal(body, &in)
		if state != "running" {
			fail(409, "sandbox %q is %s", id, state)
			return
		}
		names := []string{}
		if in.Name != "" {
			names = append(names, in.Name)
		}
		reply(201, wire.SnapshotInfo{SnapshotID: "snap-new", Names: names, SandboxID: id, CreatedAt: ptr(created), SizeBytes: 1000})
	case "rollback":
		var in wire.RollbackRequest
		json.Unmarshal(body, &in)
		if in.SnapshotID == "snap-3" {
			fail(403, "snapshot %q was not taken by sandbox %q", in.SnapshotID, id)
			return
		}
		reply(200, wire.RollbackResult{SandboxID: id, SnapshotID: in.SnapshotID, OperationID: "op-1", Status: "done"})
	case "pause":
		if state == "paused" {
			fail(409, "sandbox %q is already paused", id)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case "connect":
		code := 200
		if state == "paused" {
			code = 201
		}
		reply(code, wire.Sandbox{SandboxID: id, TemplateID: "base", ClientID: "c", EnvdVersion: "0.5.0"})
	case "clone":
		var in wire.CloneRequest
		json.Unmarshal(body, &in)
		if state != "running" {
			fail(409, "sandbox %q is %s", id, state)
			return
		}
		var out []wire.ForkResult
		for i := 0; i < *in.Count; i++ {
			if i == 2 {
				out = append(out, wire.ForkResult{Error: &wire.Error{Code: 507, Message: "no space left\non device"}})
				continue
			}
			out = append(out, wire.ForkResult{Sandbox: &wire.Sandbox{SandboxID: fmt.Sprintf("child%d", i), TemplateID: "snap-x"}})
		}
		reply(201, out)
	default:
		fail(404, "no route %s %s", r.Method, r.URL.Path)
	}
}

func ptr[T any](v T) *T { return &v }

func snapSetup(t *testing.T) *snapServer {
	s := &snapServer{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")
	return s
}

// sent returns the requests made since the last call, as strings.
func (s *snapServer) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, r := range s.reqs {
		out = append(out, r.String())
	}
	s.reqs = nil
	return out
}

func wantSent(t *testing.T, s *snapServer, want ...string) {
	t.Helper()
	got := s.sent()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSnapshotCreate(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "snapshot", "create", "--sandbox-id", "run", "--name", "before-pip")
	if err != nil {
		t.Fatal(err)
	}
	if out != "snapshot_id: snap-new\nnames: before-pip\n" {
		t.Errorf("output %q", out)
	}
	wantSent(t, s, `POST /sandboxes/run/snapshots {"name":"before-pip"}`)

	out, _, err = run(t, "snapshot", "create", "--sandbox-id", "run", "--json")
	var info wire.SnapshotInfo
	if err != nil || json.Unmarshal([]byte(out), &info) != nil || info.SnapshotID != "snap-new" || len(info.Names) != 0 || info.SandboxID != "run" {
		t.Errorf("--json: %q %v", out, err)
	}
	wantSent(t, s, `POST /sandboxes/run/snapshots {}`)

	_, _, err = run(t, "snapshot", "create", "--sandbox-id", "zzz")
	if err == nil || err.Error() != `server answered 409: sandbox "zzz" is paused` {
		t.Errorf("paused sandbox: %v", err)
	}
	_, _, err = run(t, "snapshot", "create", "--sandbox-id", "nope")
	if err == nil || !strings.Contains(err.Error(), `sandbox "nope" not found`) {
		t.Errorf("unknown sandbox: %v", err)
	}
	s.sent()
	if _, _, err := run(t, "snapshot", "create"); err == nil || !strings.Contains(err.Error(), "sandbox-id") {
		t.Errorf("without --sandbox-id: %v", err)
	}
	wantSent(t, s)
}

func TestSnapshotListFollowsPages(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "snapshot", "list")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"SNAPSHOT_ID NAMES SANDBOX_ID SIZE CREATED_AT",
		"snap-3 - other 512 B 2026-03-04T07:06:07Z",
		"snap-2 before-pip,v2 run 5.0 GiB 2026-03-04T06:06:07Z",
		"snap-1 clean run 4.5 MiB 2026-03-04T05:06:07Z",
	}
	if got := fieldsOfLines(strings.TrimSpace(out)); got != strings.Join(want, "\n") {
		t.Errorf("output:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	wantSent(t, s, "GET /snapshots?limit=100", "GET /snapshots?limit=100&nextToken=at-2")

	out, _, err = run(t, "snapshot", "list", "--sandbox-id", "run", "--name", "clean", "--json")
	var got []wire.SnapshotInfo
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || len(got) != 1 || got[0].SnapshotID != "snap-1" || got[0].SizeBytes != 4*1024*1024+512*1024 {
		t.Errorf("filtered --json: %q %v", out, err)
	}
	wantSent(t, s, "GET /snapshots?limit=100&name=clean&sandboxID=run")

	out, _, err = run(t, "snapshot", "list", "--sandbox-id", "nobody", "--json")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("empty --json: %q %v", out, err)
	}
	out, _, err = run(t, "snapshot", "list", "--sandbox-id", "nobody")
	if err != nil || fieldsOf(strings.TrimSpace(out)) != "SNAPSHOT_ID NAMES SANDBOX_ID SIZE CREATED_AT" {
		t.Errorf("empty table: %q %v", out, err)
	}
}

func TestSnapshotDelete(t *testing.T) {
	s := snapSetup(t)
	out, errOut, err := run(t, "snapshot", "delete", "snap-1", "snap-9", "snap-2")
	if err == nil || err.Error() != "1 snapshot not deleted" {
		t.Errorf("error %v", err)
	}
	if out != "snap-1\nsnap-2\n" || errOut != "snap-9: server answered 404: template \"snap-9\" not found\n"+"Error: 1 snapshot not deleted\n" {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	wantSent(t, s, "DELETE /templates/snap-1", "DELETE /templates/snap-9", "DELETE /templates/snap-2")
	if _, _, err := run(t, "snapshot", "delete"); err == nil {
		t.Error("delete without IDs succeeded")
	}
	wantSent(t, s)
}

func TestRollback(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "rollback", "--sandbox-id", "run", "--snapshot-id", "snap-1")
	if err != nil || out != "sandbox run rolled back to snap-1 (status done, operation op-1)\n" {
		t.Errorf("rollback: %q %v", out, err)
	}
	wantSent(t, s, `POST /sandboxes/run/rollback {"snapshotID":"snap-1"}`)

	out, _, err = run(t, "rollback", "--sandbox-id", "run", "--snapshot-id", "clean", "--json")
	var res wire.RollbackResult
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.SnapshotID != "clean" || res.OperationID != "op-1" {
		t.Errorf("--json: %q %v", out, err)
	}
	s.sent()

	_, _, err = run(t, "rollback", "--sandbox-id", "run", "--snapshot-id", "snap-3")
	if err == nil || err.Error() != `server answered 403: snapshot "snap-3" was not taken by sandbox "run"` {
		t.Errorf("foreign snapshot: %v", err)
	}
	_, _, err = run(t, "rollback", "--sandbox-id", "nope", "--snapshot-id", "snap-1")
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown sandbox: %v", err)
	}
	s.sent()
	if _, _, err := run(t, "rollback", "--sandbox-id", "run"); err == nil || !strings.Contains(err.Error(), "snapshot-id") {
		t.Errorf("without --snapshot-id: %v", err)
	}
	wantSent(t, s)
}

func TestPause(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "pause", "run")
	if err != nil || out != "run\n" {
		t.Errorf("pause: %q %v", out, err)
	}
	wantSent(t, s, "POST /sandboxes/run/pause")

	if _, _, err := run(t, "pause", "--no-memory", "run"); err != nil {
		t.Error(err)
	}
	wantSent(t, s, `POST /sandboxes/run/pause {"memory":false}`)

	out, errOut, err := run(t, "pause", "zzz", "nope", "run")
	if err == nil || err.Error() != "2 sandboxes not paused" {
		t.Errorf("error %v", err)
	}
	if out != "run\n" || !strings.Contains(errOut, `zzz: server answered 409: sandbox "zzz" is already paused`) || !strings.Contains(errOut, `nope: server answered 404: sandbox "nope" not found`) {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	wantSent(t, s, "POST /sandboxes/zzz/pause", "POST /sandboxes/nope/pause", "POST /sandboxes/run/pause")
}

func TestResume(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "resume", "zzz")
	if err != nil || out != "zzz resumed\n" {
		t.Errorf("paused sandbox: %q %v", out, err)
	}
	wantSent(t, s, `POST /sandboxes/zzz/connect {"timeout":300}`)

	out, _, err = run(t, "resume", "run", "--timeout", "60")
	if err != nil || out != "run was already running\n" {
		t.Errorf("running sandbox: %q %v", out, err)
	}
	wantSent(t, s, `POST /sandboxes/run/connect {"timeout":60}`)

	if _, _, err := run(t, "resume", "nope"); err == nil || err.Error() != `server answered 404: sandbox "nope" not found` {
		t.Errorf("unknown sandbox: %v", err)
	}
	s.sent()
	if _, _, err := run(t, "resume", "run", "--timeout", "-5"); err == nil || !strings.Contains(err.Error(), "--timeout -5") {
		t.Errorf("negative timeout: %v", err)
	}
	if _, _, err := run(t, "resume"); err == nil {
		t.Error("resume without an ID succeeded")
	}
	wantSent(t, s)
}

func TestClone(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "clone", "--sandbox-id", "run", "--count", "2")
	if err != nil {
		t.Fatal(err)
	}
	if got := fieldsOfLines(strings.TrimSpace(out)); got != "SANDBOX_ID ERROR\nchild0 -\nchild1 -" {
		t.Errorf("output:\n%s", got)
	}
	wantSent(t, s, `POST /sandboxes/run/clone {"count":2}`)

	out, _, err = run(t, "clone", "--sandbox-id", "run", "--count", "3", "--concurrency", "2", "--timeout", "90")
	if err == nil || err.Error() != "1 of 3 clones failed" {
		t.Errorf("partial failure: %v", err)
	}
	if got := fieldsOfLines(strings.TrimSpace(out)); got != "SANDBOX_ID ERROR\nchild0 -\nchild1 -\n- 507: no space left on device" {
		t.Errorf("output:\n%s", got)
	}
	wantSent(t, s, `POST /sandboxes/run/clone {"count":3,"concurrency":2,"timeout":90}`)

	out, _, err = run(t, "clone", "--sandbox-id", "run", "--count", "3", "--json")
	var res []wire.ForkResult
	if err == nil || json.Unmarshal([]byte(out), &res) != nil || len(res) != 3 || res[0].Sandbox.SandboxID != "child0" || res[2].Error.Code != 507 {
		t.Errorf("--json: %q %v", out, err)
	}
	s.sent()

	if _, _, err := run(t, "clone", "--sandbox-id", "zzz", "--count", "1"); err == nil || err.Error() != `server answered 409: sandbox "zzz" is paused` {
		t.Errorf("paused parent: %v", err)
	}
	s.sent()
	for _, args := range [][]string{
		{"clone", "--sandbox-id", "run"},
		{"clone", "--count", "2"},
		{"clone", "--sandbox-id", "run", "--count", "0"},
		{"clone", "--sandbox-id", "run", "--count", "2", "--concurrency", "-1"},
		{"clone", "--sandbox-id", "run", "--count", "two"},
	} {
		if _, _, err := run(t, args...); err == nil {
			t.Errorf("%v succeeded", args)
		}
	}
	wantSent(t, s)
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "-", 1: "1 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB",
		1024*1024 - 1: "1.0 MiB", 3 << 30: "3.0 GiB", 1 << 62: "4.0 EiB",
	} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
