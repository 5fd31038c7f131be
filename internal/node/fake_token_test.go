package node_test

import (
	"testing"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
)

func TestFakeFindByTokenNamesRunningAndPausedSandboxesOnly(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	a := fakeCreate(t, n, cube.CreateRequest{})
	b := fakeCreate(t, n, cube.CreateRequest{})
	find := func(token string) (string, bool) {
		return n.FindByToken(fctx(t), func(tok string) bool { return tok == token })
	}
	if id, ok := find(b.EnvdAccessToken); !ok || id != b.ID {
		t.Fatalf("b's token finds %q, %v", id, ok)
	}
	if err := n.PauseSandbox(fctx(t), a.ID, true); err != nil {
		t.Fatal(err)
	}
	if id, ok := find(a.EnvdAccessToken); !ok || id != a.ID {
		t.Fatalf("paused a's token finds %q, %v", id, ok)
	}
	if err := n.KillSandbox(fctx(t), b.ID); err != nil {
		t.Fatal(err)
	}
	if id, ok := find(b.EnvdAccessToken); ok {
		t.Fatalf("a killed sandbox's token still finds %q", id)
	}
	if id, ok := find("no sandbox has this"); ok {
		t.Fatalf("an unknown token finds %q", id)
	}
}
