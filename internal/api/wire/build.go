package wire

import "time"

// TemplateBuildRequest is the body of POST /templates: build a template
// from an OCI image. Only image is required.
type TemplateBuildRequest struct {
	// Image is a registry reference or oci-archive:PATH, oci:DIR[:TAG],
	// docker-archive:PATH.
	Image string `json:"image"`
	// TemplateID names the template; empty generates one.
	TemplateID string   `json:"templateID,omitempty"`
	Aliases    []string `json:"aliases,omitempty"`
	// CPUMillicores is rounded up to whole CPUs.
	CPUMillicores int `json:"cpuMillicores,omitempty"`
	MemoryMB      int `json:"memoryMB,omitempty"`
	// WritableLayerSize is the size of each sandbox's writable layer, such
	// as "1G" or "512M".
	WritableLayerSize string `json:"writableLayerSize,omitempty"`
	ExposedPorts      []int  `json:"exposedPorts,omitempty"`
	// ProbePort and ProbePath say where the build waits for a 2xx answer
	// before the snapshot is taken (default 49983 and /health).
	ProbePort int    `json:"probePort,omitempty"`
	ProbePath string `json:"probePath,omitempty"`
	// Cmd replaces the image's ENTRYPOINT (and with it its CMD); Args
	// replaces the image's CMD.
	Cmd  []string `json:"cmd,omitempty"`
	Args []string `json:"args,omitempty"`
	// Env adds to or overrides the image's ENV.
	Env              map[string]string `json:"env,omitempty"`
	Cwd              string            `json:"cwd,omitempty"`
	User             string            `json:"user,omitempty"`
	RegistryUsername string            `json:"registryUsername,omitempty"`
	RegistryPassword string            `json:"registryPassword,omitempty"`
	InsecureRegistry bool              `json:"insecureRegistry,omitempty"`
}

// TemplateBuildStarted is the answer to POST /templates.
type TemplateBuildStarted struct {
	JobID      string `json:"jobID"`
	TemplateID string `json:"templateID"`
}

// TemplateBuildJob is the answer to GET /templates/jobs/{jobID}.
type TemplateBuildJob struct {
	JobID      string `json:"jobID"`
	TemplateID string `json:"templateID"`
	// Phase is PULLING, UNPACKING, BOOTING, PROBING, SNAPSHOTTING, READY
	// or FAILED.
	Phase     string    `json:"phase"`
	Progress  int       `json:"progress"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// TemplateBuildInfo is what Cube adds to the E2B template answers for
// operators, on servers that build templates.
type TemplateBuildInfo struct {
	// Status is building, ready or failed.
	Status       string   `json:"status,omitempty"`
	Error        string   `json:"error,omitempty"`
	Image        string   `json:"image,omitempty"`
	ImageDigest  string   `json:"imageDigest,omitempty"`
	SizeBytes    int64    `json:"sizeBytes,omitempty"`
	ExposedPorts []int    `json:"exposedPorts,omitempty"`
	ProbePort    int      `json:"probePort,omitempty"`
	ProbePath    string   `json:"probePath,omitempty"`
	StartCmd     []string `json:"startCmd,omitempty"`
	Cwd          string   `json:"cwd,omitempty"`
	User         string   `json:"user,omitempty"`
	// JobID is the build that made the template (none for snapshots).
	JobID string `json:"jobID,omitempty"`
}

// TemplateListed is one element of GET /templates on servers that build
// templates.
type TemplateListed struct {
	Template
	TemplateBuildInfo
}

// TemplateDetail is the answer to GET /templates/{id} on servers that
// build templates.
type TemplateDetail struct {
	TemplateWithBuilds
	TemplateBuildInfo
}
