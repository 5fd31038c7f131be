package cube

import "time"

// SandboxState is a sandbox's state as the control plane reports it.
type SandboxState string

const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
	// StateLost is a sandbox on a node that stopped heartbeating: nothing
	// can reach it until that node is back.
	StateLost SandboxState = "lost"
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
	// HTTPSPorts are sandbox ports whose servers speak HTTPS: the proxy
	// reaches them over TLS, without checking their certificates (a
	// sandbox's are self-signed as often as not).
	HTTPSPorts []int `json:",omitempty"`
	// Rules transform outbound requests per host (E2B's network.rules):
	// keys are names or *. wildcards, values the transforms in order.
	// Header values may hold ${e2b.secrets.<name>} placeholders, which only
	// the egress filter resolves.
	Rules map[string][]NetworkRule `json:",omitempty"`
}

// NetworkRule is one transform of an outbound request.
type NetworkRule struct {
	// Headers are set on the request, replacing any of the same name.
	Headers map[string]string `json:",omitempty"`
}

// CreateRequest is a validated sandbox creation request.
type CreateRequest struct {
	// Team is the team the sandbox belongs to: the caller's. Its template
	// is the team's own or a public one, its volumes and secrets the
	// team's.
	Team string
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
	// VolumeMounts bind persistent volumes into the sandbox; each path is
	// valid (volume.CheckMountPath) and no two overlap.
	VolumeMounts []VolumeMount
}

// ConnectRequest is a validated connect or resume request.
type ConnectRequest struct {
	// Timeout is the minimum remaining lifetime after the call.
	Timeout time.Duration
	// Memory false asks to resume from files only (cold boot).
	Memory bool
	// RequirePaused is set by the deprecated resume route: a running
	// sandbox is then a Conflict instead of a success.
	RequirePaused bool
	// AutoPause, when set (resume route only), replaces the sandbox's
	// auto-pause setting.
	AutoPause *bool
	// MoveFrom names the node the sandbox is taken over from before it
	// resumes: a cluster resumes a sandbox paused on disk on a node that
	// takes no new sandboxes on another node (see node's move.go). Only
	// the node that decided the move sets it, never a client.
	MoveFrom string
}

// Sandbox is a sandbox as the control plane reports it.
type Sandbox struct {
	ID string
	// Team owns the sandbox; no other team sees it.
	Team       string
	TemplateID string
	// Node is the node that runs it (E2B's clientID).
	Node string
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
	VolumeMounts       []VolumeMount
}

// ListFilter selects sandboxes. Empty fields match everything.
type ListFilter struct {
	// Team, when set, keeps only that team's sandboxes.
	Team string
	// States empty means running and paused.
	States []SandboxState
	// Metadata must all be present with equal values.
	Metadata map[string]string
	// Template is a template id or alias.
	Template string
}

// Page asks for one page of a list of sandboxes, in the order they
// started (then by ID), newest first unless Asc.
type Page struct {
	// Limit is the most items the page holds (at least 1).
	Limit int
	Asc   bool
	// After is where the previous page ended; nil: the first page.
	After *Cursor
	// Since keeps the sandboxes started at or after it (zero: all).
	Since time.Time
}

// Cursor is a place in a list in start order: the sandbox a page ended
// with. Items made or removed between two pages never shift one: every
// item still there is listed exactly once.
type Cursor struct {
	Time time.Time
	ID   string
}

// Matches reports whether s passes the filter; backends may use it.
func (f ListFilter) Matches(s *Sandbox) bool {
	if f.Team != "" && f.Team != s.Team {
		return false
	}
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
