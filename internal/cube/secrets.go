package cube

import (
	"context"
	"time"
)

// SecretInfo is a secret without its value: no answer ever carries one.
type SecretInfo struct {
	ID        string
	Name      string
	Version   int64
	Metadata  map[string]string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Secrets is implemented by backends that keep secrets for network rules
// to insert into a sandbox's outbound requests. ref is an ID or a name.
type Secrets interface {
	CreateSecret(ctx context.Context, name, value string, metadata map[string]string) (SecretInfo, error)
	UpdateSecret(ctx context.Context, ref, value string, metadata map[string]string) (SecretInfo, error)
	GetSecret(ctx context.Context, ref string) (SecretInfo, error)
	ListSecrets(ctx context.Context) ([]SecretInfo, error)
	DeleteSecret(ctx context.Context, ref string) error
}
