package wire

import "time"

// Node is one node in GET /nodes and GET /nodes/{nodeID}: E2B's Node and
// NodeDetail, with Cube's additions after them.
type Node struct {
	ID                   string      `json:"id"`
	ServiceInstanceID    string      `json:"serviceInstanceID"`
	ClusterID            string      `json:"clusterID"`
	Version              string      `json:"version"`
	Commit               string      `json:"commit"`
	MachineInfo          MachineInfo `json:"machineInfo"`
	Status               string      `json:"status"`
	StatusChangedAt      time.Time   `json:"statusChangedAt"`
	SandboxCount         int         `json:"sandboxCount"`
	SandboxStartingCount int         `json:"sandboxStartingCount"`
	Metrics              NodeMetrics `json:"metrics"`
	CreateSuccesses      uint64      `json:"createSuccesses"`
	CreateFails          uint64      `json:"createFails"`
	// Cube's: where peers reach the node, when it started and was last
	// heard from, its network slots, and whether it answered this request.
	Address     string    `json:"address"`
	StartedAt   time.Time `json:"startedAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	SlotsTotal  int       `json:"slotsTotal"`
	SlotsUsed   int       `json:"slotsUsed"`
	Self        bool      `json:"self"`
}

// MachineInfo is E2B's description of a node's processor.
type MachineInfo struct {
	CPUFamily       string `json:"cpuFamily"`
	CPUModel        string `json:"cpuModel"`
	CPUModelName    string `json:"cpuModelName"`
	CPUArchitecture string `json:"cpuArchitecture"`
}

// NodeMetrics is E2B's node metrics. Cube's sandboxes use no huge pages.
type NodeMetrics struct {
	AllocatedCPU         int           `json:"allocatedCPU"`
	CPUPercent           int           `json:"cpuPercent"`
	CPUCount             int           `json:"cpuCount"`
	AllocatedMemoryBytes uint64        `json:"allocatedMemoryBytes"`
	MemoryUsedBytes      uint64        `json:"memoryUsedBytes"`
	MemoryTotalBytes     uint64        `json:"memoryTotalBytes"`
	Disks                []DiskMetrics `json:"disks"`
	HugePagesTotal       uint64        `json:"hugePagesTotal"`
	HugePagesUsed        uint64        `json:"hugePagesUsed"`
	HugePagesReserved    uint64        `json:"hugePagesReserved"`
	HugePageSizeBytes    uint64        `json:"hugePageSizeBytes"`
}

// DiskMetrics is one filesystem of a node: Cube reports its data
// directory's.
type DiskMetrics struct {
	MountPoint     string `json:"mountPoint"`
	Device         string `json:"device"`
	FilesystemType string `json:"filesystemType"`
	UsedBytes      uint64 `json:"usedBytes"`
	TotalBytes     uint64 `json:"totalBytes"`
}

// NodeStatusChange is the body of POST /nodes/{nodeID}.
type NodeStatusChange struct {
	ClusterID string `json:"clusterID,omitempty"`
	Status    string `json:"status"`
}
