package store

import "time"

// VolumeState is where a volume is in its lifecycle. A volume is recorded
// as creating before its disk is made and as deleting before its disk is
// removed, so the reconciler finishes or undoes what a crash interrupted.
type VolumeState string

const (
	VolumeCreating VolumeState = "creating"
	VolumeReady    VolumeState = "ready"
	VolumeDeleting VolumeState = "deleting"
)

// Volume is the persisted record of one persistent volume: a disk image
// of its own that outlives the sandboxes mounting it.
type Volume struct {
	ID    string      `json:"id"`
	Name  string      `json:"name"`
	State VolumeState `json:"state"`
	// Team owns the volume; names are unique within a team.
	Team string `json:"team,omitempty"`
	// Token authorises requests for the volume's content (and nothing
	// else); it is handed out with the volume.
	Token     string    `json:"token"`
	SizeBytes int64     `json:"sizeBytes"`
	CreatedAt time.Time `json:"createdAt"`
	// Node is the node whose data directory holds the volume's disk:
	// sandboxes that mount it run there. Empty in records written before
	// nodes shared a store.
	Node string `json:"node,omitempty"`
}

// VolumeMount is one volume bound into a sandbox at Path.
type VolumeMount struct {
	VolumeID string `json:"volumeId"`
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Source is the host directory the volume is mounted on.
	Source string `json:"source"`
}

// Volumes is the table of persistent volumes.
func (s *Store) Volumes() Table[Volume] {
	return Table[Volume]{s: s, name: "volumes",
		key: func(v *Volume) string { return v.ID }, state: func(v *Volume) string { return string(v.State) }}
}
