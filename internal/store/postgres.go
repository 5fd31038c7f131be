package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// A cluster keeps its state in PostgreSQL instead of the SQLite file: the
// same tables of JSON records, so every node reads and writes the same
// sandboxes, templates and volumes.
//
// Nothing here keeps state in a database session: the schema is applied
// under a transaction's advisory lock and a node's claim on its name is a
// row (see Claim). A node's connections are a small bounded pool
// (PostgresOptions), and the nodes may reach the database through a
// transaction-mode pooler (PgBouncer) when there are more of them than the
// server takes connections.

// IsURL reports whether a --store value names a PostgreSQL database
// rather than a SQLite file.
func IsURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// PostgresOptions bound the connections one node holds to PostgreSQL.
// Zero values take the defaults.
type PostgresOptions struct {
	// MaxOpenConns is the most connections the node has open at once
	// (default DefaultMaxOpenConns); a call finding them all busy waits
	// for one.
	MaxOpenConns int
	// MaxIdleConns is the most kept open while unused (default
	// DefaultMaxIdleConns); -1 keeps none.
	MaxIdleConns int
	// ConnMaxIdleTime closes a connection unused this long (default
	// DefaultConnMaxIdleTime).
	ConnMaxIdleTime time.Duration
}

// The default pool of a node: at rest its heartbeat (every 2 s) keeps
// the one idle connection open; four serve bursts of API calls.
const (
	DefaultMaxOpenConns    = 4
	DefaultMaxIdleConns    = 1
	DefaultConnMaxIdleTime = time.Minute
)

// The --store URL's parameters that set PostgresOptions; they are taken
// out of the URL before it reaches the driver.
const (
	paramMaxConns     = "pool_max_conns"
	paramMaxIdleConns = "pool_max_idle_conns"
	paramMaxIdleTime  = "pool_max_conn_idle_time"
)

// OpenPostgres connects to the PostgreSQL database at dsn
// (postgres://user:password@host:port/db?sslmode=...) and creates the
// tables it lacks. Several nodes may open one database at once: the schema
// is applied under an advisory lock. The URL may bound the node's pool
// with pool_max_conns, pool_max_idle_conns and pool_max_conn_idle_time
// (a Go duration); else the defaults hold.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	return OpenPostgresWith(ctx, dsn, PostgresOptions{})
}

// OpenPostgresWith is OpenPostgres with the pool bounded by o, the
// URL's pool parameters taking precedence over it.
func OpenPostgresWith(ctx context.Context, dsn string, o PostgresOptions) (*Store, error) {
	shown := redact(dsn)
	dsn, o, err := poolParams(dsn, o)
	if err != nil {
		return nil, fmt.Errorf("state database %s: %w", shown, err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", shown, err)
	}
	o.apply(db)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("state database %s does not answer: %w (check the --store URL and that PostgreSQL runs)", shown, err)
	}
	if err := applyPostgresSchema(pctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise state database %s: %w", shown, err)
	}
	return &Store{db: db, q: numberPlaceholders, dialect: "postgres"}, nil
}

// withDefaults fills in o's zero values.
func (o PostgresOptions) withDefaults() PostgresOptions {
	if o.MaxOpenConns <= 0 {
		o.MaxOpenConns = DefaultMaxOpenConns
	}
	switch {
	case o.MaxIdleConns == 0:
		o.MaxIdleConns = DefaultMaxIdleConns
	case o.MaxIdleConns < 0:
		o.MaxIdleConns = 0
	}
	o.MaxIdleConns = min(o.MaxIdleConns, o.MaxOpenConns)
	if o.ConnMaxIdleTime <= 0 {
		o.ConnMaxIdleTime = DefaultConnMaxIdleTime
	}
	return o
}

func (o PostgresOptions) apply(db *sql.DB) {
	o = o.withDefaults()
	db.SetMaxOpenConns(o.MaxOpenConns)
	// database/sql takes 0 idle as its default of 2: keeping none is -1.
	if o.MaxIdleConns == 0 {
		db.SetMaxIdleConns(-1)
	} else {
		db.SetMaxIdleConns(o.MaxIdleConns)
	}
	db.SetConnMaxIdleTime(o.ConnMaxIdleTime)
}

// poolParams takes the pool's parameters out of dsn into o.
func poolParams(dsn string, o PostgresOptions) (string, PostgresOptions, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn, o, nil // the driver says what is wrong with it
	}
	q := u.Query()
	if !q.Has(paramMaxConns) && !q.Has(paramMaxIdleConns) && !q.Has(paramMaxIdleTime) {
		return dsn, o, nil
	}
	count := func(name string, into *int) error {
		if !q.Has(name) {
			return nil
		}
		n, err := strconv.Atoi(q.Get(name))
		if err != nil || n < 0 || (n == 0 && name == paramMaxConns) {
			return fmt.Errorf("%s=%q: want a number of connections", name, q.Get(name))
		}
		if n == 0 {
			n = -1 // none kept idle
		}
		*into = n
		q.Del(name)
		return nil
	}
	if err := count(paramMaxConns, &o.MaxOpenConns); err != nil {
		return dsn, o, err
	}
	if err := count(paramMaxIdleConns, &o.MaxIdleConns); err != nil {
		return dsn, o, err
	}
	if q.Has(paramMaxIdleTime) {
		d, err := time.ParseDuration(q.Get(paramMaxIdleTime))
		if err != nil || d <= 0 {
			return dsn, o, fmt.Errorf("%s=%q: want a duration such as 1m", paramMaxIdleTime, q.Get(paramMaxIdleTime))
		}
		o.ConnMaxIdleTime = d
		q.Del(paramMaxIdleTime)
	}
	u.RawQuery = q.Encode()
	return u.String(), o, nil
}

// PoolStats are the node's connections to the database now.
func (s *Store) PoolStats() sql.DBStats { return s.db.Stats() }

// schemaLock is the advisory lock nodes take while they create tables, so
// two nodes starting together do not race on the catalogue.
const schemaLock = 0x637562 // "cub"

// applyPostgresSchema creates what the database lacks in one transaction,
// holding schemaLock until it ends (a transaction's lock, which a pooler
// keeps on one server connection, unlike a session's).
func applyPostgresSchema(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, postgresSchema(schema)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, postgresOnly); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `CREATE INDEX IF NOT EXISTS sandboxes_team_use ON sandboxes ((`+pgTeam+`), state, (`+pgCPU+`), (`+pgMem+`))`); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, pgNodeIndexes); err != nil {
		return err
	}
	return tx.Commit()
}

// postgresSchema is the SQLite schema in PostgreSQL's words: 64-bit
// integers (sequence numbers and times are nanoseconds) and a serial
// primary key where SQLite autoincrements.
func postgresSchema(sqlite string) string {
	s := strings.ReplaceAll(sqlite, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
	return strings.ReplaceAll(s, "INTEGER", "BIGINT")
}

// postgresOnly is what a cluster's database keeps beside the records:
//
//   - cube_claims: the node names servers hold (Claim);
//   - chg on sandboxes and nodes: the transaction that last wrote the row
//     (its 64-bit ID), and cube_gone the rows deleted, by the same
//     transaction ID, kept ten minutes: a node reads what changed since
//     its last read instead of every row (SandboxTokens, NodeChanges);
//   - beat on nodes: the record's heartbeatAt, so the nodes whose
//     heartbeat is late are read without the others (StaleNodes), and
//     cube_members, counting the nodes table's inserts and deletes.
//
// Triggers keep them, so rows written by nodes of earlier versions are
// tracked too. Columns, indexes and triggers are made only where missing:
// altering a table takes a lock that queues every query of it.
const postgresOnly = `
CREATE TABLE IF NOT EXISTS cube_claims (
	id      TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	expires TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS cube_gone (
	tbl TEXT NOT NULL,
	id  TEXT NOT NULL,
	chg BIGINT NOT NULL,
	at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS cube_members (
	tbl TEXT PRIMARY KEY,
	v   BIGINT NOT NULL
);
CREATE OR REPLACE FUNCTION cube_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.chg := pg_current_xact_id()::text::bigint;
	RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION cube_beat() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.beat := (NEW.data::json->>'heartbeatAt')::timestamptz;
	RETURN NEW;
EXCEPTION WHEN others THEN
	NEW.beat := NULL;
	RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION cube_gone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO cube_gone(tbl, id, chg) VALUES (TG_TABLE_NAME, OLD.id, pg_current_xact_id()::text::bigint);
	IF random() < 0.01 THEN
		DELETE FROM cube_gone WHERE at < now() - interval '10 minutes';
	END IF;
	RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION cube_member() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO cube_members(tbl, v) VALUES (TG_TABLE_NAME, 1)
		ON CONFLICT (tbl) DO UPDATE SET v = cube_members.v + 1;
	RETURN NULL;
END $$;
DO $$
BEGIN
	IF to_regclass('cube_gone_chg') IS NULL THEN
		CREATE INDEX cube_gone_chg ON cube_gone(tbl, chg);
		CREATE INDEX cube_gone_at ON cube_gone(at);
	END IF;
	IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'sandboxes' AND column_name = 'chg') THEN
		ALTER TABLE sandboxes ADD COLUMN chg BIGINT;
	END IF;
	IF to_regclass('sandboxes_chg') IS NULL THEN
		CREATE INDEX sandboxes_chg ON sandboxes(chg);
	END IF;
	IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'nodes' AND column_name = 'chg') THEN
		ALTER TABLE nodes ADD COLUMN chg BIGINT, ADD COLUMN beat TIMESTAMPTZ;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'sandboxes_touch') THEN
		CREATE TRIGGER sandboxes_touch BEFORE INSERT OR UPDATE ON sandboxes FOR EACH ROW EXECUTE FUNCTION cube_touch();
		CREATE TRIGGER sandboxes_gone AFTER DELETE ON sandboxes FOR EACH ROW EXECUTE FUNCTION cube_gone();
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'nodes_touch') THEN
		CREATE TRIGGER nodes_touch BEFORE INSERT OR UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION cube_touch();
		CREATE TRIGGER nodes_beat BEFORE INSERT OR UPDATE ON nodes FOR EACH ROW EXECUTE FUNCTION cube_beat();
		CREATE TRIGGER nodes_gone AFTER DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION cube_gone();
		CREATE TRIGGER nodes_member AFTER INSERT OR DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION cube_member();
		UPDATE nodes SET data = data;
	END IF;
END $$;
`

// numberPlaceholders rewrites ? placeholders as $1, $2, ...; Cube's
// queries hold no ? inside string literals.
func numberPlaceholders(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// redact is dsn without its password, for messages and logs.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable PostgreSQL URL)"
	}
	return u.Redacted()
}

// The claim on a node name is a lease: a row of cube_claims naming its
// holder (a token each Claim makes) and when it expires, renewed every
// claimCheck and taken by another server only once expired. claimWait is
// how long Claim waits for the lease of a server that stopped without
// letting go (a kill -9, a host lost) to expire.
const (
	claimTTL   = 6 * time.Second
	claimCheck = 2 * time.Second
	claimWait  = claimTTL + time.Second
)

// Claim makes this server the only one using the database as node name,
// as the lock on the data directory does for a SQLite file: a server
// reconciles its node's records with what runs on its host, so two
// servers under one name would remove each other's sandboxes. It fails,
// saying so, when another server holds the name.
//
// The claim is a lease row, held by no connection: a watchdog renews it
// every claimCheck, and calls lost if another server took it meanwhile
// (this one's lease had expired: it could not reach the database for
// longer than claimTTL), after which this one must stop. While the
// database cannot be reached the renewal is simply retried: nobody else
// can take it then either. Close ends the claim; a server that ends
// without Close (kill -9) holds it until it expires, so one started again
// at once waits up to claimTTL. A SQLite store has nothing to claim.
func (s *Store) Claim(ctx context.Context, name string, lost func(error)) error {
	if s.dialect != "postgres" {
		return nil
	}
	if s.stopClaim != nil {
		return fmt.Errorf("this store already claims node name %s", s.claimName)
	}
	var token [16]byte
	rand.Read(token[:])
	s.claimName, s.claimHolder = name, hex.EncodeToString(token[:])
	if err := s.claimOnce(ctx); err != nil {
		return err
	}
	s.stopClaim = make(chan struct{})
	s.claimDone = make(chan struct{})
	go s.watchClaim(lost)
	return nil
}

// errClaimed is a claim that another server holds.
var errClaimed = errors.New("another cube-server uses this state database under the same node name; give each server a --node-id of its own (or stop the other one)")

// claimOnce takes the lease, waiting up to claimWait for another holder's
// to expire.
func (s *Store) claimOnce(ctx context.Context) error {
	deadline := time.Now().Add(claimWait)
	for {
		got, err := s.olderServerGone(ctx)
		if err == nil && got {
			got, err = s.takeClaim(ctx)
		}
		if err != nil {
			return fmt.Errorf("claim the state database: %w", err)
		}
		if got {
			return nil
		}
		if time.Now().After(deadline) {
			return errClaimed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// nodeLockSpace is the first key of the session advisory locks by which
// servers of earlier versions claim node names; the second is the name's
// hash.
const nodeLockSpace = 0x63756265 // "cube"

// olderServerGone reports whether no server of an earlier version holds
// the name by its session lock: asked, while starting, in a transaction
// of its own, whose lock ends with it.
func (s *Store) olderServerGone(ctx context.Context) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, s.outage(err)
	}
	defer tx.Rollback()
	var free bool
	if err := tx.QueryRowContext(ctx, `SELECT pg_try_advisory_xact_lock($1, hashtext($2))`, nodeLockSpace, s.claimName).Scan(&free); err != nil {
		return false, s.outage(err)
	}
	return free, s.outage(tx.Commit())
}

// takeClaim takes or renews the lease for claimTTL from the database's
// clock, unless another holder's has not expired.
func (s *Store) takeClaim(ctx context.Context) (bool, error) {
	res, err := s.db.ExecContext(ctx, `INSERT INTO cube_claims(id, holder, expires)
		VALUES($1, $2, clock_timestamp() + $3 * interval '1 millisecond')
		ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
		WHERE cube_claims.holder = excluded.holder OR cube_claims.expires < clock_timestamp()`,
		s.claimName, s.claimHolder, claimTTL.Milliseconds())
	if err != nil {
		return false, s.outage(err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// watchClaim renews the lease every claimCheck.
func (s *Store) watchClaim(lost func(error)) {
	defer close(s.claimDone)
	t := time.NewTicker(claimCheck)
	defer t.Stop()
	for {
		select {
		case <-s.stopClaim:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), claimCheck)
		got, err := s.takeClaim(ctx)
		cancel()
		switch {
		case err != nil:
			// The database is out of reach: try again at the next tick.
		case !got:
			lost(errClaimed)
			return
		}
	}
}

// releaseClaim stops the watchdog and gives the lease up.
func (s *Store) releaseClaim() {
	if s.stopClaim == nil {
		return
	}
	close(s.stopClaim)
	<-s.claimDone
	s.stopClaim = nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.db.ExecContext(ctx, `DELETE FROM cube_claims WHERE id = $1 AND holder = $2`, s.claimName, s.claimHolder)
}

// Cursor is how far a reader of a table's changes has read (see
// SandboxTokens, NodeChanges); the zero Cursor has read nothing.
type Cursor struct {
	// xmin is the oldest transaction still running when the reader last
	// read: every change of an older one was visible to that read, so
	// the next reads from it on.
	xmin int64
	// at is when the reader last read, by this host's clock.
	at time.Time
}

// goneKept is how long PostgreSQL keeps the deletions (cube_gone): a
// reader whose last read is older than half of it reads everything again.
const goneKept = 10 * time.Minute

// fresh reports whether a read from c may be a read of changes only.
func (c Cursor) fresh(now time.Time) bool {
	return !c.at.IsZero() && now.Sub(c.at) < goneKept/2
}

// SandboxToken is what a signed file URL is checked against: a sandbox
// that may have made it (running, paused or resuming), its envd token
// and its node.
type SandboxToken struct {
	ID, Node, EnvdToken string
	State               SandboxState
}

// Live reports whether the sandbox may answer a signed URL.
func (t SandboxToken) Live() bool {
	return t.EnvdToken != "" && (t.State == Running || t.State == Paused || t.State == Resuming)
}

// TokenChanges are the sandboxes changed since a Cursor.
type TokenChanges struct {
	// Full: Changed holds every live sandbox, and what was read before
	// is to be forgotten.
	Full bool
	// Changed are the sandboxes written since; those not Live left the
	// states that answer.
	Changed []SandboxToken
	// Gone are the sandboxes deleted since.
	Gone []string
	// Next is the cursor to read the next changes from.
	Next Cursor
}

// liveStates are the sandbox states a full read of tokens takes.
const liveStates = `('running', 'paused', 'resuming')`

// SandboxTokens reads the sandboxes' envd tokens and nodes changed since
// c: every live sandbox when c is zero or old, else only the rows written
// or deleted since (the sandboxes table's chg column and cube_gone), so a
// node keeping an index of every sandbox's token reads each change once.
// Each read is one statement, whose snapshot both the rows and the next
// cursor come from. A SQLite store reads every sandbox each time.
func (s *Store) SandboxTokens(ctx context.Context, c Cursor) (TokenChanges, error) {
	now := time.Now()
	if s.dialect != "postgres" {
		all, err := s.Sandboxes().List(ctx)
		if err != nil {
			return TokenChanges{}, err
		}
		out := TokenChanges{Full: true, Next: Cursor{at: now}}
		for _, v := range all {
			if t := (SandboxToken{ID: v.ID, Node: v.Node, EnvdToken: v.EnvdToken, State: v.State}); t.Live() {
				out.Changed = append(out.Changed, t)
			}
		}
		return out, nil
	}
	full := !c.fresh(now)
	var rows *sql.Rows
	var err error
	if full {
		rows, err = s.db.QueryContext(ctx, `SELECT x.xmin, c.id, c.state, c.token, c.node, false
			FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) x
			LEFT JOIN (SELECT s.id, s.state, r."envdToken" AS token, r.node
				FROM sandboxes s, json_to_record(s.data::json) AS r("envdToken" text, node text)
				WHERE s.state IN `+liveStates+`) c ON true`)
	} else {
		rows, err = s.db.QueryContext(ctx, `SELECT x.xmin, c.id, c.state, c.token, c.node, c.gone
			FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) x
			LEFT JOIN (SELECT s.id, s.state, r."envdToken" AS token, r.node, false AS gone
				FROM sandboxes s, json_to_record(s.data::json) AS r("envdToken" text, node text)
				WHERE s.chg >= $1
				UNION ALL
				SELECT id, '', '', '', true FROM cube_gone WHERE tbl = 'sandboxes' AND chg >= $1) c ON true`, c.xmin)
	}
	if err != nil {
		return TokenChanges{}, s.outage(fmt.Errorf("read sandbox tokens: %w", err))
	}
	defer rows.Close()
	out := TokenChanges{Full: full, Next: Cursor{at: now}}
	for rows.Next() {
		var id, state, token, node sql.NullString
		var gone sql.NullBool
		if err := rows.Scan(&out.Next.xmin, &id, &state, &token, &node, &gone); err != nil {
			return TokenChanges{}, s.outage(fmt.Errorf("read sandbox tokens: %w", err))
		}
		switch {
		case !id.Valid:
		case gone.Bool:
			out.Gone = append(out.Gone, id.String)
		default:
			out.Changed = append(out.Changed, SandboxToken{ID: id.String, Node: node.String, EnvdToken: token.String, State: SandboxState(state.String)})
		}
	}
	if err := rows.Err(); err != nil {
		return TokenChanges{}, s.outage(fmt.Errorf("read sandbox tokens: %w", err))
	}
	return out, nil
}

// NodeChanges are the node records changed since a Cursor.
type NodeChanges struct {
	// Full: Changed is every node, and what was read before is to be
	// forgotten.
	Full    bool
	Changed []*Node
	Gone    []string
	Next    Cursor
}

// NodeChanges reads the node records written or deleted since c, as
// SandboxTokens does the sandboxes: every record when c is zero or old
// (and always from a SQLite store).
func (s *Store) NodeChanges(ctx context.Context, c Cursor) (NodeChanges, error) {
	now := time.Now()
	if s.dialect != "postgres" || !c.fresh(now) {
		var out NodeChanges
		var err error
		if s.dialect != "postgres" {
			out.Changed, err = s.Nodes().List(ctx)
		} else {
			out, err = s.nodeRows(ctx, `SELECT x.xmin, n.id, n.data, n.chg, false
				FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) x
				LEFT JOIN nodes n ON true`)
		}
		out.Full, out.Next.at = true, now
		return out, err
	}
	out, err := s.nodeRows(ctx, `SELECT x.xmin, c.id, c.data, c.chg, c.gone
		FROM (SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) x
		LEFT JOIN (SELECT id, data, chg, false AS gone FROM nodes WHERE chg >= $1
			UNION ALL
			SELECT id, NULL, NULL, true FROM cube_gone WHERE tbl = 'nodes' AND chg >= $1) c ON true`, c.xmin)
	out.Next.at = now
	return out, err
}

func (s *Store) nodeRows(ctx context.Context, query string, args ...any) (NodeChanges, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return NodeChanges{}, s.outage(fmt.Errorf("read nodes: %w", err))
	}
	defer rows.Close()
	var out NodeChanges
	for rows.Next() {
		var id, data sql.NullString
		var written sql.NullInt64
		var gone sql.NullBool
		if err := rows.Scan(&out.Next.xmin, &id, &data, &written, &gone); err != nil {
			return NodeChanges{}, s.outage(fmt.Errorf("read nodes: %w", err))
		}
		switch {
		case !id.Valid:
		case gone.Bool:
			out.Gone = append(out.Gone, id.String)
		default:
			v := new(Node)
			if err := json.Unmarshal([]byte(data.String), v); err != nil {
				return NodeChanges{}, fmt.Errorf("decode node %s: %w", id.String, err)
			}
			v.Written = written.Int64
			out.Changed = append(out.Changed, v)
		}
	}
	if err := rows.Err(); err != nil {
		return NodeChanges{}, s.outage(fmt.Errorf("read nodes: %w", err))
	}
	return out, nil
}

// StaleNodes names the nodes whose last heartbeat is before before, and
// the version of the nodes table's membership, which changes when a node
// is added or removed: a reader that knows the members reads only the
// late ones (usually none) each heartbeat, and the members again when the
// version changed (NodeIDs).
func (s *Store) StaleNodes(ctx context.Context, before time.Time) (stale []string, members int64, err error) {
	if s.dialect != "postgres" {
		all, err := s.Nodes().List(ctx)
		if err != nil {
			return nil, 0, err
		}
		h := fnv.New64a()
		ids := make([]string, 0, len(all))
		for _, n := range all {
			ids = append(ids, n.ID)
			if n.HeartbeatAt.Before(before) {
				stale = append(stale, n.ID)
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			h.Write([]byte(id + "\x00"))
		}
		return stale, int64(h.Sum64() >> 1), nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT coalesce((SELECT v FROM cube_members WHERE tbl = 'nodes'), 0), n.id
		FROM (SELECT 1) one LEFT JOIN nodes n ON n.beat IS NULL OR n.beat < $1`, before)
	if err != nil {
		return nil, 0, s.outage(fmt.Errorf("read late nodes: %w", err))
	}
	defer rows.Close()
	for rows.Next() {
		var id sql.NullString
		if err := rows.Scan(&members, &id); err != nil {
			return nil, 0, s.outage(fmt.Errorf("read late nodes: %w", err))
		}
		if id.Valid {
			stale = append(stale, id.String)
		}
	}
	return stale, members, s.outage(rows.Err())
}

// NodeIDs names every node.
func (s *Store) NodeIDs(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM nodes`)
	if err != nil {
		return nil, s.outage(fmt.Errorf("read nodes: %w", err))
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, s.outage(err)
		}
		ids = append(ids, id)
	}
	return ids, s.outage(rows.Err())
}
