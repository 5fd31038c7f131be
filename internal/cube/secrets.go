package cube

import (
	"context"
	"time"
)

// SecretInfo is a secret without its value: no answer ever carries one.
type SecretInfo struct {
	ID        string
	Team      string
	Name      string
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Secrets is implemented by backends that keep secrets for network rules
// to insert into a sandbox's outbound requests. Every secret belongs to a
// team, each method acts for team, and ref is an ID or a name: names are
// unique within a team, and another team's secret, by ID or name, is
// NotFound, as one that does not exist. Lists hold team's secrets only.
// A sandbox's rules are filled only with its own team's secrets.
type Secrets interface {
	CreateSecret(ctx context.Context, team, name, value string, metadata map[string]string) (SecretInfo, error)
	UpdateSecret(ctx context.Context, team, ref, value string, metadata map[string]string) (SecretInfo, error)
	GetSecret(ctx context.Context, team, ref string) (SecretInfo, error)
	ListSecrets(ctx context.Context, team string) ([]SecretInfo, error)
	DeleteSecret(ctx context.Context, team, ref string) error
}
