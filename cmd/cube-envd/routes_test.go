package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	"cube/internal/envd"
	fspb "cube/internal/envd/gen/filesystem"
	pb "cube/internal/envd/gen/process"
	"cube/internal/envd/reap"
	"cube/internal/envd/users"
)

// wantPublic are the only routes that may answer without credentials, and
// why: widening this list is a decision, not a side effect.
var wantPublic = map[string][]string{
	// The control plane polls it before /init hands out a token.
	"envd": {"GET /health"},
	// A readiness probe waiting for the warm default kernel.
	"code interpreter, contexts need the token": {"GET /health"},
	// By default also the context routes: @e2b/code-interpreter up to
	// 2.8.0 sends the token with /execute only.
	"code interpreter": {"DELETE /contexts/{id}", "GET /contexts", "GET /health", "POST /contexts", "POST /contexts/{id}/restart"},
}

// connectFiles are the descriptors of every Connect service envd serves.
var connectFiles = []protoreflect.FileDescriptor{pb.File_process_process_proto, fspb.File_filesystem_filesystem_proto}

// probe is one request to a route.
type probe struct{ method, path, contentType string }

var wildcard = regexp.MustCompile(`\{[^}]*\}`)

// probesFor turns a ServeMux pattern into requests that reach it.
func probesFor(pattern string) []probe {
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		method, path = "", pattern
	}
	path = wildcard.ReplaceAllString(path, "x")
	if strings.HasSuffix(path, "/") {
		path += "x"
	}
	if method != "" {
		return []probe{{method, path, "application/json"}}
	}
	return []probe{{"GET", path, "application/json"}, {"POST", path, "application/json"}}
}

// connectProbes is a call of every procedure of every Connect service
// envd registers, straight from the generated descriptors, so a new RPC is
// covered without touching this test.
func connectProbes(t *testing.T, routes []string) []probe {
	t.Helper()
	var out []probe
	served := map[string]bool{}
	for _, fd := range connectFiles {
		for i := 0; i < fd.Services().Len(); i++ {
			svc := fd.Services().Get(i)
			prefix := "/" + string(svc.FullName()) + "/"
			if !slices.Contains(routes, prefix) {
				t.Errorf("service %s is described but envd does not serve it", svc.FullName())
			}
			served[prefix] = true
			for j := 0; j < svc.Methods().Len(); j++ {
				m := svc.Methods().Get(j)
				ct := "application/json"
				if m.IsStreamingClient() || m.IsStreamingServer() {
					ct = "application/connect+json"
				}
				out = append(out, probe{"POST", prefix + string(m.Name()), ct})
			}
		}
	}
	for _, r := range routes {
		if strings.HasPrefix(r, "/") && strings.HasSuffix(r, "/") && !served[r] {
			t.Errorf("envd serves %s, a service this test has no descriptor for: add it to connectFiles", r)
		}
	}
	return out
}

func send(t *testing.T, h http.Handler, p probe, token string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(p.method, p.path, strings.NewReader(`{"context_id":"no-such-context","cwd":"/no/such/dir"}`))
	req.Header.Set("Content-Type", p.contentType)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

// walk checks every route of one server: 401 without the token and with a
// wrong one, except the public routes; and, with the token, no 401, so the
// probes really reach the routes they name.
func walk(t *testing.T, name string, h http.Handler, patterns []string, public map[string]string, probes []probe) {
	t.Helper()
	var gotPublic []string
	for p, why := range public {
		gotPublic = append(gotPublic, p)
		if why == "" {
			t.Errorf("%s: public route %s gives no reason", name, p)
		}
		if !slices.Contains(patterns, p) {
			t.Errorf("%s: public route %s is not served", name, p)
		}
	}
	slices.Sort(gotPublic)
	if want := wantPublic[name]; !slices.Equal(gotPublic, want) {
		t.Errorf("%s: public routes are %v, want %v", name, gotPublic, want)
	}
	for _, pattern := range patterns {
		if strings.HasPrefix(pattern, "/") && strings.HasSuffix(pattern, "/") && name == "envd" {
			continue // a Connect service: its procedures are probed one by one
		}
		for _, p := range probesFor(pattern) {
			p := p
			if public[pattern] != "" {
				if st, body := send(t, h, p, ""); st == http.StatusUnauthorized {
					t.Errorf("%s: public %s %s refused: %d %s", name, p.method, p.path, st, body)
				}
				continue
			}
			probes = append(probes, p)
		}
	}
	probes = append(probes, probe{"GET", "/no-such-route", "application/json"})
	for _, p := range probes {
		for _, token := range []string{"", "wrong-token"} {
			if st, body := send(t, h, p, token); st != http.StatusUnauthorized {
				t.Errorf("%s: %s %s with token %q: %d %s, want 401", name, p.method, p.path, token, st, body)
			}
		}
		if p.path == "/no-such-route" {
			continue
		}
		if st, body := send(t, h, p, routeToken); st == http.StatusUnauthorized {
			t.Errorf("%s: %s %s with the token: %d %s", name, p.method, p.path, st, body)
		}
	}
}

const routeToken = "route-walk-token"

// Every route of envd (its plain routes and every Connect procedure) and
// of the code interpreter, as cube-envd wires them, wants the access token
// unless it is one of the few named public routes.
func TestEveryRouteNeedsTheToken(t *testing.T) {
	cur, err := users.Current()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := envd.New(envd.Options{Logger: log, DefaultUser: cur.Name, DefaultWorkdir: t.TempDir(), AccessToken: routeToken})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	walk(t, "envd", srv.Handler(), srv.Routes(), envd.PublicRoutes, connectProbes(t, srv.Routes()))

	ci := codeInterpreter(srv, reap.New(), log)
	defer ci.Close()
	srv.State.SetContextsNeedToken(true)
	walk(t, "code interpreter, contexts need the token", ci.Handler(), ci.Routes(), ci.OpenRoutes(), nil)
	srv.State.SetContextsNeedToken(false)
	walk(t, "code interpreter", ci.Handler(), ci.Routes(), ci.OpenRoutes(), nil)
}

// The control plane closes the context routes of a running sandbox
// through /init, without rebuilding its template.
func TestInitClosesContextRoutes(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv, err := envd.New(envd.Options{Logger: log, DefaultWorkdir: t.TempDir(), AccessToken: routeToken})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ci := codeInterpreter(srv, reap.New(), log)
	defer ci.Close()
	status := func(h http.Handler, method, path, token, body string) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if got := status(ci.Handler(), "GET", "/contexts", "", ""); got == http.StatusUnauthorized {
		t.Fatalf("GET /contexts without token before /init: 401, want open by default")
	}
	init := fmt.Sprintf(`{"codeContextsNeedToken":true,"timestamp":%q}`, time.Now().UTC().Format(time.RFC3339Nano))
	if got := status(srv.Handler(), "POST", "/init", routeToken, init); got != http.StatusNoContent {
		t.Fatalf("/init: %d", got)
	}
	if got := status(ci.Handler(), "GET", "/contexts", "", ""); got != http.StatusUnauthorized {
		t.Fatalf("GET /contexts without token after /init closed them: %d, want 401", got)
	}
	if got := status(ci.Handler(), "GET", "/contexts", routeToken, ""); got != http.StatusOK {
		t.Fatalf("GET /contexts with the token: %d, want 200", got)
	}
}
