package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// DBStats is what the nodes have asked of PostgreSQL so far, read from
// pg_stat_statements (counted when each statement ends, so exact at any
// moment) and the WAL position, with PostgreSQL's CPU time.
type DBStats struct {
	At time.Time
	// Statements by the role that ran them (each node connects as a role
	// of its own) and normalised query text (the nodes' database only).
	Statements map[RoleQuery]StatementStats
	// WALBytes is the WAL position: differences are bytes of WAL written.
	WALBytes int64
	// CPU is PostgreSQL's processes' CPU time; SelfCPU this process's;
	// HostCPU every process's.
	CPU, SelfCPU, HostCPU time.Duration
}

// RoleQuery names a statement as one role ran it.
type RoleQuery struct{ Role, Query string }

// StatementStats are one statement's calls and rows (returned by a
// SELECT, written by an INSERT, UPDATE or DELETE).
type StatementStats struct {
	Calls, Rows int64
	// ExecMS is the time PostgreSQL spent executing it, in milliseconds.
	ExecMS float64
}

// Stats reads the statistics now.
func (pg *Postgres) Stats(ctx context.Context) (DBStats, error) {
	s := DBStats{At: time.Now(), Statements: map[RoleQuery]StatementStats{}, SelfCPU: SelfCPU(), HostCPU: HostCPU()}
	rows, err := pg.admin.QueryContext(ctx, `SELECT coalesce(r.rolname, ''), s.query, sum(s.calls)::bigint, sum(s.rows)::bigint, sum(s.total_exec_time)
		FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid LEFT JOIN pg_roles r ON r.oid = s.userid
		WHERE d.datname = 'cube' GROUP BY 1, 2`)
	if err != nil {
		return s, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var role, q string
		var st StatementStats
		if err := rows.Scan(&role, &q, &st.Calls, &st.Rows, &st.ExecMS); err != nil {
			return s, err
		}
		k := RoleQuery{role, normalise(q)}
		prev := s.Statements[k]
		prev.Calls += st.Calls
		prev.Rows += st.Rows
		prev.ExecMS += st.ExecMS
		s.Statements[k] = prev
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	if err := pg.admin.QueryRowContext(ctx, `SELECT pg_current_wal_lsn() - '0/0'::pg_lsn`).Scan(&s.WALBytes); err != nil {
		return s, fmt.Errorf("read the WAL position: %w", err)
	}
	s.CPU, _ = pg.CPU()
	return s, nil
}

// normalise folds a statement's text to one line and BEGIN/COMMIT to one
// spelling.
func normalise(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	switch strings.ToLower(q) {
	case "begin", "begin read write", "begin isolation level serializable", "start transaction":
		return "BEGIN"
	case "commit":
		return "COMMIT"
	case "rollback":
		return "ROLLBACK"
	}
	return q
}

// Connections counts the nodes' sessions (pg_stat_activity on database
// cube) by state: active, idle, idle in transaction.
func (pg *Postgres) Connections(ctx context.Context) (total int, byState map[string]int, err error) {
	rows, err := pg.admin.QueryContext(ctx, `SELECT coalesce(state, ''), count(*) FROM pg_stat_activity WHERE datname = 'cube' GROUP BY 1`)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	byState = map[string]int{}
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return 0, nil, err
		}
		byState[st] += n
		total += n
	}
	return total, byState, rows.Err()
}

// MaxConnections is the server's max_connections.
func (pg *Postgres) MaxConnections(ctx context.Context) int {
	var n int
	pg.admin.QueryRowContext(ctx, `SELECT setting::int FROM pg_settings WHERE name = 'max_connections'`).Scan(&n)
	return n
}

// Delta is what happened between two DBStats.
type Delta struct {
	Seconds float64
	// Statements are every statement's calls; Writes those of INSERT,
	// UPDATE and DELETE, RowsWritten their rows; RowsRead the rows
	// SELECTs returned; Transactions the COMMITs plus the statements run
	// on their own (each its own transaction).
	Statements, Writes, RowsWritten, RowsRead, Transactions float64
	// HeartbeatWrites are the UPDATEs of the nodes table (heartbeats, and
	// placements' reservations while creates run).
	HeartbeatWrites float64
	WALBytes        float64
	// CPU and SelfCPU are the seconds of CPU PostgreSQL and this process
	// used; OtherCPU what the host's other processes used meanwhile.
	CPU, SelfCPU, OtherCPU float64
	// ByStatement is each statement's share, for the breakdown.
	ByStatement map[string]StatementStats
}

// Sub is b − a, every role's statements.
func (b DBStats) Sub(a DBStats) Delta { return b.SubOf(a, nil) }

// SubOf is b − a, the statements of roles only (nil: all). WAL and CPU
// are the whole server's either way.
func (b DBStats) SubOf(a DBStats, roles map[string]bool) Delta {
	d := Delta{Seconds: b.At.Sub(a.At).Seconds(), WALBytes: float64(b.WALBytes - a.WALBytes),
		CPU: (b.CPU - a.CPU).Seconds(), SelfCPU: (b.SelfCPU - a.SelfCPU).Seconds(), ByStatement: map[string]StatementStats{}}
	d.OtherCPU = max((b.HostCPU-a.HostCPU).Seconds()-d.CPU-d.SelfCPU, 0)
	for k, s := range b.Statements {
		if roles != nil && !roles[k.Role] {
			continue
		}
		q := k.Query
		p := a.Statements[k]
		c := StatementStats{Calls: s.Calls - p.Calls, Rows: s.Rows - p.Rows, ExecMS: s.ExecMS - p.ExecMS}
		if c.Calls == 0 {
			continue
		}
		sum := d.ByStatement[q]
		sum.Calls += c.Calls
		sum.Rows += c.Rows
		sum.ExecMS += c.ExecMS
		d.ByStatement[q] = sum
		calls := float64(c.Calls)
		d.Statements += calls
		switch kind(q) {
		case "write":
			d.Writes += calls
			d.RowsWritten += float64(c.Rows)
			if strings.HasPrefix(strings.ToUpper(q), "UPDATE NODES") {
				d.HeartbeatWrites += calls
			}
		case "read":
			d.RowsRead += float64(c.Rows)
		}
		if q == "COMMIT" || q == "ROLLBACK" {
			d.Transactions += calls
		}
	}
	return d
}

// kind classes a statement: "write", "read", or "other" (BEGIN, COMMIT,
// SET, advisory locks).
func kind(q string) string {
	u := strings.ToUpper(strings.TrimSpace(q))
	switch {
	case strings.HasPrefix(u, "INSERT"), strings.HasPrefix(u, "UPDATE"), strings.HasPrefix(u, "DELETE"),
		strings.HasPrefix(u, "WITH") && (strings.Contains(u, " INSERT ") || strings.Contains(u, " UPDATE ") || strings.Contains(u, " DELETE ")):
		return "write"
	case strings.HasPrefix(u, "SELECT PG_"), strings.HasPrefix(u, "SELECT HASHTEXT"):
		return "other"
	case strings.HasPrefix(u, "SELECT"), strings.HasPrefix(u, "WITH"):
		return "read"
	}
	return "other"
}

// Less is d with what a background of rate per second would have done
// over its time taken away (floored at zero): a burst's own share, when
// rate was measured in a quiet window just before.
func (d Delta) Less(rate Delta) Delta {
	if rate.Seconds <= 0 {
		return d
	}
	k := d.Seconds / rate.Seconds
	sub := func(x, y float64) float64 { return max(x-y*k, 0) }
	out := Delta{Seconds: d.Seconds,
		Statements: sub(d.Statements, rate.Statements), Writes: sub(d.Writes, rate.Writes),
		RowsWritten: sub(d.RowsWritten, rate.RowsWritten), RowsRead: sub(d.RowsRead, rate.RowsRead),
		Transactions: sub(d.Transactions, rate.Transactions), HeartbeatWrites: sub(d.HeartbeatWrites, rate.HeartbeatWrites),
		WALBytes: sub(d.WALBytes, rate.WALBytes), CPU: sub(d.CPU, rate.CPU), SelfCPU: sub(d.SelfCPU, rate.SelfCPU), OtherCPU: d.OtherCPU,
		ByStatement: map[string]StatementStats{}}
	for q, s := range d.ByStatement {
		r := rate.ByStatement[q]
		c := StatementStats{Calls: int64(sub(float64(s.Calls), float64(r.Calls))), Rows: int64(sub(float64(s.Rows), float64(r.Rows))),
			ExecMS: sub(s.ExecMS, r.ExecMS)}
		if c.Calls > 0 {
			out.ByStatement[q] = c
		}
	}
	return out
}

// Per is d divided by n (per create, per read), ByStatement included.
func (d Delta) Per(n float64) Delta {
	if n <= 0 {
		return Delta{}
	}
	out := Delta{Seconds: d.Seconds / n, Statements: d.Statements / n, Writes: d.Writes / n, RowsWritten: d.RowsWritten / n,
		RowsRead: d.RowsRead / n, Transactions: d.Transactions / n, HeartbeatWrites: d.HeartbeatWrites / n,
		WALBytes: d.WALBytes / n, CPU: d.CPU / n, SelfCPU: d.SelfCPU / n}
	return out
}

// Breakdown is a statement and its calls and rows per unit (per create).
type Breakdown struct {
	Statement     string  `json:"statement"`
	Calls, Rows   float64 `json:"-"`
	CallsPer      float64 `json:"calls"`
	RowsPer       float64 `json:"rows"`
	ExecMSPerCall float64 `json:"execMsPerCall"`
}

// Top is d's statements by calls, per n, at most k of them, each at least
// min calls per unit.
func (d Delta) Top(n float64, k int, minPer float64) []Breakdown {
	var out []Breakdown
	for q, s := range d.ByStatement {
		b := Breakdown{Statement: shorten(q, 110), CallsPer: float64(s.Calls) / n, RowsPer: float64(s.Rows) / n}
		if s.Calls > 0 {
			b.ExecMSPerCall = s.ExecMS / float64(s.Calls)
		}
		if b.CallsPer >= minPer {
			out = append(out, b)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CallsPer != out[j].CallsPer {
			return out[i].CallsPer > out[j].CallsPer
		}
		return out[i].Statement < out[j].Statement
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}
