package node_test

import (
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/egress"
	"cube/internal/node/nodefake"
	"cube/internal/store"
)

// The Filter's last events for a sandbox arrive as its kill cuts its
// connections: none may outlive the sandbox in the store.
func TestFakeEgressAuditOfAKilledSandboxIsNotKept(t *testing.T) {
	n := newFake(t, nodefake.Options{})
	gone := fakeCreate(t, n, cube.CreateRequest{})
	kept := fakeCreate(t, n, cube.CreateRequest{})
	if err := n.KillSandbox(fctx(t), gone.ID); err != nil {
		t.Fatal(err)
	}
	n.EgressAudit(egress.Event{Owner: gone.ID, Decision: egress.Allowed, Name: "late.example"})
	n.EgressAudit(egress.Event{Owner: kept.ID, Decision: egress.Allowed, Name: "live.example"})
	// One writer takes the events in order: once the second is in, the
	// first has been dealt with.
	deadline := time.Now().Add(20 * time.Second)
	for {
		evs, err := n.Store.Events(fctx(t), kept.ID, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if hasEvent(evs, "live.example") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live sandbox's egress event was never written; its log: %+v", evs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if evs, err := n.Store.Events(fctx(t), gone.ID, 0, 1000); err != nil || len(evs) != 0 {
		t.Errorf("a killed sandbox has %d events left in the store (%v): %+v", len(evs), err, evs)
	}
}

func hasEvent(evs []store.Event, text string) bool {
	for _, e := range evs {
		if strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}
