package cube

import (
	"context"
	"time"
)

// NodeStatus is a node's status in E2B's terms: ready nodes take new
// sandboxes; draining (on the way out) and standby (set aside, back with
// ready) nodes keep running theirs and take none; unhealthy nodes have
// missed their heartbeats.
type NodeStatus string

const (
	NodeReady     NodeStatus = "ready"
	NodeDraining  NodeStatus = "draining"
	NodeStandby   NodeStatus = "standby"
	NodeUnhealthy NodeStatus = "unhealthy"
)

// Node is what the API shows of one node of the service.
type Node struct {
	ID              string
	Address         string
	Status          NodeStatus
	StatusChangedAt time.Time
	Version         string
	StartedAt       time.Time
	HeartbeatAt     time.Time
	// Self is the node that answers the request.
	Self  bool
	Usage NodeUsage
}

// NodeUsage is a node's resources and their use at its last heartbeat.
type NodeUsage struct {
	CPUCount             int
	CPUPercent           float64
	MemoryTotalBytes     uint64
	MemoryUsedBytes      uint64
	AllocatedCPU         int
	AllocatedMemoryBytes uint64
	DiskTotalBytes       uint64
	DiskUsedBytes        uint64
	SlotsTotal           int
	SlotsUsed            int
	Sandboxes            int
	SandboxesStarting    int
	CreateSuccesses      uint64
	CreateFails          uint64
	CPUModel             string
	Arch                 string
}

// NodeAdmin is the operators' view of the service's nodes.
type NodeAdmin interface {
	ListNodes(ctx context.Context) ([]Node, error)
	GetNode(ctx context.Context, id string) (Node, error)
	// SetNodeStatus makes a node ready, draining or standby.
	SetNodeStatus(ctx context.Context, id string, status NodeStatus) error
	// RemoveNode forgets a node that is gone.
	RemoveNode(ctx context.Context, id string) error
}
