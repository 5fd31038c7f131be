package wire

import "time"

// VolumeMount binds a volume into a sandbox (E2B's SandboxVolumeMount).
// ReadOnly is a Cube extension.
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly *bool  `json:"readOnly,omitempty"`
}

// NewVolume is the body of POST /volumes. SizeMB is a Cube extension:
// the volume's capacity (default: the server's --volume-size).
type NewVolume struct {
	Name   string `json:"name"`
	SizeMB *int64 `json:"sizeMB,omitempty"`
}

// Volume is one element of GET /volumes; SizeMB and CreatedAt are Cube's.
type Volume struct {
	VolumeID  string    `json:"volumeID"`
	Name      string    `json:"name"`
	SizeMB    int64     `json:"sizeMB"`
	CreatedAt time.Time `json:"createdAt"`
}

// VolumeAndToken answers POST /volumes and GET /volumes/{volumeID}: the
// token authorises the volume content routes for this volume only.
// Domain stays absent, so the SDKs send content requests where they send
// the API's. SizeMB, UsedMB and CreatedAt are Cube's.
type VolumeAndToken struct {
	VolumeID  string    `json:"volumeID"`
	Name      string    `json:"name"`
	Token     string    `json:"token"`
	Domain    *string   `json:"domain,omitempty"`
	SizeMB    int64     `json:"sizeMB"`
	UsedMB    *int64    `json:"usedMB,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// VolumeEntryStat describes a file, directory or symlink in a volume.
type VolumeEntryStat struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"`
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// VolumeAttr is the body of PATCH /volumecontent/{volumeID}/path.
type VolumeAttr struct {
	UID  *uint32 `json:"uid,omitempty"`
	GID  *uint32 `json:"gid,omitempty"`
	Mode *uint32 `json:"mode,omitempty"`
}
