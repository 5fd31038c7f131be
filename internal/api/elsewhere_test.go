package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"cube/internal/cube"
)

// answeredElsewhere pauses nothing: another node answers the request.
type answeredElsewhere struct{ *fakeBackend }

func (answeredElsewhere) PauseSandbox(context.Context, string, bool) error {
	return &cube.Error{Kind: cube.Unavailable, Message: "node-b answers this request", Err: cube.ErrAnsweredElsewhere}
}

// auditEntries records the audit trail.
type auditEntries struct {
	mu      sync.Mutex
	entries []cube.AuditEntry
}

func (a *auditEntries) Record(e cube.AuditEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
}

func (a *auditEntries) ListAudit(context.Context, cube.AuditFilter) ([]cube.AuditEntry, error) {
	return nil, nil
}

func (a *auditEntries) routes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, e := range a.entries {
		out = append(out, fmt.Sprintf("%s %d", e.Route, e.Status))
	}
	return out
}

// A request whose call another node answers (handed to it whole, a node
// of an earlier version in a cluster being upgraded) is neither answered
// nor audited by this API: that node does both.
func TestRequestAnsweredElsewhere(t *testing.T) {
	trail := &auditEntries{}
	fake := newFake()
	e := newEnvWith(t, fake, answeredElsewhere{fake}, func(c *envConfig) { c.Audit = trail })
	sb := e.create("base", nil)
	r := e.do("POST", "/sandboxes/"+sb.SandboxID+"/pause", nil)
	if len(r.body) != 0 || r.header.Get("Retry-After") != "" {
		t.Fatalf("a pause answered elsewhere was answered here: %d %s", r.status, r.body)
	}
	if got := trail.routes(); len(got) != 1 || got[0] != "POST /v2/sandboxes 201" {
		t.Fatalf("a pause answered elsewhere was audited here: %q", got)
	}
	if r := e.do("DELETE", "/sandboxes/"+sb.SandboxID, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", r.status, r.body)
	}
	if got := trail.routes(); len(got) != 2 || got[1] != "DELETE /sandboxes/{sandboxID} 204" {
		t.Fatalf("audited %q", got)
	}
}
