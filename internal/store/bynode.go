package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Each node reads its own sandboxes often: its heartbeat's load, the
// reaper's refresh, its reconcile.
// In a cluster they share one table with every other node's, so these
// reads go through an index on each record's node (an expression on its
// JSON, as for the team: the records keep their shape and every version
// of the server writes them the same way) and never read another node's
// rows. A record without a node (written by a single node before it
// joined a cluster) counts as every node's until one takes it.

// The record's node as each database reads it from the JSON.
const (
	sqliteNode = `COALESCE(json_extract(data, '$.node'), '')`
	pgNode     = `COALESCE((data::jsonb->>'node'), '')`
)

// nodeIndexes are the indexes behind the reads below, in each dialect.
const (
	sqliteNodeIndexes = `
CREATE INDEX IF NOT EXISTS sandboxes_node ON sandboxes(` + sqliteNode + `, state);
CREATE INDEX IF NOT EXISTS sandboxes_seq ON sandboxes(seq, id);
CREATE INDEX IF NOT EXISTS sandboxes_team_seq ON sandboxes(` + sqliteTeam + `, seq, id);
CREATE INDEX IF NOT EXISTS templates_seq ON templates(seq, id);
CREATE INDEX IF NOT EXISTS templates_team_seq ON templates(` + sqliteTeam + `, seq, id);
`
	pgNodeIndexes = `
CREATE INDEX IF NOT EXISTS templates_aliases ON templates USING gin ((data::jsonb->'aliases'));
CREATE INDEX IF NOT EXISTS sandboxes_node ON sandboxes ((` + pgNode + `), state);
CREATE INDEX IF NOT EXISTS sandboxes_seq ON sandboxes (seq, id);
CREATE INDEX IF NOT EXISTS sandboxes_team_seq ON sandboxes ((` + pgTeam + `), seq, id);
CREATE INDEX IF NOT EXISTS templates_seq ON templates (seq, id);
CREATE INDEX IF NOT EXISTS templates_team_seq ON templates ((` + pgTeam + `), seq, id);
`
)

func (s *Store) nodeExpr() string {
	if s.dialect == "postgres" {
		return pgNode
	}
	return sqliteNode
}

func (s *Store) teamExpr() string {
	if s.dialect == "postgres" {
		return pgTeam
	}
	return sqliteTeam
}

// inStates is " AND state IN (?, ...)" for states (nothing when there
// are none), with their arguments appended to args.
func inStates[S ~string](args []any, states []S) (string, []any) {
	if len(states) == 0 {
		return "", args
	}
	marks := make([]string, len(states))
	for i, st := range states {
		marks[i] = "?"
		args = append(args, string(st))
	}
	return ` AND state IN (` + strings.Join(marks, ", ") + `)`, args
}

// NodeSandboxes returns the sandbox records of node (and those of no
// node) in the given states, all states when none are given, in
// creation order.
func (s *Store) NodeSandboxes(ctx context.Context, node string, states ...SandboxState) ([]*Sandbox, error) {
	where, args := inStates([]any{node}, states)
	return queryRecords[Sandbox](ctx, s, "sandboxes", s.q(`SELECT data FROM sandboxes WHERE `+s.nodeExpr()+` IN (?, '')`+where+` ORDER BY seq, id`), args...)
}

// NodeLoad is what the sandbox records of one node hold, by state.
type NodeLoad struct {
	// Count is the records in each state (the state column: every paused
	// state is Paused).
	Count map[SandboxState]int
	// Total counts every record, whatever its state.
	Total int
	// CPUs and MemoryMB sum the running records' limits.
	CPUs, MemoryMB int
	// HoldingSlots counts the records holding a network slot.
	HoldingSlots int
}

// NodeLoad totals the sandbox records of node (and those of no node) in
// the database: the rows of that node alone, one row back per state.
func (s *Store) NodeLoad(ctx context.Context, node string) (NodeLoad, error) {
	cpu, mem, slot := sqliteCPU, sqliteMem, `json_extract(data, '$.slot')`
	if s.dialect == "postgres" {
		cpu, mem, slot = pgCPU, pgMem, `((data::jsonb->>'slot')::int)`
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT state, COUNT(*), COALESCE(SUM(COALESCE(`+cpu+`, 0)), 0), COALESCE(SUM(COALESCE(`+mem+`, 0)), 0),
		COALESCE(SUM(CASE WHEN COALESCE(`+slot+`, -1) >= 0 THEN 1 ELSE 0 END), 0)
		FROM sandboxes WHERE `+s.nodeExpr()+` IN (?, '') GROUP BY state`), node)
	if err != nil {
		return NodeLoad{}, s.outage(err)
	}
	defer rows.Close()
	l := NodeLoad{Count: map[SandboxState]int{}}
	for rows.Next() {
		var state string
		var n, cpus, memMB, slots int64
		if err := rows.Scan(&state, &n, &cpus, &memMB, &slots); err != nil {
			return NodeLoad{}, s.outage(err)
		}
		l.Count[SandboxState(state)] = int(n)
		l.Total += int(n)
		l.HoldingSlots += int(slots)
		if SandboxState(state) == Running {
			l.CPUs, l.MemoryMB = int(cpus), int(memMB)
		}
	}
	return l, s.outage(rows.Err())
}

// Deadline is when one running sandbox ends.
type Deadline struct {
	ID    string
	EndAt time.Time
}

// NodeDeadlines returns the end times of node's running sandboxes (and
// those of no node), for the reaper.
func (s *Store) NodeDeadlines(ctx context.Context, node string) ([]Deadline, error) {
	end := `json_extract(data, '$.endAt')`
	if s.dialect == "postgres" {
		end = `(data::jsonb->>'endAt')`
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, COALESCE(`+end+`, '') FROM sandboxes WHERE `+s.nodeExpr()+` IN (?, '') AND state = ?`), node, string(Running))
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []Deadline
	for rows.Next() {
		var id, at string
		if err := rows.Scan(&id, &at); err != nil {
			return nil, s.outage(err)
		}
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t = time.Time{} // unreadable: due now, and expire reads the record itself
		}
		out = append(out, Deadline{ID: id, EndAt: t})
	}
	return out, s.outage(rows.Err())
}

// PageQuery selects a page of records in creation order (the seq
// column: a sandbox's start time, a template's or snapshot's creation
// time, in nanoseconds; then the ID).
type PageQuery struct {
	// Team, when set, keeps that team's records alone.
	Team string
	// States keeps the records whose state column is one of these (a
	// sandbox's state, a template's status).
	States []string
	// Since keeps the records started at or after it (zero: all).
	Since time.Time
	// Asc lists oldest first; otherwise newest first.
	Asc bool
	// AfterSeq and AfterID are the last record of the previous page:
	// the page starts after it in the list's order. Empty AfterID: from
	// the start.
	AfterSeq int64
	AfterID  string
}

// SandboxPage returns up to limit sandbox records the query selects and
// keep accepts (limit 0: all of them), in order, reading them by index in
// batches: a page costs the rows up to its end, not the table. last is
// the seq of the page's last record, where the next page starts; more
// says whether another accepted record follows the page.
func (s *Store) SandboxPage(ctx context.Context, q PageQuery, limit int, keep func(*Sandbox) bool) (page []*Sandbox, last int64, more bool, err error) {
	return readPage(ctx, s, "sandboxes", q, limit, keep)
}

// TemplatePage is SandboxPage for templates and snapshots, whose state
// is their status.
func (s *Store) TemplatePage(ctx context.Context, q PageQuery, limit int, keep func(*Template) bool) (page []*Template, last int64, more bool, err error) {
	return readPage(ctx, s, "templates", q, limit, keep)
}

// readPage reads a page of table's records through its (team, seq, id)
// and (seq, id) indexes.
func readPage[T any](ctx context.Context, s *Store, table string, q PageQuery, limit int, keep func(*T) bool) (page []*T, last int64, more bool, err error) {
	batch := 500
	if limit > 0 {
		batch = max(limit+1, 64)
	}
	afterSeq, afterID := q.AfterSeq, q.AfterID
	for {
		states, args := inStates(nil, q.States)
		where := []string{"1 = 1" + states}
		if q.Team != "" {
			where, args = append(where, s.teamExpr()+` = ?`), append(args, q.Team)
		}
		if !q.Since.IsZero() {
			where, args = append(where, `seq >= ?`), append(args, q.Since.UnixNano())
		}
		order, cmp := "ASC", ">"
		if !q.Asc {
			order, cmp = "DESC", "<"
		}
		if afterID != "" {
			where, args = append(where, `(seq, id) `+cmp+` (?, ?)`), append(args, afterSeq, afterID)
		}
		args = append(args, batch)
		rows, err := s.db.QueryContext(ctx, s.q(`SELECT seq, id, data FROM `+table+` WHERE `+strings.Join(where, " AND ")+
			` ORDER BY seq `+order+`, id `+order+` LIMIT ?`), args...)
		if err != nil {
			return nil, 0, false, s.outage(err)
		}
		n := 0
		for rows.Next() {
			n++
			var seq int64
			var id, data string
			if err := rows.Scan(&seq, &id, &data); err != nil {
				rows.Close()
				return nil, 0, false, s.outage(err)
			}
			rec := new(T)
			if err := json.Unmarshal([]byte(data), rec); err != nil {
				rows.Close()
				return nil, 0, false, fmt.Errorf("decode %s: %w", table, err)
			}
			afterSeq, afterID = seq, id
			if !keep(rec) {
				continue
			}
			if limit > 0 && len(page) == limit {
				rows.Close()
				return page, last, true, nil
			}
			page, last = append(page, rec), seq
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, 0, false, s.outage(err)
		}
		if n < batch {
			return page, last, false, nil
		}
	}
}

// TemplatesNamed returns the templates and snapshots whose ID is name or
// which have name among their aliases, of every team (FindTemplate and
// OwnTemplate choose among them): a create by alias reads these rows
// alone, through an index on the aliases in PostgreSQL, instead of every
// template and snapshot.
func (s *Store) TemplatesNamed(ctx context.Context, name string) ([]*Template, error) {
	query := `SELECT data FROM templates WHERE id = ? OR EXISTS (SELECT 1 FROM json_each(data, '$.aliases') WHERE value = ?) ORDER BY seq, id`
	args := []any{name, name}
	if s.dialect == "postgres" {
		query = `SELECT data FROM templates WHERE id = $1 OR (data::jsonb->'aliases') @> jsonb_build_array($1::text) ORDER BY seq, id`
		args = args[:1]
	}
	return queryRecords[Template](ctx, s, "templates", query, args...)
}

// queryRecords runs a query whose one column is the data of table's
// records, and decodes them.
func queryRecords[T any](ctx context.Context, s *Store, table, query string, args ...any) ([]*T, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		var data string
		if err := rows.Scan(&data); err != nil {
			return nil, s.outage(err)
		}
		v := new(T)
		if err := json.Unmarshal([]byte(data), v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", table, err)
		}
		out = append(out, v)
	}
	return out, s.outage(rows.Err())
}
