package server

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/store"
)

// The forwarding's check of a credential takes what the API takes: the
// key in X-API-Key or as a bearer token, a volume's token on that volume's
// content routes only, and nothing on the build file uploads, whose links
// carry their own signature.
func TestForwardingTakesTheAPIsCredentials(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Volumes().Put(context.Background(), &store.Volume{ID: "vol1", Name: "data", State: store.VolumeReady, Token: "vtok_1"}); err != nil {
		t.Fatal(err)
	}
	ok := authorized(func(k string) bool { return k == "e2b_key" }, st)
	for _, c := range []struct {
		method, path, header, value string
		want                        bool
	}{
		{"POST", "/sandboxes", "", "", false},
		{"POST", "/sandboxes", "X-API-Key", "e2b_wrong", false},
		{"POST", "/sandboxes", "X-API-Key", "e2b_key", true},
		{"POST", "/sandboxes", "Authorization", "Bearer e2b_key", true},
		{"GET", "/volumecontent/vol1/file?path=/a", "Authorization", "Bearer vtok_1", true},
		{"GET", "/volumecontent/vol1/file?path=/a", "Authorization", "Bearer vtok_2", false},
		{"GET", "/volumecontent/vol2/file?path=/a", "Authorization", "Bearer vtok_1", false},
		{"GET", "/volumes/vol1", "Authorization", "Bearer vtok_1", false},
		{"PUT", "/templates/t1/files/abc/upload?expires=1&signature=x", "", "", true},
		{"GET", "/templates/t1/files/abc", "", "", false},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		if c.header != "" {
			r.Header.Set(c.header, c.value)
		}
		if got := ok(r); got != c.want {
			t.Errorf("%s %s with %s %q: %v, want %v", c.method, c.path, c.header, c.value, got, c.want)
		}
	}
}

// A node of a cluster passes clients' API keys and sandbox tokens on to
// its peers: it does not start without mutual TLS between them.
func TestClusterNeedsPeerTLS(t *testing.T) {
	o := Options{DataDir: t.TempDir(), Store: "postgres://cube@127.0.0.1:1/cube", ClusterSecret: "0123456789abcdef0123"}
	err := Run(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "--peer-listen") || !strings.Contains(err.Error(), "--cluster-insecure-transport") {
		t.Fatalf("a node of a cluster without --peer-listen: %v", err)
	}
}
