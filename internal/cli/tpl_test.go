package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/api/wire"
)

// tplServer answers the template routes. Each GET of a job advances it
// one step along steps.
type tplServer struct {
	mu      sync.Mutex
	created []wire.TemplateBuildRequest
	steps   []wire.TemplateBuildJob
	polls   int
	deleted []string
	uploads []upload
	// uploadLimit, when set, is the largest upload accepted.
	uploadLimit int
}

// upload is one archive sent to POST /templates/imports.
type upload struct {
	kind, contentType string
	body              []byte
}

func (s *tplServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	fail := func(code int, msg string) {
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(wire.Error{Code: code, Message: msg})
	}
	switch {
	case r.Method == "POST" && r.URL.Path == "/templates":
		var req wire.TemplateBuildRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(400, err.Error())
			return
		}
		if req.TemplateID == "taken" {
			fail(409, `template "taken" already exists (ready)`)
			return
		}
		s.created = append(s.created, req)
		w.WriteHeader(http.StatusAccepted)
		json.NewEncoder(w).Encode(wire.TemplateBuildStarted{JobID: "job1", TemplateID: "tpl1"})
	case r.Method == "POST" && r.URL.Path == "/templates/imports":
		b, err := io.ReadAll(r.Body)
		if err != nil {
			fail(400, err.Error())
			return
		}
		if s.uploadLimit > 0 && len(b) > s.uploadLimit {
			fail(413, "the archive is larger than 8 GiB, the most an image may unpack to: raise it with cube-server --max-image-bytes")
			return
		}
		s.uploads = append(s.uploads, upload{kind: r.URL.Query().Get("kind"), contentType: r.Header.Get("Content-Type"), body: b})
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"image":"%s:/srv/imports/upload-%d.tar"}`, r.URL.Query().Get("kind"), len(s.uploads))
	case r.Method == "GET" && r.URL.Path == "/templates/jobs/job1":
		i := min(s.polls, len(s.steps)-1)
		s.polls++
		json.NewEncoder(w).Encode(s.steps[i])
	case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/templates/jobs/"):
		fail(404, "build job not found")
	case r.Method == "GET" && r.URL.Path == "/templates":
		json.NewEncoder(w).Encode([]wire.TemplateListed{
			{Template: wire.Template{TemplateID: "code-interpreter", Aliases: []string{"base", "code-interpreter-v1"}, BuildStatus: "ready", CreatedAt: created},
				TemplateBuildInfo: wire.TemplateBuildInfo{Status: "ready", Image: "oci-archive:/var/cache/cube/default-image.tar"}},
			{Template: wire.Template{TemplateID: "snap-abc", BuildStatus: "ready", CreatedAt: created.Add(time.Hour)}},
			{Template: wire.Template{TemplateID: "broken", BuildStatus: "error", CreatedAt: created.Add(2 * time.Hour)},
				TemplateBuildInfo: wire.TemplateBuildInfo{Status: "failed", Image: "docker.io/library/nope:1"}},
		})
	case r.Method == "GET" && r.URL.Path == "/templates/base":
		json.NewEncoder(w).Encode(wire.TemplateDetail{
			TemplateWithBuilds: wire.TemplateWithBuilds{TemplateID: "code-interpreter", Aliases: []string{"base"}, CreatedAt: created},
			TemplateBuildInfo:  wire.TemplateBuildInfo{Status: "ready", Image: "oci-archive:/x.tar", SizeBytes: 123},
		})
	case r.Method == "DELETE" && r.URL.Path == "/templates/base":
		s.deleted = append(s.deleted, "base")
		w.WriteHeader(http.StatusNoContent)
	case strings.HasPrefix(r.URL.Path, "/templates/"):
		fail(404, `template "`+strings.TrimPrefix(r.URL.Path, "/templates/")+`" not found`)
	default:
		fail(404, "no route")
	}
}

func tplSetup(t *testing.T, steps ...wire.TemplateBuildJob) *tplServer {
	s := &tplServer{steps: steps}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Setenv("CUBE_API_URL", srv.URL)
	t.Setenv("E2B_API_KEY", "")
	t.Setenv("CUBE_API_KEY", "e2b_cli")
	t.Setenv(EnvRegistryPassword, "")
	old := watchInterval
	watchInterval = time.Millisecond
	t.Cleanup(func() { watchInterval = old })
	return s
}

func job(phase string, progress int, reason string) wire.TemplateBuildJob {
	return wire.TemplateBuildJob{JobID: "job1", TemplateID: "tpl1", Phase: phase, Progress: progress, Error: reason}
}

func TestTplCreateFromImage(t *testing.T) {
	s := tplSetup(t)
	out, _, err := run(t, "tpl", "create-from-image", "--image", "oci-archive:/tmp/img.tar", "--template-id", "tpl1",
		"--alias", "base", "--alias", "code-interpreter-v1", "--expose-port", "49983", "--expose-port", "49999",
		"--probe", "49999", "--probe-path", "/ready", "--writable-layer-size", "1G", "--cpu", "1500", "--memory", "1024",
		"--cmd", "/usr/bin/python3 -m http.server", "--arg", "8000", "--env", "A=1", "--env", "B=x=y",
		"--registry-username", "u", "--insecure-registry")
	if err != nil {
		t.Fatal(err)
	}
	if out != "job_id: job1\ntemplate_id: tpl1\n" {
		t.Errorf("output %q", out)
	}
	got := s.created[0]
	if got.Image != "oci-archive:/tmp/img.tar" || got.TemplateID != "tpl1" || strings.Join(got.Aliases, ",") != "base,code-interpreter-v1" ||
		len(got.ExposedPorts) != 2 || got.ProbePort != 49999 || got.ProbePath != "/ready" || got.WritableLayerSize != "1G" ||
		got.CPUMillicores != 1500 || got.MemoryMB != 1024 || strings.Join(got.Cmd, "|") != "/usr/bin/python3|-m|http.server" ||
		strings.Join(got.Args, "|") != "8000" || got.Env["A"] != "1" || got.Env["B"] != "x=y" || got.RegistryUsername != "u" || !got.InsecureRegistry {
		t.Errorf("request %+v", got)
	}

	t.Setenv(EnvRegistryPassword, "from-env")
	out, _, err = run(t, "tpl", "create-from-image", "--image", "python:3.12", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ids map[string]string
	if err := json.Unmarshal([]byte(out), &ids); err != nil || ids["job_id"] != "job1" || ids["template_id"] != "tpl1" {
		t.Errorf("--json output %q (%v)", out, err)
	}
	if s.created[1].RegistryPassword != "from-env" {
		t.Errorf("password from the environment not sent: %+v", s.created[1])
	}

	if _, _, err := run(t, "tpl", "create-from-image", "--image", "x", "--env", "NOEQUALS"); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
		t.Errorf("--env without '=': %v", err)
	}
	if _, _, err := run(t, "tpl", "create-from-image"); err == nil {
		t.Error("create-from-image without --image succeeded")
	}
	if _, _, err := run(t, "tpl", "create-from-image", "--image", "x", "--template-id", "taken"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("conflict: %v", err)
	}
}

func TestTplWatchReady(t *testing.T) {
	tplSetup(t, job("PULLING", 10, ""), job("UNPACKING", 50, ""), job("PROBING", 80, ""), job("READY", 100, ""))
	out, _, err := run(t, "tpl", "watch", "--job-id", "job1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "100%") || !strings.Contains(out, "template tpl1 READY") {
		t.Errorf("output %q", out)
	}
}

func TestTplWatchFailed(t *testing.T) {
	s := tplSetup(t, job("PULLING", 0, ""), job("FAILED", 30, "pull x: image not found: check the repository name and tag"))
	out, _, err := run(t, "tpl", "watch", "--job-id", "job1")
	if err == nil || !strings.Contains(err.Error(), "FAILED: pull x: image not found") {
		t.Errorf("watch of a failed job: %v", err)
	}
	if !strings.Contains(out, "PULLING") || s.polls != 2 {
		t.Errorf("output %q after %d polls", out, s.polls)
	}
	if _, _, err := run(t, "tpl", "watch", "--job-id", "other"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("unknown job: %v", err)
	}
}

func TestTplCreateWait(t *testing.T) {
	tplSetup(t, job("SNAPSHOTTING", 95, ""), job("FAILED", 95, "snapshot: disk full"))
	out, errOut, err := run(t, "tpl", "create-from-image", "--image", "x", "--wait", "--json")
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("--wait on a failing build: %v", err)
	}
	var ids map[string]string
	if json.Unmarshal([]byte(out), &ids) != nil || ids["job_id"] != "job1" {
		t.Errorf("stdout is not one JSON document: %q", out)
	}
	if !strings.Contains(errOut, "SNAPSHOTTING") {
		t.Errorf("progress not on stderr: %q", errOut)
	}
}

func TestTplStatus(t *testing.T) {
	tplSetup(t, job("FAILED", 75, "probe: no answer"))
	out, _, err := run(t, "tpl", "status", "--job-id", "job1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"job_id: job1", "template_id: tpl1", "phase: FAILED", "progress: 75%", "error: probe: no answer"} {
		if !strings.Contains(fieldsOfLines(out), want) {
			t.Errorf("status output %q lacks %q", out, want)
		}
	}
	out, _, err = run(t, "tpl", "status", "--job-id", "job1", "--json")
	var j wire.TemplateBuildJob
	if err != nil || json.Unmarshal([]byte(out), &j) != nil || j.Phase != "FAILED" {
		t.Errorf("status --json: %q %v", out, err)
	}
}

// fieldsOfLines collapses runs of spaces within each line.
func fieldsOfLines(s string) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		lines = append(lines, fieldsOf(l))
	}
	return strings.Join(lines, "\n")
}

func TestTplList(t *testing.T) {
	tplSetup(t)
	out, _, err := run(t, "tpl", "list")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"TEMPLATE_ID ALIASES STATUS CREATED_AT IMAGE",
		"code-interpreter base,code-interpreter-v1 ready 2026-01-02T03:04:05Z oci-archive:/var/cache/cube/default-image.tar",
		"snap-abc - ready 2026-01-02T04:04:05Z -",
		"broken - failed 2026-01-02T05:04:05Z docker.io/library/nope:1",
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	for i := range want {
		if fieldsOf(lines[i]) != want[i] {
			t.Errorf("line %d = %q, want %q", i, fieldsOf(lines[i]), want[i])
		}
	}
	out, _, err = run(t, "tpl", "list", "--json")
	var ts []wire.TemplateListed
	if err != nil || json.Unmarshal([]byte(out), &ts) != nil || len(ts) != 3 || ts[0].Image == "" {
		t.Errorf("list --json: %q %v", out, err)
	}
}

func TestTplInfoAndDelete(t *testing.T) {
	s := tplSetup(t)
	out, _, err := run(t, "tpl", "info", "--template-id", "base")
	var d wire.TemplateDetail
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.TemplateID != "code-interpreter" || d.SizeBytes != 123 || d.Status != "ready" {
		t.Errorf("info: %q %v", out, err)
	}
	if _, _, err := run(t, "tpl", "info", "--template-id", "zzz"); err == nil || !strings.Contains(err.Error(), `"zzz" not found`) {
		t.Errorf("info unknown: %v", err)
	}
	out, _, err = run(t, "tpl", "delete", "--template-id", "base")
	if err != nil || out != "deleted template base\n" || len(s.deleted) != 1 {
		t.Errorf("delete: %q %v %v", out, err, s.deleted)
	}
	if _, _, err := run(t, "tpl", "delete", "--template-id", "zzz"); err == nil {
		t.Error("deleting an unknown template succeeded")
	}
	if _, _, err := run(t, "tpl", "delete"); err == nil {
		t.Error("delete without --template-id succeeded")
	}
}
