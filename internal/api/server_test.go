package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/proxy"
	"cube/internal/testenv"
)

const testKey = "e2b_0123456789abcdef0123456789abcdef01234567"

type testEnv struct {
	t    *testing.T
	srv  *httptest.Server
	fake *fakeBackend
	logs *testenv.LogBuffer
}

// envConfig is what a test may change of the API's and the proxy's
// settings; the proxy's Domain and Logger default to the API's, as the
// server sets them.
type envConfig struct {
	Config
	Proxy proxy.Config
}

func newEnv(t *testing.T, mutate ...func(*envConfig)) *testEnv {
	return newEnvWith(t, newFake(), nil, mutate...)
}

func newEnvWith(t *testing.T, fake *fakeBackend, b cube.Backend, mutate ...func(*envConfig)) *testEnv {
	t.Helper()
	logs := &testenv.LogBuffer{}
	cfg := envConfig{Config: Config{
		Teams:      adminKeys("e2b_other", testKey),
		MaxTimeout: time.Hour,
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}}
	for _, m := range mutate {
		m(&cfg)
	}
	if b == nil {
		b = fake
	}
	s, err := NewServer(cfg.Config, b)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, srv: serve(t, s, fake, cfg.Proxy), fake: fake, logs: logs}
}

// serve puts s and a proxy resolving through r on one test listener, the
// way the server mounts them.
func serve(t *testing.T, s *Server, r cube.Resolver, pcfg proxy.Config) *httptest.Server {
	t.Helper()
	if pcfg.Domain == "" {
		pcfg.Domain = s.cfg.Domain
	}
	if pcfg.Logger == nil {
		pcfg.Logger = s.cfg.Logger
	}
	pcfg.IsAPIKey = s.IsAPIKey
	srv := httptest.NewServer(Mount(s, proxy.New(pcfg, r)))
	t.Cleanup(srv.Close)
	return srv
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (e *testEnv) do(method, path string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		js, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(js)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if h := req.Header.Get("Host"); h != "" {
		req.Host = h
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: data}
}

// wantError checks the E2B error shape and that the message mentions want.
func (r resp) wantError(t *testing.T, status int, want string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	var e wire.Error
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	if e.Code != status {
		t.Errorf("code %d in body, want %d", e.Code, status)
	}
	if !strings.Contains(e.Message, want) {
		t.Errorf("message %q does not mention %q", e.Message, want)
	}
}

func (r resp) decode(t *testing.T, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("body %q: %v", r.body, err)
		}
	}
}

// fields returns the top-level keys of a JSON object.
func fields(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return m
}

func (e *testEnv) create(tpl string, extra map[string]any) wire.Sandbox {
	e.t.Helper()
	body := map[string]any{"templateID": tpl}
	for k, v := range extra {
		body[k] = v
	}
	var sb wire.Sandbox
	e.do("POST", "/v2/sandboxes", body).decode(e.t, http.StatusCreated, &sb)
	return sb
}

func TestNewServerRequiresKeyAndBackend(t *testing.T) {
	if _, err := NewServer(Config{}, newFake()); err == nil {
		t.Error("NewServer without API keys succeeded")
	}
	if _, err := NewServer(Config{Teams: adminKeys("k")}, nil); err == nil {
		t.Error("NewServer without a backend succeeded")
	}
}

func TestHealthIsOpen(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/health", nil, "X-API-Key", "")
	var h wire.Health
	r.decode(t, http.StatusOK, &h)
	if h.Status != "ok" || h.Version == "" {
		t.Errorf("health = %+v", h)
	}
}

func TestAuth(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "").wantError(t, http.StatusUnauthorized, "API key")
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", testKey+"x").wantError(t, http.StatusUnauthorized, "API key")
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "").decode(t, http.StatusUnauthorized, nil)
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "", "Authorization", "Bearer "+testKey).decode(t, http.StatusOK, nil)
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "", "Authorization", "Bearer nope").wantError(t, http.StatusUnauthorized, "API key")
	// Any configured key works.
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "e2b_other").decode(t, http.StatusOK, nil)
	// Unauthenticated requests to unknown routes still get JSON 404.
	e.do("GET", "/nope", nil, "X-API-Key", "").wantError(t, http.StatusNotFound, "/nope")
}

func TestKeysAndTokensNeverLogged(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", map[string]any{"network": map[string]any{"allowPublicTraffic": false}})
	e.do("GET", "/v2/sandboxes", nil, "X-API-Key", "", "Authorization", "Bearer "+testKey)
	e.do("GET", "/sandboxes/"+sb.SandboxID, nil)
	logs := e.logs.String()
	if !strings.Contains(logs, "/sandboxes/"+sb.SandboxID) {
		t.Fatalf("access log lacks the request path:\n%s", logs)
	}
	for _, secret := range []string{testKey, sb.EnvdAccessToken, *sb.TrafficAccessToken} {
		if strings.Contains(logs, secret) {
			t.Errorf("log contains secret %q:\n%s", secret, logs)
		}
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t)
	e.do("GET", "/v3/whatever", nil).wantError(t, http.StatusNotFound, "/v3/whatever")
	r := e.do("PATCH", "/sandboxes/abc", nil)
	r.wantError(t, http.StatusMethodNotAllowed, "PATCH")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "DELETE") {
		t.Errorf("Allow = %q, want GET and DELETE", allow)
	}
}

func TestCreateSandbox(t *testing.T) {
	e := newEnv(t, func(c *envConfig) { c.Domain = "cube.test" })
	r := e.do("POST", "/v2/sandboxes", map[string]any{
		"templateID": "base", "timeout": 60,
		"metadata": map[string]string{"user": "ann"}, "envVars": map[string]string{"A": "1"},
		"autoPause": true, "autoResume": map[string]any{"enabled": true},
		"allow_internet_access": false,
		"network":               map[string]any{"allowOut": []string{"1.1.1.1"}, "denyOut": []string{"0.0.0.0/0"}},
		"futureField":           map[string]any{"x": 1},
	})
	m := fields(t, r.body)
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	for _, k := range []string{"templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken", "domain", "trafficAccessToken", "alias"} {
		if _, ok := m[k]; !ok {
			t.Errorf("create answer lacks %q: %s", k, r.body)
		}
	}
	if m["domain"] != "cube.test" || m["alias"] != "base" || m["trafficAccessToken"] != nil {
		t.Errorf("answer %s", r.body)
	}
	got := e.fake.lastCreate
	if got.Template != "base" || got.Timeout != time.Minute || got.Metadata["user"] != "ann" || got.EnvVars["A"] != "1" ||
		!got.AutoPause || !got.AutoPauseMemory || !got.AutoResume || !got.Secure ||
		got.Network.AllowInternetAccess == nil || *got.Network.AllowInternetAccess ||
		len(got.Network.AllowOut) != 1 || len(got.Network.DenyOut) != 1 {
		t.Errorf("backend got %+v", got)
	}
}

func TestCreateDefaults(t *testing.T) {
	e := newEnv(t)
	e.do("POST", "/sandboxes", map[string]any{"templateID": "base"}).decode(t, http.StatusCreated, nil)
	if c := e.fake.lastCreate; c.Timeout != 15*time.Second || c.Secure {
		t.Errorf("v1 defaults: %+v", c)
	}
	e.do("POST", "/sandboxes", map[string]any{"templateID": "base", "secure": true}).decode(t, http.StatusCreated, nil)
	if !e.fake.lastCreate.Secure {
		t.Error("v1 secure:true not passed on")
	}
	var sb wire.Sandbox
	e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}).decode(t, http.StatusCreated, &sb)
	if c := e.fake.lastCreate; c.Timeout != 300*time.Second || !c.Secure {
		t.Errorf("v2 defaults: %+v", c)
	}
	// No domain configured: null, which the SDKs read as "use your own".
	m := fields(t, e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}).body)
	if v, ok := m["domain"]; !ok || v != nil {
		t.Errorf("domain = %v (present %v), want null", v, ok)
	}
	if sb.EnvdAccessToken == "" {
		t.Error("no envdAccessToken")
	}
}

func TestCreateBadInput(t *testing.T) {
	e := newEnv(t, func(c *envConfig) { c.MaxBodyBytes = 512 })
	cases := []struct {
		name   string
		body   any
		status int
		want   string
	}{
		{"malformed", `{"templateID": "base",`, 400, "malformed JSON"},
		{"syntax", `{"templateID": base}`, 400, "malformed JSON"},
		{"not object", `[1,2]`, 400, "JSON object"},
		{"trailing", `{"templateID":"base"} {}`, 400, "after the top-level"},
		{"empty", ``, 400, "body is required"},
		{"no template", `{"timeout": 10}`, 400, "templateID"},
		{"timeout string", `{"templateID":"base","timeout":"10"}`, 400, `"timeout"`},
		{"timeout float", `{"templateID":"base","timeout":1.5}`, 400, `"timeout"`},
		{"metadata type", `{"templateID":"base","metadata":{"a":1}}`, 400, `metadata`},
		{"negative timeout", `{"templateID":"base","timeout":-1}`, 400, "timeout must be between"},
		{"huge timeout", `{"templateID":"base","timeout":3601}`, 400, "timeout must be between 1 and 3600"},
		{"giant timeout", `{"templateID":"base","timeout":99999999999999}`, 400, "timeout"},
		{"volume mount path", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/proc/x"}]}`, 400, "volumeMounts[0].path"},
		{"env name", `{"templateID":"base","envVars":{"A=B":"1"}}`, 400, "A=B"},
		{"too large", `{"templateID":"base","metadata":{"x":"` + strings.Repeat("x", 600) + `"}}`, 413, "larger than 512"},
		{"unknown template", `{"templateID":"nope"}`, 404, `"nope"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.do("POST", "/v2/sandboxes", c.body).wantError(t, c.status, c.want)
		})
	}
	// The server is unharmed.
	e.do("POST", "/v2/sandboxes", `{"templateID":"base"}`).decode(t, http.StatusCreated, nil)
}

func TestCreateLimitPassesThrough(t *testing.T) {
	e := newEnv(t)
	e.fake.maxCount = 1
	e.create("base", nil)
	r := e.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
	r.wantError(t, http.StatusTooManyRequests, "limit of 1")
	if ra := r.header.Get("Retry-After"); ra != "2" {
		t.Errorf("Retry-After = %q, want 2", ra)
	}
}

func TestGetAndKill(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", map[string]any{"metadata": map[string]string{"k": "v"}, "timeout": 100})
	r := e.do("GET", "/sandboxes/"+sb.SandboxID, nil)
	var d wire.SandboxDetail
	r.decode(t, http.StatusOK, &d)
	m := fields(t, r.body)
	for _, k := range []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "envdVersion", "cpuCount", "memoryMB", "diskSizeMB", "state", "metadata", "envdAccessToken", "lifecycle"} {
		if _, ok := m[k]; !ok {
			t.Errorf("detail lacks %q: %s", k, r.body)
		}
	}
	if d.State != "running" || d.Metadata["k"] != "v" || d.EndAt.Sub(d.StartedAt) != 100*time.Second || d.Lifecycle.OnTimeout != "kill" {
		t.Errorf("detail %+v", d)
	}
	if d.EnvdAccessToken != sb.EnvdAccessToken {
		t.Errorf("envdAccessToken %q, create said %q", d.EnvdAccessToken, sb.EnvdAccessToken)
	}
	e.do("GET", "/sandboxes/NOPE", nil).wantError(t, http.StatusBadRequest, "invalid sandbox ID")
	e.do("GET", "/sandboxes/zzz", nil).wantError(t, http.StatusNotFound, `"zzz"`)
	e.do("DELETE", "/sandboxes/"+sb.SandboxID, nil).decode(t, http.StatusNoContent, nil)
	e.do("DELETE", "/sandboxes/"+sb.SandboxID, nil).wantError(t, http.StatusNotFound, sb.SandboxID)
}

func TestListPaging(t *testing.T) {
	e := newEnv(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, e.create("base", nil).SandboxID)
	}
	var seen []string
	token := ""
	pages := 0
	for {
		path := "/v2/sandboxes?limit=2"
		if token != "" {
			path += "&nextToken=" + url.QueryEscape(token)
		}
		r := e.do("GET", path, nil)
		var items []wire.ListedSandbox
		r.decode(t, http.StatusOK, &items)
		pages++
		for _, it := range items {
			seen = append(seen, it.SandboxID)
		}
		token = r.header.Get("X-Next-Token")
		if token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	// Newest first.
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("listed %v, want %v", seen, want)
	}
	var asc []wire.ListedSandbox
	e.do("GET", "/v2/sandboxes?order=asc&limit=1", nil).decode(t, http.StatusOK, &asc)
	if len(asc) != 1 || asc[0].SandboxID != ids[0] {
		t.Errorf("asc first = %v", asc)
	}
	e.do("GET", "/v2/sandboxes?limit=0", nil).wantError(t, 400, "limit")
	e.do("GET", "/v2/sandboxes?limit=101", nil).wantError(t, 400, "limit")
	e.do("GET", "/v2/sandboxes?limit=x", nil).wantError(t, 400, "limit")
	e.do("GET", "/v2/sandboxes?nextToken=%21%21", nil).wantError(t, 400, "nextToken")
	e.do("GET", "/v2/sandboxes?order=up", nil).wantError(t, 400, "order")
}

// jsMetadataQuery builds the metadata parameter the way the JS SDK does:
// each key and value through encodeURIComponent, the pairs through
// URLSearchParams, and the result through the query serializer again.
func jsMetadataQuery(md map[string]string) string {
	inner := url.Values{}
	for k, v := range md {
		inner.Set(encodeURIComponent(k), encodeURIComponent(v))
	}
	return "metadata=" + encodeURIComponent(inner.Encode())
}

func encodeURIComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

func TestListMetadataAndStateFilter(t *testing.T) {
	e := newEnv(t)
	md := map[string]string{"user": "ann smith", "app": "a&b=c/d%"}
	match := e.create("base", map[string]any{"metadata": md})
	e.create("base", map[string]any{"metadata": map[string]string{"user": "ann smith"}})
	paused := e.create("base", map[string]any{"metadata": md})
	e.do("POST", "/sandboxes/"+paused.SandboxID+"/pause", nil).decode(t, http.StatusNoContent, nil)

	var items []wire.ListedSandbox
	e.do("GET", "/v2/sandboxes?"+jsMetadataQuery(md)+"&state=running", nil).decode(t, http.StatusOK, &items)
	if len(items) != 1 || items[0].SandboxID != match.SandboxID {
		t.Fatalf("metadata+running filter = %+v", items)
	}
	e.do("GET", "/v2/sandboxes?"+jsMetadataQuery(md), nil).decode(t, http.StatusOK, &items)
	if len(items) != 2 {
		t.Fatalf("metadata filter, both states = %d items", len(items))
	}
	e.do("GET", "/v2/sandboxes?state=paused", nil).decode(t, http.StatusOK, &items)
	if len(items) != 1 || items[0].SandboxID != paused.SandboxID || items[0].State != "paused" {
		t.Fatalf("paused filter = %+v", items)
	}
	e.do("GET", "/v2/sandboxes?state=running,paused", nil).decode(t, http.StatusOK, &items)
	if len(items) != 3 {
		t.Fatalf("running,paused = %d items", len(items))
	}
	// A once-encoded filter (other clients) works too.
	e.do("GET", "/v2/sandboxes?metadata="+url.QueryEscape("user=ann+smith"), nil).decode(t, http.StatusOK, &items)
	if len(items) != 3 {
		t.Errorf("once-encoded filter = %d items, want 3", len(items))
	}
	// The legacy list is running only.
	e.do("GET", "/sandboxes?"+jsMetadataQuery(md), nil).decode(t, http.StatusOK, &items)
	if len(items) != 1 || items[0].SandboxID != match.SandboxID {
		t.Errorf("legacy list = %+v", items)
	}
	e.do("GET", "/v2/sandboxes?state=sleeping", nil).wantError(t, 400, "sleeping")
}

func TestTimeoutRefreshConnect(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID
	e.do("POST", path+"/timeout", map[string]any{"timeout": 30}).decode(t, http.StatusNoContent, nil)
	if lt := e.fake.lastTimeout; lt.d != 30*time.Second || lt.extendOnly {
		t.Errorf("timeout → %+v", lt)
	}
	e.do("POST", path+"/timeout", `{}`).wantError(t, 400, "timeout is required")
	e.do("POST", path+"/timeout", map[string]any{"timeout": 7200}).wantError(t, 400, "timeout must be between 0 and 3600")
	e.do("POST", "/sandboxes/zzz/timeout", map[string]any{"timeout": 30}).wantError(t, 404, "zzz")

	e.do("POST", path+"/refreshes", map[string]any{"duration": 60}).decode(t, http.StatusNoContent, nil)
	if lt := e.fake.lastTimeout; lt.d != time.Minute || !lt.extendOnly {
		t.Errorf("refresh → %+v", lt)
	}
	e.do("POST", path+"/refreshes", nil).decode(t, http.StatusNoContent, nil)
	e.do("POST", path+"/refreshes", map[string]any{"duration": 3601}).wantError(t, 400, "duration")

	var c wire.Sandbox
	e.do("POST", "/v2"+path+"/connect", nil).decode(t, http.StatusOK, &c)
	if c.SandboxID != sb.SandboxID || c.EnvdAccessToken != sb.EnvdAccessToken || e.fake.lastConnect.Timeout != 300*time.Second {
		t.Errorf("connect v2 = %+v, backend %+v", c, e.fake.lastConnect)
	}
	e.do("POST", path+"/connect", `{}`).wantError(t, 400, "timeout is required")
	e.do("POST", path+"/connect", map[string]any{"timeout": 20}).decode(t, http.StatusOK, nil)

	e.do("POST", path+"/pause", map[string]any{"memory": true}).decode(t, http.StatusNoContent, nil)
	e.do("POST", path+"/pause", nil).wantError(t, http.StatusConflict, "already paused")
	e.do("POST", "/v2"+path+"/connect", map[string]any{"timeout": 10}).decode(t, http.StatusCreated, &c)

	e.do("POST", path+"/resume", nil).wantError(t, http.StatusConflict, "already running")
	e.do("POST", path+"/pause", nil).decode(t, http.StatusNoContent, nil)
	// As on E2B, a paused sandbox's timeout cannot be set or refreshed: it
	// is not found there (e2b 2.0 to 2.4 connect by setting the timeout,
	// resuming when that fails).
	e.fake.lastTimeout.id = ""
	e.do("POST", path+"/timeout", map[string]any{"timeout": 30}).wantError(t, http.StatusNotFound, "doesn't exist or you don't have access to it")
	e.do("POST", path+"/refreshes", map[string]any{"duration": 60}).wantError(t, http.StatusNotFound, sb.SandboxID)
	if lt := e.fake.lastTimeout; lt.id != "" {
		t.Errorf("the timeout of a paused sandbox was set: %+v", lt)
	}
	e.do("POST", path+"/resume", map[string]any{"timeout": 50, "autoPause": true}).decode(t, http.StatusCreated, &c)
	if lc := e.fake.lastConnect; !lc.RequirePaused || lc.Timeout != 50*time.Second || lc.AutoPause == nil || !*lc.AutoPause {
		t.Errorf("resume → %+v", lc)
	}
}

func TestMetricsAndLogs(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID
	var ms []wire.SandboxMetric
	r := e.do("GET", path+"/metrics?start=1&end=2", nil)
	r.decode(t, http.StatusOK, &ms)
	if len(ms) != 2 || ms[0].CPUUsedPct != 12.5 || ms[0].TimestampUnix != ms[0].Timestamp.Unix() {
		t.Errorf("metrics %s", r.body)
	}
	var arr []map[string]any
	_ = json.Unmarshal(r.body, &arr)
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := arr[0][k]; !ok {
			t.Errorf("metric lacks %q", k)
		}
	}
	e.do("GET", path+"/metrics?start=5&end=2", nil).wantError(t, 400, "before start")
	e.do("GET", path+"/metrics?start=abc", nil).wantError(t, 400, "start")

	var bulk wire.SandboxesWithMetrics
	e.do("GET", "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+",zzz", nil).decode(t, http.StatusOK, &bulk)
	if len(bulk.Sandboxes) != 1 || bulk.Sandboxes[sb.SandboxID].MemTotal != 512<<20 {
		t.Errorf("bulk metrics %+v", bulk)
	}
	e.do("GET", "/sandboxes/metrics", nil).wantError(t, 400, "sandbox_ids")

	var v1 wire.SandboxLogs
	e.do("GET", path+"/logs", nil).decode(t, http.StatusOK, &v1)
	if len(v1.Logs) != 3 || len(v1.LogEntries) != 3 || !strings.Contains(v1.Logs[0].Line, "sandbox created") {
		t.Errorf("v1 logs %+v", v1)
	}
	var v2 wire.SandboxLogsV2
	e.do("GET", "/v2"+path+"/logs?level=info", nil).decode(t, http.StatusOK, &v2)
	if len(v2.Logs) != 2 || v2.Logs[1].Message != "process exited" || v2.Logs[1].Fields["exit"] != "1" {
		t.Errorf("v2 level filter %+v", v2)
	}
	e.do("GET", "/v2"+path+"/logs?direction=backward&limit=1", nil).decode(t, http.StatusOK, &v2)
	if len(v2.Logs) != 1 || v2.Logs[0].Message != "process exited" {
		t.Errorf("v2 backward %+v", v2)
	}
	e.do("GET", "/v2"+path+"/logs?search=started", nil).decode(t, http.StatusOK, &v2)
	if len(v2.Logs) != 1 || v2.Logs[0].Level != "debug" {
		t.Errorf("v2 search %+v", v2)
	}
	e.do("GET", "/v2"+path+"/logs?level=loud", nil).wantError(t, 400, "loud")
	e.do("GET", "/v2/sandboxes/zzz/logs", nil).wantError(t, 404, "zzz")
}

func TestTemplates(t *testing.T) {
	e := newEnv(t)
	var ts []wire.Template
	r := e.do("GET", "/templates", nil)
	r.decode(t, http.StatusOK, &ts)
	if len(ts) != 1 || ts[0].TemplateID != "base0000000000000000" || ts[0].BuildStatus != "ready" || len(ts[0].Aliases) != 2 {
		t.Errorf("templates %s", r.body)
	}
	if ts[0].LastSpawnedAt != nil {
		t.Errorf("lastSpawnedAt = %v, want null", ts[0].LastSpawnedAt)
	}
	var tw wire.TemplateWithBuilds
	e.do("GET", "/templates/code-interpreter-v1", nil).decode(t, http.StatusOK, &tw)
	if tw.TemplateID != "base0000000000000000" || len(tw.Builds) != 1 || tw.Builds[0].BuildID != "b1" {
		t.Errorf("template %+v", tw)
	}
	e.do("GET", "/templates/nope", nil).wantError(t, 404, `"nope"`)
	// The SDK's Template.exists asks /templates/aliases/{alias}.
	for _, name := range []string{"code-interpreter-v1", "base0000000000000000"} {
		var a wire.TemplateAliasResponse
		e.do("GET", "/templates/aliases/"+name, nil).decode(t, http.StatusOK, &a)
		if a.TemplateID != "base0000000000000000" || !a.Public {
			t.Errorf("alias %s: %+v", name, a)
		}
	}
	e.do("GET", "/templates/aliases/nope", nil).wantError(t, 404, `"nope"`)
	e.do("GET", "/templates/aliases/a%0Ab", nil).wantError(t, 400, "invalid template alias")
	e.do("DELETE", "/templates/base0000000000000000", nil).decode(t, http.StatusNoContent, nil)
	e.do("DELETE", "/templates/base0000000000000000", nil).wantError(t, 404, "base0000000000000000")
}

func TestSnapshotsForkRollback(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", nil)
	other := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID
	var s1, s2 wire.SnapshotInfo
	e.do("POST", path+"/snapshots", map[string]any{"name": "first"}).decode(t, http.StatusCreated, &s1)
	if s1.SnapshotID == "" || len(s1.Names) != 1 || s1.Names[0] != "first" {
		t.Errorf("snapshot %+v", s1)
	}
	e.do("POST", path+"/snapshots", nil).decode(t, http.StatusCreated, &s2)
	if s2.Names == nil {
		t.Error("names is null, want []")
	}
	e.do("POST", "/sandboxes/"+other.SandboxID+"/snapshots", nil).decode(t, http.StatusCreated, nil)

	r := e.do("GET", "/snapshots?sandboxID="+sb.SandboxID+"&limit=1", nil)
	var list []wire.SnapshotInfo
	r.decode(t, http.StatusOK, &list)
	if len(list) != 1 || list[0].SnapshotID != s2.SnapshotID || r.header.Get("X-Next-Token") == "" {
		t.Errorf("snapshot page 1 %+v next %q", list, r.header.Get("X-Next-Token"))
	}
	r = e.do("GET", "/snapshots?sandboxID="+sb.SandboxID+"&limit=1&nextToken="+r.header.Get("X-Next-Token"), nil)
	r.decode(t, http.StatusOK, &list)
	if len(list) != 1 || list[0].SnapshotID != s1.SnapshotID || r.header.Get("X-Next-Token") != "" {
		t.Errorf("snapshot page 2 %+v", list)
	}

	var forks []wire.ForkResult
	e.do("POST", path+"/fork", map[string]any{"count": 2, "timeout": 30}).decode(t, http.StatusCreated, &forks)
	if len(forks) != 2 || forks[0].Sandbox == nil || forks[0].Error != nil || forks[1].Error == nil || forks[1].Error.Code != 507 {
		t.Errorf("fork %+v", forks)
	}
	e.do("POST", path+"/fork", map[string]any{"count": 101}).wantError(t, 400, "count")
	e.do("POST", path+"/clone", map[string]any{"count": 1, "concurrency": 1}).decode(t, http.StatusCreated, &forks)
	if len(forks) != 1 || forks[0].Sandbox == nil {
		t.Errorf("clone %+v", forks)
	}

	var rb wire.RollbackResult
	e.do("POST", path+"/rollback", map[string]any{"snapshotID": s1.SnapshotID}).decode(t, http.StatusOK, &rb)
	if rb.SandboxID != sb.SandboxID || rb.SnapshotID != s1.SnapshotID || rb.Status != "completed" {
		t.Errorf("rollback %+v", rb)
	}
	e.do("POST", "/sandboxes/"+other.SandboxID+"/rollback", map[string]any{"snapshotID": s1.SnapshotID}).wantError(t, 403, "not taken")
	e.do("POST", path+"/rollback", `{}`).wantError(t, 400, "snapshotID")
	e.do("DELETE", "/templates/"+s1.SnapshotID, nil).decode(t, http.StatusNoContent, nil)
}

func TestNetworkUpdate(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", nil)
	e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", map[string]any{"allowOut": []string{"example.com"}, "allow_internet_access": false}).decode(t, http.StatusNoContent, nil)
	if n := e.fake.lastNetwork; len(n.AllowOut) != 1 || n.AllowInternetAccess == nil || *n.AllowInternetAccess {
		t.Errorf("network → %+v", n)
	}
	e.do("PUT", "/sandboxes/"+sb.SandboxID+"/network", `{"allowOut":"x"}`).wantError(t, 400, "allowOut")
}

func TestOptionalOperationsAnswer501(t *testing.T) {
	fake := newFake()
	e := newEnvWith(t, fake, coreOnly{fake})
	sb := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID
	e.do("POST", path+"/pause", nil).wantError(t, 501, "pausing")
	e.do("POST", path+"/snapshots", nil).wantError(t, 501, "snapshots")
	e.do("GET", "/snapshots", nil).wantError(t, 501, "snapshots")
	e.do("POST", path+"/fork", nil).wantError(t, 501, "snapshots")
	e.do("PUT", path+"/network", `{}`).wantError(t, 501, "network")
}

func TestPrometheusMetrics(t *testing.T) {
	e := newEnv(t)
	e.create("base", nil)
	sb := e.create("base", nil)
	e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil)
	e.do("GET", "/sandboxes/zzz", nil)
	e.do("POST", "/v2/sandboxes", `{"templateID":"nope"}`)
	r := e.do("GET", "/metrics", nil, "X-API-Key", "")
	if r.status != 200 {
		t.Fatalf("metrics status %d", r.status)
	}
	text := string(r.body)
	for _, want := range []string{
		`cube_sandboxes{state="running"} 1`,
		`cube_sandboxes{state="paused"} 1`,
		`cube_sandbox_create_duration_seconds_count{result="ok"} 2`,
		`cube_sandbox_create_duration_seconds_count{result="error"} 1`,
		`cube_http_errors_total{code="404",route="GET /sandboxes/{sandboxID}"} 1`,
		`cube_http_requests_total{code="201",route="POST /v2/sandboxes"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/openapi.yml", nil, "X-API-Key", "")
	if r.status != 200 || !strings.Contains(string(r.body), "openapi: 3") {
		t.Errorf("GET /openapi.yml: %d %.100s", r.status, r.body)
	}
}

// Only the API peers call (Over) takes a resume's move from its header:
// the header is a node's, signed with what it sends, and a client's would
// otherwise move any sandbox paused on disk away from its node.
func TestMoveFromHeaderOnlyFromPeers(t *testing.T) {
	e := newEnv(t)
	sb := e.create("base", nil)
	path := "/sandboxes/" + sb.SandboxID
	e.do("POST", path+"/connect", map[string]any{"timeout": 20}, MoveFromHeader, "node-c").decode(t, http.StatusOK, nil)
	if from := e.fake.lastConnect.MoveFrom; from != "" {
		t.Fatalf("a client's %s moved the sandbox from %q", MoveFromHeader, from)
	}

	s, err := NewServer(Config{Teams: adminKeys(testKey), MaxTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler)}, e.fake)
	if err != nil {
		t.Fatal(err)
	}
	peers := &testEnv{t: t, srv: serve(t, s.Over(e.fake), e.fake, proxy.Config{}), fake: e.fake}
	peers.do("POST", path+"/connect", map[string]any{"timeout": 20}, MoveFromHeader, "node-c").decode(t, http.StatusOK, nil)
	if from := e.fake.lastConnect.MoveFrom; from != "node-c" {
		t.Fatalf("a peer's connect moved the sandbox from %q, want node-c", from)
	}
	e.do("POST", path+"/pause", nil).decode(t, http.StatusNoContent, nil)
	peers.do("POST", path+"/resume", map[string]any{"timeout": 20}, MoveFromHeader, "node-d").decode(t, http.StatusCreated, nil)
	if from := e.fake.lastConnect.MoveFrom; from != "node-d" {
		t.Fatalf("a peer's resume moved the sandbox from %q, want node-d", from)
	}
	peers.do("POST", "/v2"+path+"/connect", nil).decode(t, http.StatusOK, nil)
	if from := e.fake.lastConnect.MoveFrom; from != "" {
		t.Fatalf("a peer's connect without the header moved the sandbox from %q", from)
	}
}
