package store

import (
	"context"
	"time"
)

// UsageRecord is one stretch of time a sandbox ran, from the moment it
// started running (created, forked, resumed) to the moment it stopped
// (paused, killed, reaped, found lost), with the size it ran at. The
// table is append-only: a sandbox that is running has no row for its
// current stretch yet, only its record's RunningSince.
type UsageRecord struct {
	Seq      int64
	Team     string
	Sandbox  string
	Node     string
	Start    time.Time
	End      time.Time
	VCPUs    int
	MemoryMB int
}

// UsageFilter selects usage rows: of one team (empty: every team) that
// overlap [From, To] (a zero bound: unbounded on that side).
type UsageFilter struct {
	Team     string
	From, To time.Time
}

// AppendUsage adds rows in one transaction.
func (s *Store) AppendUsage(ctx context.Context, recs ...UsageRecord) error {
	if len(recs) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.outage(err)
	}
	defer tx.Rollback()
	q := s.q(`INSERT INTO usage(team, sandbox_id, node, start_ns, end_ns, vcpus, memory_mb) VALUES(?, ?, ?, ?, ?, ?, ?)`)
	for _, r := range recs {
		end := r.End
		if end.Before(r.Start) {
			end = r.Start
		}
		if _, err := tx.ExecContext(ctx, q, r.Team, r.Sandbox, r.Node, r.Start.UnixNano(), end.UnixNano(), r.VCPUs, r.MemoryMB); err != nil {
			return s.outage(err)
		}
	}
	return s.outage(tx.Commit())
}

// ListUsage returns the rows f selects, oldest first.
func (s *Store) ListUsage(ctx context.Context, f UsageFilter) ([]UsageRecord, error) {
	query := `SELECT seq, team, sandbox_id, node, start_ns, end_ns, vcpus, memory_mb FROM usage WHERE 1=1`
	var args []any
	if f.Team != "" {
		query += ` AND team = ?`
		args = append(args, f.Team)
	}
	if !f.From.IsZero() {
		query += ` AND end_ns >= ?`
		args = append(args, f.From.UnixNano())
	}
	if !f.To.IsZero() {
		query += ` AND start_ns <= ?`
		args = append(args, f.To.UnixNano())
	}
	query += ` ORDER BY seq`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []UsageRecord
	for rows.Next() {
		var r UsageRecord
		var start, end int64
		if err := rows.Scan(&r.Seq, &r.Team, &r.Sandbox, &r.Node, &start, &end, &r.VCPUs, &r.MemoryMB); err != nil {
			return nil, s.outage(err)
		}
		r.Start, r.End = time.Unix(0, start).UTC(), time.Unix(0, end).UTC()
		out = append(out, r)
	}
	return out, s.outage(rows.Err())
}

// UsageSum is a team's rows added up, over all time. Durations are whole
// milliseconds per row: sums of nanoseconds times sizes would overflow.
type UsageSum struct {
	Team string
	// First is the sequence number of the team's first row: sums come in
	// the order teams first appeared.
	First           int64
	Rows            int64
	Millis          int64
	VCPUMillis      int64
	MemoryMiBMillis int64
}

// SumUsage adds up every team's rows, those of one node only unless node
// is empty, in the order the teams first appeared.
func (s *Store) SumUsage(ctx context.Context, node string) ([]UsageSum, error) {
	const ms = `((end_ns - start_ns) / 1000000)`
	query := `SELECT team, MIN(seq), COUNT(*), CAST(SUM(` + ms + `) AS BIGINT), CAST(SUM(` + ms + ` * vcpus) AS BIGINT),
		CAST(SUM(` + ms + ` * memory_mb) AS BIGINT) FROM usage`
	var args []any
	if node != "" {
		query += ` WHERE node = ?`
		args = append(args, node)
	}
	query += ` GROUP BY team ORDER BY MIN(seq)`
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []UsageSum
	for rows.Next() {
		var u UsageSum
		if err := rows.Scan(&u.Team, &u.First, &u.Rows, &u.Millis, &u.VCPUMillis, &u.MemoryMiBMillis); err != nil {
			return nil, s.outage(err)
		}
		out = append(out, u)
	}
	return out, s.outage(rows.Err())
}
