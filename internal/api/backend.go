package api

import (
	"context"
	"time"

	"cube/internal/proxy"
)

// Backend is what the control plane needs from the node that runs sandboxes.
// Its methods speak in domain types, never wire types, so the node knows
// nothing about JSON or HTTP. Every error may be an *Error to choose the HTTP
// status (Errorf(http.StatusNotFound, ...)); other errors answer 500.
//
// Validation of user input (IDs, timeouts against the configured maximum,
// body shapes) happens before the backend is called; limits that need state
// (number of sandboxes, disk space) are the backend's to enforce.
//
// Operations that arrive with later work (pause, snapshots, fork, rollback,
// network updates) are separate optional interfaces below: a backend that
// does not implement one answers 501 on its routes.
type Backend interface {
	// Resolve finds where proxied traffic for a sandbox port goes. See
	// proxy.Resolver; the same node answers both.
	proxy.Resolver

	// CreateSandbox starts a sandbox and returns once it answers (envd /init
	// done). Unknown template → 404 naming it; too many sandboxes → 429.
	CreateSandbox(ctx context.Context, req CreateRequest) (*Sandbox, error)
	// GetSandbox returns a running or paused sandbox; unknown → 404.
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	// ListSandboxes returns every sandbox matching the filter, in any order;
	// the control plane sorts and pages.
	ListSandboxes(ctx context.Context, f ListFilter) ([]Sandbox, error)
	// KillSandbox destroys a sandbox (running or paused); unknown → 404.
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

	// ListTemplates returns every template, snapshots included.
	ListTemplates(ctx context.Context) ([]Template, error)
	// GetTemplate looks a template up by id or alias; unknown → 404.
	GetTemplate(ctx context.Context, idOrAlias string) (*Template, error)
	// DeleteTemplate deletes a template or snapshot; unknown → 404.
	DeleteTemplate(ctx context.Context, idOrAlias string) error

	// CountSandboxes feeds the sandboxes-by-state gauge on /metrics.
	CountSandboxes(ctx context.Context) (map[SandboxState]int, error)
}

// Pauser is implemented by backends that can pause a sandbox (write its
// memory and files to disk and free its resources). Already paused → 409.
type Pauser interface {
	PauseSandbox(ctx context.Context, id string, keepMemory bool) error
}

// Snapshotter is implemented by backends that can snapshot, fork and roll
// back sandboxes. A snapshot is a template whose id the Snapshot carries.
type Snapshotter interface {
	// CreateSnapshot checkpoints a running sandbox, which keeps running.
	CreateSnapshot(ctx context.Context, sandboxID, name string) (*Snapshot, error)
	// ListSnapshots returns every snapshot matching the filter, in any
	// order; the control plane sorts and pages.
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error)
	// ForkSandbox checkpoints the sandbox once and starts Count children
	// from it. The error is for the whole request (nothing attempted); each
	// child's own failure goes in its ForkResult.
	ForkSandbox(ctx context.Context, id string, req ForkRequest) ([]ForkResult, error)
	// RollbackSandbox returns the sandbox, in place, to a snapshot it took
	// itself (403 otherwise).
	RollbackSandbox(ctx context.Context, id, snapshotID string) (*Rollback, error)
}

// NetworkUpdater is implemented by backends that can replace a running
// sandbox's egress policy.
type NetworkUpdater interface {
	UpdateNetwork(ctx context.Context, id string, n Network) error
}

// SandboxState is a sandbox's state as the API reports it.
type SandboxState string

const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
)

// Network is a sandbox's network policy.
type Network struct {
	// AllowInternetAccess false means no egress at all; nil means not set.
	AllowInternetAccess *bool
	// AllowOut and DenyOut hold CIDRs, IPs or domain names; allow beats deny.
	AllowOut []string
	DenyOut  []string
	// AllowPublicTraffic false makes the proxy require the sandbox's traffic
	// access token; nil means the default (true).
	AllowPublicTraffic *bool
	// MaskRequestHost replaces the Host header of proxied requests;
	// "${PORT}" in it is replaced by the target port.
	MaskRequestHost string
}

// CreateRequest is a validated sandbox creation request.
type CreateRequest struct {
	// Template is the template or snapshot id or alias, as the user sent it.
	Template string
	// Timeout is the lifetime from now; it is within the server's maximum.
	Timeout  time.Duration
	Metadata map[string]string
	EnvVars  map[string]string
	// AutoPause pauses instead of killing at the end time;
	// AutoPauseMemory false keeps only files when it does.
	AutoPause       bool
	AutoPauseMemory bool
	// AutoResume resumes a paused sandbox when proxied traffic reaches it.
	AutoResume bool
	// Secure asks for envd access-token enforcement (always on for v2).
	Secure  bool
	Network Network
	// CPUCount and MemoryMB, when positive, replace the template's limits
	// for this sandbox.
	CPUCount int
	MemoryMB int
}

// ConnectRequest is a validated connect or resume request.
type ConnectRequest struct {
	// Timeout is the minimum remaining lifetime after the call.
	Timeout time.Duration
	// Memory false asks to resume from files only (cold boot).
	Memory bool
	// RequirePaused is set by the deprecated resume route: a running
	// sandbox is then a 409 instead of a success.
	RequirePaused bool
	// AutoPause, when set (resume route only), replaces the sandbox's
	// auto-pause setting.
	AutoPause *bool
}

// Sandbox is a sandbox as the control plane reports it.
type Sandbox struct {
	ID         string
	TemplateID string
	// Alias is the template alias it was created by, if any.
	Alias       string
	EnvdVersion string
	// EnvdAccessToken is the sandbox's own token for envd; always set.
	EnvdAccessToken string
	// TrafficAccessToken is required by the proxy when set (public traffic
	// not allowed); empty otherwise.
	TrafficAccessToken string
	State              SandboxState
	StartedAt          time.Time
	EndAt              time.Time
	CPUCount           int
	MemoryMB           int
	DiskSizeMB         int
	Metadata           map[string]string
	Network            Network
	AutoPause          bool
	AutoResume         bool
}

// ListFilter selects sandboxes. Empty fields match everything.
type ListFilter struct {
	// States empty means running and paused.
	States []SandboxState
	// Metadata must all be present with equal values.
	Metadata map[string]string
	// Template is a template id or alias.
	Template string
}

// Matches reports whether s passes the filter; backends may use it.
func (f ListFilter) Matches(s *Sandbox) bool {
	if len(f.States) > 0 {
		ok := false
		for _, st := range f.States {
			ok = ok || st == s.State
		}
		if !ok {
			return false
		}
	}
	for k, v := range f.Metadata {
		if got, ok := s.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if f.Template != "" && f.Template != s.TemplateID && f.Template != s.Alias {
		return false
	}
	return true
}

// Metric is one resource sample of a sandbox.
type Metric struct {
	Time       time.Time
	CPUCount   int
	CPUUsedPct float64
	MemUsed    int64
	MemTotal   int64
	MemCache   int64
	DiskUsed   int64
	DiskTotal  int64
}

// LogEntry is one sandbox log record.
type LogEntry struct {
	Time    time.Time
	Level   LogLevel
	Message string
	Fields  map[string]string
}

// LogLevel orders log entries for the v2 level filter.
type LogLevel string

const (
	LevelDebug LogLevel = "debug"
	LevelInfo  LogLevel = "info"
	LevelWarn  LogLevel = "warn"
	LevelError LogLevel = "error"
)

// Template is a template (or snapshot) as the control plane reports it.
type Template struct {
	ID      string
	Aliases []string
	BuildID string
	// BuildStatus is building, waiting, ready or error.
	BuildStatus string
	BuildCount  int
	CPUCount    int
	MemoryMB    int
	DiskSizeMB  int
	EnvdVersion string
	Public      bool
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// LastSpawnedAt is zero when no sandbox was ever created from it.
	LastSpawnedAt time.Time
	SpawnCount    int64
}

// Snapshot is a snapshot of a sandbox (itself usable as a template).
type Snapshot struct {
	ID        string
	Names     []string
	SandboxID string
	CreatedAt time.Time
	SizeBytes int64
}

// SnapshotFilter selects snapshots. Empty fields match everything.
type SnapshotFilter struct {
	SandboxID string
	// Name matches the id or any of the names.
	Name string
}

// ForkRequest is a validated fork or clone request.
type ForkRequest struct {
	Count   int
	Timeout time.Duration
	// Concurrency bounds how many children start at once (clone); 0 lets
	// the backend choose.
	Concurrency int
}

// ForkResult is one child of a fork: Sandbox or Err.
type ForkResult struct {
	Sandbox *Sandbox
	Err     error
}

// Rollback is the outcome of a rollback.
type Rollback struct {
	OperationID string
	Status      string
}
