package cube

import (
	"context"
	"time"
)

// FirstTeam is the ID of the team every install starts with: the key made
// at first start is its admin key, and records written before Cube had
// teams belong to it. It is fixed so that nodes of a cluster starting at
// once agree on it without asking each other.
const FirstTeam = "00000000-0000-4000-8000-000000000001"

// Caller is who an API request acts for: the team that owns what it
// touches and the key it presented (by ID and name, never the key).
type Caller struct {
	Team    string
	KeyID   string
	KeyName string
	// Admin keys manage every team: teams, their keys and quotas, and
	// (naming a team) that team's objects.
	Admin bool
	// RequestsPerSecond is the key's team's API rate quota (0: the
	// server's).
	RequestsPerSecond float64
}

// Team is a tenant of the service: it owns API keys, sandboxes,
// templates, snapshots, volumes, secrets and builds, and nothing of one
// team is visible to another.
type Team struct {
	ID        string
	Name      string
	CreatedAt time.Time
	Quotas    Quotas
}

// Quotas bound what one team may hold at once; a zero field is no limit.
type Quotas struct {
	// RunningSandboxes counts running sandboxes (paused ones hold no CPU
	// or memory and are bounded by DiskBytes).
	RunningSandboxes int `json:",omitempty"`
	// VCPUs and MemoryMB total the sizes of the running sandboxes.
	VCPUs    int `json:",omitempty"`
	MemoryMB int `json:",omitempty"`
	// MaxTimeout is the longest lifetime a sandbox may ask for.
	MaxTimeout time.Duration `json:",omitempty"`
	// DiskBytes totals templates, snapshots, pause images and volumes.
	DiskBytes int64 `json:",omitempty"`
	// Builds counts template builds in progress.
	Builds int `json:",omitempty"`
	// RequestsPerSecond is each key's sustained API rate.
	RequestsPerSecond float64 `json:",omitempty"`
}

// APIKey is a key as its team sees it: the key itself is shown once, when
// it is made, and kept only as a digest.
type APIKey struct {
	ID   string
	Team string
	Name string
	// Mask shows enough of the key to recognise it.
	Mask      KeyMask
	CreatedAt time.Time
	// CreatedBy is the ID of the key that made it; empty for the key made
	// at first start.
	CreatedBy string
	// LastUsed is zero until the key is used; it is updated at most once a
	// minute.
	LastUsed time.Time
	Admin    bool
}

// KeyMask is E2B's masked view of a key: its type prefix, length, and a
// few characters from each end.
type KeyMask struct {
	Prefix       string
	ValueLength  int
	MaskedPrefix string
	MaskedSuffix string
}

// NewAPIKey is a key just made: the only answer that carries Key.
type NewAPIKey struct {
	APIKey
	Key string
}

// Teams is implemented by backends that keep teams and their keys.
// Unknown team or key → NotFound. A team's own keys manage its keys; an
// admin key manages teams and every team's keys.
type Teams interface {
	// Authenticate returns the caller a key stands for; an unknown or
	// revoked key → Forbidden. A key revoked on any node of a cluster
	// fails here within a second.
	Authenticate(ctx context.Context, key string) (Caller, error)
	CreateTeam(ctx context.Context, name string, q Quotas) (Team, error)
	ListTeams(ctx context.Context) ([]Team, error)
	GetTeam(ctx context.Context, id string) (Team, error)
	SetQuotas(ctx context.Context, id string, q Quotas) (Team, error)
	// DeleteTeam removes a team and its keys; a team that still owns
	// sandboxes, templates, snapshots or volumes → Conflict naming them.
	DeleteTeam(ctx context.Context, id string) error
	CreateKey(ctx context.Context, team, name, createdBy string) (NewAPIKey, error)
	ListKeys(ctx context.Context, team string) ([]APIKey, error)
	RenameKey(ctx context.Context, team, keyID, name string) error
	// DeleteKey revokes a key; the last admin key cannot go (Conflict).
	DeleteKey(ctx context.Context, team, keyID string) error
}
