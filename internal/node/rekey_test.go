package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
)

// TestForgedInitDoesNotSurviveSnapshot: code in a sandbox re-initialises
// its own agent with its current token and a timestamp ahead of the host's
// clock, hoping the node's /init for sandboxes made from its snapshot
// looks stale and is ignored. No sandbox may be handed out that still
// answers to the parent's token: either the create fails, or the child
// accepts only its own token.
func TestForgedInitDoesNotSurviveSnapshot(t *testing.T) {
	f := newFixture(t)
	parent := f.create(t, "tiny", time.Minute)
	ahead := time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339Nano)
	forged := fmt.Sprintf(`{"accessToken":%q,"timestamp":%q}`, parent.EnvdAccessToken, ahead)
	code, body := f.envd(t, parent, "POST", "/init", []byte(forged), parent.EnvdAccessToken)
	t.Logf("forged /init answered %d %s", code, body)

	snap, err := f.CreateSnapshot(ctx(t), parent.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	child, err := f.CreateSandbox(ctx(t), cube.CreateRequest{Template: snap.ID, Timeout: time.Minute})
	if err != nil {
		if !strings.Contains(err.Error(), "access token") {
			t.Fatalf("create from the snapshot failed without saying why: %v", err)
		}
		return
	}
	if code, _ := f.envd(t, child, "GET", "/envs", nil, parent.EnvdAccessToken); code != 401 {
		t.Fatalf("a sandbox made from the snapshot answers to its parent's token: %d", code)
	}
	if code, body := f.envd(t, child, "GET", "/envs", nil, child.EnvdAccessToken); code != 200 {
		t.Fatalf("a sandbox made from the snapshot refuses its own token: %d %s", code, body)
	}
}
