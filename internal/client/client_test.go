package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/api/wire"
)

func TestFromEnvKeyOrder(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("e2b_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvURL, "")
	t.Setenv(EnvE2BKey, "")
	t.Setenv(EnvKey, "")
	c, err := FromEnv(dir)
	if err != nil || c.APIKey != "e2b_fromfile" || c.BaseURL != DefaultURL {
		t.Fatalf("file key: %+v %v", c, err)
	}
	t.Setenv(EnvKey, "e2b_cube")
	if c, _ := FromEnv(dir); c.APIKey != "e2b_cube" {
		t.Errorf("CUBE_API_KEY ignored: %q", c.APIKey)
	}
	t.Setenv(EnvE2BKey, "e2b_e2b")
	t.Setenv(EnvURL, "http://example.test:9/")
	if c, _ := FromEnv(dir); c.APIKey != "e2b_e2b" || c.BaseURL != "http://example.test:9" {
		t.Errorf("E2B_API_KEY / URL: %+v", c)
	}
	t.Setenv(EnvURL, "ftp://x")
	if _, err := FromEnv(dir); err == nil || !strings.Contains(err.Error(), EnvURL) {
		t.Errorf("bad URL accepted: %v", err)
	}
	t.Setenv(EnvURL, "")
	t.Setenv(EnvE2BKey, "")
	t.Setenv(EnvKey, "")
	if _, err := FromEnv(t.TempDir()); err == nil || !strings.Contains(err.Error(), "api-key") {
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
