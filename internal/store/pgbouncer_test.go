package store

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"cube/internal/testenv"
)

// pgbouncer starts a PgBouncer in transaction mode in front of the
// PostgreSQL server at dsn, with at most pool server connections, and
// returns dsn through it. The test is skipped where PgBouncer is not
// installed (Debian's pgbouncer package).
func pgbouncer(t *testing.T, dsn string, pool int) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			t.Skip("no pgbouncer: apt-get install pgbouncer")
		}
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		t.Skip("no system user postgres")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	// A folder the user postgres reaches (t.TempDir's parent is root's).
	dir, err := os.MkdirTemp("", "cube-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	os.Chown(dir, uid, gid)
	users := filepath.Join(dir, "users.txt")
	os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o644)
	conf := filepath.Join(dir, "pgbouncer.ini")
	os.WriteFile(conf, []byte(fmt.Sprintf(`[databases]
* = host=%s port=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 900
server_reset_query =
ignore_startup_parameters = extra_float_digits,application_name
logfile = %s
pidfile = %s
`, u.Hostname(), u.Port(), port, users, pool, filepath.Join(dir, "log"), filepath.Join(dir, "pid"))), 0o644)
	cmd := exec.Command("runuser", "-u", "postgres", "--", bin, conf)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; ; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			break
		}
		if i == 100 {
			log, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Fatalf("pgbouncer does not listen: %s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	u.Host = fmt.Sprintf("127.0.0.1:%d", port)
	q := u.Query()
	// Unnamed statements only: PgBouncer before 1.21 keeps no prepared
	// statements across the server connections it hands out.
	q.Set("default_query_exec_mode", "exec")
	u.RawQuery = q.Encode()
	return u.String()
}

// A hundred nodes fit PostgreSQL's default max_connections through
// PgBouncer in transaction mode: each claims its name, heartbeats, reads
// the late nodes and changes, and bursts past its pool, while PostgreSQL
// sees no more than PgBouncer's pool.
func TestPostgresHundredNodesThroughPgBouncer(t *testing.T) {
	direct := testenv.Postgres(t)
	const pool = 40
	dsn := pgbouncer(t, direct, pool)
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
