package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/proxy"
)

// fakeStepBuilder adds step builds to the in-memory backend: one template
// (the fake's base) with one build, build1. Builds belong to their
// template's team (builds), and templates are found as the builder finds
// them (fakeBackend.find): a team sees its own and public ones, and
// changes only its own.
type fakeStepBuilder struct {
	*fakeBackend
	maxFiles  int64
	files     map[string][]byte
	intent    cube.BuildIntent
	spec      cube.BuildSpec
	logQuery  cube.BuildLogQuery
	logs      []cube.BuildLogEntry
	reason    *cube.BuildReason
	offset    int
	assigned  []string
	removed   []string
	public    *bool
	firstRead chan []byte // when set, PutFiles sends its first read here
	// builds are the template of each build ID; teams, the team of every
	// call, in order.
	builds map[string]string
	teams  []string
}

const (
	stepTemplate = "base0000000000000000"
	stepBuild    = "build1"
)

func newStepEnv(t *testing.T, mutate ...func(*envConfig)) (*testEnv, *fakeStepBuilder) {
	fake := newFake()
	b := &fakeStepBuilder{fakeBackend: fake, maxFiles: 2 << 20, files: map[string][]byte{}, builds: map[string]string{stepBuild: stepTemplate}}
	return newEnvWith(t, fake, b, mutate...), b
}

// known returns the template idOrName names to team (a tag aside):
// NotFound for one the fake does not hold or team may not see, and, when
// change is set, Forbidden for another team's public one.
func (b *fakeStepBuilder) known(team, idOrName string, change bool) (*cube.Template, error) {
	b.teams = append(b.teams, team)
	name, _, _ := strings.Cut(idOrName, ":")
	t := b.find(team, name)
	if t == nil {
		return nil, cube.Errorf(cube.NotFound, "template %q not found", idOrName)
	}
	if change && !owned(t, team) {
		return nil, cube.Errorf(cube.Forbidden, "template %q is another team's public template", idOrName)
	}
	return t, nil
}

// knownBuild checks a build of the template: another team's build is not
// found, even of a public template.
func (b *fakeStepBuilder) knownBuild(team, templateID, buildID string) error {
	t, err := b.known(team, templateID, false)
	if err != nil {
		return err
	}
	if b.builds[buildID] != t.ID || !owned(t, team) {
		return cube.Errorf(cube.NotFound, "build %q not found", buildID)
	}
	return nil
}

func (b *fakeStepBuilder) RequestBuild(ctx context.Context, req cube.BuildIntent) (*cube.BuildTicket, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	name, tag, tagged := strings.Cut(req.Name, ":")
	if name == "taken" {
		return nil, cube.Errorf(cube.Conflict, "name %q is held by a snapshot", name)
	}
	b.intent = req
	b.teams = append(b.teams, req.Team)
	tags := append([]string{}, req.Tags...)
	if tagged {
		tags = append(tags, tag)
	}
	return &cube.BuildTicket{TemplateID: "tpl1", BuildID: stepBuild, Names: []string{name}, Tags: tags}, nil
}

func (b *fakeStepBuilder) FilesPresent(ctx context.Context, team, templateID, hash string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.known(team, templateID, true); err != nil {
		return false, err
	}
	_, ok := b.files[hash]
	return ok, nil
}

func (b *fakeStepBuilder) PutFiles(ctx context.Context, templateID, hash string, body io.Reader, verify bool) error {
	b.mu.Lock()
	_, err := b.known("", templateID, false)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	if verify {
		data, err := io.ReadAll(body)
		if err != nil {
			return err
		}
		if got := sha(string(data)); got != hash {
			return cube.Errorf(cube.Invalid, "the files' SHA-256 is %s, which does not match %s", got, hash)
		}
		body = bytes.NewReader(data)
	}
	var got []byte
	if b.firstRead != nil {
		buf := make([]byte, 64)
		n, err := body.Read(buf)
		if err != nil {
			return err
		}
		b.firstRead <- buf[:n]
		got = buf[:n]
	}
	rest, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.files[hash] = append(got, rest...)
	return nil
}

func (b *fakeStepBuilder) MaxFilesBytes() int64 { return b.maxFiles }

func (b *fakeStepBuilder) StartBuild(ctx context.Context, team, templateID, buildID string, spec cube.BuildSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.knownBuild(team, templateID, buildID); err != nil {
		return err
	}
	if from, _, _ := strings.Cut(spec.FromTemplate, ":"); from != "" && b.find(team, from) == nil {
		return cube.Errorf(cube.Invalid, "base template %q not found or not ready", spec.FromTemplate)
	}
	b.spec = spec
	return nil
}

func (b *fakeStepBuilder) BuildStatus(ctx context.Context, team, templateID, buildID string, logsOffset int) (*cube.BuildStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.knownBuild(team, templateID, buildID); err != nil {
		return nil, err
	}
	b.offset = logsOffset
	st := &cube.BuildStatus{TemplateID: stepTemplate, BuildID: buildID, Status: cube.BuildBuilding, Reason: b.reason}
	if b.reason != nil {
		st.Status = cube.BuildError
	}
	if logsOffset < len(b.logs) {
		st.Logs = b.logs[logsOffset:]
	}
	return st, nil
}

func (b *fakeStepBuilder) BuildLogs(ctx context.Context, team, templateID, buildID string, q cube.BuildLogQuery) ([]cube.BuildLogEntry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.knownBuild(team, templateID, buildID); err != nil {
		return nil, err
	}
	b.logQuery = q
	return b.logs, nil
}

func (b *fakeStepBuilder) AssignTags(ctx context.Context, team, target string, tags []string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.known(team, target, true); err != nil {
		return "", err
	}
	b.assigned = tags
	return stepBuild, nil
}

func (b *fakeStepBuilder) RemoveTags(ctx context.Context, team, name string, tags []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.known(team, name, true); err != nil {
		return err
	}
	b.removed = tags
	return nil
}

func (b *fakeStepBuilder) TemplateTags(ctx context.Context, team, idOrName string) ([]cube.TemplateTag, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.known(team, idOrName, false); err != nil {
		return nil, err
	}
	return []cube.TemplateTag{{Tag: "default", BuildID: stepBuild, CreatedAt: b.now}}, nil
}

func (b *fakeStepBuilder) SetPublic(ctx context.Context, team, idOrName string, public bool) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, err := b.known(team, idOrName, true)
	if err != nil {
		return nil, err
	}
	b.public = &public
	t.Public = public
	return t.Aliases, nil
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestRequestBuild(t *testing.T) {
	e, b := newStepEnv(t)
	var got wire.TemplateRequestResponseV3
	e.do("POST", "/v3/templates", map[string]any{"name": "app:v1", "tags": []string{"prod"}, "cpuCount": 2, "memoryMB": 1024, "minFreeDiskMb": 10}).
		decode(t, http.StatusAccepted, &got)
	if got.TemplateID != "tpl1" || got.BuildID != stepBuild || !slices.Equal(got.Names, []string{"app"}) ||
		!slices.Equal(got.Aliases, got.Names) || !slices.Equal(got.Tags, []string{"prod", "v1"}) {
		t.Errorf("answer %+v", got)
	}
	if b.intent.Name != "app:v1" || b.intent.CPUCount != 2 || b.intent.MemoryMB != 1024 || !slices.Equal(b.intent.Tags, []string{"prod"}) {
		t.Errorf("backend got %+v", b.intent)
	}
	// The deprecated alias stands in for name.
	e.do("POST", "/v3/templates", map[string]any{"alias": "old"}).decode(t, http.StatusAccepted, &got)
	if b.intent.Name != "old" {
		t.Errorf("alias gave name %q", b.intent.Name)
	}

	for body, want := range map[string]string{
		`{"name":`:                        "malformed JSON",
		`{}`:                              "name is required",
		`{"name":"App"}`:                  "invalid name",
		`{"name":"app:V1"}`:               "invalid tag",
		`{"name":"app","tags":["a b"]}`:   "invalid tag",
		`{"name":"app","cpuCount":65}`:    "cpuCount",
		`{"name":"app","memoryMB":-1}`:    "memoryMB",
		`{"name":"app","cpuCount":"two"}`: "cpuCount",
		`{"name":"app:v1:x"}`:             "invalid tag",
		`{"name":"app","tags":["` + strings.Repeat("a", 64) + `"]}`: "invalid tag",
	} {
		e.do("POST", "/v3/templates", body).wantError(t, http.StatusBadRequest, want)
	}
	e.do("POST", "/v3/templates", map[string]any{"name": "taken"}).wantError(t, http.StatusConflict, "snapshot")
}

func TestStepRoutesUnsupported(t *testing.T) {
	e := newEnv(t)
	e.do("POST", "/v3/templates", map[string]any{"name": "app"}).wantError(t, http.StatusNotImplemented, "not supported")
	e.do("GET", "/templates/base/files/"+sha("x"), nil).wantError(t, http.StatusNotImplemented, "not supported")
	e.do("GET", "/templates/base/tags", nil).wantError(t, http.StatusNotImplemented, "not supported")
}

// uploadLink asks for the upload link of hash and returns it.
func uploadLink(t *testing.T, e *testEnv, templateID, hash string) string {
	t.Helper()
	var up wire.TemplateBuildFileUpload
	e.do("GET", "/templates/"+templateID+"/files/"+hash, nil).decode(t, http.StatusCreated, &up)
	if up.Present || !strings.HasPrefix(up.URL, e.srv.URL+"/templates/"+templateID+"/files/"+hash+"/upload?") {
		t.Fatalf("answer %+v, want a link on %s", up, e.srv.URL)
	}
	return up.URL
}

// put uploads body to link as the SDK does: no API key.
func put(t *testing.T, link string, body io.Reader) resp {
	t.Helper()
	req, err := http.NewRequest("PUT", link, body)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

func TestFileUploadLinkAndUpload(t *testing.T) {
	e, b := newStepEnv(t)
	hash := sha("files")
	link := uploadLink(t, e, "base", hash)
	// Larger than the API's JSON limit, within the builder's.
	big := strings.Repeat("t", DefaultMaxBodyBytes+DefaultMaxBodyBytes/2)
	if r := put(t, link, strings.NewReader(big)); r.status != http.StatusNoContent {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if string(b.files[hash]) != big {
		t.Errorf("backend stored %d bytes, want %d", len(b.files[hash]), len(big))
	}
	var up wire.TemplateBuildFileUpload
	e.do("GET", "/templates/base/files/"+hash, nil).decode(t, http.StatusCreated, &up)
	if !up.Present || up.URL != "" {
		t.Errorf("stored files: answer %+v, want present without url", up)
	}

	e.do("GET", "/templates/base/files/"+strings.ToUpper(hash), nil).wantError(t, http.StatusBadRequest, "invalid files hash")
	e.do("GET", "/templates/base/files/abc", nil).wantError(t, http.StatusBadRequest, "invalid files hash")
	e.do("GET", "/templates/nope/files/"+hash, nil).wantError(t, http.StatusNotFound, "not found")
}

func TestUploadSignature(t *testing.T) {
	e, b := newStepEnv(t)
	hash := sha("sig")
	link := uploadLink(t, e, "base", hash)
	u, _ := url.Parse(link)
	q := u.Query()

	tampered := *u
	tq := url.Values{"expires": {q.Get("expires")}, "signature": {strings.Repeat("0", 64)}}
	tampered.RawQuery = tq.Encode()
	put(t, tampered.String(), strings.NewReader("x")).wantError(t, http.StatusForbidden, "invalid upload signature")

	// A link signed for one hash does not upload another.
	other := strings.Replace(link, hash, sha("other"), 1)
	put(t, other, strings.NewReader("x")).wantError(t, http.StatusForbidden, "invalid upload signature")

	unsigned := strings.SplitN(link, "?", 2)[0]
	put(t, unsigned, strings.NewReader("x")).wantError(t, http.StatusForbidden, "invalid upload signature")

	// An expired link, correctly signed, is refused as expired.
	s, err := NewServer(Config{Teams: adminKeys(testKey), UploadSecret: []byte("secret")}, b)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, s, b.fakeBackend, proxy.Config{})
	past := time.Now().Add(-time.Minute).Unix()
	expired := fmt.Sprintf("%s/templates/base/files/%s/upload?expires=%d&signature=%s", srv.URL, hash, past, s.uploadSignature("base", hash, past, ""))
	put(t, expired, strings.NewReader("x")).wantError(t, http.StatusForbidden, "expired")
	if len(b.files) != 0 {
		t.Errorf("refused uploads stored %d files", len(b.files))
	}
}

func TestUploadTooLarge(t *testing.T) {
	e, b := newStepEnv(t)
	b.maxFiles = 1 << 10
	link := uploadLink(t, e, "base", sha("big"))
	put(t, link, strings.NewReader(strings.Repeat("x", 1<<10+1))).wantError(t, http.StatusRequestEntityTooLarge, "larger than the server accepts")
	// Without a Content-Length the limit is found half-way.
	put(t, link, io.MultiReader(strings.NewReader(strings.Repeat("x", 1<<10+1)))).wantError(t, http.StatusRequestEntityTooLarge, "larger than the server accepts")
	if len(b.files) != 0 {
		t.Errorf("oversized uploads stored %d files", len(b.files))
	}
}

// TestUploadStreams checks that PutFiles reads the body as it arrives:
// the client sends its second part only after the backend saw the first.
func TestUploadStreams(t *testing.T) {
	e, b := newStepEnv(t)
	b.firstRead = make(chan []byte, 1)
	hash := sha("stream")
	link := uploadLink(t, e, "base", hash)
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("part1"))
		select {
		case <-b.firstRead:
			pw.Write([]byte("part2"))
			pw.Close()
		case <-time.After(5 * time.Second):
			pw.CloseWithError(fmt.Errorf("PutFiles did not see the first part before the body ended"))
		}
	}()
	if r := put(t, link, pr); r.status != http.StatusNoContent {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	if got := string(b.files[hash]); got != "part1part2" {
		t.Errorf("stored %q", got)
	}
}

func TestUploadUnknownTemplate(t *testing.T) {
	e, _ := newStepEnv(t)
	link := uploadLink(t, e, "base", sha("x"))
	link = strings.Replace(link, "/templates/base/", "/templates/nope/", 1)
	put(t, link, strings.NewReader("x")).wantError(t, http.StatusForbidden, "invalid upload signature")
}

func TestStartBuild(t *testing.T) {
	e, b := newStepEnv(t)
	hash := sha("copy")
	path := "/v2/templates/base/builds/" + stepBuild
	r := e.do("POST", path, map[string]any{
		"fromImage":         "python:3.12",
		"fromImageRegistry": map[string]any{"type": "registry", "username": "u", "password": "p"},
		"steps": []map[string]any{
			{"type": "RUN", "args": []string{"pip install x", "root"}, "force": true},
			{"type": "COPY", "args": []string{"app", "/app"}, "filesHash": hash, "forceUpload": true, "resolveSymlinks": false},
			{"type": "ENV", "args": []string{"A", "1", "B", "2"}},
			{"type": "WORKDIR", "args": []string{"/app"}},
			{"type": "USER", "args": []string{"user"}},
		},
		"startCmd": "python app.py", "readyCmd": "curl localhost:8000", "force": true,
	})
	if r.status != http.StatusAccepted || len(r.body) != 0 {
		t.Fatalf("start: %d %q", r.status, r.body)
	}
	sp := b.spec
	if sp.FromImage != "python:3.12" || sp.RegistryUsername != "u" || sp.RegistryPassword != "p" || len(sp.Steps) != 5 ||
		sp.StartCmd != "python app.py" || sp.ReadyCmd != "curl localhost:8000" || !sp.Force {
		t.Errorf("spec %+v", sp)
	}
	if st := sp.Steps[0]; st.Type != cube.StepRun || !st.Force || !slices.Equal(st.Args, []string{"pip install x", "root"}) {
		t.Errorf("RUN step %+v", st)
	}
	if st := sp.Steps[1]; st.Type != cube.StepCopy || st.FilesHash != hash {
		t.Errorf("COPY step %+v", st)
	}
	e.do("POST", path, map[string]any{"fromTemplate": "base:v1"}).decode(t, http.StatusAccepted, nil)
	if b.spec.FromTemplate != "base:v1" || b.spec.FromImage != "" {
		t.Errorf("fromTemplate spec %+v", b.spec)
	}

	for body, want := range map[string]string{
		`[`:                                    "malformed JSON",
		`{}`:                                   "exactly one of fromImage and fromTemplate",
		`{"fromImage":"a","fromTemplate":"b"}`: "exactly one of fromImage and fromTemplate",
		`{"fromTemplate":"Bad"}`:               "invalid fromTemplate",
		`{"fromImage":"a","fromImageRegistry":{"type":"aws","awsRegion":"x"}}`:                                "only general registries",
		`{"fromImage":"a","fromImageRegistry":{"type":"gcp"}}`:                                                "only general registries",
		`{"fromImage":"a","fromImageRegistry":{"type":"ftp"}}`:                                                "want \"registry\"",
		`{"fromImage":"a","steps":[{"type":"RUN","args":["x"]},{"type":"ADD","args":["x"]}]}`:                 "step 2: type \"ADD\"",
		`{"fromImage":"a","steps":[{"type":"COPY","args":["a","/b"]}]}`:                                       "step 1: COPY needs filesHash",
		`{"fromImage":"a","steps":[{"type":"COPY","args":["a"],"filesHash":"` + hash + `"}]}`:                 "step 1: COPY takes",
		`{"fromImage":"a","steps":[{"type":"ENV","args":["A","1","B"]}]}`:                                     "name-value pairs",
		`{"fromImage":"a","steps":[{"type":"ENV"}]}`:                                                          "step 1: ENV takes",
		`{"fromImage":"a","steps":[{"type":"RUN","args":["a","b","c"]}]}`:                                     "RUN takes 1 to 2",
		`{"fromImage":"a","steps":[{"type":"RUN"}]}`:                                                          "RUN takes 1 to 2",
		`{"fromImage":"a","steps":[{"type":"WORKDIR","args":["/a","/b"]}]}`:                                   "WORKDIR takes exactly 1",
		`{"fromImage":"a","steps":[{"type":"USER","args":[]}]}`:                                               "USER takes exactly 1",
		`{"fromImage":"a","steps":[{"type":"RUN","args":["x"],"filesHash":"` + hash + `"}]}`:                  "COPY steps only",
		`{"fromImage":"a","startCmd":"a\u0000b"}`:                                                             "startCmd may not contain NUL",
		`{"fromImage":"a","steps":[{"type":"RUN","args":["` + strings.Repeat("x", maxBuildString+1) + `"]}]}`: "longer than",
	} {
		e.do("POST", path, body).wantError(t, http.StatusBadRequest, want)
	}
	many := make([]map[string]any, MaxBuildSteps+1)
	for i := range many {
		many[i] = map[string]any{"type": "USER", "args": []string{"u"}}
	}
	e.do("POST", path, map[string]any{"fromImage": "a", "steps": many}).wantError(t, http.StatusBadRequest, "at most 256 steps")
	e.do("POST", "/v2/templates/nope/builds/"+stepBuild, map[string]any{"fromImage": "a"}).wantError(t, http.StatusNotFound, "not found")
	e.do("POST", "/v2/templates/base/builds/other", map[string]any{"fromImage": "a"}).wantError(t, http.StatusNotFound, "not found")
}

func TestBuildStatus(t *testing.T) {
	e, b := newStepEnv(t)
	at := time.Date(2026, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	b.logs = []cube.BuildLogEntry{
		{Time: at, Level: "info", Message: "pulling", Step: "base"},
		{Time: at.Add(time.Second), Level: "error", Message: "exit 1", Step: "1"},
	}
	path := "/templates/base/builds/" + stepBuild + "/status"
	r := e.do("GET", path, nil)
	var st wire.BuildStatusInfo
	r.decode(t, http.StatusOK, &st)
	if st.TemplateID != stepTemplate || st.BuildID != stepBuild || st.Status != "building" || len(st.LogEntries) != 2 || st.Reason != nil {
		t.Errorf("status %+v", st)
	}
	if e0 := st.LogEntries[0]; e0.Timestamp != "2026-03-04T05:06:07.890Z" || e0.Level != "info" || e0.Message != "pulling" || e0.Step != "base" {
		t.Errorf("entry %+v", e0)
	}
	if m := fields(t, r.body); fmt.Sprint(m["logs"]) != "[]" {
		t.Errorf("logs = %v, want []", m["logs"])
	}

	b.reason = &cube.BuildReason{Message: "step 1 failed", Step: "1", Logs: b.logs[1:]}
	e.do("GET", path+"?logsOffset=2", nil).decode(t, http.StatusOK, &st)
	if b.offset != 2 || len(st.LogEntries) != 0 || st.LogEntries == nil || st.Status != "error" ||
		st.Reason == nil || st.Reason.Message != "step 1 failed" || st.Reason.Step != "1" || len(st.Reason.LogEntries) != 1 {
		t.Errorf("offset %d, status %+v", b.offset, st)
	}

	e.do("GET", path+"?logsOffset=-1", nil).wantError(t, http.StatusBadRequest, "logsOffset")
	e.do("GET", path+"?logsOffset=x", nil).wantError(t, http.StatusBadRequest, "logsOffset")
	e.do("GET", "/templates/nope/builds/"+stepBuild+"/status", nil).wantError(t, http.StatusNotFound, "not found")
}

func TestBuildLogs(t *testing.T) {
	e, b := newStepEnv(t)
	b.logs = []cube.BuildLogEntry{{Time: time.Unix(1, 0), Level: "warn", Message: "m"}}
	path := "/templates/base/builds/" + stepBuild + "/logs"
	var got wire.TemplateBuildLogsResponse
	e.do("GET", path, nil).decode(t, http.StatusOK, &got)
	if len(got.Logs) != 1 || got.Logs[0].Message != "m" || b.logQuery != (cube.BuildLogQuery{Limit: 100}) {
		t.Errorf("logs %+v, query %+v", got, b.logQuery)
	}
	e.do("GET", path+"?cursor=5000&limit=1000&direction=backward&level=warn&source=persistent", nil).decode(t, http.StatusOK, &got)
	if b.logQuery != (cube.BuildLogQuery{Cursor: 5000, Limit: 1000, Backward: true, Level: "warn"}) {
		t.Errorf("query %+v", b.logQuery)
	}
	for q, want := range map[string]string{
		"limit=1001": "limit", "limit=0": "limit", "cursor=-1": "cursor", "direction=up": "direction",
		"level=trace": "level", "source=disk": "source",
	} {
		e.do("GET", path+"?"+q, nil).wantError(t, http.StatusBadRequest, want)
	}
}

func TestTags(t *testing.T) {
	e, b := newStepEnv(t)
	var got wire.AssignedTemplateTags
	e.do("POST", "/templates/tags", map[string]any{"target": "base:v1", "tags": []string{"prod", "stable"}}).decode(t, http.StatusCreated, &got)
	if got.BuildID != stepBuild || !slices.Equal(got.Tags, []string{"prod", "stable"}) || !slices.Equal(b.assigned, got.Tags) {
		t.Errorf("answer %+v, backend %v", got, b.assigned)
	}
	e.do("POST", "/templates/tags", map[string]any{"target": "nope:v1", "tags": []string{"x"}}).wantError(t, http.StatusNotFound, "not found")
	e.do("POST", "/templates/tags", map[string]any{"target": "base", "tags": []string{}}).wantError(t, http.StatusBadRequest, "tags")
	e.do("POST", "/templates/tags", map[string]any{"tags": []string{"x"}}).wantError(t, http.StatusBadRequest, "target is required")
	e.do("POST", "/templates/tags", `{"target":`).wantError(t, http.StatusBadRequest, "malformed JSON")

	if r := e.do("DELETE", "/templates/tags", map[string]any{"name": "base", "tags": []string{"prod"}}); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if !slices.Equal(b.removed, []string{"prod"}) {
		t.Errorf("removed %v", b.removed)
	}
	e.do("DELETE", "/templates/tags", map[string]any{"name": "base", "tags": []string{"Bad"}}).wantError(t, http.StatusBadRequest, "invalid tag")

	var tags []wire.TemplateTag
	e.do("GET", "/templates/base/tags", nil).decode(t, http.StatusOK, &tags)
	if len(tags) != 1 || tags[0].Tag != "default" || tags[0].BuildID != stepBuild || !tags[0].CreatedAt.Equal(b.now) {
		t.Errorf("tags %+v", tags)
	}
	e.do("GET", "/templates/nope/tags", nil).wantError(t, http.StatusNotFound, "not found")
	// The wider mux pattern answers only .../tags.
	e.do("GET", "/templates/base/other", nil).wantError(t, http.StatusNotFound, "no route")
	// The routes it overlaps keep theirs.
	e.do("GET", "/templates/aliases/base", nil).decode(t, http.StatusOK, nil)
}

func TestUpdateTemplateAndV2List(t *testing.T) {
	e, b := newStepEnv(t)
	for _, path := range []string{"/templates/base", "/v2/templates/base"} {
		var got wire.TemplateUpdateResponse
		e.do("PATCH", path, map[string]any{"public": true}).decode(t, http.StatusOK, &got)
		if !slices.Equal(got.Names, []string{"base", "code-interpreter-v1"}) || b.public == nil || !*b.public {
			t.Errorf("%s: answer %+v, public %v", path, got, b.public)
		}
	}
	b.public = nil
	var got wire.TemplateUpdateResponse
	e.do("PATCH", "/templates/base", map[string]any{}).decode(t, http.StatusOK, &got)
	if b.public != nil || len(got.Names) != 2 {
		t.Errorf("empty patch: answer %+v, public %v", got, b.public)
	}
	e.do("PATCH", "/templates/base", `{"public":"yes"}`).wantError(t, http.StatusBadRequest, "public")
	e.do("PATCH", "/v2/templates/nope", map[string]any{"public": false}).wantError(t, http.StatusNotFound, "not found")

	var v1, v2 []wire.Template
	e.do("GET", "/templates", nil).decode(t, http.StatusOK, &v1)
	e.do("GET", "/v2/templates", nil).decode(t, http.StatusOK, &v2)
	if len(v2) != 1 || fmt.Sprint(v1) != fmt.Sprint(v2) {
		t.Errorf("v2 list %+v, v1 %+v", v2, v1)
	}
}

// TestUploadLinkSingleUse: the first complete upload spends its link, so
// a link that leaks afterwards cannot replace the files; an upload that
// failed leaves it usable.
func TestUploadLinkSingleUse(t *testing.T) {
	e, b := newStepEnv(t)
	b.maxFiles = 1 << 10
	hash := sha("once")
	link := uploadLink(t, e, "base", hash)
	put(t, link, strings.NewReader(strings.Repeat("x", 1<<10+1))).wantError(t, http.StatusRequestEntityTooLarge, "larger")
	if r := put(t, link, strings.NewReader("first")); r.status != http.StatusNoContent {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	put(t, link, strings.NewReader("swapped")).wantError(t, http.StatusForbidden, "already used")
	// The same link spelled otherwise is the same link.
	u, _ := url.Parse(link)
	q := u.Query()
	q.Set("signature", strings.ToUpper(q.Get("signature")))
	q.Set("expires", "0"+q.Get("expires"))
	u.RawQuery = q.Encode()
	put(t, u.String(), strings.NewReader("swapped")).wantError(t, http.StatusForbidden, "already used")
	if got := string(b.files[hash]); got != "first" {
		t.Errorf("stored %q after the link was used again", got)
	}
}

// TestUploadVerified: a link asked for with verify=archive takes only an
// archive whose SHA-256 is the hash it names; another is refused with 400
// naming both, and the link stays usable for the right one.
func TestUploadVerified(t *testing.T) {
	e, b := newStepEnv(t)
	content := "the archive"
	hash := sha(content)
	var up wire.TemplateBuildFileUpload
	e.do("GET", "/templates/base/files/"+hash+"?verify=archive", nil).decode(t, http.StatusCreated, &up)
	if !strings.Contains(up.URL, "verify=archive") {
		t.Fatalf("link %q does not carry verify=archive", up.URL)
	}
	put(t, up.URL, strings.NewReader("another archive")).wantError(t, http.StatusBadRequest, "does not match "+hash)
	if _, ok := b.files[hash]; ok {
		t.Error("a mismatched upload was stored")
	}
	// The mode is signed with the link: dropping it is a bad signature.
	unverified := strings.Replace(up.URL, "&verify=archive", "", 1)
	put(t, unverified, strings.NewReader("another archive")).wantError(t, http.StatusForbidden, "invalid upload signature")
	if r := put(t, up.URL, strings.NewReader(content)); r.status != http.StatusNoContent {
		t.Fatalf("the matching upload: %d %s", r.status, r.body)
	}
	e.do("GET", "/templates/base/files/"+hash+"?verify=zip", nil).wantError(t, http.StatusBadRequest, "verify")
}
