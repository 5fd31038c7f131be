package store

import (
	"context"
	"strings"
)

// A team's quota is checked on every create of the team, so what its
// sandboxes hold is counted in the database, through an index on each
// record's team (an expression on its JSON: the records keep their shape),
// reading the team's rows alone rather than decoding every record.

// The record's team, CPU count and memory as each database reads them
// from the JSON. The index holds all three after the state, so the totals
// are read from it alone (the expressions in the query are exactly the
// index's), without parsing a record.
const (
	sqliteTeam = `json_extract(data, '$.team')`
	sqliteCPU  = `json_extract(data, '$.cpuCount')`
	sqliteMem  = `json_extract(data, '$.memoryMB')`
	pgTeam     = `(data::jsonb->>'team')`
	pgCPU      = `((data::jsonb->>'cpuCount')::int)`
	pgMem      = `((data::jsonb->>'memoryMB')::int)`
)

// sqliteOnly is what SQLite keeps beside the shared schema.
const sqliteOnly = `
CREATE INDEX IF NOT EXISTS sandboxes_team_use ON sandboxes(` + sqliteTeam + `, state, ` + sqliteCPU + `, ` + sqliteMem + `);
`

// TeamUse totals the sandboxes of team in the given states: how many,
// their vCPUs (at least one each) and their memory in MiB.
func (s *Store) TeamUse(ctx context.Context, team string, states ...SandboxState) (count, vcpus, memoryMB int, err error) {
	team0, cpu, mem := sqliteTeam, `MAX(COALESCE(`+sqliteCPU+`, 0), 1)`, `COALESCE(`+sqliteMem+`, 0)`
	if s.dialect == "postgres" {
		team0, cpu, mem = pgTeam, `GREATEST(COALESCE(`+pgCPU+`, 0), 1)`, `COALESCE(`+pgMem+`, 0)`
	}
	args := []any{team}
	marks := make([]string, len(states))
	for i, st := range states {
		marks[i] = "?"
		args = append(args, string(st))
	}
	q := `SELECT COUNT(*), COALESCE(SUM(` + cpu + `), 0), COALESCE(SUM(` + mem + `), 0) FROM sandboxes WHERE ` + team0 + ` = ?`
	if len(states) > 0 {
		q += ` AND state IN (` + strings.Join(marks, ", ") + `)`
	}
	var c, v, m int64
	if err := s.db.QueryRowContext(ctx, s.q(q), args...).Scan(&c, &v, &m); err != nil {
		return 0, 0, 0, s.outage(err)
	}
	return int(c), int(v), int(m), nil
}
