package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"cube/internal/cluster"
	"cube/internal/cube"
	"cube/internal/hoststat"
	"cube/internal/id"
	"cube/internal/node"
	"cube/internal/store"
)

// nodeIDFile keeps a node's name across restarts, so its record (and an
// operator's drain) stays its own.
const nodeIDFile = "node-id"

// nodeName is --node-id, else the name kept in the data directory, else a
// new one: the host's name and a random suffix, kept from then on.
func nodeName(o Options) (string, error) {
	if o.NodeID != "" {
		if !id.ValidName(o.NodeID) {
			return "", fmt.Errorf("--node-id %q: use lowercase letters, digits and dashes", o.NodeID)
		}
		return o.NodeID, nil
	}
	path := filepath.Join(o.DataDir, nodeIDFile)
	if b, err := os.ReadFile(path); err == nil && id.ValidName(strings.TrimSpace(string(b))) {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	host, _ := os.Hostname()
	host = strings.ToLower(strings.Split(host, ".")[0])
	if !id.ValidName(host) {
		host = "node"
	}
	name := host + "-" + id.New("", 6)
	if err := os.WriteFile(path, []byte(name+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("keep the node's name in %s: %w", path, err)
	}
	return name, nil
}

// creates counts the sandbox creates this node attempted, for its
// heartbeat: a request refused before any work (bad input, unknown
// template) is not an attempt.
type creates struct{ ok, failed atomic.Uint64 }

func (c *creates) record(err error) {
	switch {
	case err == nil:
		c.ok.Add(1)
	case cube.KindOf(err) == cube.Invalid, cube.KindOf(err) == cube.NotFound, cube.KindOf(err) == cube.Unavailable:
	default:
		c.failed.Add(1)
	}
}

// usage reads this node's resources and their use for its heartbeat.
type usage struct {
	nd      *node.Node
	dataDir string
	slots   int
	creates *creates
	machine hoststat.Machine

	mu   sync.Mutex
	last hoststat.Sample // the previous heartbeat's, for CPU busy %
}

func (u *usage) read(ctx context.Context) store.NodeUsage {
	s := hoststat.Read("/proc")
	u.mu.Lock()
	busy := hoststat.BusyPercent(u.last, s)
	u.last = s
	u.mu.Unlock()
	disk := hoststat.DiskOf(u.dataDir)
	out := store.NodeUsage{
		CPUCount: s.CPUs, CPUPercent: busy,
		MemoryTotalBytes: s.MemTotalBytes, MemoryUsedBytes: s.MemTotalBytes - min(s.MemAvailableBytes, s.MemTotalBytes),
		DiskTotalBytes: disk.TotalBytes, DiskUsedBytes: disk.TotalBytes - min(disk.FreeBytes, disk.TotalBytes),
		SlotsTotal: u.slots, CreateSuccesses: u.creates.ok.Load(), CreateFails: u.creates.failed.Load(),
		CPUModel: u.machine.CPUModel, Arch: u.machine.Arch,
	}
	if l, err := u.nd.Load(ctx); err == nil {
		out.Sandboxes, out.SandboxesStarting, out.SlotsUsed = l.Running, l.Starting, l.HoldingSlots
		out.AllocatedCPU, out.AllocatedMemoryBytes = l.CPUs, uint64(l.MemoryMB)<<20
	}
	return out
}

// registerNode records this server as a node of the service, reporting
// the node's usage; the caller runs its heartbeat.
func registerNode(ctx context.Context, o Options, reg *cluster.Registry, nd *node.Node, slots int, c *creates) error {
	u := &usage{nd: nd, dataDir: o.DataDir, slots: slots, creates: c, machine: hoststat.ReadMachine("/proc"), last: hoststat.Read("/proc")}
	return reg.Register(ctx, u.read)
}
