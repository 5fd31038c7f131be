package wire

import "time"

// TeamMetric is one step of GET /teams/{teamID}/metrics (E2B's
// TeamMetric).
type TeamMetric struct {
	Timestamp           time.Time `json:"timestamp"`
	TimestampUnix       int64     `json:"timestampUnix"`
	ConcurrentSandboxes int32     `json:"concurrentSandboxes"`
	SandboxStartRate    float32   `json:"sandboxStartRate"`
}

// MaxTeamMetric is the answer of GET /teams/{teamID}/metrics/max (E2B's
// MaxTeamMetric).
type MaxTeamMetric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	Value         float64   `json:"value"`
}

// TeamUsage is the answer of GET /teams/{teamID}/usage, a Cube addition:
// what the team's sandboxes used over [start, end].
type TeamUsage struct {
	TeamID           string    `json:"teamID"`
	Start            time.Time `json:"start"`
	End              time.Time `json:"end"`
	SandboxSeconds   float64   `json:"sandboxSeconds"`
	VCPUSeconds      float64   `json:"vcpuSeconds"`
	MemoryMiBSeconds float64   `json:"memoryMiBSeconds"`
	SandboxesStarted int64     `json:"sandboxesStarted"`
	RunningSandboxes int       `json:"runningSandboxes"`
	SnapshotBytes    int64     `json:"snapshotBytes"`
	VolumeBytes      int64     `json:"volumeBytes"`
}
