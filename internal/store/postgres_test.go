package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/testenv"
)

// claimAs tries once to take name's lease as a server of its own, with
// no watchdog.
func (s *Store) claimAs(ctx context.Context, name string) (bool, error) {
	if s.claimHolder == "" {
		var token [16]byte
		rand.Read(token[:])
		s.claimHolder = hex.EncodeToString(token[:])
	}
	s.claimName = name
	return s.takeClaim(ctx)
}

func TestPoolParamsAreTakenFromTheURL(t *testing.T) {
	dsn, o, err := poolParams("postgres://u:p@h:5432/db?sslmode=disable&pool_max_conns=8&pool_max_idle_conns=0&pool_max_conn_idle_time=30s", PostgresOptions{MaxOpenConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dsn, "pool_") || !strings.Contains(dsn, "sslmode=disable") {
		t.Fatalf("URL passed on: %s", dsn)
	}
	if o.MaxOpenConns != 8 || o.MaxIdleConns != -1 || o.ConnMaxIdleTime != 30*time.Second {
		t.Fatalf("options %+v", o)
	}
	if got := o.withDefaults(); got.MaxIdleConns != 0 {
		t.Fatalf("no idle connection asked for: %+v", got)
	}
	if d := (PostgresOptions{}).withDefaults(); d.MaxOpenConns != DefaultMaxOpenConns || d.MaxIdleConns != DefaultMaxIdleConns || d.ConnMaxIdleTime != DefaultConnMaxIdleTime {
		t.Fatalf("defaults %+v", d)
	}
	same := "postgres://u@h/db?sslmode=disable"
	if dsn, _, err := poolParams(same, PostgresOptions{}); err != nil || dsn != same {
		t.Fatalf("a URL without pool parameters: %q, %v", dsn, err)
	}
	for _, bad := range []string{"pool_max_conns=0", "pool_max_conns=x", "pool_max_idle_conns=-1", "pool_max_conn_idle_time=soon"} {
		if _, _, err := poolParams(same+"&"+bad, PostgresOptions{}); err == nil || !strings.Contains(err.Error(), strings.Split(bad, "=")[0]) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// connections counts the sessions of the test's database that carry
// application name app.
func connections(t *testing.T, admin *sql.DB, app string) int {
	t.Helper()
	var n int
	if err := admin.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A node's connections are bounded by its pool: a burst of calls waits
// for the pool's few rather than opening one each, and what is not used
// is closed again.
func TestPostgresPoolIsBounded(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	s, err := OpenPostgres(ctx, dsn+"&application_name=bounded&pool_max_conns=3&pool_max_idle_conns=1&pool_max_conn_idle_time=1s")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	peak := 0
	var mu sync.Mutex
	for range 12 {
		wg.Go(func() {
			if _, err := s.db.ExecContext(ctx, `SELECT pg_sleep(0.2)`); err != nil {
				t.Error(err)
			}
			n := connections(t, admin, "bounded")
			mu.Lock()
			peak = max(peak, n)
			mu.Unlock()
		})
	}
	wg.Wait()
	if peak > 3 || peak == 0 {
		t.Fatalf("%d connections during a burst of 12 calls, want at most the pool's 3", peak)
	}
	// A closed connection's backend leaves pg_stat_activity once it has
	// exited: soon after.
	deadline := time.Now().Add(time.Second)
	for n := connections(t, admin, "bounded"); n > 1; n = connections(t, admin, "bounded") {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections after the burst, want the one kept idle", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	deadline = time.Now().Add(5 * time.Second)
	for connections(t, admin, "bounded") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle connection was not closed after its idle time")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Many nodes on one database: a claim holds no connection, each node
// keeps one connection at rest (its heartbeat's) and no more than its
// pool at its peak. The numbers are logged: docs/CLUSTER.md quotes them.
func TestPostgresConnectionsOfManyNodes(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	const nodes = 24
	stores := make([]*Store, nodes)
	for i := range stores {
		s, err := OpenPostgres(ctx, dsn+"&application_name=node")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Claim(ctx, fmt.Sprintf("node-%d", i), func(err error) { t.Errorf("node-%d lost its claim: %v", i, err) }); err != nil {
			t.Fatal(err)
		}
		stores[i] = s
	}
	// A heartbeat on each: its write and its read of the late nodes.
	beat := func(i int) {
		s := stores[i]
		id := fmt.Sprintf("node-%d", i)
		if err := s.Nodes().Put(ctx, &Node{ID: id, Status: NodeReady, HeartbeatAt: time.Now().UTC()}); err != nil {
			t.Error(err)
		}
		if err := s.Nodes().Update(ctx, id, func(n *Node) error { n.HeartbeatAt = time.Now().UTC(); return nil }); err != nil {
			t.Error(err)
		}
		if _, _, err := s.StaleNodes(ctx, time.Now().Add(-10*time.Second)); err != nil {
			t.Error(err)
		}
	}
	for i := range stores {
		beat(i)
	}
	rest := connections(t, admin, "node")
	for i, s := range stores {
		if st := s.PoolStats(); st.InUse != 0 || st.OpenConnections > 1 {
			t.Fatalf("node-%d at rest: %d connections open, %d in use; want at most its idle one", i, st.OpenConnections, st.InUse)
		}
	}
	if rest > nodes {
		t.Fatalf("%d nodes at rest hold %d connections", nodes, rest)
	}
	// Every node at its peak: more calls at once than its pool.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, s := range stores {
		for range 3 * DefaultMaxOpenConns {
			wg.Go(func() {
				if _, err := s.db.ExecContext(ctx, `SELECT pg_sleep(0.3)`); err != nil {
					t.Error(err)
				}
			})
		}
	}
	peak := 0
	go func() {
		wg.Wait()
		close(stop)
	}()
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		case <-time.After(50 * time.Millisecond):
			peak = max(peak, connections(t, admin, "node"))
		}
	}
	if peak > nodes*DefaultMaxOpenConns {
		t.Fatalf("%d nodes at their peak hold %d connections, more than %d each", nodes, peak, DefaultMaxOpenConns)
	}
	t.Logf("%d nodes: %d connections at rest (%.2f a node), %d at the peak (%.2f a node)", nodes, rest, float64(rest)/nodes, peak, float64(peak)/nodes)
}

func TestPostgresClaimHoldsNoConnection(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	s, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Claim(ctx, "node-a", func(error) {}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(claimCheck + 500*time.Millisecond) // a renewal
	if st := s.PoolStats(); st.InUse != 0 || st.OpenConnections > 1 {
		t.Fatalf("a claimed store holds %d connections, %d in use", st.OpenConnections, st.InUse)
	}
	// Closed, the claim is free at once for the next server.
	s.Close()
	next, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if got, err := next.claimAs(ctx, "node-a"); err != nil || !got {
		t.Fatalf("claim after Close: %v, %v", got, err)
	}
}

// tokenIndex is what a reader of SandboxTokens knows.
type tokenIndex struct {
	c      Cursor
	tokens map[string]SandboxToken
}

func (x *tokenIndex) read(t *testing.T, s *Store) TokenChanges {
	t.Helper()
	ch, err := s.SandboxTokens(context.Background(), x.c)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Full || x.tokens == nil {
		x.tokens = map[string]SandboxToken{}
	}
	for _, id := range ch.Gone {
		delete(x.tokens, id)
	}
	for _, v := range ch.Changed {
		if v.Live() {
			x.tokens[v.ID] = v
		} else {
			delete(x.tokens, v.ID)
		}
	}
	x.c = ch.Next
	return ch
}

func (x *tokenIndex) ids() []string {
	var out []string
	for id := range x.tokens {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// A reader of the sandboxes' tokens reads them all once, then only what
// changed: new, changed and deleted sandboxes, and a write that committed
// after a read its transaction had started before.
func TestPostgresSandboxTokensAreReadByChanges(t *testing.T) {
	ctx := context.Background()
	s, _ := postgresBackend(t).open(t)
	put := func(id string, state SandboxState, node string) {
		t.Helper()
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: id, State: state, Node: node, EnvdToken: "tok-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", Running, "n1")
	put("b", Paused, "n2")
	put("c", Creating, "n1")
	var x tokenIndex
	if ch := x.read(t, s); !ch.Full || !slices.Equal(x.ids(), []string{"a", "b"}) || x.tokens["b"].Node != "n2" || x.tokens["a"].EnvdToken != "tok-a" {
		t.Fatalf("first read: full %v, %+v", ch.Full, x.tokens)
	}
	// Nothing changed: nothing read but the cursor (the overlap of a
	// read is only what transactions still running may write).
	if ch := x.read(t, s); ch.Full || len(ch.Changed)+len(ch.Gone) > 3 {
		t.Fatalf("a read with nothing changed: %+v", ch)
	}
	put("c", Running, "n1")
	put("a", Killing, "n1")
	if err := s.Sandboxes().Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	put("d", Running, "n3")
	if ch := x.read(t, s); ch.Full || !slices.Equal(x.ids(), []string{"c", "d"}) {
		t.Fatalf("after changes: full %v, %v", ch.Full, x.ids())
	}
	// A write whose transaction began before a read and committed after
	// it is read the next time.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO sandboxes(id, state, seq, data) VALUES('late', 'running', 1, '{"id":"late","state":"running","node":"n4","envdToken":"tok-late"}')`); err != nil {
		t.Fatal(err)
	}
	put("e", Running, "n1") // committed after late's transaction began
	x.read(t, s)
	if _, ok := x.tokens["late"]; ok || !slices.Contains(x.ids(), "e") {
		t.Fatalf("read while late's transaction runs: %v", x.ids())
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	x.read(t, s)
	if x.tokens["late"].Node != "n4" {
		t.Fatalf("a write committed after a read began was not read next: %v", x.ids())
	}
	// A cursor too old for the deletions kept reads everything again.
	x.c.at = time.Now().Add(-goneKept)
	if ch := x.read(t, s); !ch.Full || !slices.Equal(x.ids(), []string{"c", "d", "e", "late"}) {
		t.Fatalf("an old cursor: full %v, %v", ch.Full, x.ids())
	}
}

// Node records are read by changes too, and the late ones alone each
// heartbeat, with the version of the membership.
func TestPostgresNodesAreReadByChanges(t *testing.T) {
	ctx := context.Background()
	s, _ := postgresBackend(t).open(t)
	now := time.Now().UTC()
	put := func(id string, beat time.Time) {
		t.Helper()
		if err := s.Nodes().Put(ctx, &Node{ID: id, Status: NodeReady, HeartbeatAt: beat}); err != nil {
			t.Fatal(err)
		}
	}
	put("a", now)
	put("b", now.Add(-time.Minute))
	ch, err := s.NodeChanges(ctx, Cursor{})
	if err != nil || !ch.Full || len(ch.Changed) != 2 {
		t.Fatalf("first read: %+v, %v", ch, err)
	}
	stale, v1, err := s.StaleNodes(ctx, now.Add(-10*time.Second))
	if err != nil || !slices.Equal(stale, []string{"b"}) {
		t.Fatalf("late nodes: %v, %v", stale, err)
	}
	// A heartbeat changes the record, not the membership.
	if err := s.Nodes().Update(ctx, "b", func(n *Node) error { n.HeartbeatAt = now; return nil }); err != nil {
		t.Fatal(err)
	}
	stale, v2, err := s.StaleNodes(ctx, now.Add(-10*time.Second))
	if err != nil || len(stale) != 0 || v2 != v1 {
		t.Fatalf("after b's heartbeat: %v, version %d then %d, %v", stale, v1, v2, err)
	}
	next, err := s.NodeChanges(ctx, ch.Next)
	if err != nil || next.Full || !slices.ContainsFunc(next.Changed, func(n *Node) bool { return n.ID == "b" && n.HeartbeatAt.Equal(now) }) {
		t.Fatalf("changes after b's heartbeat: %+v, %v", next, err)
	}
	if err := s.Nodes().Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	put("c", now)
	_, v3, err := s.StaleNodes(ctx, now.Add(-10*time.Second))
	if err != nil || v3 == v2 {
		t.Fatalf("membership version after a node came and one went: %d, %v", v3, err)
	}
	last, err := s.NodeChanges(ctx, next.Next)
	if err != nil || !slices.Equal(last.Gone, []string{"a"}) || !slices.ContainsFunc(last.Changed, func(n *Node) bool { return n.ID == "c" }) {
		t.Fatalf("changes after a went and c came: %+v, %v", last, err)
	}
	if ids, err := s.NodeIDs(ctx); err != nil || !slices.Equal(sortedCopy(ids), []string{"b", "c"}) {
		t.Fatalf("node IDs: %v, %v", ids, err)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// A SQLite store answers the same calls by reading everything.
func TestSQLiteChangesReadEverything(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Sandboxes().Put(ctx, &Sandbox{ID: "a", State: Running, Node: "n", EnvdToken: "t"})
	s.Sandboxes().Put(ctx, &Sandbox{ID: "b", State: Killing, Node: "n", EnvdToken: "t"})
	now := time.Now().UTC()
	s.Nodes().Put(ctx, &Node{ID: "n", HeartbeatAt: now})
	s.Nodes().Put(ctx, &Node{ID: "m", HeartbeatAt: now.Add(-time.Minute)})
	tok, err := s.SandboxTokens(ctx, Cursor{})
	if err != nil || !tok.Full || len(tok.Changed) != 1 || tok.Changed[0].ID != "a" {
		t.Fatalf("tokens: %+v, %v", tok, err)
	}
	if again, err := s.SandboxTokens(ctx, tok.Next); err != nil || !again.Full {
		t.Fatalf("tokens again: %+v, %v", again, err)
	}
	nodes, err := s.NodeChanges(ctx, Cursor{})
	if err != nil || !nodes.Full || len(nodes.Changed) != 2 {
		t.Fatalf("nodes: %+v, %v", nodes, err)
	}
	stale, v1, err := s.StaleNodes(ctx, now.Add(-time.Second))
	if err != nil || !slices.Equal(stale, []string{"m"}) {
		t.Fatalf("late nodes: %v, %v", stale, err)
	}
	s.Nodes().Delete(ctx, "m")
	if _, v2, _ := s.StaleNodes(ctx, now.Add(-time.Second)); v2 == v1 {
		t.Fatal("the membership version did not change with the members")
	}
}

// A server of an earlier version claims its name by a session lock: a
// server of this version does not start under that name while it runs.
func TestPostgresClaimRespectsAnEarlierServersLock(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	older, err := admin.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := older.ExecContext(ctx, `SELECT pg_advisory_lock($1, hashtext('node-a'))`, nodeLockSpace); err != nil {
		t.Fatal(err)
	}
	s, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Claim(ctx, "node-a", func(error) {}); err == nil || !strings.Contains(err.Error(), "another cube-server") {
		t.Fatalf("a claim of a name an earlier server holds: %v", err)
	}
	// The earlier server stops: its session, and its lock, end.
	older.Raw(func(c any) error { return c.(interface{ Close() error }).Close() })
	older.Close()
	if err := s.Claim(ctx, "node-a", func(error) {}); err != nil {
		t.Fatalf("a claim once the earlier server is gone: %v", err)
	}
}
