// Package wire holds the JSON shapes of the E2B-compatible control-plane API,
// field for field as the official SDKs send and expect them. It has no
// behaviour so that both the server and the CLI's client can share it without
// pulling in each other's dependencies.
//
// Optional fields are pointers or omitempty; fields the Python SDK treats as
// required never are, because a missing required field fails its parsing.
package wire

import (
	"time"

	"cube/internal/httperr"
)

// Error is every non-2xx answer of the control plane. It is defined where
// those answers are written (httperr), so that the client reads the very
// shape the server writes.
type Error = httperr.Body

// Health is the body of GET /health.
type Health struct {
	Status  string `json:"status"`
	Version string `json:"version"`
}

// NetworkConfig is a sandbox's egress and inbound configuration.
type NetworkConfig struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
	MaskRequestHost    string   `json:"maskRequestHost,omitempty"`
	// HTTPSPorts are ports whose servers speak HTTPS (not envd's).
	HTTPSPorts []int `json:"httpsPorts,omitempty"`
	// Rules: see NetworkRule (secrets.go).
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// NetworkUpdate is the body of PUT /sandboxes/{id}/network. Omitted fields
// clear the corresponding rule.
type NetworkUpdate struct {
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
	AllowOut            []string `json:"allowOut,omitempty"`
	DenyOut             []string `json:"denyOut,omitempty"`
	// Rules replaces every rule; omitted, the sandbox has none.
	Rules map[string][]NetworkRule `json:"rules,omitempty"`
}

// AutoResume is the auto-resume part of a create request.
type AutoResume struct {
	Enabled bool `json:"enabled"`
}

// NewSandbox is the body of POST /sandboxes and POST /v2/sandboxes (the
// latter ignores Secure: it is always secure). E2B's fields that Cube does
// not implement have no Go field; the server refuses them by name.
type NewSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int              `json:"timeout,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
	AutoPause           *bool             `json:"autoPause,omitempty"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory,omitempty"`
	AutoResume          *AutoResume       `json:"autoResume,omitempty"`
	Secure              *bool             `json:"secure,omitempty"`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	// CPUCount and MemoryMB narrow the template's limits for this sandbox
	// (a Cube extension; E2B takes them from the template only).
	CPUCount *int `json:"cpuCount,omitempty"`
	MemoryMB *int `json:"memoryMB,omitempty"`
	// VolumeMounts bind persistent volumes (volumes.go).
	VolumeMounts []VolumeMount `json:"volumeMounts,omitempty"`
}

// Sandbox is the answer to create, connect and resume.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	Alias              string  `json:"alias,omitempty"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// Lifecycle says what happens to a sandbox at its end time.
type Lifecycle struct {
	OnTimeout  string `json:"onTimeout"`
	AutoResume bool   `json:"autoResume"`
}

// SandboxDetail is the answer to GET /sandboxes/{id}.
type SandboxDetail struct {
	TemplateID          string            `json:"templateID"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	Alias               string            `json:"alias,omitempty"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	State               string            `json:"state"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	Domain              *string           `json:"domain"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	Lifecycle           *Lifecycle        `json:"lifecycle,omitempty"`
	VolumeMounts        []VolumeMount     `json:"volumeMounts,omitempty"`
}

// ListedSandbox is one element of the sandbox lists.
type ListedSandbox struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	Alias        string            `json:"alias,omitempty"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	EnvdVersion  string            `json:"envdVersion"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int               `json:"memoryMB"`
	DiskSizeMB   int               `json:"diskSizeMB"`
	State        string            `json:"state"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	VolumeMounts []VolumeMount     `json:"volumeMounts,omitempty"`
}

// TimeoutRequest is the body of POST /sandboxes/{id}/timeout.
type TimeoutRequest struct {
	Timeout *int `json:"timeout"`
}

// RefreshRequest is the body of POST /sandboxes/{id}/refreshes.
type RefreshRequest struct {
	Duration *int `json:"duration,omitempty"`
}

// ConnectRequest is the body of both connect routes and of the deprecated
// resume route (which also carries autoPause).
type ConnectRequest struct {
	Timeout   *int  `json:"timeout,omitempty"`
	Memory    *bool `json:"memory,omitempty"`
	AutoPause *bool `json:"autoPause,omitempty"`
}

// PauseRequest is the body of POST /sandboxes/{id}/pause.
type PauseRequest struct {
	Memory *bool `json:"memory,omitempty"`
}

// SandboxMetric is one sample of a sandbox's resource use.
type SandboxMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// SandboxesWithMetrics is the answer to GET /sandboxes/metrics.
type SandboxesWithMetrics struct {
	Sandboxes map[string]SandboxMetric `json:"sandboxes"`
}

// SandboxLog is a v1 log line.
type SandboxLog struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// SandboxLogEntry is a structured log entry (v1 logEntries and v2 logs).
type SandboxLogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// SandboxLogs is the answer to GET /sandboxes/{id}/logs.
type SandboxLogs struct {
	Logs       []SandboxLog      `json:"logs"`
	LogEntries []SandboxLogEntry `json:"logEntries"`
}

// SandboxLogsV2 is the answer to GET /v2/sandboxes/{id}/logs.
type SandboxLogsV2 struct {
	Logs []SandboxLogEntry `json:"logs"`
}

// TeamUser is the creator of a template; Cube has no users, so it is null.
type TeamUser struct {
	ID    string  `json:"id"`
	Email *string `json:"email"`
}

// TemplateAliasResponse answers GET /templates/aliases/{alias}, which the
// SDK's Template.exists and aliasExists ask. Every template of a Cube
// server is visible to every API key, hence public.
type TemplateAliasResponse struct {
	TemplateID string `json:"templateID"`
	Public     bool   `json:"public"`
}

// Template is one element of GET /templates.
type Template struct {
	TemplateID    string     `json:"templateID"`
	BuildID       string     `json:"buildID"`
	BuildStatus   string     `json:"buildStatus"`
	BuildCount    int        `json:"buildCount"`
	CPUCount      int        `json:"cpuCount"`
	MemoryMB      int        `json:"memoryMB"`
	DiskSizeMB    int        `json:"diskSizeMB"`
	EnvdVersion   string     `json:"envdVersion"`
	Public        bool       `json:"public"`
	Aliases       []string   `json:"aliases"`
	Names         []string   `json:"names"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	CreatedBy     *TeamUser  `json:"createdBy"`
	LastSpawnedAt *time.Time `json:"lastSpawnedAt"`
	SpawnCount    int64      `json:"spawnCount"`
}

// TemplateBuild is one build of a template.
type TemplateBuild struct {
	BuildID     string     `json:"buildID"`
	Status      string     `json:"status"`
	CPUCount    int        `json:"cpuCount"`
	MemoryMB    int        `json:"memoryMB"`
	DiskSizeMB  int        `json:"diskSizeMB,omitempty"`
	EnvdVersion string     `json:"envdVersion,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
}

// TemplateWithBuilds is the answer to GET /templates/{id}.
type TemplateWithBuilds struct {
	TemplateID    string          `json:"templateID"`
	Public        bool            `json:"public"`
	Aliases       []string        `json:"aliases"`
	Names         []string        `json:"names"`
	CreatedAt     time.Time       `json:"createdAt"`
	UpdatedAt     time.Time       `json:"updatedAt"`
	LastSpawnedAt *time.Time      `json:"lastSpawnedAt"`
	SpawnCount    int64           `json:"spawnCount"`
	Builds        []TemplateBuild `json:"builds"`
}

// SnapshotRequest is the body of POST /sandboxes/{id}/snapshots.
type SnapshotRequest struct {
	Name string `json:"name,omitempty"`
}

// SnapshotInfo describes a snapshot. snapshotID and names are what the SDKs
// read; the rest is Cube's addition for operators.
type SnapshotInfo struct {
	SnapshotID string     `json:"snapshotID"`
	Names      []string   `json:"names"`
	SandboxID  string     `json:"sandboxID,omitempty"`
	CreatedAt  *time.Time `json:"createdAt,omitempty"`
	SizeBytes  int64      `json:"sizeBytes,omitempty"`
}

// ForkRequest is the body of POST /sandboxes/{id}/fork.
type ForkRequest struct {
	Count   *int `json:"count,omitempty"`
	Timeout *int `json:"timeout,omitempty"`
}

// CloneRequest is the body of POST /sandboxes/{id}/clone.
type CloneRequest struct {
	Count       *int `json:"count,omitempty"`
	Concurrency *int `json:"concurrency,omitempty"`
	Timeout     *int `json:"timeout,omitempty"`
}

// ForkResult is one child of a fork or clone: exactly one field is set.
type ForkResult struct {
	Sandbox *Sandbox `json:"sandbox,omitempty"`
	Error   *Error   `json:"error,omitempty"`
}

// RollbackRequest is the body of POST /sandboxes/{id}/rollback.
type RollbackRequest struct {
	SnapshotID string `json:"snapshotID"`
}

// RollbackResult is the answer to a rollback.
type RollbackResult struct {
	SandboxID   string `json:"sandboxID"`
	SnapshotID  string `json:"snapshotID"`
	OperationID string `json:"operationID"`
	Status      string `json:"status"`
}
