// Package store keeps Cube's persistent state in one SQLite file
// (modernc.org/sqlite, no cgo) in the data directory.
//
// Each record is a JSON document keyed by ID, with the few fields that
// queries filter on copied into columns. The node writes a record before it
// acts (state "creating", "pausing", ...) and updates it after, so after a
// crash the reconciler can tell intent from fact.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite"
)

// ErrNotFound is returned when no record has the given ID.
var ErrNotFound = errors.New("not found")

// ErrExists is returned by Insert when a record has the ID already.
var ErrExists = errors.New("exists already")

// Store is the state database.
type Store struct {
	db *sql.DB
	// q turns a query written with ? placeholders into the database's own
	// (PostgreSQL numbers them).
	q func(query string) string
	// dialect is "sqlite" or "postgres".
	dialect string
	// claimName and claimHolder are Claim's lease (postgres.go);
	// stopClaim ends its watchdog, which closes claimDone.
	stopClaim, claimDone   chan struct{}
	claimName, claimHolder string

	// The cap on each sandbox's log (AddEvent); zero: MaxEvents and
	// eventTrimEvery. Tests set them lower.
	maxEvents, eventTrimEvery int
	trimMu                    sync.Mutex
	added                     map[string]int // lines added per sandbox since its last trim
}

const schema = `
CREATE TABLE IF NOT EXISTS sandboxes (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS templates (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS volumes (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS nodes (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS teams (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS teamnames (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS apikeys (
	id    TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	seq   INTEGER NOT NULL,
	data  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	sandbox_id TEXT NOT NULL,
	ts         INTEGER NOT NULL,
	level      TEXT NOT NULL,
	message    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_sandbox ON events(sandbox_id, seq);
CREATE TABLE IF NOT EXISTS audit (
	seq      INTEGER PRIMARY KEY AUTOINCREMENT,
	ts       INTEGER NOT NULL,
	team     TEXT NOT NULL,
	key_id   TEXT NOT NULL,
	key_name TEXT NOT NULL,
	method   TEXT NOT NULL,
	route    TEXT NOT NULL,
	target   TEXT NOT NULL,
	status   INTEGER NOT NULL,
	node     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_team ON audit(team, seq);
CREATE INDEX IF NOT EXISTS audit_ts ON audit(ts);
CREATE TABLE IF NOT EXISTS usage (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	team       TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	node       TEXT NOT NULL,
	start_ns   INTEGER NOT NULL,
	end_ns     INTEGER NOT NULL,
	vcpus      INTEGER NOT NULL,
	memory_mb  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_team_end ON usage(team, end_ns);
`

// Open opens (creating if needed) the database at path.
func Open(path string) (*Store, error) {
	// synchronous(FULL): every commit is on disk (the WAL fsynced) before
	// Put returns. The node records an intent or a fact and then acts on
	// it (checkpoints into the directory a record names, retires the
	// container of a sandbox recorded as written out, tells the user a
	// pause or snapshot is done); with NORMAL a power loss could drop the
	// last commits while their effects on disk remain, and the next start
	// would delete a paused sandbox's only copy as unreferenced.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)")
	if err != nil {
		return nil, fmt.Errorf("open state database %s: %w", path, err)
	}
	// SQLite serialises writers anyway; one connection avoids SQLITE_BUSY
	// between our own goroutines.
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(schema + sqliteOnly + sqliteNodeIndexes); err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise state database %s: %w", path, err)
	}
	return &Store{db: db, q: func(query string) string { return query }, dialect: "sqlite"}, nil
}

// Close closes the database, ending a Claim.
func (s *Store) Close() error {
	s.releaseClaim()
	return s.db.Close()
}

// Table is a typed view of one table of JSON records.
type Table[T any] struct {
	s     *Store
	name  string
	key   func(*T) string
	state func(*T) string
	// seq orders the records (List, and the sandboxes' pages); nil: the
	// time of the first write.
	seq func(*T) int64
}

// seqOf is the seq column of a record written for the first time.
func (t Table[T]) seqOf(v *T) int64 {
	if t.seq != nil {
		if n := t.seq(v); n != 0 {
			return n
		}
	}
	return time.Now().UnixNano()
}

// Put inserts or replaces a record.
func (t Table[T]) Put(ctx context.Context, v *T) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = t.s.db.ExecContext(ctx,
		t.s.q(`INSERT INTO `+t.name+`(id, state, seq, data) VALUES(?, ?, ?, ?)
		 ON CONFLICT(id) DO UPDATE SET state=excluded.state, data=excluded.data`),
		t.key(v), t.state(v), t.seqOf(v), string(data))
	if err != nil {
		return t.s.outage(fmt.Errorf("store %s %s: %w", t.name, t.key(v), err))
	}
	return nil
}

// Insert adds a record whose ID no record has yet, or returns ErrExists:
// of two inserts of one ID at once, on one node or several, one wins.
func (t Table[T]) Insert(ctx context.Context, v *T) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	res, err := t.s.db.ExecContext(ctx,
		t.s.q(`INSERT INTO `+t.name+`(id, state, seq, data) VALUES(?, ?, ?, ?) ON CONFLICT(id) DO NOTHING`),
		t.key(v), t.state(v), t.seqOf(v), string(data))
	if err != nil {
		return t.s.outage(fmt.Errorf("store %s %s: %w", t.name, t.key(v), err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return ErrExists
	}
	return nil
}

// Get returns the record with the given ID or ErrNotFound.
func (t Table[T]) Get(ctx context.Context, id string) (*T, error) {
	var data string
	err := t.s.db.QueryRowContext(ctx, t.s.q(`SELECT data FROM `+t.name+` WHERE id = ?`), id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, t.s.outage(fmt.Errorf("load %s %s: %w", t.name, id, err))
	}
	v := new(T)
	if err := json.Unmarshal([]byte(data), v); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", t.name, id, err)
	}
	return v, nil
}

// Update changes one record in a transaction: it is read, given to
// change and written back with no other write in between, so two writers
// that each change part of a record (a node's heartbeat, an operator's
// status change) do not undo each other. PostgreSQL locks the row; SQLite
// has one writer anyway. A missing record is ErrNotFound; an error from
// change leaves the record as it was.
func (t Table[T]) Update(ctx context.Context, id string, change func(*T) error) error {
	tx, err := t.s.db.BeginTx(ctx, nil)
	if err != nil {
		return t.s.outage(err)
	}
	defer tx.Rollback()
	query := `SELECT data FROM ` + t.name + ` WHERE id = ?`
	if t.s.dialect == "postgres" {
		query += ` FOR UPDATE`
	}
	var data string
	err = tx.QueryRowContext(ctx, t.s.q(query), id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return t.s.outage(fmt.Errorf("load %s %s: %w", t.name, id, err))
	}
	v := new(T)
	if err := json.Unmarshal([]byte(data), v); err != nil {
		return fmt.Errorf("decode %s %s: %w", t.name, id, err)
	}
	if err := change(v); err != nil {
		return err
	}
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, t.s.q(`UPDATE `+t.name+` SET state = ?, data = ? WHERE id = ?`), t.state(v), string(out), id); err != nil {
		return t.s.outage(fmt.Errorf("store %s %s: %w", t.name, id, err))
	}
	return t.s.outage(tx.Commit())
}

// Delete removes a record; deleting a missing record is not an error.
func (t Table[T]) Delete(ctx context.Context, id string) error {
	_, err := t.s.db.ExecContext(ctx, t.s.q(`DELETE FROM `+t.name+` WHERE id = ?`), id)
	return t.s.outage(err)
}

// List returns every record in creation order, optionally only those whose
// state is one of states.
func (t Table[T]) List(ctx context.Context, states ...string) ([]*T, error) {
	rows, err := t.s.db.QueryContext(ctx, `SELECT state, data FROM `+t.name+` ORDER BY seq, id`)
	if err != nil {
		return nil, t.s.outage(err)
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		var state, data string
		if err := rows.Scan(&state, &data); err != nil {
			return nil, t.s.outage(err)
		}
		if len(states) > 0 && !slices.Contains(states, state) {
			continue
		}
		v := new(T)
		if err := json.Unmarshal([]byte(data), v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", t.name, err)
		}
		out = append(out, v)
	}
	return out, t.s.outage(rows.Err())
}

// Sandboxes is the table of sandboxes. Its state column is State alone,
// which older nodes filter on: a List of Paused is every paused sandbox,
// whichever of the paused states (Pause) it is in. Its seq is the
// sandbox's start time in nanoseconds, the order the API lists them in
// (SandboxPage).
func (s *Store) Sandboxes() Table[Sandbox] {
	return Table[Sandbox]{s: s, name: "sandboxes",
		key: func(v *Sandbox) string { return v.ID }, state: func(v *Sandbox) string { return string(v.State) },
		seq: func(v *Sandbox) int64 {
			if v.StartedAt.IsZero() {
				return 0
			}
			return v.StartedAt.UnixNano()
		}}
}

// Templates is the table of templates and snapshots. Its seq is the
// record's creation time in nanoseconds, the order snapshots are listed
// in (TemplatePage).
func (s *Store) Templates() Table[Template] {
	return Table[Template]{s: s, name: "templates",
		key: func(v *Template) string { return v.ID }, state: func(v *Template) string { return string(v.Status) },
		seq: func(v *Template) int64 {
			if v.CreatedAt.IsZero() {
				return 0
			}
			return v.CreatedAt.UnixNano()
		}}
}

// Jobs is the table of template build jobs.
func (s *Store) Jobs() Table[Job] {
	return Table[Job]{s: s, name: "jobs",
		key: func(v *Job) string { return v.ID }, state: func(v *Job) string { return string(v.Phase) }}
}

// Event is one line of a sandbox's lifecycle log.
type Event struct {
	Seq     int64
	Time    time.Time
	Level   string
	Message string
}

// MaxEvents caps the lines kept of one sandbox's log: a sandbox can make
// lines without end (each connection the egress filter denies is one),
// and the log lives on the data disk and is read whole for GET
// /sandboxes/{id}/logs. The newest are kept; the first line then says how
// many earlier ones were dropped (droppedNote).
const MaxEvents = 10000

// eventTrimEvery is how many lines a server adds to a sandbox's log between
// two trims of it, which take it back to MaxEvents-eventTrimEvery lines: a
// trim scans the log, a line added does not. The first line a server adds
// after it starts trims too, so the log never holds more than MaxEvents
// lines written by one server.
const eventTrimEvery = 500

// droppedNote follows the count of dropped lines in a log's first line.
const droppedNote = " earlier events dropped: a sandbox's log keeps only its newest lines"

// AddEvent appends a line to a sandbox's log, dropping its oldest beyond
// MaxEvents.
func (s *Store) AddEvent(ctx context.Context, sandboxID, level, msg string) error {
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO events(sandbox_id, ts, level, message) VALUES(?, ?, ?, ?)`),
		sandboxID, time.Now().UnixNano(), level, msg)
	if err != nil {
		return s.outage(err)
	}
	if s.trimDue(sandboxID) {
		return s.trimEvents(ctx, sandboxID)
	}
	return nil
}

func (s *Store) eventCap() (maxLines, every int) {
	maxLines, every = MaxEvents, eventTrimEvery
	if s.maxEvents > 0 {
		maxLines, every = s.maxEvents, s.eventTrimEvery
	}
	return maxLines, every
}

// NewLog tells the store that a sandbox's log starts now, empty (a new
// sandbox): its first line needs no trim, which would read the log for
// nothing on every create.
func (s *Store) NewLog(sandboxID string) {
	s.trimMu.Lock()
	defer s.trimMu.Unlock()
	if s.added == nil || len(s.added) >= 4*MaxEvents {
		s.added = map[string]int{}
	}
	s.added[sandboxID] = 0
}

// trimDue counts a line added to a sandbox's log and reports whether the
// log is to be trimmed now.
func (s *Store) trimDue(sandboxID string) bool {
	_, every := s.eventCap()
	s.trimMu.Lock()
	defer s.trimMu.Unlock()
	n, seen := s.added[sandboxID]
	if seen && n+1 < every {
		s.added[sandboxID] = n + 1
		return false
	}
	// One count per sandbox this server logged for lately: forgetting
	// them all costs only a trim each at their next line.
	if s.added == nil || len(s.added) >= 4*MaxEvents {
		s.added = map[string]int{}
	}
	s.added[sandboxID] = 0
	return true
}

// trimEvents takes a sandbox's log back to its newest maxLines-every lines, the
// first of them replaced by the count of those dropped (added to the count
// an earlier trim left there).
func (s *Store) trimEvents(ctx context.Context, sandboxID string) error {
	maxLines, every := s.eventCap()
	keep := maxLines - every // lines kept, the note of those dropped included
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.outage(err)
	}
	defer tx.Rollback()
	// The oldest of the keep-1 newest lines.
	var cutoff int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT seq FROM events WHERE sandbox_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?`),
		sandboxID, keep-2).Scan(&cutoff)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // shorter than that
	}
	if err != nil {
		return s.outage(err)
	}
	// The oldest line becomes (or is) the note; the newest line dropped
	// times it.
	var first, lastTS int64
	var msg string
	if err := tx.QueryRowContext(ctx, s.q(`SELECT seq, message FROM events WHERE sandbox_id = ? ORDER BY seq LIMIT 1`),
		sandboxID).Scan(&first, &msg); err != nil {
		return s.outage(err)
	}
	if err := tx.QueryRowContext(ctx, s.q(`SELECT ts FROM events WHERE sandbox_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1`),
		sandboxID, cutoff).Scan(&lastTS); err != nil {
		return s.outage(err)
	}
	res, err := tx.ExecContext(ctx, s.q(`DELETE FROM events WHERE sandbox_id = ? AND seq > ? AND seq < ?`), sandboxID, first, cutoff)
	if err != nil {
		return s.outage(err)
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return s.outage(err)
	}
	dropped, ok := droppedCount(msg)
	if !ok {
		dropped = 1 // the oldest line, which the note replaces
	}
	if _, err := tx.ExecContext(ctx, s.q(`UPDATE events SET level = ?, message = ?, ts = ? WHERE seq = ?`),
		"warn", strconv.FormatInt(dropped+n, 10)+droppedNote, lastTS, first); err != nil {
		return s.outage(err)
	}
	return s.outage(tx.Commit())
}

// droppedCount reads the count of a log's first line written by
// trimEvents; false if it is another line.
func droppedCount(msg string) (int64, bool) {
	num, ok := strings.CutSuffix(msg, droppedNote)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(num, 10, 64)
	return n, err == nil
}

// Events returns up to limit log lines of a sandbox after sequence number after.
func (s *Store) Events(ctx context.Context, sandboxID string, after int64, limit int) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx,
		s.q(`SELECT seq, ts, level, message FROM events WHERE sandbox_id = ? AND seq > ? ORDER BY seq LIMIT ?`),
		sandboxID, after, limit)
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var ts int64
		if err := rows.Scan(&e.Seq, &ts, &e.Level, &e.Message); err != nil {
			return nil, s.outage(err)
		}
		e.Time = time.Unix(0, ts)
		out = append(out, e)
	}
	return out, s.outage(rows.Err())
}

// DeleteEvents removes a sandbox's log.
func (s *Store) DeleteEvents(ctx context.Context, sandboxID string) error {
	_, err := s.db.ExecContext(ctx, s.q(`DELETE FROM events WHERE sandbox_id = ?`), sandboxID)
	s.trimMu.Lock()
	delete(s.added, sandboxID)
	s.trimMu.Unlock()
	return s.outage(err)
}

// DeleteOrphanEvents removes the log lines of sandboxes that have no
// record any more (lines written while their sandbox was being deleted),
// and says how many went.
func (s *Store) DeleteOrphanEvents(ctx context.Context) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM events WHERE sandbox_id NOT IN (SELECT id FROM sandboxes)`)
	if err != nil {
		return 0, s.outage(err)
	}
	return res.RowsAffected()
}
