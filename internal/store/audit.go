package store

import (
	"context"
	"time"
)

// AuditRecord is one change made through the API: who (team, key), what
// (method, route, target), how it ended (status) and where (node). The
// table is append-only; only the retention trim removes rows.
type AuditRecord struct {
	Seq     int64
	Time    time.Time
	Team    string
	KeyID   string
	KeyName string
	Method  string
	Route   string
	Target  string
	Status  int
	Node    string
}

// AuditFilter selects audit records, newest first. Empty fields match
// everything; Before, when positive, pages: only records older than that
// sequence number.
type AuditFilter struct {
	Team   string
	KeyID  string
	Target string
	Since  time.Time
	Before int64
	Limit  int
}

// AppendAudit adds records in one transaction.
func (s *Store) AppendAudit(ctx context.Context, recs []AuditRecord) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.outage(err)
	}
	defer tx.Rollback()
	q := s.q(`INSERT INTO audit(ts, team, key_id, key_name, method, route, target, status, node) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	for _, r := range recs {
		if _, err := tx.ExecContext(ctx, q, r.Time.UnixNano(), r.Team, r.KeyID, r.KeyName, r.Method, r.Route, r.Target, r.Status, r.Node); err != nil {
			return s.outage(err)
		}
	}
	return s.outage(tx.Commit())
}

// ListAudit returns the records f selects, newest first.
func (s *Store) ListAudit(ctx context.Context, f AuditFilter) ([]AuditRecord, error) {
	query := `SELECT seq, ts, team, key_id, key_name, method, route, target, status, node FROM audit WHERE 1=1`
	var args []any
	if f.Team != "" {
		query += ` AND team = ?`
		args = append(args, f.Team)
	}
	if f.KeyID != "" {
		query += ` AND key_id = ?`
		args = append(args, f.KeyID)
	}
	if f.Target != "" {
		query += ` AND target = ?`
		args = append(args, f.Target)
	}
	if !f.Since.IsZero() {
		query += ` AND ts >= ?`
		args = append(args, f.Since.UnixNano())
	}
	if f.Before > 0 {
		query += ` AND seq < ?`
		args = append(args, f.Before)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	query += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit)
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, s.outage(err)
	}
	defer rows.Close()
	var out []AuditRecord
	for rows.Next() {
		var r AuditRecord
		var ts int64
		if err := rows.Scan(&r.Seq, &ts, &r.Team, &r.KeyID, &r.KeyName, &r.Method, &r.Route, &r.Target, &r.Status, &r.Node); err != nil {
			return nil, s.outage(err)
		}
		r.Time = time.Unix(0, ts).UTC()
		out = append(out, r)
	}
	return out, s.outage(rows.Err())
}

// TrimAudit removes records older than before, and the oldest beyond
// maxRows (0: no bound), and says how many went.
func (s *Store) TrimAudit(ctx context.Context, before time.Time, maxRows int64) (int64, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM audit WHERE ts < ?`), before.UnixNano())
	if err != nil {
		return 0, s.outage(err)
	}
	n, _ := res.RowsAffected()
	if maxRows > 0 {
		res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM audit WHERE seq <= (SELECT MAX(seq) FROM audit) - ?`), maxRows)
		if err != nil {
			return n, s.outage(err)
		}
		m, _ := res.RowsAffected()
		n += m
	}
	return n, nil
}
