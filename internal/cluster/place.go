package cluster

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"cube/internal/cube"
	"cube/internal/id"
	"cube/internal/store"
)

// Want is what a create needs of a node: Node is the node that must run it
// because it alone holds the volumes' disks ("" when any node will do);
// Holders are the nodes that hold the template's files, preferred because
// another node first copies them from one of these; MemoryMB is the memory
// it asks for.
type Want struct {
	Node     string
	Holders  []string
	MemoryMB int
	// Avoid are nodes not to place on: a peer that could not be reached
	// for this create, until its heartbeat says what became of it.
	Avoid []string
}

// ErrNoNode is a node the records name that the nodes table does not
// hold (an operator removed it).
var ErrNoNode = errors.New("no such node")

// pendingMB is the memory a placed create is counted for until its node's
// heartbeat shows what it uses: sandboxes share their template's memory
// and touch little of their limit when they start (an idle one holds
// about 26 MiB of the host, docs/BENCHMARKS.md). It bounds how many
// creates one node is given between two heartbeats: free memory /
// pendingMB, some 350 a node with 22 GB free (at 256 MB it was 88, which
// turned bursts on one node into 429s with room to spare).
const pendingMB = 64

// reservationTTL drops a reservation whose create never reported back
// (the placing node died while forwarding it).
const reservationTTL = 2 * time.Minute

// Self is this node's name.
func (r *Registry) Self() string { return r.cfg.ID }

// peerAge is how old the node records a peer's address is looked up in
// may be: every request forwarded to a peer asks for its address, and an
// address changes only when its node restarts somewhere else.
const peerAge = time.Second

// Peer returns a node's API base URL and whether it heartbeats, from the
// node records read by changes (at most peerAge ago; read again for a
// node they do not hold or show late).
func (r *Registry) Peer(ctx context.Context, nodeID string) (string, bool, error) {
	rec, err := r.node(ctx, nodeID, peerAge)
	if err == nil && (rec == nil || r.view(rec).Status == cube.NodeUnhealthy) {
		// Not there, or late as last read: read again, so that a node
		// back from a restart is answered as alive at once.
		rec, err = r.node(ctx, nodeID, 0)
	}
	if err != nil {
		return "", false, err
	}
	if rec == nil {
		return "", false, ErrNoNode
	}
	return rec.Address, r.view(rec).Status != cube.NodeUnhealthy, nil
}

// Place picks the node a create runs on: a ready node that heartbeats,
// the one want names if it names one, with a free network slot, CPUs not
// all busy, and the most free memory (counting the creates placed there
// that its usage does not show yet). Nodes holding the template come first; another node is
// chosen only when none of them can take it, and only while one of them
// heartbeats to copy the template from. The choice is a reservation
// written into the node's row in a transaction that checks the room
// again, so concurrent creates on any nodes never take the same last
// slot. release marks the create done; the reservation then lasts until
// the node's next heartbeat.
func (r *Registry) Place(ctx context.Context, want Want) (string, func(), error) {
	// The records as of now, read by changes: the rows written since
	// this node's last placement (see records).
	recs, err := r.nodes(ctx, 0)
	if err != nil {
		return "", nil, err
	}
	now := r.cfg.Now().UTC()
	// source: a node holding the template heartbeats, to copy it from.
	source := len(want.Holders) == 0
	for _, rec := range recs {
		if slices.Contains(want.Holders, rec.ID) && r.view(rec).Status != cube.NodeUnhealthy {
			source = true
		}
	}
	var holders, others []*store.Node
	for _, rec := range recs {
		switch {
		case want.Node != "" && rec.ID != want.Node, r.view(rec).Status != cube.NodeReady, slices.Contains(want.Avoid, rec.ID):
		case len(want.Holders) == 0 || slices.Contains(want.Holders, rec.ID):
			holders = append(holders, rec)
		case source:
			others = append(others, rec)
		}
	}
	if len(holders)+len(others) == 0 {
		return "", nil, r.nowhere(recs, want, source)
	}
	// A node whose CPUs are nearly all busy comes after those with some
	// to spare (a restore is CPU-bound); then the most free memory.
	byRoom := func(a, b *store.Node) int {
		if c := cmp.Compare(cpuBusy(a), cpuBusy(b)); c != 0 {
			return c
		}
		if c := cmp.Compare(freeMB(b, now), freeMB(a, now)); c != 0 {
			return c
		}
		return cmp.Compare(a.Usage.Sandboxes, b.Usage.Sandboxes)
	}
	slices.SortStableFunc(holders, byRoom)
	slices.SortStableFunc(others, byRoom)
	resv := store.Reservation{ID: id.New("", 12), MemoryMB: max(want.MemoryMB, 0), At: now}
	for _, c := range append(holders, others...) {
		err := r.reserve(ctx, c, resv, now)
		switch {
		case err == nil:
			node := c.ID
			return node, func() { r.release(node, resv.ID) }, nil
		case errors.Is(err, errFull), errors.Is(err, store.ErrNotFound):
			continue
		default:
			return "", nil, err
		}
	}
	return "", nil, cube.Errorf(cube.Capacity, "every node that can run this sandbox is full (network slots or memory): kill sandboxes or add nodes").WithRetryAfter(time.Second)
}

// reserve holds room for resv on node c (as this placement read it), or
// says errFull. Room and status are checked on the row itself, which an
// operator or another placement may have changed since it was read: first
// by writing over the row as read, in one statement, and only when it
// changed meanwhile in a transaction that reads and locks it.
func (r *Registry) reserve(ctx context.Context, c *store.Node, resv store.Reservation, now time.Time) error {
	with := func(rec *store.Node) error {
		if r.view(rec).Status != cube.NodeReady || freeSlots(rec, now) <= 0 || freeMB(rec, now) < pendingMB {
			return errFull
		}
		rec.Reservations = append(live(rec.Reservations, now), resv)
		return nil
	}
	next := *c // the records read are shared: change a copy
	if err := with(&next); err != nil {
		return err
	}
	if ok, err := r.cfg.Store.ReplaceNode(ctx, &next); ok || err != nil {
		return err
	}
	return r.cfg.Store.Nodes().Update(ctx, c.ID, with)
}

var errFull = errors.New("node full")

// nowhere says why no node can take a create, and what to do.
func (r *Registry) nowhere(recs []*store.Node, want Want, source bool) error {
	find := func(id string) *store.Node {
		if i := slices.IndexFunc(recs, func(n *store.Node) bool { return n.ID == id }); i >= 0 {
			return recs[i]
		}
		return nil
	}
	if want.Node != "" {
		rec := find(want.Node)
		switch {
		case rec == nil:
			return cube.Errorf(cube.Unavailable, "this sandbox's volumes are on node %s, which is no longer a node of the cluster", want.Node)
		case r.view(rec).Status != cube.NodeReady:
			return cube.Errorf(cube.Unavailable, "this sandbox's volumes are on node %s, which is %s and takes no new sandboxes", want.Node, r.view(rec).Status).WithRetryAfter(5 * time.Second)
		}
		return cube.Errorf(cube.Unavailable, "this sandbox's volumes are on node %s, and its template cannot be copied there while no node holding it (%s) answers", want.Node, strings.Join(want.Holders, ", ")).WithRetryAfter(5 * time.Second)
	}
	if !source {
		for _, id := range want.Holders {
			if rec := find(id); rec != nil {
				return cube.Errorf(cube.Unavailable, "this sandbox's template is held by node %s, which is %s: it can be neither run nor copied until that node is back", id, r.view(rec).Status).WithRetryAfter(5 * time.Second)
			}
		}
		return cube.Errorf(cube.Unavailable, "this sandbox's template is held by node %s, which is no longer a node of the cluster", strings.Join(want.Holders, ", "))
	}
	return cube.Errorf(cube.Unavailable, "no node takes new sandboxes: every node is draining, standby or unhealthy (see `cubemastercli node list`)").WithRetryAfter(5 * time.Second)
}

// release marks a placed create as done, in one statement.
func (r *Registry) release(nodeID, resvID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.cfg.Store.EndReservation(ctx, nodeID, resvID, r.cfg.Now().UTC())
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		r.cfg.Logger.Warn("release a placement", "node", nodeID, "err", err)
	}
}

// live drops the reservations that are stale.
func live(rs []store.Reservation, now time.Time) []store.Reservation {
	return slices.DeleteFunc(slices.Clone(rs), func(v store.Reservation) bool { return now.Sub(v.At) > reservationTTL })
}

// settled drops the reservations of creates that ended before usage was
// read: the usage shows them.
func settled(rs []store.Reservation, usageRead, now time.Time) []store.Reservation {
	return slices.DeleteFunc(live(rs, now), func(v store.Reservation) bool { return !v.DoneAt.IsZero() && v.DoneAt.Before(usageRead) })
}

// busyCPU is the share of its CPUs a node may use and still be placed on
// before nodes with some to spare.
const busyCPU = 90

// cpuBusy is 1 for a node whose CPUs were nearly all busy at its last
// heartbeat, else 0.
func cpuBusy(n *store.Node) int {
	if n.Usage.CPUPercent >= busyCPU {
		return 1
	}
	return 0
}

func freeSlots(n *store.Node, now time.Time) int {
	return n.Usage.SlotsTotal - n.Usage.SlotsUsed - len(live(n.Reservations, now))
}

func freeMB(n *store.Node, now time.Time) int64 {
	free := int64(n.Usage.MemoryTotalBytes>>20) - int64(n.Usage.MemoryUsedBytes>>20)
	return free - int64(len(live(n.Reservations, now)))*pendingMB
}
