package cube

import (
	"context"
	"time"
)

// AuditEntry is one change made through the API, kept after the objects
// it names are gone: who made it (team, key by ID and name, never the
// key), what it was (method, route, the object it named) and how it ended.
type AuditEntry struct {
	Seq     int64
	Time    time.Time
	Team    string
	KeyID   string
	KeyName string
	Method  string
	Route   string
	Target  string
	Status  int
	Node    string
}

// AuditFilter selects audit entries, newest first; empty fields match
// everything. Before pages: entries older than that Seq.
type AuditFilter struct {
	Team   string
	KeyID  string
	Target string
	Since  time.Time
	Before int64
	Limit  int
}

// Audit is the service's append-only trail of changes.
type Audit interface {
	// Record adds an entry; it never blocks the request that made it.
	Record(e AuditEntry)
	ListAudit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
}
