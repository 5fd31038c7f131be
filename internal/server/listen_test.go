package server

import (
	"context"
	"path/filepath"
	"testing"

	"cube/internal/store"
)

// TestACMEPolicyOnlyLiveSandboxes: ACME is asked for the API's name and
// the canonical host of a sandbox the server holds, and for nothing else,
// so made-up names cannot use up the domain's certificate limit.
func TestACMEPolicyOnlyLiveSandboxes(t *testing.T) {
	var asked []string
	live := func(_ context.Context, id string) bool {
		asked = append(asked, id)
		return id == "abc123"
	}
	policy := acmePolicy("Cube.Example.com.", live)
	ctx := context.Background()
	for _, host := range []string{"api.cube.example.com", "cube.example.com", "49983-abc123.cube.example.com", "8080-ABC123.cube.example.com."} {
		if err := policy(ctx, host); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	for _, host := range []string{
		"49983-nosuchsandbox.cube.example.com", // no such sandbox
		"049983-abc123.cube.example.com",       // another spelling of a live host
		"49983-abc123-x1.cube.example.com",
		"0-abc123.cube.example.com",
		"49983-abc123.other.example.com",
		"www.cube.example.com",
		"example.com",
	} {
		if err := policy(ctx, host); err == nil {
			t.Errorf("%s is allowed a certificate", host)
		}
	}
	if len(asked) != 3 {
		t.Errorf("the sandboxes were looked up for %v, want only the three well-formed hosts", asked)
	}
}

// TestLiveSandbox: the policy's lookup is the store's record, a sandbox
// being killed counting as gone.
func TestLiveSandbox(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, sb := range []*store.Sandbox{{ID: "running1", State: store.Running}, {ID: "paused1", State: store.Paused}, {ID: "killing1", State: store.Killing}} {
		if err := st.Sandboxes().Put(ctx, sb); err != nil {
			t.Fatal(err)
		}
	}
	live := liveSandbox(st)
	for id, want := range map[string]bool{"running1": true, "paused1": true, "killing1": false, "nosuch": false} {
		if got := live(ctx, id); got != want {
			t.Errorf("live(%s) = %v, want %v", id, got, want)
		}
	}
}
