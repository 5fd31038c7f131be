package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/testenv"
)

// backend opens a state database for a test, and opens it again as a
// restarted server would.
type backend struct {
	name string
	open func(t *testing.T) (s *Store, reopen func() *Store)
}

func sqliteBackend() backend {
	return backend{"sqlite", func(t *testing.T) (*Store, func() *Store) {
		path := filepath.Join(t.TempDir(), "state.db")
		return openOrFail(t, func() (*Store, error) { return Open(path) })
	}}
}

// postgresBackend gives each test a database of its own on one server.
func postgresBackend(t *testing.T) backend {
	admin := testenv.Postgres(t)
	n := 0
	return backend{"postgres", func(t *testing.T) (*Store, func() *Store) {
		n++
		name := fmt.Sprintf("t%d", n)
		db, err := sql.Open("pgx", admin)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
			t.Fatal(err)
		}
		dsn := strings.Replace(admin, "/cube?", "/"+name+"?", 1)
		return openOrFail(t, func() (*Store, error) { return OpenPostgres(context.Background(), dsn) })
	}}
}

func openOrFail(t *testing.T, open func() (*Store, error)) (*Store, func() *Store) {
	t.Helper()
	reopen := func() *Store {
		s, err := open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return reopen(), reopen
}

// suite is every test that holds for any backend.
var suite = []struct {
	name string
	test func(t *testing.T, b backend)
}{
	{"SandboxRoundTripAndReopen", testSandboxRoundTripAndReopen},
	{"ListFiltersByStateInOrder", testListFiltersByStateInOrder},
	{"Events", testEvents},
	{"EventsKeepTheNewest", testEventsKeepTheNewest},
	{"InFlightWriteOutRoundTrips", testInFlightWriteOutRoundTrips},
	{"UpdatesDoNotLoseEachOther", testUpdatesDoNotLoseEachOther},
	{"OrphanEventsGo", testOrphanEventsGo},
	{"PausedStatesRoundTrip", testPausedStatesRoundTrip},
	{"OldPausedRecordsReadAsTheirState", testOldPausedRecordsReadAsTheirState},
	{"Usage", testUsage},
}

func runSuite(t *testing.T, b backend) {
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) { c.test(t, b) })
	}
}

func TestStoreOnSQLite(t *testing.T) { runSuite(t, sqliteBackend()) }

// TestStoreOnPostgres runs the suite against a real PostgreSQL server,
// the cluster's state database.
func TestStoreOnPostgres(t *testing.T) { runSuite(t, postgresBackend(t)) }

func testSandboxRoundTripAndReopen(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	sb := &Sandbox{ID: "abc", TemplateID: "base", State: Creating, Slot: 3,
		EndAt: time.Now().Add(time.Minute).UTC().Truncate(time.Second), Metadata: map[string]string{"k": "v"}}
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	sb.State = Running
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s2 := reopen()
	got, err := s2.Sandboxes().Get(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Running || got.Slot != 3 || got.Metadata["k"] != "v" || !got.EndAt.Equal(sb.EndAt) {
		t.Fatalf("got %+v", got)
	}
	if _, err := s2.Sandboxes().Get(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing record: %v", err)
	}
}

func testListFiltersByStateInOrder(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	for _, x := range []struct {
		id string
		st SandboxState
	}{{"a", Running}, {"b", Paused}, {"c", Running}} {
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: x.id, State: x.st}); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := s.Sandboxes().List(ctx)
	if len(all) != 3 || all[0].ID != "a" || all[2].ID != "c" {
		t.Fatalf("all = %v", ids(all))
	}
	running, _ := s.Sandboxes().List(ctx, string(Running))
	if len(running) != 2 || running[0].ID != "a" || running[1].ID != "c" {
		t.Fatalf("running = %v", ids(running))
	}
	if err := s.Sandboxes().Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	running, _ = s.Sandboxes().List(ctx, string(Running))
	if len(running) != 1 {
		t.Fatalf("after delete: %v", ids(running))
	}
}

func testEvents(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	for _, m := range []string{"created", "paused", "resumed"} {
		if err := s.AddEvent(ctx, "sb1", "info", m); err != nil {
			t.Fatal(err)
		}
	}
	s.AddEvent(ctx, "other", "info", "x")
	ev, err := s.Events(ctx, "sb1", 0, 2)
	if err != nil || len(ev) != 2 || ev[0].Message != "created" || ev[1].Message != "paused" {
		t.Fatalf("events = %+v, %v", ev, err)
	}
	ev, _ = s.Events(ctx, "sb1", ev[1].Seq, 10)
	if len(ev) != 1 || ev[0].Message != "resumed" {
		t.Fatalf("after cursor: %+v", ev)
	}
	s.DeleteEvents(ctx, "sb1")
	if ev, _ := s.Events(ctx, "sb1", 0, 10); len(ev) != 0 {
		t.Fatalf("not deleted: %+v", ev)
	}
}

// A sandbox's log keeps its newest lines, under a cap however many are
// added (a sandbox looping over denied connections adds one each), and
// its first line says how many earlier ones were dropped.
func testEventsKeepTheNewest(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	const max, every = 100, 10
	s.maxEvents, s.eventTrimEvery = max, every
	added := 0
	add := func(s *Store, n int) {
		t.Helper()
		for range n {
			if err := s.AddEvent(ctx, "sb1", "info", fmt.Sprintf("line %d", added)); err != nil {
				t.Fatal(err)
			}
			added++
			if added%37 == 0 {
				if ev, err := s.Events(ctx, "sb1", 0, 10*max); err != nil || len(ev) > max {
					t.Fatalf("after %d lines the log has %d (%v), want at most %d", added, len(ev), err, max)
				}
			}
		}
	}
	// Another sandbox's log is not touched.
	for i := range 3 {
		s.AddEvent(ctx, "other", "info", fmt.Sprintf("other %d", i))
	}
	check := func(s *Store) {
		t.Helper()
		ev, err := s.Events(ctx, "sb1", 0, 10*max)
		if err != nil || len(ev) > max || len(ev) < max-every {
			t.Fatalf("after %d lines the log has %d (%v), want %d to %d", added, len(ev), err, max-every, max)
		}
		kept := len(ev) - 1
		if want := fmt.Sprintf("%d%s", added-kept, droppedNote); ev[0].Message != want || ev[0].Level != "warn" {
			t.Errorf("first line %s %q, want %q", ev[0].Level, ev[0].Message, want)
		}
		for i, e := range ev[1:] {
			if want := fmt.Sprintf("line %d", added-kept+i); e.Message != want {
				t.Fatalf("line %d of the log is %q, want %q (the newest, in order)", i+1, e.Message, want)
			}
		}
		if ev[0].Time.After(ev[1].Time) {
			t.Errorf("the dropped note is timed %v, after the first line kept (%v)", ev[0].Time, ev[1].Time)
		}
	}
	// A new sandbox's log (NewLog) is first trimmed when it could be
	// over the cap, and then kept to it like any other.
	s.NewLog("sb1")
	add(s, 1000)
	check(s)
	// A restarted server (nothing counted yet) keeps to the cap too.
	s.Close()
	s = reopen()
	s.maxEvents, s.eventTrimEvery = max, every
	add(s, 1)
	check(s)
	add(s, 2*max+3)
	check(s)
	if ev, _ := s.Events(ctx, "other", 0, 10); len(ev) != 3 {
		t.Errorf("another sandbox's log: %+v", ev)
	}
}

func ids(l []*Sandbox) []string {
	var out []string
	for _, s := range l {
		out = append(out, s.ID)
	}
	return out
}

// TestCommitsAreSynced: each commit reaches the disk before Put returns
// (synchronous=FULL in WAL mode), since the node acts on a record as soon
// as it is written.
func TestCommitsAreSynced(t *testing.T) {
	s, _ := sqliteBackend().open(t)
	var mode string
	var sync int
	if err := s.db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
}

// TestInFlightWriteOutRoundTrips: the fields that name a write-out in
// flight survive a reopen, as the reconciler needs them after a crash.
func testInFlightWriteOutRoundTrips(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	sb := &Sandbox{ID: "p", State: Paused, Slot: 2, ContainerID: "p-1",
		PauseImageTarget: "/data/sandboxes/p/pause", PauseChecksum: "abc"}
	if err := s.Sandboxes().Put(ctx, sb); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s2 := reopen()
	got, err := s2.Sandboxes().Get(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if got.PauseImageTarget != sb.PauseImageTarget || got.PauseChecksum != "abc" || got.PauseImage != "" {
		t.Fatalf("after reopen: %+v", got)
	}
}

// Nodes of a cluster open one PostgreSQL database at once: the schema is
// created once, and each sees the others' writes.
func TestPostgresSharedByNodes(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	stores := make([]*Store, 4)
	errs := make(chan error, len(stores))
	for i := range stores {
		go func() {
			s, err := OpenPostgres(ctx, dsn)
			stores[i] = s
			errs <- err
		}()
	}
	for range stores {
		if err := <-errs; err != nil {
			t.Fatalf("a node opening the database with the others: %v", err)
		}
	}
	for _, s := range stores {
		defer s.Close()
	}
	if err := stores[0].Sandboxes().Put(ctx, &Sandbox{ID: "on-node-0", State: Running}); err != nil {
		t.Fatal(err)
	}
	if err := stores[3].AddEvent(ctx, "on-node-0", "info", "seen everywhere"); err != nil {
		t.Fatal(err)
	}
	got, err := stores[2].Sandboxes().Get(ctx, "on-node-0")
	if err != nil || got.State != Running {
		t.Fatalf("another node reads %+v, %v", got, err)
	}
	if ev, err := stores[1].Events(ctx, "on-node-0", 0, 10); err != nil || len(ev) != 1 || ev[0].Message != "seen everywhere" {
		t.Fatalf("events from another node: %+v, %v", ev, err)
	}
}

func TestPostgresErrorsNameTheServerWithoutThePassword(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = OpenPostgres(ctx, "postgres://cube:hunter2@"+addr+"/cube?sslmode=disable")
	if err == nil {
		t.Fatal("opened a database nothing serves")
	}
	if strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "--store") {
		t.Fatalf("error %q: want the address and what to check, never the password", err)
	}
}

func TestPlaceholdersAreNumberedForPostgres(t *testing.T) {
	got := numberPlaceholders(`SELECT a FROM t WHERE b = ? AND c > ? LIMIT ?`)
	if want := `SELECT a FROM t WHERE b = $1 AND c > $2 LIMIT $3`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if !IsURL("postgres://h/db") || !IsURL("postgresql://h/db") || IsURL("/var/lib/cube/state.db") {
		t.Fatal("IsURL")
	}
}

func TestPostgresNodeNameIsClaimedByOneServer(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	first, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Claim(ctx, "node-a", func(error) {}); err != nil {
		t.Fatal(err)
	}
	second, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.Claim(ctx, "node-a", func(error) {}); err == nil || !strings.Contains(err.Error(), "another cube-server") {
		t.Fatalf("a second server's claim of the same name: %v", err)
	}
	// Another name is another node: both use the database.
	third, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := third.Claim(ctx, "node-b", func(error) {}); err != nil {
		t.Fatalf("a claim of another name: %v", err)
	}
	// Once the first server is gone, its name is free again.
	first.Close()
	if err := second.Claim(ctx, "node-a", func(error) {}); err != nil {
		t.Fatalf("claim after the first server closed: %v", err)
	}
}

// Two writers each changing a record through Update lose nothing of the
// other's changes.
func testUpdatesDoNotLoseEachOther(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	if err := s.Sandboxes().Put(ctx, &Sandbox{ID: "n", State: Running}); err != nil {
		t.Fatal(err)
	}
	const each = 25
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for range each {
				if err := s.Sandboxes().Update(ctx, "n", func(v *Sandbox) error { v.Slot++; return nil }); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Sandboxes().Get(ctx, "n")
	if err != nil || got.Slot != 2*each {
		t.Fatalf("after %d updates from each of two writers: %+v, %v", each, got, err)
	}
	if err := s.Sandboxes().Update(ctx, "none", func(*Sandbox) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a missing record: %v", err)
	}
	stop := errors.New("changed my mind")
	if err := s.Sandboxes().Update(ctx, "n", func(v *Sandbox) error { v.Slot = -5; return stop }); !errors.Is(err, stop) {
		t.Fatalf("update whose change fails: %v", err)
	}
	if got, _ := s.Sandboxes().Get(ctx, "n"); got.Slot != 2*each {
		t.Fatalf("a failed change was written: %+v", got)
	}
}

// The claim is a lease held by no connection: when the server's
// sessions are cut (a PostgreSQL restart, a reset), it keeps renewing it
// over new ones; when its lease expired and another server took it
// meanwhile, the first is told to stop.
func TestPostgresClaimSurvivesALostConnection(t *testing.T) {
	dsn := testenv.Postgres(t)
	ctx := context.Background()
	lost := make(chan error, 1)
	first, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.Claim(ctx, "node-a", func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	admin.SetMaxOpenConns(1)
	// lease is the claim's holder and expiry.
	lease := func() (holder string, expires time.Time) {
		t.Helper()
		if err := admin.QueryRow(`SELECT holder, expires FROM cube_claims WHERE id = 'node-a'`).Scan(&holder, &expires); err != nil {
			t.Fatal(err)
		}
		return holder, expires
	}
	// cut ends every session of the database but the admin's.
	cut := func() {
		t.Helper()
		if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
			t.Fatal(err)
		}
	}

	// Cut with nobody else waiting: the lease is renewed over a new
	// session, by the same holder.
	holder, was := lease()
	cut()
	deadline := time.Now().Add(3 * claimCheck)
	for {
		h, exp := lease()
		if h != holder {
			t.Fatalf("the lease changed hands: %s, then %s", holder, h)
		}
		if exp.After(was) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease was not renewed after the sessions were cut")
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case err := <-lost:
		t.Fatalf("told the claim was lost: %v", err)
	default:
	}

	// The first server's lease expires (it could not reach the database
	// for longer than claimTTL) and another server claims first: the
	// first is told.
	second, err := OpenPostgres(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	// The first server's watchdog may renew the lease before the second
	// gets it, which is right too: then expire it again.
	for try := 0; ; try++ {
		if _, err := admin.Exec(`UPDATE cube_claims SET expires = clock_timestamp() - interval '1 second' WHERE id = 'node-a'`); err != nil {
			t.Fatal(err)
		}
		got, err := second.claimAs(ctx, "node-a")
		if err != nil {
			t.Fatal(err)
		}
		if got {
			break
		}
		if try == 3 {
			t.Fatal("the second server could not take an expired claim")
		}
	}
	select {
	case err := <-lost:
		if !strings.Contains(err.Error(), "another cube-server") {
			t.Fatalf("lost: %v", err)
		}
	case <-time.After(3 * claimCheck):
		t.Fatal("the first server was not told that another one holds the database")
	}
}

// The log lines of a sandbox without a record go; others stay.
func testOrphanEventsGo(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	if err := s.Sandboxes().Put(ctx, &Sandbox{ID: "kept", State: Running}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"kept", "gone", "gone"} {
		if err := s.AddEvent(ctx, id, "info", "line"); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.DeleteOrphanEvents(ctx); err != nil || n != 2 {
		t.Fatalf("DeleteOrphanEvents = %d, %v; want 2", n, err)
	}
	if ev, _ := s.Events(ctx, "kept", 0, 10); len(ev) != 1 {
		t.Fatalf("the kept sandbox's log: %+v", ev)
	}
}

// While PostgreSQL is down every call fails as an outage, which the API
// answers 503 with Retry-After; when it is back the same store works
// again and holds what was written before.
func TestPostgresOutage(t *testing.T) {
	pg := testenv.PostgresServer(t)
	ctx := context.Background()
	s, err := OpenPostgres(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Sandboxes().Put(ctx, &Sandbox{ID: "kept", State: Running}); err != nil {
		t.Fatal(err)
	}
	pg.Stop(t)
	for name, call := range map[string]func() error{
		"get":    func() error { _, err := s.Sandboxes().Get(ctx, "kept"); return err },
		"list":   func() error { _, err := s.Sandboxes().List(ctx); return err },
		"put":    func() error { return s.Sandboxes().Put(ctx, &Sandbox{ID: "new", State: Running}) },
		"update": func() error { return s.Sandboxes().Update(ctx, "kept", func(*Sandbox) error { return nil }) },
		"delete": func() error { return s.Sandboxes().Delete(ctx, "kept") },
		"event":  func() error { return s.AddEvent(ctx, "kept", "info", "line") },
	} {
		err := call()
		var o *OutageError
		if !errors.As(err, &o) || o.Outage() != OutageRetry || !strings.Contains(err.Error(), "try again") {
			t.Errorf("%s while PostgreSQL is down: %T %v; want an outage", name, err, err)
		}
	}
	pg.Start(t)
	if got, err := s.Sandboxes().Get(ctx, "kept"); err != nil || got.State != Running {
		t.Fatalf("after PostgreSQL came back: %+v, %v", got, err)
	}
}

// A SQLite store's failures are never outages: the file is on this host.
func TestSQLiteFailuresAreNotOutages(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = s.Sandboxes().Get(context.Background(), "any")
	var o *OutageError
	if err == nil || errors.As(err, &o) {
		t.Fatalf("Get on a closed SQLite store: %T %v", err, err)
	}
}

// rawSandbox is a sandbox's row as stored: its state column and its
// record decoded as an older node decodes it, knowing nothing of Pause.
func rawSandbox(t *testing.T, s *Store, id string) (column string, record map[string]any) {
	t.Helper()
	var data string
	if err := s.db.QueryRow(s.q(`SELECT state, data FROM sandboxes WHERE id = ?`), id).Scan(&column, &data); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(data), &record); err != nil {
		t.Fatal(err)
	}
	return column, record
}

// Each paused state is stored as itself and read back as itself through
// Get, List and Update, after a reopen too, whatever the record's other
// fields would suggest. Older nodes sharing the store see "paused" in
// the state column and in the record, as they always did.
func testPausedStatesRoundTrip(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	// Each with the fields another paused state keeps.
	want := map[string]*Sandbox{
		"frozen":      {ID: "frozen", State: Paused, Pause: PauseFrozen, PauseImageTarget: "/d/pause"},
		"writing-out": {ID: "writing-out", State: Paused, Pause: PauseWritingOut},
		"on-disk":     {ID: "on-disk", State: Paused, Pause: PauseOnDisk, ContainerID: "c"},
	}
	for _, rec := range want {
		if err := s.Sandboxes().Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	check := func(how string, got *Sandbox) {
		t.Helper()
		if w := want[got.ID]; got.State != Paused || got.Pause != w.Pause || got.PausedOnDisk() != (w.Pause == PauseOnDisk) {
			t.Errorf("%s: %s reads as %q/%q (on disk %v), want paused/%q", how, got.ID, got.State, got.Pause, got.PausedOnDisk(), w.Pause)
		}
	}
	for _, s := range []*Store{s, reopen()} {
		for id := range want {
			got, err := s.Sandboxes().Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			check("Get", got)
			column, record := rawSandbox(t, s, id)
			if column != "paused" || record["state"] != "paused" || record["pause"] != string(want[id].Pause) {
				t.Errorf("%s is stored as column %q, record state %v pause %v", id, column, record["state"], record["pause"])
			}
		}
		for _, filter := range [][]string{nil, {string(Paused)}} {
			all, err := s.Sandboxes().List(ctx, filter...)
			if err != nil || len(all) != len(want) {
				t.Fatalf("List(%v) = %v, %v", filter, ids(all), err)
			}
			for _, got := range all {
				check(fmt.Sprintf("List(%v)", filter), got)
			}
		}
		for id := range want {
			if err := s.Sandboxes().Update(ctx, id, func(got *Sandbox) error { check("Update", got); got.Slot = 7; return nil }); err != nil {
				t.Fatal(err)
			}
			got, err := s.Sandboxes().Get(ctx, id)
			if err != nil || got.Slot != 7 {
				t.Fatalf("after Update: %+v, %v", got, err)
			}
			check("Get after Update", got)
		}
	}
}

// Records that say only "paused" (written before the paused states were
// stored, or rewritten since by an older node of the cluster) read as the
// paused state their fields show, through Get, List and Update; so does a
// paused state this version does not know. An Update stores the state
// read. A state other than paused has no paused state.
func testOldPausedRecordsReadAsTheirState(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	rows := []struct {
		id, state, data string
		want            PauseState
	}{
		{"frozen", "paused", `{"id":"frozen","state":"paused","containerId":"c1","slot":2}`, PauseFrozen},
		{"writing-out", "paused", `{"id":"writing-out","state":"paused","containerId":"c2","slot":3,"pauseImageTarget":"/d/pause","pauseChecksum":"x"}`, PauseWritingOut},
		{"on-disk", "paused", `{"id":"on-disk","state":"paused","containerId":"","slot":-1,"pauseImage":"/d/pause"}`, PauseOnDisk},
		{"later", "paused", `{"id":"later","state":"paused","pause":"compressing","containerId":"","slot":-1,"pauseImage":"/d/pause"}`, PauseOnDisk},
		{"running", "running", `{"id":"running","state":"running","pause":"frozen","containerId":"c3","slot":4}`, ""},
	}
	for i, r := range rows {
		if _, err := s.db.Exec(s.q(`INSERT INTO sandboxes(id, state, seq, data) VALUES(?, ?, ?, ?)`), r.id, r.state, i, r.data); err != nil {
			t.Fatal(err)
		}
	}
	wantOf := map[string]PauseState{}
	for _, r := range rows {
		wantOf[r.id] = r.want
	}
	check := func(how string, got *Sandbox) {
		t.Helper()
		if w := wantOf[got.ID]; got.Pause != w || got.PausedOnDisk() != (w == PauseOnDisk) {
			t.Errorf("%s: %s reads as %q/%q (on disk %v), want %q", how, got.ID, got.State, got.Pause, got.PausedOnDisk(), w)
		}
	}
	for _, r := range rows {
		got, err := s.Sandboxes().Get(ctx, r.id)
		if err != nil {
			t.Fatal(err)
		}
		check("Get", got)
	}
	all, err := s.Sandboxes().List(ctx)
	if err != nil || len(all) != len(rows) {
		t.Fatalf("List = %v, %v", ids(all), err)
	}
	for _, got := range all {
		check("List", got)
	}
	paused, err := s.Sandboxes().List(ctx, string(Paused))
	if err != nil || len(paused) != 4 {
		t.Fatalf("List(paused) = %v, %v; want the four paused", ids(paused), err)
	}
	for _, got := range paused {
		check("List(paused)", got)
	}
	for _, r := range rows {
		if err := s.Sandboxes().Update(ctx, r.id, func(got *Sandbox) error { check("Update", got); return nil }); err != nil {
			t.Fatal(err)
		}
		column, record := rawSandbox(t, s, r.id)
		if pause, _ := record["pause"].(string); column != r.state || record["state"] != r.state || pause != string(r.want) {
			t.Errorf("%s after Update is stored as column %q, record state %v pause %v", r.id, column, record["state"], record["pause"])
		}
	}
}
