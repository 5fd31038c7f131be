package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/api/wire"
)

// TestFromEnvKeyOrder: CUBE_API_KEY, then the data dir's api-key, and
// E2B_API_KEY only when neither is there: in an E2B user's shell it is
// the key of their E2B account, which must not go to a Cube server.
func TestFromEnvKeyOrder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("e2b_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvURL, "")
	t.Setenv(EnvE2BKey, "e2b_e2b")
	t.Setenv(EnvKey, "")
	c, err := FromEnv(dir)
	if err != nil || c.APIKey != "e2b_fromfile" || c.BaseURL != DefaultURL {
		t.Fatalf("the data dir's key under E2B_API_KEY: %+v %v", c, err)
	}
	t.Setenv(EnvKey, "e2b_cube")
	t.Setenv(EnvURL, "http://example.test:9/")
	if c, _ := FromEnv(dir); c.APIKey != "e2b_cube" || c.BaseURL != "http://example.test:9" {
		t.Errorf("CUBE_API_KEY / URL: %+v", c)
	}
	t.Setenv(EnvKey, "")
	if c, err := FromEnv(t.TempDir()); err != nil || c.APIKey != "e2b_e2b" {
		t.Errorf("E2B_API_KEY, the last resort: %+v %v", c, err)
	}
	t.Setenv(EnvURL, "ftp://x")
	if _, err := FromEnv(dir); err == nil || !strings.Contains(err.Error(), EnvURL) {
		t.Errorf("bad URL accepted: %v", err)
	}
	t.Setenv(EnvURL, "")
	t.Setenv(EnvE2BKey, "")
	if _, err := FromEnv(t.TempDir()); err == nil || !strings.Contains(err.Error(), "api-key") || !strings.Contains(err.Error(), EnvKey) {
		t.Errorf("missing key: %v", err)
	}
}

func TestListFollowsPagesAndErrors(t *testing.T) {
	var gotKeys, gotMeta []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKeys = append(gotKeys, r.Header.Get("X-API-Key"))
		switch {
		case r.URL.Path == "/v2/sandboxes" && r.URL.Query().Get("nextToken") == "":
			gotMeta = append(gotMeta, r.URL.Query().Get("metadata"), r.URL.Query().Get("state"))
			w.Header().Set("X-Next-Token", "p2")
			json.NewEncoder(w).Encode([]wire.ListedSandbox{{SandboxID: "a"}})
		case r.URL.Path == "/v2/sandboxes":
			json.NewEncoder(w).Encode([]wire.ListedSandbox{{SandboxID: "b"}})
		default:
			w.WriteHeader(http.StatusNotFound)
			json.NewEncoder(w).Encode(wire.Error{Code: 404, Message: "sandbox \"x\" not found"})
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k1")
	items, err := c.ListSandboxes(context.Background(), ListOptions{States: []string{"running"}, Metadata: map[string]string{"user": "a b"}})
	if err != nil || len(items) != 2 || items[0].SandboxID != "a" || items[1].SandboxID != "b" {
		t.Fatalf("list = %+v, %v", items, err)
	}
	if gotKeys[0] != "k1" || gotMeta[0] != "user=a+b" || gotMeta[1] != "running" {
		t.Errorf("request: keys %v meta %v", gotKeys, gotMeta)
	}
	_, err = c.GetSandbox(context.Background(), "x")
	if !IsNotFound(err) || !strings.Contains(err.Error(), `sandbox "x" not found`) {
		t.Errorf("get unknown: %v", err)
	}
}

func TestCreateSandboxAndErrorKinds(t *testing.T) {
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body wire.NewSandbox
		json.NewDecoder(r.Body).Decode(&body)
		sent = append(sent, r.Method+" "+r.URL.Path+" "+body.TemplateID)
		switch {
		case r.URL.Path == "/sandboxes" && body.TemplateID == "base":
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(wire.Sandbox{SandboxID: "sb1", TemplateID: "base"})
		case r.URL.Path == "/sandboxes" && body.TemplateID == "empty":
			w.WriteHeader(http.StatusCreated)
			json.NewEncoder(w).Encode(wire.Sandbox{})
		case r.URL.Path == "/sandboxes/x/snapshots":
			w.WriteHeader(http.StatusNotImplemented)
			json.NewEncoder(w).Encode(wire.Error{Code: 501, Message: "snapshots are not supported"})
		case r.URL.Path == "/sandboxes/x/teapot":
			w.WriteHeader(http.StatusBadGateway)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	ctx := context.Background()

	sb, err := c.CreateSandbox(ctx, wire.NewSandbox{TemplateID: "base"})
	if err != nil || sb.SandboxID != "sb1" {
		t.Fatalf("create = %+v, %v", sb, err)
	}
	if _, err := c.CreateSandbox(ctx, wire.NewSandbox{TemplateID: "empty"}); err == nil || !strings.Contains(err.Error(), "no sandboxID") {
		t.Errorf("answer without an ID: %v", err)
	}

	// A JSON 501 and a route the router does not know both mean the
	// server lacks the operation; only the JSON one is the server's word.
	_, err = c.CreateSnapshot(ctx, "x", "")
	var ae *APIError
	if !Unsupported(err) || !errors.As(err, &ae) || ae.Raw || ae.RouteMissing() || ae.Method != "POST" || ae.Path != "/sandboxes/x/snapshots" {
		t.Errorf("501: %+v", err)
	}
	_, err = c.ForkSandbox(ctx, "x", 1)
	if !Unsupported(err) || !errors.As(err, &ae) || !ae.RouteMissing() || !IsNotFound(err) {
		t.Errorf("unknown route: %#v", err)
	}
	if err.Error() != "server answered 404: 404 page not found" {
		t.Errorf("unknown route reads %q", err)
	}
	_, err = c.Do(ctx, http.MethodGet, "/sandboxes/x/teapot", nil, nil, nil)
	if Unsupported(err) || err.Error() != "server answered 502: Bad Gateway" {
		t.Errorf("empty 502: %v", err)
	}
}
