package cube

import "time"

// Template is a template (or snapshot) as the control plane reports it.
type Template struct {
	ID string
	// Team owns the template; Public lets every team start from it.
	Team    string
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
	Team      string
	Names     []string
	SandboxID string
	CreatedAt time.Time
	SizeBytes int64
}

// SnapshotFilter selects snapshots. Empty fields match everything.
type SnapshotFilter struct {
	// Team, when set, keeps only that team's snapshots.
	Team      string
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

// BuildRequest is a validated request to build a template from an image.
// Zero values mean the builder's defaults.
type BuildRequest struct {
	// Team builds the template and owns it and its build job.
	Team  string
	Image string
	// TemplateID is empty (generate one) or satisfies id.ValidName.
	TemplateID string
	// Aliases each satisfy id.ValidName and are distinct.
	Aliases    []string
	CPUCount   int
	MemoryMB   int
	DiskSizeMB int
	// ExposedPorts are 1-65535; empty takes the image's EXPOSE ports.
	ExposedPorts []int
	ProbePort    int
	// ProbePath starts with "/".
	ProbePath string
	// Cmd replaces the image's ENTRYPOINT and CMD; Args replaces its CMD.
	Cmd  []string
	Args []string
	// Env adds to or overrides the image's ENV.
	Env       map[string]string
	Cwd, User string

	RegistryUsername, RegistryPassword string
	InsecureRegistry                   bool
}

// BuildJob is a template build as the control plane reports it.
type BuildJob struct {
	ID         string
	TemplateID string
	// Phase is PULLING, UNPACKING, BOOTING, PROBING, SNAPSHOTTING, READY
	// or FAILED.
	Phase     string
	Progress  int
	Error     string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// TemplateDetail is what operators see of a template beyond E2B's fields.
type TemplateDetail struct {
	// Status is building, ready or failed.
	Status       string
	Error        string
	Image        string
	ImageDigest  string
	SizeBytes    int64
	ExposedPorts []int
	ProbePort    int
	ProbePath    string
	StartCmd     []string
	Cwd, User    string
	JobID        string
}
