package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// NodeStatus is an operator's or the registry's word on a node, in E2B's
// terms. Ready nodes take new sandboxes; draining and standby nodes keep
// the sandboxes they run and take no new ones (draining: on the way out;
// standby: set aside for now, back with uncordon). Unhealthy is not
// stored: a node is reported so when its heartbeat is late.
type NodeStatus string

const (
	NodeReady     NodeStatus = "ready"
	NodeDraining  NodeStatus = "draining"
	NodeStandby   NodeStatus = "standby"
	NodeUnhealthy NodeStatus = "unhealthy"
)

// Node is the record a server keeps of itself in the state database: who
// it is, where peers reach it, what it can hold and holds, and when it was
// last heard from.
type Node struct {
	ID string `json:"id"`
	// Address is the node's API base URL, as other nodes reach it.
	Address string     `json:"address"`
	Status  NodeStatus `json:"status"`
	// StatusChangedAt is when Status last changed.
	StatusChangedAt time.Time `json:"statusChangedAt"`
	Version         string    `json:"version"`
	StartedAt       time.Time `json:"startedAt"`
	HeartbeatAt     time.Time `json:"heartbeatAt"`
	Usage           NodeUsage `json:"usage"`
	// CACert is the PEM certificate of the authority whose certificates
	// the node presents to its peers (mutual TLS), when it has one.
	CACert string `json:"caCert,omitempty"`
	// Reservations hold room for creates placed on the node that its
	// usage does not show yet.
	Reservations []Reservation `json:"reservations,omitempty"`
	// Written names the write of the row this record was read from (the
	// transaction, in PostgreSQL), as NodeChanges reads it; 0: unknown.
	// ReplaceNode writes a record only over that same write.
	Written int64 `json:"-"`
}

// Reservation is room held on a node for one create placed there: from
// the placement until the node's first heartbeat whose usage was read
// after the create ended (DoneAt), or until it is stale.
type Reservation struct {
	ID       string    `json:"id"`
	MemoryMB int       `json:"memoryMB"`
	At       time.Time `json:"at"`
	DoneAt   time.Time `json:"doneAt,omitzero"`
}

// NodeUsage is a node's resources and their use at its last heartbeat.
type NodeUsage struct {
	CPUCount             int     `json:"cpuCount"`
	CPUPercent           float64 `json:"cpuPercent"`
	MemoryTotalBytes     uint64  `json:"memoryTotalBytes"`
	MemoryUsedBytes      uint64  `json:"memoryUsedBytes"`
	AllocatedCPU         int     `json:"allocatedCPU"`
	AllocatedMemoryBytes uint64  `json:"allocatedMemoryBytes"`
	DiskTotalBytes       uint64  `json:"diskTotalBytes"`
	DiskUsedBytes        uint64  `json:"diskUsedBytes"`
	// Slots are network slots: every running sandbox holds one.
	SlotsTotal        int    `json:"slotsTotal"`
	SlotsUsed         int    `json:"slotsUsed"`
	Sandboxes         int    `json:"sandboxes"`
	SandboxesStarting int    `json:"sandboxesStarting"`
	CreateSuccesses   uint64 `json:"createSuccesses"`
	CreateFails       uint64 `json:"createFails"`
	// CPUModel and Arch describe the machine.
	CPUModel string `json:"cpuModel"`
	Arch     string `json:"arch"`
}

// Nodes is the table of nodes.
func (s *Store) Nodes() Table[Node] {
	return Table[Node]{s: s, name: "nodes",
		key: func(v *Node) string { return v.ID }, state: func(v *Node) string { return string(v.Status) }}
}

// EndReservation marks a node's reservation done at the time given: its
// create ended, and the node's next heartbeat shows what it uses. In
// PostgreSQL it is one UPDATE of the row, without reading it first: every
// create placed on another node ends with one. A reservation or node that
// is gone is no error.
func (s *Store) EndReservation(ctx context.Context, node, resvID string, at time.Time) error {
	if s.dialect != "postgres" {
		err := s.Nodes().Update(ctx, node, func(rec *Node) error {
			for i := range rec.Reservations {
				if rec.Reservations[i].ID == resvID {
					rec.Reservations[i].DoneAt = at
				}
			}
			return nil
		})
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	_, err := s.db.ExecContext(ctx, `UPDATE nodes SET data = jsonb_set(data::jsonb, '{reservations}',
		(SELECT jsonb_agg(CASE WHEN e->>'id' = $2 THEN e || jsonb_build_object('doneAt', $3::text) ELSE e END ORDER BY i)
		 FROM jsonb_array_elements(data::jsonb->'reservations') WITH ORDINALITY AS a(e, i)))::text
		WHERE id = $1 AND data::jsonb->'reservations' @> jsonb_build_array(jsonb_build_object('id', $2::text))`,
		node, resvID, at.UTC().Format(time.RFC3339Nano))
	return s.outage(err)
}

// ReplaceNode writes rec over its row if the row is still as rec was read
// (rec.Written): one UPDATE, no lock held between the read and the write.
// false: the row was written since (or is gone, or the store cannot tell),
// and nothing was written.
func (s *Store) ReplaceNode(ctx context.Context, rec *Node) (bool, error) {
	if s.dialect != "postgres" || rec.Written == 0 {
		return false, nil
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	res, err := s.db.ExecContext(ctx, `UPDATE nodes SET state = $2, data = $3 WHERE id = $1 AND chg = $4`,
		rec.ID, string(rec.Status), string(data), rec.Written)
	if err != nil {
		return false, s.outage(err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}
