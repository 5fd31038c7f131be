package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
)

// fakeBuilder adds template builds to the in-memory backend.
type fakeBuilder struct {
	*fakeBackend
	last cube.BuildRequest
	jobs map[string]*cube.BuildJob
	// jobTeams is the team of each job BuildTemplate made; another
	// team's job is not found.
	jobTeams map[string]string
}

func (b *fakeBuilder) BuildTemplate(ctx context.Context, req cube.BuildRequest) (*cube.BuildJob, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if req.TemplateID == "taken" {
		return nil, cube.Errorf(cube.Conflict, "template %q already exists", req.TemplateID)
	}
	b.last = req
	j := &cube.BuildJob{ID: fmt.Sprintf("job%d", len(b.jobs)+1), TemplateID: req.TemplateID, Phase: "PULLING", CreatedAt: b.now, UpdatedAt: b.now}
	if j.TemplateID == "" {
		j.TemplateID = "generated"
	}
	b.jobs[j.ID] = j
	b.jobTeams[j.ID] = req.Team
	return j, nil
}

func (b *fakeBuilder) BuildJob(ctx context.Context, team, jobID string) (*cube.BuildJob, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	j, ok := b.jobs[jobID]
	if jt := b.jobTeams[jobID]; jt != "" && jt != team {
		ok = false
	}
	if !ok {
		return nil, cube.Errorf(cube.NotFound, "build job %q not found", jobID)
	}
	return j, nil
}

func (b *fakeBuilder) TemplateDetails(ctx context.Context) (map[string]cube.TemplateDetail, error) {
	return map[string]cube.TemplateDetail{
		"base0000000000000000": {Status: "ready", Image: "oci-archive:/cache/default.tar", SizeBytes: 4 << 20, ExposedPorts: []int{49983, 49999}, ProbePort: 49999, ProbePath: "/health", JobID: "job0"},
	}, nil
}

func newBuilderEnv(t *testing.T, mutate ...func(*envConfig)) (*testEnv, *fakeBuilder) {
	fake := newFake()
	b := &fakeBuilder{fakeBackend: fake, jobs: map[string]*cube.BuildJob{}, jobTeams: map[string]string{}}
	return newEnvWith(t, fake, b, mutate...), b
}

func TestBuildTemplateRequest(t *testing.T) {
	e, b := newBuilderEnv(t)
	r := e.do("POST", "/templates", map[string]any{
		"image": " localhost:5000/app:v1 ", "templateID": "app", "aliases": []string{"a1", "a2"},
		"cpuMillicores": 1500, "memoryMB": 768, "writableLayerSize": "1G", "exposedPorts": []int{49999, 49983, 49999},
		"probePort": 49999, "probePath": "/ready", "cmd": []string{"/bin/app", "-v"}, "args": []string{"x"},
		"env": map[string]string{"K": "V"}, "registryUsername": "u", "registryPassword": "p", "insecureRegistry": true,
	})
	var started wire.TemplateBuildStarted
	r.decode(t, http.StatusAccepted, &started)
	if started.JobID != "job1" || started.TemplateID != "app" || r.header.Get("Location") != "/templates/jobs/job1" {
		t.Errorf("answer %+v, Location %q", started, r.header.Get("Location"))
	}
	got := b.last
	if got.Image != "localhost:5000/app:v1" || got.CPUCount != 2 || got.MemoryMB != 768 || got.DiskSizeMB != 1024 ||
		!slices.Equal(got.ExposedPorts, []int{49983, 49999}) || got.ProbePort != 49999 || got.ProbePath != "/ready" ||
		!slices.Equal(got.Cmd, []string{"/bin/app", "-v"}) || !slices.Equal(got.Args, []string{"x"}) || got.Env["K"] != "V" ||
		got.RegistryUsername != "u" || got.RegistryPassword != "p" || !got.InsecureRegistry || !slices.Equal(got.Aliases, []string{"a1", "a2"}) {
		t.Errorf("backend got %+v", got)
	}

	// Defaults are the builder's: nothing is filled in on the way.
	e.do("POST", "/templates", map[string]any{"image": "python:3.12"}).decode(t, http.StatusAccepted, &started)
	if started.TemplateID != "generated" || b.last.CPUCount != 0 || b.last.DiskSizeMB != 0 || b.last.ProbePort != 0 {
		t.Errorf("defaults: %+v %+v", started, b.last)
	}
	e.do("POST", "/templates", map[string]any{"image": "x", "templateID": "taken"}).wantError(t, http.StatusConflict, "already exists")
}

func TestBuildTemplateRejects(t *testing.T) {
	e, b := newBuilderEnv(t)
	for _, c := range []struct {
		body map[string]any
		want string
	}{
		{map[string]any{}, "image is required"},
		{map[string]any{"image": "  "}, "image is required"},
		{map[string]any{"image": "x", "templateID": "Bad ID"}, "invalid template ID"},
		{map[string]any{"image": "x", "templateID": "snap-x"}, "reserved for snapshots"},
		{map[string]any{"image": "x", "aliases": []string{"ok", "no/slash"}}, `invalid alias "no/slash"`},
		{map[string]any{"image": "x", "aliases": []string{"a", "a"}}, "given twice"},
		{map[string]any{"image": "x", "templateID": "t", "aliases": []string{"t"}}, "is the template ID"},
		{map[string]any{"image": "x", "cpuMillicores": -1}, "cpuMillicores"},
		{map[string]any{"image": "x", "memoryMB": 1 << 30}, "memoryMB"},
		{map[string]any{"image": "x", "writableLayerSize": "lots"}, "writableLayerSize"},
		{map[string]any{"image": "x", "writableLayerSize": "0G"}, "writableLayerSize"},
		{map[string]any{"image": "x", "exposedPorts": []int{70000}}, "exposed port 70000"},
		{map[string]any{"image": "x", "probePort": 65536}, "probePort"},
		{map[string]any{"image": "x", "probePath": "health"}, "probePath"},
		{map[string]any{"image": "x", "cmd": []string{""}}, "program name is empty"},
		{map[string]any{"image": "x", "env": map[string]string{"A=B": "c"}}, "invalid variable name"},
		{map[string]any{"image": "x", "cwd": "relative"}, "cwd"},
		{map[string]any{"image": 5}, `field "image"`},
	} {
		e.do("POST", "/templates", c.body).wantError(t, http.StatusBadRequest, c.want)
	}
	e.do("POST", "/templates", "").wantError(t, http.StatusBadRequest, "request body is required")
	if len(b.jobs) != 0 {
		t.Errorf("rejected requests reached the builder: %v", b.jobs)
	}
}

func TestBuildJobStatus(t *testing.T) {
	e, b := newBuilderEnv(t)
	b.jobs["j9"] = &cube.BuildJob{ID: "j9", TemplateID: "app", Phase: "FAILED", Progress: 80, Error: "probe: no answer",
		CreatedAt: b.now, UpdatedAt: b.now.Add(time.Minute)}
	var j wire.TemplateBuildJob
	e.do("GET", "/templates/jobs/j9", nil).decode(t, http.StatusOK, &j)
	if j.JobID != "j9" || j.TemplateID != "app" || j.Phase != "FAILED" || j.Progress != 80 || j.Error != "probe: no answer" || !j.UpdatedAt.Equal(b.now.Add(time.Minute)) {
		t.Errorf("job %+v", j)
	}
	e.do("GET", "/templates/jobs/nope", nil).wantError(t, http.StatusNotFound, `"nope" not found`)
	e.do("GET", "/templates/jobs/Bad%20Id", nil).wantError(t, http.StatusBadRequest, "invalid job ID")
	e.do("GET", "/templates/jobs/j9", nil, "X-API-Key", "").wantError(t, http.StatusUnauthorized, "API key")
}

func TestTemplateAnswersCarryBuildFacts(t *testing.T) {
	e, _ := newBuilderEnv(t)
	var list []wire.TemplateListed
	e.do("GET", "/templates", nil).decode(t, http.StatusOK, &list)
	if len(list) != 1 || list[0].TemplateID != "base0000000000000000" || list[0].Status != "ready" ||
		list[0].Image != "oci-archive:/cache/default.tar" || list[0].BuildStatus != "ready" || !slices.Equal(list[0].Aliases, []string{"base", "code-interpreter-v1"}) {
		t.Errorf("list %+v", list)
	}
	var d wire.TemplateDetail
	r := e.do("GET", "/templates/base", nil)
	r.decode(t, http.StatusOK, &d)
	if d.TemplateID != "base0000000000000000" || d.Status != "ready" || d.SizeBytes != 4<<20 || d.ProbePort != 49999 ||
		d.JobID != "job0" || len(d.Builds) != 1 || d.CreatedAt.IsZero() {
		t.Errorf("detail %+v", d)
	}
	if m := fields(t, r.body); m["builds"] == nil || m["spawnCount"] == nil || m["image"] == nil {
		t.Errorf("detail lacks E2B or Cube fields: %s", r.body)
	}
	e.do("GET", "/templates/nope", nil).wantError(t, http.StatusNotFound, "not found")
}

func TestBuildRoutesWithoutBuilder(t *testing.T) {
	e := newEnv(t)
	e.do("POST", "/templates", map[string]any{"image": "x"}).wantError(t, http.StatusNotImplemented, "not supported")
	e.do("GET", "/templates/jobs/j1", nil).wantError(t, http.StatusNotImplemented, "not supported")
	// The E2B answers are unchanged.
	r := e.do("GET", "/templates/base", nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	if _, ok := fields(t, r.body)["status"]; ok {
		t.Errorf("build facts without a builder: %s", r.body)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"1G": 1024, "1g": 1024, "512M": 512, "512MB": 512, "1GiB": 1024, "1.5G": 1536, "2048": 2048, "1T": 1 << 20, "4096K": 4} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "-1G", "0", "1X", "NaN", "Inf", "512K", "2T"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}
