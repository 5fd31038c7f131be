package node_test

import (
	"errors"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

func TestFakeCreateErrorKinds(t *testing.T) {
	n := newFake(t, nodefake.Options{MaxSandboxes: 2})
	_, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "nope", Timeout: time.Minute})
	wantKind(t, "unknown template", err, cube.NotFound)

	half := &store.Template{ID: "half", Status: store.TemplateBuilding, CreatedAt: time.Now().UTC()}
	if err := n.Store.Templates().Put(fctx(t), half); err != nil {
		t.Fatal(err)
	}
	_, err = n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "half", Timeout: time.Minute})
	wantKind(t, "template still building", err, cube.Conflict)
	wantKind(t, "delete of a template still building", n.DeleteTemplate(fctx(t), "", "half"), cube.Conflict)

	_, err = n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute,
		Network: cube.Network{AllowOut: []string{"10.0.0.0/99"}}})
	wantKind(t, "bad egress rule", err, cube.Invalid)

	fakeCreate(t, n, cube.CreateRequest{})
	fakeCreate(t, n, cube.CreateRequest{})
	_, err = n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
	wantKind(t, "create past the sandbox limit", err, cube.Capacity)
	var ce *cube.Error
	if !errors.As(err, &ce) || ce.RetryAfter <= 0 {
		t.Fatalf("capacity error without RetryAfter: %#v", err)
	}
	if len(n.Runtime.Containers()) != 2 || len(n.Slots.Held()) != 2 {
		t.Fatalf("a refused create left something: %v, slots %v", n.Runtime.Containers(), n.Slots.Held())
	}
}

func TestFakeSlotExhaustionIsCapacity(t *testing.T) {
	n := newFake(t, nodefake.Options{Slots: 1})
	a := fakeCreate(t, n, cube.CreateRequest{})
	_, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute})
	wantKind(t, "create with every slot held", err, cube.Capacity)
	var ce *cube.Error
	if !errors.As(err, &ce) || ce.RetryAfter <= 0 {
		t.Fatalf("capacity error without RetryAfter: %#v", err)
	}
	if list, _ := n.ListSandboxes(fctx(t), cube.ListFilter{}); len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("sandboxes after a refused create: %+v", list)
	}
	// The slot is free again once its sandbox is gone.
	if err := n.KillSandbox(fctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	fakeCreate(t, n, cube.CreateRequest{})
}

// A create that fails after its slot (and container) were taken gives
// both back and leaves no record.
func TestFakeFailedCreateLeavesNothing(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	records := func() int {
		all, err := n.Store.Sandboxes().List(fctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}

	n.Runtime.Fail(nodefake.OpRestore, errors.New("no memory"))
	if _, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute}); err == nil {
		t.Fatal("create succeeded with restores failing")
	}
	wantHeld(t, n, nil, nil)
	if records() != 0 {
		t.Fatal("a failed restore left its record")
	}
	n.Runtime.Fail(nodefake.OpRestore, nil)

	n.Agents.Refuse(errors.New("bad token"))
	if _, err := n.CreateSandbox(fctx(t), cube.CreateRequest{Template: "tiny", Timeout: time.Minute}); err == nil {
		t.Fatal("create succeeded with the agent refusing /init")
	}
	wantHeld(t, n, nil, nil)
	if records() != 0 {
		t.Fatal("a refused /init left its record")
	}
	if inits := n.Agents.Inits(); len(inits) != 1 || inits[0].Err == nil {
		t.Fatalf("inits = %+v", inits)
	}
	n.Agents.Refuse(nil)

	// Nothing leaked: the first slot is handed out again.
	a := fakeCreate(t, n, cube.CreateRequest{})
	if _, host := served(t, n, a.ID); slotOf(t, host) != 0 {
		t.Fatalf("served at %v, not from slot 0", host)
	}
}
