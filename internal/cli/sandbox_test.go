package cli

import (
	"bytes"
	"encoding/json"
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

// fakeServer answers the three sandbox verbs from a fixed set of sandboxes
// and records what it was asked.
type fakeServer struct {
	mu     sync.Mutex
	keys   []string
	killed []string
	query  []string
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, r.Header.Get("X-API-Key"))
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sbs := map[string]wire.ListedSandbox{
		"aaa": {SandboxID: "aaa", TemplateID: "tpl1", Alias: "base", State: "running", StartedAt: start, EndAt: start.Add(5 * time.Minute)},
		"bbb": {SandboxID: "bbb", TemplateID: "snap-x", State: "paused", StartedAt: start.Add(time.Hour), EndAt: start.Add(2 * time.Hour)},
	}
	notFound := func(id string) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(wire.Error{Code: 404, Message: "sandbox \"" + id + "\" not found"})
	}
	switch {
	case r.Method == "GET" && r.URL.Path == "/v2/sandboxes":
		f.query = append(f.query, r.URL.RawQuery)
		if r.URL.Query().Get("nextToken") == "" {
			w.Header().Set("X-Next-Token", "next")
			json.NewEncoder(w).Encode([]wire.ListedSandbox{sbs["bbb"]})
			return
		}
		json.NewEncoder(w).Encode([]wire.ListedSandbox{sbs["aaa"]})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/sandboxes/"):
		id := strings.TrimPrefix(r.URL.Path, "/sandboxes/")
		sb, ok := sbs[id]
		if !ok {
			notFound(id)
			return
		}
		json.NewEncoder(w).Encode(wire.SandboxDetail{SandboxID: sb.SandboxID, TemplateID: sb.TemplateID, State: sb.State, CPUCount: 2, MemoryMB: 512, StartedAt: sb.StartedAt, EndAt: sb.EndAt})
	case r.Method == "DELETE" && strings.HasPrefix(r.URL.Path, "/sandboxes/"):
		id := strings.TrimPrefix(r.URL.Path, "/sandboxes/")
		if _, ok := sbs[id]; !ok {
			notFound(id)
			return
		}
		f.killed = append(f.killed, id)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := Root()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	err = root.Execute()
	return out.String(), errb.String(), err
}

func setup(t *testing.T) *fakeServer {
	f := &fakeServer{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")
	return f
}

func TestList(t *testing.T) {
	f := setup(t)
	out, _, err := run(t, "list", "--state", "running,paused", "--metadata", "user=ann")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out)
	}
	if fieldsOf(lines[0]) != "ID TEMPLATE STATE STARTED ENDS" {
		t.Errorf("header %q", lines[0])
	}
	if fieldsOf(lines[1]) != "bbb snap-x paused 2026-01-02T04:04:05Z 2026-01-02T05:04:05Z" {
		t.Errorf("row 1 %q", lines[1])
	}
	if fieldsOf(lines[2]) != "aaa base running 2026-01-02T03:04:05Z 2026-01-02T03:09:05Z" {
		t.Errorf("row 2 %q", lines[2])
	}
	if f.keys[0] != "e2b_cli" || !strings.Contains(f.query[0], "state=running%2Cpaused") || !strings.Contains(f.query[0], "metadata=user%3Dann") {
		t.Errorf("asked with key %q query %q", f.keys[0], f.query[0])
	}
	if _, _, err := run(t, "list", "--state", "sleeping"); err == nil {
		t.Error("list --state sleeping succeeded")
	}
}

func fieldsOf(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestInfo(t *testing.T) {
	setup(t)
	out, _, err := run(t, "info", "--sandbox-id", "aaa")
	if err != nil {
		t.Fatal(err)
	}
	var d wire.SandboxDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.SandboxID != "aaa" || d.MemoryMB != 512 {
		t.Errorf("info output %s (%v)", out, err)
	}
	if _, _, err := run(t, "info", "--sandbox-id", "zzz"); err == nil || !strings.Contains(err.Error(), `"zzz" not found`) {
		t.Errorf("info unknown: %v", err)
	}
	if _, _, err := run(t, "info"); err == nil {
		t.Error("info without --sandbox-id succeeded")
	}
}

func TestRm(t *testing.T) {
	f := setup(t)
	out, errOut, err := run(t, "rm", "aaa", "zzz", "bbb")
	if err == nil || !strings.Contains(err.Error(), "1 sandbox not removed") {
		t.Errorf("rm error %v", err)
	}
	if out != "aaa\nbbb\n" || !strings.Contains(errOut, `zzz: server answered 404: sandbox "zzz" not found`) {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
	if strings.Join(f.killed, ",") != "aaa,bbb" {
		t.Errorf("killed %v", f.killed)
	}
}

func TestKeyFromDataDir(t *testing.T) {
	f := setup(t)
	t.Setenv("CUBE_API_KEY", "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api-key"), []byte("e2b_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, "rm", "--data-dir", dir, "aaa"); err != nil {
		t.Fatal(err)
	}
	if f.keys[len(f.keys)-1] != "e2b_file" {
		t.Errorf("key %q, want the data dir's", f.keys[len(f.keys)-1])
	}
	if _, _, err := run(t, "rm", "--data-dir", t.TempDir(), "aaa"); err == nil || !strings.Contains(err.Error(), "api-key") {
		t.Errorf("missing key file: %v", err)
	}
}
