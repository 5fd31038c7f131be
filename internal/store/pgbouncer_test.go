package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"sync"
	"testing"
	"time"

	"cube/internal/pgbouncer"
	"cube/internal/testenv"
)

// throughPgBouncer starts a PgBouncer in transaction mode in front of the
// PostgreSQL server at dsn, with at most pool server connections, and
// returns dsn through it. The test is skipped where PgBouncer is not
// installed (Debian's pgbouncer package).
func throughPgBouncer(t *testing.T, dsn string, pool int) string {
	t.Helper()
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Skip("no system user postgres")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// A folder the user postgres reaches (t.TempDir's parent is root's).
	dir, err := os.MkdirTemp("", "cube-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	os.Chown(dir, uid, gid)
	b, err := pgbouncer.Start(context.Background(), pgbouncer.Options{
		Upstream: u.Host, Dir: dir, AsUser: "postgres", Pool: pool, MaxClients: 900,
	})
	if errors.Is(err, pgbouncer.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	through, err := b.Through(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return through
}

// A hundred nodes fit PostgreSQL's default max_connections through
// PgBouncer in transaction mode: each claims its name, heartbeats, reads
// the late nodes and changes, and bursts past its pool, while PostgreSQL
// sees no more than PgBouncer's pool.
func TestPostgresHundredNodesThroughPgBouncer(t *testing.T) {
	direct := testenv.Postgres(t)
	const pool = 40
	dsn := throughPgBouncer(t, direct, pool)
	ctx := context.Background()
	admin, err := sql.Open("pgx", direct)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var maxConns int
	if err := admin.QueryRow(`SHOW max_connections`).Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	const nodes = 100
	stores := make([]*Store, nodes)
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() {
			s, err := OpenPostgres(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			stores[i] = s
			if err := s.Claim(ctx, fmt.Sprintf("node-%d", i), func(err error) { t.Errorf("node-%d lost its claim: %v", i, err) }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			defer s.Close()
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	server := func() int {
		var n int
		if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	peak := 0
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				peak = max(peak, server())
			}
		}
	}()
	// Two heartbeats each, a read of the changes, and a burst of three
	// times the pool's calls on every node at once.
	for round := range 2 {
		for i, s := range stores {
			wg.Go(func() {
				id := fmt.Sprintf("node-%d", i)
				if err := s.Nodes().Put(ctx, &Node{ID: id, Status: NodeReady, HeartbeatAt: time.Now().UTC()}); err != nil {
					t.Error(err)
				}
				if _, _, err := s.StaleNodes(ctx, time.Now().Add(-10*time.Second)); err != nil {
					t.Error(err)
				}
				if _, err := s.NodeChanges(ctx, Cursor{}); err != nil {
					t.Error(err)
				}
				if round == 1 {
					for range 3 * DefaultMaxOpenConns {
						wg.Go(func() {
							if _, err := s.Sandboxes().List(ctx); err != nil {
								t.Error(err)
							}
						})
					}
				}
			})
		}
		wg.Wait()
	}
	time.Sleep(claimCheck) // a renewal of every claim
	close(stop)
	<-watched
	if peak > pool+1 || peak > maxConns {
		t.Fatalf("PostgreSQL saw %d connections, PgBouncer's pool is %d", peak, pool)
	}
	t.Logf("%d nodes through PgBouncer (transaction mode, pool %d): at most %d connections on PostgreSQL (max_connections %d)", nodes, pool, peak, maxConns)
}
