package api

import (
	"math"
	"net/http"

	"cube/internal/api/wire"
	"cube/internal/cube"
	"cube/internal/httperr"
	"cube/internal/id"
)

// The nodes API is E2B's admin API for nodes: list them, read one, change
// its status (ready, draining, standby). Cube adds DELETE, which forgets a
// node that is gone.

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) error {
	a, err := capability[cube.NodeAdmin](s, "the nodes API is")
	if err != nil {
		return err
	}
	nodes, err := a.ListNodes(r.Context())
	if err != nil {
		return err
	}
	out := make([]wire.Node, len(nodes))
	for i, n := range nodes {
		out[i] = nodeWire(n)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// nodeID reads the path's node ID.
func nodeID(r *http.Request) (string, error) {
	v := r.PathValue("nodeID")
	if !id.ValidName(v) {
		return "", httperr.Errorf(http.StatusBadRequest, "invalid node ID %q: list nodes with GET /nodes", v)
	}
	return v, nil
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) error {
	nid, err := nodeID(r)
	if err != nil {
		return err
	}
	a, err := capability[cube.NodeAdmin](s, "the nodes API is")
	if err != nil {
		return err
	}
	n, err := a.GetNode(r.Context(), nid)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, nodeWire(n))
	return nil
}

func (s *Server) setNodeStatus(w http.ResponseWriter, r *http.Request) error {
	nid, err := nodeID(r)
	if err != nil {
		return err
	}
	var body wire.NodeStatusChange
	if err := decodeBody(r, &body, true); err != nil {
		return err
	}
	a, err := capability[cube.NodeAdmin](s, "the nodes API is")
	if err != nil {
		return err
	}
	if err := a.SetNodeStatus(r.Context(), nid, cube.NodeStatus(body.Status)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) removeNode(w http.ResponseWriter, r *http.Request) error {
	nid, err := nodeID(r)
	if err != nil {
		return err
	}
	a, err := capability[cube.NodeAdmin](s, "the nodes API is")
	if err != nil {
		return err
	}
	if err := a.RemoveNode(r.Context(), nid); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func nodeWire(n cube.Node) wire.Node {
	u := n.Usage
	return wire.Node{
		ID: n.ID, ServiceInstanceID: n.ID, Version: n.Version, Commit: n.Version,
		MachineInfo: wire.MachineInfo{CPUModelName: u.CPUModel, CPUArchitecture: u.Arch},
		Status:      string(n.Status), StatusChangedAt: n.StatusChangedAt,
		SandboxCount: u.Sandboxes, SandboxStartingCount: u.SandboxesStarting,
		Metrics: wire.NodeMetrics{
			AllocatedCPU: u.AllocatedCPU, CPUPercent: int(math.Round(u.CPUPercent)), CPUCount: u.CPUCount,
			AllocatedMemoryBytes: u.AllocatedMemoryBytes, MemoryUsedBytes: u.MemoryUsedBytes, MemoryTotalBytes: u.MemoryTotalBytes,
			Disks: []wire.DiskMetrics{{MountPoint: "data", UsedBytes: u.DiskUsedBytes, TotalBytes: u.DiskTotalBytes}},
		},
		CreateSuccesses: u.CreateSuccesses, CreateFails: u.CreateFails,
		Address: n.Address, StartedAt: n.StartedAt, HeartbeatAt: n.HeartbeatAt,
		SlotsTotal: u.SlotsTotal, SlotsUsed: u.SlotsUsed, Self: n.Self,
	}
}
