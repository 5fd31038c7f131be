package cube

import (
	"context"
	"io"
	"os"
	"time"
)

// Volume is a persistent volume: a filesystem of its own that outlives
// the sandboxes mounting it.
type Volume struct {
	ID   string
	Team string
	Name string
	// Token authorises requests for this volume's content only.
	Token     string
	SizeBytes int64
	// UsedBytes is what its files take; zero when unknown.
	UsedBytes int64
	CreatedAt time.Time
}

// VolumeMount binds the volume called Name at Path inside a sandbox.
type VolumeMount struct {
	Name     string
	Path     string
	ReadOnly bool
}

// VolumeEntry describes one file, directory or symlink in a volume.
type VolumeEntry struct {
	Name string
	// Path is the entry's path from the volume's root, starting with "/".
	Path   string
	Type   string // "file", "directory", "symlink" or "unknown"
	Size   int64
	Mode   os.FileMode
	UID    uint32
	GID    uint32
	Atime  time.Time
	Mtime  time.Time
	Ctime  time.Time
	Target string // a symlink's target as written
}

// VolumeWrite says how a file or directory is created: its owner and
// permissions (nil: the defaults, uid/gid 1000, 0644 or 0755) and, with
// Force, that missing parents are made and an existing file replaced.
type VolumeWrite struct {
	UID, GID *uint32
	Mode     *uint32
	Force    bool
}

// VolumeAttr is a metadata change; nil fields stay as they are.
type VolumeAttr struct {
	UID, GID *uint32
	Mode     *uint32
}

// Volumes is implemented by backends that keep persistent volumes.
// Unknown volume → NotFound; a volume still mounted by sandboxes or
// snapshots cannot be deleted (Conflict naming them).
type Volumes interface {
	// CreateVolume makes a volume of team's; names are unique within a
	// team.
	CreateVolume(ctx context.Context, team, name string, sizeBytes int64) (*Volume, error)
	// ListVolumes returns team's volumes.
	ListVolumes(ctx context.Context, team string) ([]Volume, error)
	GetVolume(ctx context.Context, id string) (*Volume, error)
	DeleteVolume(ctx context.Context, id string) error
	// VolumeFiles opens the content of a volume for one request; the
	// caller closes it.
	VolumeFiles(ctx context.Context, id string) (VolumeFiles, error)
	// DefaultVolumeBytes and MaxVolumeBytes are the size of a volume
	// created without one and the largest size allowed.
	DefaultVolumeBytes() int64
	MaxVolumeBytes() int64
}

// VolumeFiles are the file operations of the volume content API. Paths
// are relative to the volume's root (a leading "/" is allowed); none
// resolves outside it, through ".." or symlinks. Missing → NotFound;
// exists already → Conflict; the volume full → DiskFull.
type VolumeFiles interface {
	Stat(path string) (*VolumeEntry, error)
	List(path string, depth int) ([]VolumeEntry, error)
	MakeDir(path string, w VolumeWrite) (*VolumeEntry, error)
	WriteFile(path string, r io.Reader, w VolumeWrite) (*VolumeEntry, error)
	// ReadFile opens a regular file for reading.
	ReadFile(path string) (io.ReadCloser, *VolumeEntry, error)
	Remove(path string) error
	SetAttr(path string, a VolumeAttr) (*VolumeEntry, error)
	Close() error
}
