// Package cube is the core of the service: the domain types (sandboxes,
// templates, snapshots, build jobs) and the service interfaces the control
// plane calls, with failures as error kinds rather than status codes. It
// exists so that the node and the template builder, which do the work, and
// the HTTP layer, which speaks E2B's REST dialect, meet in a package that
// knows neither: the node imports no transport, and status codes and error
// bodies are chosen in the HTTP layer alone.
package cube

import (
	"context"
	"io"
	"time"
)

// Backend is what the control plane needs from the node that runs sandboxes.
// Its methods speak in domain types, never wire types, so the node knows
// nothing about JSON or HTTP. An error may be an *Error whose Kind says why
// (Errorf(NotFound, ...)); any other error is an internal failure.
//
// Validation of user input (IDs, timeouts against the configured maximum,
// body shapes) happens before the backend is called; limits that need state
// (number of sandboxes, disk space) are the backend's to enforce.
//
// Operations that arrive with later work (pause, snapshots, fork, rollback,
// network updates) are separate optional interfaces below: a backend that
// does not implement one leaves them Unsupported.
type Backend interface {
	// CreateSandbox starts a sandbox and returns once it answers (envd /init
	// done). Unknown template → NotFound naming it; too many sandboxes →
	// Capacity.
	CreateSandbox(ctx context.Context, req CreateRequest) (*Sandbox, error)
	// GetSandbox returns a running or paused sandbox; unknown → NotFound.
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	// ListSandboxes returns every sandbox matching the filter, in any order;
	// the control plane sorts and pages.
	ListSandboxes(ctx context.Context, f ListFilter) ([]Sandbox, error)
	// ListSandboxPage returns one page of the sandboxes matching the
	// filter, in start order, and the cursor of the next page (nil on the
	// last): a page costs the sandboxes up to its end, not all of them.
	ListSandboxPage(ctx context.Context, f ListFilter, p Page) (items []Sandbox, next *Cursor, err error)
	// KillSandbox destroys a sandbox (running or paused); unknown → NotFound.
	KillSandbox(ctx context.Context, id string) error
	// SetTimeout moves the sandbox's end time to now+timeout. With
	// extendOnly it never moves it earlier (the refresh semantics).
	SetTimeout(ctx context.Context, id string, timeout time.Duration, extendOnly bool) error
	// ConnectSandbox returns a running sandbox, resuming it first when it is
	// paused (resumed reports that), and extends its end time to at least
	// now+Timeout.
	ConnectSandbox(ctx context.Context, id string, req ConnectRequest) (sb *Sandbox, resumed bool, err error)
	// SandboxMetrics returns resource samples between start and end. Zero
	// start and end ask for one current sample.
	SandboxMetrics(ctx context.Context, id string, start, end time.Time) ([]Metric, error)
	// SandboxLogs returns the sandbox's log entries (lifecycle events and
	// process records), oldest first; the control plane filters and pages.
	SandboxLogs(ctx context.Context, id string) ([]LogEntry, error)

	// ListTemplates returns the templates team may use (its own and the
	// public ones; every one for the empty team), snapshots included.
	ListTemplates(ctx context.Context, team string) ([]Template, error)
	// GetTemplate looks a template up by id or alias; unknown → NotFound.
	// Another team's private template → NotFound, as if it did not exist.
	GetTemplate(ctx context.Context, team, idOrAlias string) (*Template, error)
	// DeleteTemplate deletes a template or snapshot; unknown → NotFound.
	// Another team's public template → Forbidden.
	DeleteTemplate(ctx context.Context, team, idOrAlias string) error

	// CountSandboxes feeds the sandboxes-by-state gauge on /metrics.
	CountSandboxes(ctx context.Context) (map[SandboxState]int, error)
}

// Pauser is implemented by backends that can pause a sandbox (write its
// memory and files to disk and free its resources). Already paused →
// Conflict.
type Pauser interface {
	PauseSandbox(ctx context.Context, id string, keepMemory bool) error
}

// Snapshotter is implemented by backends that can snapshot, fork and roll
// back sandboxes. A snapshot is a template whose id the Snapshot carries.
type Snapshotter interface {
	// CreateSnapshot checkpoints a running sandbox, which keeps running.
	CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error)
	// ListSnapshots returns one page of the snapshots matching the
	// filter, newest first (p.Asc: oldest first), and the cursor of the
	// next page (nil on the last).
	ListSnapshots(ctx context.Context, f SnapshotFilter, p Page) (items []Snapshot, next *Cursor, err error)
	// ForkSandbox checkpoints the sandbox once and starts Count children
	// from it. The error is for the whole request (nothing attempted); each
	// child's own failure goes in its ForkResult.
	ForkSandbox(ctx context.Context, id string, req ForkRequest) ([]ForkResult, error)
	// RollbackSandbox returns the sandbox, in place, to a snapshot it took
	// itself (Forbidden otherwise).
	RollbackSandbox(ctx context.Context, id, snapshotID string) (*Rollback, error)
}

// NetworkUpdater is implemented by backends that can replace a running
// sandbox's egress policy.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, id string, n Network) error
}

// TemplateBuilder is implemented by backends that build templates from OCI
// images (without it building is Unsupported). It also enriches template
// listings with each template's build facts.
type TemplateBuilder interface {
	// BuildTemplate records a build job and its template (status building),
	// both req.Team's, and starts the build in the background; it returns
	// at once. An alias or template ID the team already uses → Conflict;
	// so is a template ID another team's template has (IDs are unique
	// across teams, aliases only within one).
	BuildTemplate(ctx context.Context, req BuildRequest) (*BuildJob, error)
	// BuildJob returns one of team's build jobs; unknown, or another
	// team's → NotFound. The empty team is the node, which sees every one.
	BuildJob(ctx context.Context, team, jobID string) (*BuildJob, error)
	// TemplateDetails returns the build facts of every stored template
	// (snapshots included), keyed by template ID, whatever its team: the
	// caller picks those of the templates it lists (ListTemplates and
	// GetTemplate filter by team).
	TemplateDetails(ctx context.Context) (map[string]TemplateDetail, error)
}

// ArchiveImporter is implemented by backends that take uploaded image
// archives, for clients whose archive is not in the server's import
// directory (another machine, or another directory).
type ArchiveImporter interface {
	// ImportArchive stores body, an archive of kind (oci-archive or
	// docker-archive), and returns the image reference that builds from
	// it. Larger than MaxImportBytes → TooLarge.
	ImportArchive(ctx context.Context, kind string, body io.Reader) (image string, err error)
	MaxImportBytes() int64
}
