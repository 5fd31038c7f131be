package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// A cluster keeps its state in PostgreSQL instead of the SQLite file: the
// same tables of JSON records, so every node reads and writes the same
// sandboxes, templates and volumes.

// IsURL reports whether a --store value names a PostgreSQL database
// rather than a SQLite file.
func IsURL(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// OpenPostgres connects to the PostgreSQL database at dsn
// (postgres://user:password@host:port/db?sslmode=...) and creates the
// tables it lacks. Several nodes may open one database at once: the schema
// is applied under an advisory lock.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	shown := redact(dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", shown, err)
	}
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

// schemaLock is the advisory lock nodes take while they create tables, so
// two nodes starting together do not race on the catalogue.
const schemaLock = 0x637562 // "cub"

func applyPostgresSchema(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, schemaLock); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, schemaLock)
	_, err = conn.ExecContext(ctx, postgresSchema(schema))
	return err
}

// postgresSchema is the SQLite schema in PostgreSQL's words: 64-bit
// integers (sequence numbers and times are nanoseconds) and a serial
// primary key where SQLite autoincrements.
func postgresSchema(sqlite string) string {
	s := strings.ReplaceAll(sqlite, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
	return strings.ReplaceAll(s, "INTEGER", "BIGINT")
}

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

// nodeLockSpace is the first key of the advisory locks by which servers
// claim node names (see Claim); the second is the name's hash.
const nodeLockSpace = 0x63756265 // "cube"

// claimWait is how long Claim waits for a server that stopped to let go;
// claimCheck how often the watchdog checks the claim.
const (
	claimWait  = 5 * time.Second
	claimCheck = 3 * time.Second
)

// Claim makes this server the only one using the database as node name,
// as the lock on the data directory does for a SQLite file: a server
// reconciles its node's records with what runs on its host, so two
// servers under one name would remove each other's sandboxes. It fails,
// saying so, when another server holds the name. The claim is a session lock, so it
// goes with its connection (a PostgreSQL restart, a reset): a watchdog
// checks it every few seconds and takes it again, and calls lost if
// another server got it meanwhile, after which this one must stop. While
// the database cannot be reached the claim is simply retried: nobody else
// can take it then either. Close ends the claim. A SQLite store has nothing
// to claim.
func (s *Store) Claim(ctx context.Context, name string, lost func(error)) error {
	if s.dialect != "postgres" {
		return nil
	}
	s.claimName = name
	conn, err := s.claimOnce(ctx)
	if err != nil {
		return err
	}
	s.claim = conn
	s.stopClaim = make(chan struct{})
	s.claimDone = make(chan struct{})
	go s.watchClaim(lost)
	return nil
}

// errClaimed is a claim that another server holds.
var errClaimed = errors.New("another cube-server uses this state database under the same node name; give each server a --node-id of its own (or stop the other one)")

// claimOnce takes the lock on a connection of its own, waiting up to
// claimWait for a server that just stopped to let go (its session ends when
// PostgreSQL notices its connection is gone).
func (s *Store) claimOnce(ctx context.Context) (*sql.Conn, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim the state database: %w", err)
	}
	var got bool
	deadline := time.Now().Add(claimWait)
	for {
		if err := conn.QueryRowContext(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, nodeLockSpace, s.claimName).Scan(&got); err != nil {
			conn.Close()
			return nil, fmt.Errorf("claim the state database: %w", err)
		}
		if got || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !got {
		conn.Close()
		return nil, errClaimed
	}
	return conn, nil
}

// watchClaim checks the claim's connection every claimCheck and takes the
// claim again when the connection is gone.
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
		err := s.claim.PingContext(ctx)
		cancel()
		if err == nil {
			continue
		}
		s.claim.Close()
		ctx, cancel = context.WithTimeout(context.Background(), claimWait+claimCheck)
		conn, err := s.claimOnce(ctx)
		cancel()
		switch {
		case err == nil:
			s.claim = conn
		case errors.Is(err, errClaimed):
			lost(err)
			return
		default:
			// The database is out of reach: keep the old, dead
			// connection to fail the next check and try again.
		}
	}
}
