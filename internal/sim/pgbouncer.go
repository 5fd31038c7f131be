package sim

import (
	"context"
	"fmt"
	"os"

	"cube/internal/pgbouncer"
)

// startPgBouncer starts a PgBouncer under dir in front of pg, for the
// given roles (the nodes), holding at most pool connections to the server.
func startPgBouncer(ctx context.Context, pg *Postgres, dir string, roles []string, pool int) (*pgbouncer.Pooler, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := reachableBy(pg.asUser, dir); err != nil {
		return nil, err
	}
	return pgbouncer.Start(ctx, pgbouncer.Options{
		Upstream: fmt.Sprintf("127.0.0.1:%d", pg.port), Dir: dir, AsUser: pg.asUser, Roles: roles, Pool: pool,
	})
}
