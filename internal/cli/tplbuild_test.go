package cli

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
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

// stepServer plays the step build routes for template tpl1, build b1. Its
// status answers hand out one log entry a poll, then the final status.
type stepServer struct {
	mu        sync.Mutex
	base      string
	requested []wire.TemplateBuildRequestV3
	files     map[string][]byte
	started   []wire.TemplateBuildStartV2
	logs      []wire.BuildLogEntry
	reason    *wire.BuildStatusReason
	polls     int
	badPut    string            // why an upload was refused, if one was
	verify    map[string]string // ?verify= of each link asked for, by hash
}

func (s *stepServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(v)
	}
	const files = "/templates/tpl1/files/"
	switch {
	case r.Method == "POST" && r.URL.Path == "/v3/templates":
		var req wire.TemplateBuildRequestV3
		json.NewDecoder(r.Body).Decode(&req)
		s.requested = append(s.requested, req)
		reply(202, wire.TemplateRequestResponseV3{TemplateID: "tpl1", BuildID: "b1", Names: []string{"app"}, Aliases: []string{"app"}, Tags: []string{}})
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, files):
		hash := strings.TrimPrefix(r.URL.Path, files)
		s.verify[hash] = r.URL.Query().Get("verify")
		if _, ok := s.files[hash]; ok {
			reply(201, wire.TemplateBuildFileUpload{Present: true})
			return
		}
		reply(201, wire.TemplateBuildFileUpload{URL: s.base + "/upload/" + hash + "?signature=x", Headers: map[string]string{"X-Link": "1"}})
	case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/upload/"):
		if r.Header.Get("X-API-Key") != "" || r.Header.Get("X-Link") != "1" || r.URL.Query().Get("signature") != "x" {
			s.badPut = "the upload carried the API key or lacked the link's header or query"
			reply(403, wire.Error{Code: 403, Message: s.badPut})
			return
		}
		body, _ := io.ReadAll(r.Body)
		s.files[strings.TrimPrefix(r.URL.Path, "/upload/")] = body
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "POST" && r.URL.Path == "/v2/templates/tpl1/builds/b1":
		var spec wire.TemplateBuildStartV2
		json.NewDecoder(r.Body).Decode(&spec)
		s.started = append(s.started, spec)
		w.WriteHeader(http.StatusAccepted)
	case r.Method == "GET" && r.URL.Path == "/templates/tpl1/builds/b1/status":
		s.polls++
		var offset int
		json.Unmarshal([]byte(r.URL.Query().Get("logsOffset")), &offset)
		st := wire.BuildStatusInfo{TemplateID: "tpl1", BuildID: "b1", Status: "building", LogEntries: []wire.BuildLogEntry{}, Logs: []string{}}
		if offset < len(s.logs) {
			st.LogEntries = s.logs[offset : offset+1]
		}
		if offset >= len(s.logs)-1 {
			st.Status, st.Reason = "ready", s.reason
			if s.reason != nil {
				st.Status = "error"
			}
		}
		reply(200, st)
	case r.Method == "GET" && r.URL.Path == "/templates/tpl1/builds/b1/logs":
		reply(200, wire.TemplateBuildLogsResponse{Logs: s.logs})
	default:
		reply(404, wire.Error{Code: 404, Message: "no route " + r.Method + " " + r.URL.Path})
	}
}

func stepSetup(t *testing.T) *stepServer {
	s := &stepServer{files: map[string][]byte{}, verify: map[string]string{}, logs: []wire.BuildLogEntry{
		{Timestamp: "2026-03-04T05:06:07.000Z", Level: "info", Message: "FROM python:3.12", Step: "base"},
		{Timestamp: "2026-03-04T05:06:08.500Z", Level: "info", Message: "RUN pip install flask", Step: "1"},
	}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.base = srv.URL
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")
	old := watchInterval
	watchInterval = time.Millisecond
	t.Cleanup(func() { watchInterval = old })
	return s
}

// writeContext makes a build context: template.json, src/ with two files
// and cfg.txt, whose COPY step names a hash the server already has.
func writeContext(t *testing.T, s *stepServer, name string) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "src", "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "app.py"), []byte("print(1)\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "src", "sub", "data"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(dir, "cfg.txt"), []byte("cfg"), 0o644)
	present := strings.Repeat("ab", 32)
	s.files[present] = []byte("stored before")
	tf := map[string]any{
		"fromImage": "python:3.12",
		"steps": []map[string]any{
			{"type": "RUN", "args": []string{"pip install flask"}},
			{"type": "COPY", "args": []string{"src", "/app"}},
			{"type": "COPY", "args": []string{"cfg.txt", "/etc/cfg"}, "filesHash": present},
		},
		"startCmd": "python /app/app.py", "force": false,
	}
	if name != "" {
		tf["name"] = name
	}
	data, _ := json.Marshal(tf)
	path := filepath.Join(dir, "template.json")
	os.WriteFile(path, data, 0o644)
	return path
}

func tarNames(t *testing.T, archive []byte) map[string]int64 {
	t.Helper()
	names := map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("upload is not a tar: %v", err)
		}
		names[h.Name] = h.Mode
	}
}

func TestTplBuild(t *testing.T) {
	s := stepSetup(t)
	file := writeContext(t, s, "app:v1")
	out, _, err := run(t, "tpl", "build", "--file", file)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(s.requested) != 1 || s.requested[0].Name != "app:v1" || s.badPut != "" {
		t.Fatalf("requested %+v, upload refusal %q", s.requested, s.badPut)
	}
	spec := s.started[0]
	copyHash := spec.Steps[1].FilesHash
	archive, ok := s.files[copyHash]
	if !ok || len(s.files) != 2 {
		t.Fatalf("COPY src sent hash %q; server holds %d archives", copyHash, len(s.files))
	}
	if sum := sha256.Sum256(archive); hex.EncodeToString(sum[:]) != copyHash {
		t.Errorf("hash %s is not the SHA-256 of the uploaded tar", copyHash)
	}
	// The server checks an upload named by its tar's hash; the hash the
	// template file gave (the SDK's) it cannot check.
	if s.verify[copyHash] != "archive" || s.verify[strings.Repeat("ab", 32)] != "" {
		t.Errorf("links asked for with verify %v, want archive for the tar's hash only", s.verify)
	}
	names := tarNames(t, archive)
	if names["src/app.py"] != 0o755 || names["src/sub/data"] != 0o644 || len(names) != 4 {
		t.Errorf("tar entries %v, want src/, src/app.py (0755), src/sub/, src/sub/data", names)
	}
	if spec.Steps[2].FilesHash != strings.Repeat("ab", 32) || spec.FromImage != "python:3.12" || spec.StartCmd != "python /app/app.py" {
		t.Errorf("started %+v", spec)
	}
	for _, want := range []string{
		"template_id: tpl1\nbuild_id: b1\n", "uploaded src (", "cfg.txt already on the server",
		"2026-03-04T05:06:07.000Z info  FROM python:3.12\n", "2026-03-04T05:06:08.500Z info  RUN pip install flask\n",
		"template tpl1 READY (build b1)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestTplBuildFailsWithReason(t *testing.T) {
	s := stepSetup(t)
	s.reason = &wire.BuildStatusReason{Message: "exit status 1", Step: "1"}
	file := writeContext(t, s, "")
	_, _, err := run(t, "tpl", "build", "--file", file)
	if err == nil || !strings.Contains(err.Error(), "no \"name\"") {
		t.Errorf("nameless template: %v", err)
	}
	out, _, err := run(t, "tpl", "build", "--file", file, "--name", "other", "--context", filepath.Dir(file))
	if err == nil || !strings.Contains(err.Error(), "FAILED: step 1: exit status 1") {
		t.Errorf("failing build: %v", err)
	}
	if !strings.Contains(out, "RUN pip install flask") || s.requested[0].Name != "other" {
		t.Errorf("output %q, requested %+v", out, s.requested)
	}
}

func TestTplBuildNoWait(t *testing.T) {
	s := stepSetup(t)
	file := writeContext(t, s, "app")
	out, _, err := run(t, "tpl", "build", "--file", file, "--no-wait")
	if err != nil || s.polls != 0 || len(s.started) != 1 || !strings.HasPrefix(out, "template_id: tpl1\nbuild_id: b1\n") {
		t.Errorf("--no-wait: %v after %d polls, output %q", err, s.polls, out)
	}
	// A COPY source that is not there fails before the build starts.
	os.RemoveAll(filepath.Join(filepath.Dir(file), "src"))
	if _, _, err := run(t, "tpl", "build", "--file", file); err == nil || !strings.Contains(err.Error(), "step 2: COPY source") {
		t.Errorf("missing source: %v", err)
	}
	if _, _, err := run(t, "tpl", "build"); err == nil {
		t.Error("build without --file succeeded")
	}
}

func TestTplLogs(t *testing.T) {
	stepSetup(t)
	out, _, err := run(t, "tpl", "logs", "--template-id", "tpl1", "--build-id", "b1")
	want := "2026-03-04T05:06:07.000Z info  FROM python:3.12\n2026-03-04T05:06:08.500Z info  RUN pip install flask\n"
	if err != nil || out != want {
		t.Errorf("logs: %v %q", err, out)
	}
	out, _, err = run(t, "tpl", "logs", "--template-id", "tpl1", "--build-id", "b1", "--follow")
	if err != nil || out != want+"template tpl1 READY (build b1)\n" {
		t.Errorf("logs --follow: %v %q", err, out)
	}
	if _, _, err := run(t, "tpl", "logs", "--template-id", "tpl1", "--build-id", "nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown build: %v", err)
	}
}

func TestTplCommit(t *testing.T) {
	s := snapSetup(t)
	out, _, err := run(t, "tpl", "commit", "--sandbox-id", "run", "--alias", "my-env")
	if err != nil {
		t.Fatal(err)
	}
	if out != "template_id: snap-new\nnames: my-env\nSandbox.create('my-env') now starts from it\n" {
		t.Errorf("output %q", out)
	}
	wantSent(t, s, `POST /sandboxes/run/snapshots {"name":"my-env"}`)
	if _, _, err := run(t, "tpl", "commit", "--sandbox-id", "zzz", "--alias", "x"); err == nil || !strings.Contains(err.Error(), "paused") {
		t.Errorf("commit of a paused sandbox: %v", err)
	}
	if _, _, err := run(t, "tpl", "commit", "--sandbox-id", "run"); err == nil {
		t.Error("commit without --alias succeeded")
	}
}
