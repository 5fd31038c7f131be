package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"time"
)

// needPostgres skips a test where the simulation cannot start its
// PostgreSQL: not installed, or run as root without the postgres user to
// run it as.
func needPostgres(t *testing.T) {
	t.Helper()
	if _, err := postgresBin(""); err != nil {
		t.Skipf("PostgreSQL is not installed: %v", err)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("running as root without a postgres system user to run PostgreSQL as")
		}
		if _, err := exec.LookPath("runuser"); err != nil {
			t.Skip("running as root without runuser")
		}
	}
}

// A simulation of three nodes and a few dozen sandboxes goes through
// every phase: the creates through other nodes than their templates',
// the database's work per create counted, the mixed workload with no
// errors, a drain whose paused sandboxes move to the other nodes, and a
// killed node declared lost within its heartbeat timeout.
func TestSimFourNodes(t *testing.T) {
	needPostgres(t)
	if testing.Short() {
		t.Skip("starts PostgreSQL and three nodes")
	}
	dir := t.TempDir()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Nodes: 4, Sandboxes: 36, Losses: 1, Duration: 3 * time.Second, Concurrency: 6, Seed: 7,
		CostOps: 12, IdleWindow: 2500 * time.Millisecond, DrainPaused: 4, PauseWriteDelay: 300 * time.Millisecond,
		Dir: dir, Log: &log, Progress: t.Logf})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var out bytes.Buffer
	Print(&out, []*Result{res})
	PrintSummary(&out, []*Result{res})
	t.Log(out.String())

	if res.Reached != 36 || res.Fill.Errors != 0 {
		t.Errorf("reached %d of 36 sandboxes, %d creates failed: %v", res.Reached, res.Fill.Errors, res.Fill.Sample)
	}
	for _, c := range []Cost{res.CostEmpty, res.CostFull} {
		if c.Create.Ops != 12 || c.Create.Statements < 5 || c.Create.RowsWritten < 2 || c.Create.WALBytes <= 0 {
			t.Errorf("cost of a create at %d sandboxes not counted: %+v", c.Sandboxes, c.Create)
		}
		if c.Read.Ops != 12 || c.Read.Statements < 1 || c.Read.Writes > 0.5 {
			t.Errorf("cost of a read at %d sandboxes: %+v", c.Sandboxes, c.Read)
		}
	}
	// A create reads its own rows, not every sandbox of the cluster.
	if res.CostFull.Create.RowsRead >= float64(res.CostFull.Sandboxes) {
		t.Errorf("a create read %.0f rows with %d sandboxes in the cluster", res.CostFull.Create.RowsRead, res.CostFull.Sandboxes)
	}
	if res.IdleEmpty.HeartbeatWritesPerS <= 0 || res.IdleEmpty.HeartbeatWritesPerS > 4 {
		t.Errorf("four nodes heartbeat every 2s, measured %.2f writes/s", res.IdleEmpty.HeartbeatWritesPerS)
	}
	for _, op := range []string{"read", "create", "kill", "pause", "resume", "snapshot", "fork", "list (first page of 100)"} {
		s := res.Ops[op]
		if s.Count == 0 {
			t.Errorf("the mixed workload made no %s", op)
		}
		if s.Errors > 0 {
			t.Errorf("mix: %d of %d %s failed: %v", s.Errors, s.Count+s.Errors, op, s.Sample)
		}
	}
	if d := res.Drain; d == nil || d.Paused == 0 || d.Moved != d.Paused || d.Failed > 0 {
		t.Errorf("drain: %+v", d)
	}
	if l := res.Loss; l == nil || l.UnhealthyAfterS <= 0 || l.UnhealthyAfterS > 20 || (l.Sandboxes > 0 && l.LostAfterS <= 0) {
		t.Errorf("loss: %+v", l)
	}
	if l := res.Losses; l == nil || len(l.Nodes) != 1 || l.AllUnhealthyAfterS <= 0 || l.Missing != 0 ||
		l.Listed+l.ReadLost != l.Sandboxes || l.Sandboxes == 0 {
		t.Errorf("losses: %+v", l)
	}
	if v := res.Via; v == nil || v.CreateOwn.Count == 0 || v.CreateOther.Count == 0 || v.ReadOther.Count == 0 ||
		v.CreateOwn.Errors+v.CreateOther.Errors+v.ReadOwn.Errors+v.ReadOther.Errors > 0 {
		t.Errorf("one at a time: %+v", v)
	}
	if res.Connections.Max < 3 {
		t.Errorf("sessions: %+v", res.Connections)
	}
	if _, err := json.Marshal(res); err != nil {
		t.Error(err)
	}
	if !strings.Contains(out.String(), "statements per create") {
		t.Errorf("the report lacks the breakdown of a create:\n%s", out.String())
	}
}
