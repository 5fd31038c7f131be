package cluster

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
	"cube/internal/testenv"
)

// openPostgres opens a store on a PostgreSQL server of the test's own,
// and the database beside it for the test's own statements.
func openPostgres(t testing.TB) (*store.Store, *sql.DB) {
	dsn := testenv.Postgres(t)
	st, err := store.OpenPostgres(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return st, db
}

// On PostgreSQL a heartbeat reads the late nodes alone (and the members
// when they changed): a node that stops heartbeating is not alive past
// the timeout, one that comes back or joins is, one removed is gone.
func TestAliveNodesOnPostgres(t *testing.T) {
	ctx := context.Background()
	st, _ := openPostgres(t)
	c := &clock{time.Now()}
	a := register(t, st, "a", c)
	b := register(t, st, "b", c)
	cr := register(t, st, "c", c)
	beat := func(rs ...*Registry) {
		t.Helper()
		for _, r := range rs {
			if err := r.heartbeat(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	beat(a, b, cr)
	if got := a.AlivePeers(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("alive peers of a: %v", got)
	}
	// c goes silent: within the timeout (5 intervals) it is still alive,
	// past it not.
	c.t = c.t.Add(4 * time.Second)
	beat(a, b)
	if !a.Alive("c") {
		t.Fatal("c is not alive within the timeout")
	}
	c.t = c.t.Add(2 * time.Second)
	beat(a, b)
	if a.Alive("c") || !a.Alive("b") || !a.Alive("a") || !slices.Equal(a.AlivePeers(), []string{"b"}) {
		t.Fatalf("c silent past the timeout: alive peers of a %v", a.AlivePeers())
	}
	// c back, d new: both alive at a's next heartbeat.
	beat(cr)
	d := register(t, st, "d", c)
	beat(a)
	if got := a.AlivePeers(); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Fatalf("after c came back and d joined: %v", got)
	}
	// d goes for good and is removed.
	c.t = c.t.Add(6 * time.Second)
	beat(a, b, cr)
	if err := a.RemoveNode(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	beat(a)
	if got := a.AlivePeers(); !slices.Equal(got, []string{"b", "c"}) || a.Alive("d") {
		t.Fatalf("after d was removed: %v", got)
	}
	_ = d
}

// Placement reads the node records by changes, and sees at once what
// changed since its last read; a node drained after it was read is not
// placed on, since the room is checked again on its row.
func TestPlacementOnPostgresSeesChanges(t *testing.T) {
	ctx := context.Background()
	st, db := openPostgres(t)
	c := &clock{time.Now()}
	a := registerRoomy(t, st, "a", c, 1000)
	registerRoomy(t, st, "b", c, 4000)
	registerRoomy(t, st, "c", c, 2000)
	place := func() string {
		t.Helper()
		node, release, err := a.Place(ctx, Want{})
		if err != nil {
			t.Fatal(err)
		}
		release()
		return node
	}
	if got := place(); got != "b" {
		t.Fatalf("placed on %s, want the roomiest, b", got)
	}
	if err := st.Nodes().Update(ctx, "b", func(n *store.Node) error { n.Usage.CPUPercent = 99; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := place(); got != "c" {
		t.Fatalf("b's CPUs busy: placed on %s, want c", got)
	}
	if err := st.Nodes().Update(ctx, "b", func(n *store.Node) error { n.Usage.CPUPercent = 0; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := place(); got != "b" {
		t.Fatalf("b's CPUs free again: placed on %s", got)
	}
	// b drained where this node's reads do not see it (the change
	// tracking off for the write): its row refuses the placement.
	if _, err := db.Exec(`ALTER TABLE nodes DISABLE TRIGGER nodes_touch`); err != nil {
		t.Fatal(err)
	}
	if err := a.SetNodeStatus(ctx, "b", cube.NodeDraining); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`ALTER TABLE nodes ENABLE TRIGGER nodes_touch`); err != nil {
		t.Fatal(err)
	}
	if got := place(); got != "c" {
		t.Fatalf("b drained unseen: placed on %s, want c", got)
	}
}

// The cluster's tokens are read from the shared store: a sandbox of any
// node is found by its token, with its node, and a sandbox killed, moved
// or paused is seen so at the next read.
func TestTokensOnPostgres(t *testing.T) {
	ctx := context.Background()
	st, _ := openPostgres(t)
	put := func(id, node string, state store.SandboxState) {
		t.Helper()
		if err := st.Sandboxes().Put(ctx, &store.Sandbox{ID: id, Node: node, State: state, EnvdToken: "tok-" + id}); err != nil {
			t.Fatal(err)
		}
	}
	put("s1", "n1", store.Running)
	put("s2", "n2", store.Paused)
	put("s3", "n2", store.Creating)
	idx := NewTokens(st)
	idx.maxAge = 0
	find := func(token string) (string, string, bool) {
		t.Helper()
		id, node, ok, err := idx.Find(ctx, "", func(tok string) bool { return tok == token })
		if err != nil {
			t.Fatal(err)
		}
		return id, node, ok
	}
	if id, node, ok := find("tok-s2"); !ok || id != "s2" || node != "n2" {
		t.Fatalf("s2: %q on %q, %v", id, node, ok)
	}
	if _, _, ok := find("tok-s3"); ok {
		t.Fatal("a sandbox being created was found")
	}
	put("s3", "n2", store.Running)
	put("s1", "n3", store.Running) // moved
	if err := st.Sandboxes().Delete(ctx, "s2"); err != nil {
		t.Fatal(err)
	}
	if id, node, ok := find("tok-s3"); !ok || id != "s3" || node != "n2" {
		t.Fatalf("s3 once running: %q on %q, %v", id, node, ok)
	}
	if _, node, _ := find("tok-s1"); node != "n3" {
		t.Fatalf("s1 after its move: on %q", node)
	}
	if _, _, ok := find("tok-s2"); ok || idx.Len() != 2 {
		t.Fatalf("s2 deleted: found %v, %d in the index", ok, idx.Len())
	}
	put("s3", "n2", store.Killing)
	if _, _, ok := find("tok-s3"); ok {
		t.Fatal("a sandbox being killed was found")
	}
}

// BenchmarkTokensRead measures the reads of the index of 20,000
// sandboxes of 100 nodes from PostgreSQL: the first, of every sandbox,
// and one of the changes of 100 sandboxes written since.
func BenchmarkTokensRead(b *testing.B) {
	ctx := context.Background()
	st, db := openPostgres(b)
	const n = 20000
	// A sandbox record as a node writes it, its template's boot record
	// within: about 1.5 KB.
	boot := &store.Template{ID: "tpl-base", Status: store.TemplateReady, Node: "node-00", Rootfs: "/var/lib/cube/templates/tpl-base/rootfs",
		Envd: "/usr/local/bin/cube-envd", Checkpoint: "/var/lib/cube/templates/tpl-base/checkpoint", SizeBytes: 1 << 30,
		Checksum: strings.Repeat("c", 64), StartCmd: []string{"/bin/sh", "-c", "sleep infinity"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/root"},
		CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, Aliases: []string{"base"}}
	rec := &store.Sandbox{ID: "SBXID", Team: "team-0000", TemplateID: "tpl-base", State: store.Running, ContainerID: "ctr-SBXID", Slot: 7,
		HostAddr: "10.11.0.7", Node: "NODE", CreatedAt: time.Now(), StartedAt: time.Now(), EndAt: time.Now().Add(time.Hour), Timeout: time.Hour,
		RunningSince: time.Now(), CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, Metadata: map[string]string{"job": "rollout-1234", "worker": "17"},
		EnvVars: map[string]string{"FOO": "bar"}, EnvdToken: "TOKEN", TrafficToken: strings.Repeat("t", 32), Boot: boot}
	data, _ := json.Marshal(rec)
	b.Logf("a sandbox record: %d bytes", len(data))
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO sandboxes(id, state, seq, data)
		SELECT 'sbx-' || i, 'running', i, replace(replace(replace('%s', 'SBXID', 'sbx-' || i), 'NODE', 'node-' || (i %% 100)), 'TOKEN', md5(i::text))
		FROM generate_series(1, %d) i`, strings.ReplaceAll(string(data), "'", "''"), n)); err != nil {
		b.Fatal(err)
	}
	b.Run("every sandbox", func(b *testing.B) {
		for b.Loop() {
			ch, err := st.SandboxTokens(ctx, store.Cursor{})
			if err != nil || len(ch.Changed) != n {
				b.Fatal(len(ch.Changed), err)
			}
		}
	})
	b.Run("100 changed", func(b *testing.B) {
		first, err := st.SandboxTokens(ctx, store.Cursor{})
		if err != nil {
			b.Fatal(err)
		}
		cur, i := first.Next, 0
		for b.Loop() {
			b.StopTimer()
			if _, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE sandboxes SET data = data WHERE id IN (SELECT 'sbx-' || g FROM generate_series(%d, %d) g)`, i%n+1, i%n+100)); err != nil {
				b.Fatal(err)
			}
			i += 100
			b.StartTimer()
			ch, err := st.SandboxTokens(ctx, cur)
			if err != nil || ch.Full || len(ch.Changed) < 100 {
				b.Fatal(ch.Full, len(ch.Changed), err)
			}
			cur = ch.Next
		}
	})
	b.Run("index of every sandbox", func(b *testing.B) {
		for b.Loop() {
			idx := NewTokens(st)
			if _, err := idx.read(ctx, 0); err != nil || idx.Len() != n {
				b.Fatal(idx.Len(), err)
			}
		}
	})
}
