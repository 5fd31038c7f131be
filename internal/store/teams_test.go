package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"
)

// teamsSuite is every test of teams, keys and adoption that holds for any
// backend.
var teamsSuite = []struct {
	name string
	test func(t *testing.T, b backend)
}{
	{"TeamUseCountsOneTeamsSandboxes", testTeamUse},
	{"TeamRecordsRoundTrip", testTeamRecordsRoundTrip},
	{"APIKeysByDigestListedByTeam", testAPIKeysByDigestListedByTeam},
	{"AdoptUnownedGivesOldRecordsToTheTeam", testAdoptUnowned},
	{"AdoptUnownedLosesNoConcurrentWrite", testAdoptUnownedWhileWritten},
	{"AdoptUnownedOnManyNodesAtOnce", testAdoptUnownedOnManyNodes},
}

func TestTeamsStoreOnSQLite(t *testing.T) { runTeamsSuite(t, sqliteBackend()) }

// TestTeamsStoreOnPostgres runs the teams suite against a real PostgreSQL
// server, the cluster's state database.
func TestTeamsStoreOnPostgres(t *testing.T) { runTeamsSuite(t, postgresBackend(t)) }

func runTeamsSuite(t *testing.T, b backend) {
	for _, c := range teamsSuite {
		t.Run(c.name, func(t *testing.T) { c.test(t, b) })
	}
}

const firstTeam = "00000000-0000-4000-8000-000000000001"

func testTeamRecordsRoundTrip(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	team := &Team{ID: "t1", Name: "acme", CreatedAt: at, Quotas: []byte(`{"VCPUs":8,"MaxTimeout":3600000000000}`)}
	if err := s.Teams().Put(ctx, team); err != nil {
		t.Fatal(err)
	}
	if err := s.Teams().Put(ctx, &Team{ID: "t2", Name: "other", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if err := s.Teams().Update(ctx, "t2", func(v *Team) error { v.Quotas = []byte(`{"Builds":1}`); return nil }); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen()
	got, err := s.Teams().Get(ctx, "t1")
	if err != nil || got.Name != "acme" || !got.CreatedAt.Equal(at) || !jsonEqual(got.Quotas, team.Quotas) {
		t.Fatalf("team after reopen: %+v (quotas %s), %v", got, got.Quotas, err)
	}
	all, err := s.Teams().List(ctx)
	if err != nil || len(all) != 2 || all[0].ID != "t1" || all[1].ID != "t2" || !jsonEqual(all[1].Quotas, []byte(`{"Builds":1}`)) {
		t.Fatalf("teams = %+v, %v", all, err)
	}
	if err := s.Teams().Delete(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Teams().Get(ctx, "t1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted team: %v", err)
	}
	if err := s.Teams().Update(ctx, "t1", func(*Team) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of a deleted team: %v", err)
	}
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

func keyIDs(l []*APIKey) []string {
	var out []string
	for _, k := range l {
		out = append(out, k.ID)
	}
	return out
}

// A key's record is found by its digest and listed with its team's, and
// follows its team if that changes.
func testAPIKeysByDigestListedByTeam(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	keys := []*APIKey{
		{Hash: "h-a1", ID: "a1", Team: "A", Name: "ci", CreatedAt: at, MaskPrefix: "e2b_ab", MaskSuffix: "wxyz", Length: 44},
		{Hash: "h-b1", ID: "b1", Team: "B", Name: "laptop", CreatedAt: at, Admin: true, CreatedBy: "a1"},
		{Hash: "h-a2", ID: "a2", Team: "A", Name: "prod", CreatedAt: at, LastUsed: at.Add(time.Minute)},
	}
	for _, k := range keys {
		if err := s.APIKeys().Put(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = reopen()
	for _, want := range keys {
		got, err := s.APIKeys().Get(ctx, want.Hash)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("key %s: %+v, %v; want %+v", want.Hash, got, err, want)
		}
	}
	if _, err := s.APIKeys().Get(ctx, "a1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a key found by its ID rather than its digest: %v", err)
	}
	list := func(teams ...string) []string {
		t.Helper()
		l, err := s.APIKeys().List(ctx, teams...)
		if err != nil {
			t.Fatal(err)
		}
		return keyIDs(l)
	}
	if got := list("A"); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("keys of A = %v", got)
	}
	if got := list("B"); !slices.Equal(got, []string{"b1"}) {
		t.Fatalf("keys of B = %v", got)
	}
	if got := list("C"); len(got) != 0 {
		t.Fatalf("keys of a team without keys = %v", got)
	}
	if got := list(); len(got) != 3 {
		t.Fatalf("all keys = %v", got)
	}
	// Moved to B by an Update, it is listed with B's.
	if err := s.APIKeys().Update(ctx, "h-a2", func(k *APIKey) error { k.Team = "B"; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := list("A"); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("keys of A after the move = %v", got)
	}
	if got := list("B"); !slices.Equal(got, []string{"b1", "a2"}) {
		t.Fatalf("keys of B after the move = %v", got)
	}
	if err := s.APIKeys().Delete(ctx, "h-a1"); err != nil {
		t.Fatal(err)
	}
	if got := list("A"); len(got) != 0 {
		t.Fatalf("keys of A after its last went = %v", got)
	}
}

// row is a record as stored: its state column, its order and its JSON.
type row struct {
	state string
	seq   int64
	data  map[string]any
}

var ownedTables = []string{"sandboxes", "templates", "jobs", "volumes"}

func rowsOf(t *testing.T, s *Store, table string) map[string]row {
	t.Helper()
	rows, err := s.db.Query(`SELECT id, state, seq, data FROM ` + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]row{}
	for rows.Next() {
		var id, data string
		var r row
		if err := rows.Scan(&id, &r.state, &r.seq, &data); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(data), &r.data); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func allRows(t *testing.T, s *Store) map[string]map[string]row {
	t.Helper()
	out := map[string]map[string]row{}
	for _, table := range append(slices.Clone(ownedTables), "nodes", "teams", "apikeys") {
		out[table] = rowsOf(t, s, table)
	}
	return out
}

// oldRows are records as an install from before teams wrote them (no
// "team" field), and one of each owned by a team already.
var oldRows = []struct{ table, id, state, data string }{
	{"sandboxes", "sb-run", "running", `{"id":"sb-run","templateId":"base","state":"running","containerId":"c1","slot":3,"createdAt":"2025-03-01T12:00:00Z","startedAt":"2025-03-01T12:00:00Z","endAt":"2025-03-01T13:00:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":2048,"metadata":{"user":"ann"},"envVars":{"A":"1"},"envdToken":"tok","autoPause":true}`},
	{"sandboxes", "sb-paused", "paused", `{"id":"sb-paused","templateId":"base","state":"paused","pause":"on-disk","containerId":"","slot":-1,"createdAt":"2025-03-01T12:00:00Z","startedAt":"2025-03-01T12:00:00Z","endAt":"2025-03-01T13:00:00Z","pausedAt":"2025-03-01T12:30:00Z","cpuCount":2,"memoryMB":512,"diskSizeMB":2048,"envdToken":"tok2","pauseImage":"/d/p","pauseChecksum":"x"}`},
	{"sandboxes", "sb-owned", "running", `{"id":"sb-owned","team":"T2","templateId":"base","state":"running","containerId":"c3","slot":4,"createdAt":"2025-03-01T12:00:00Z","startedAt":"2025-03-01T12:00:00Z","endAt":"2025-03-01T13:00:00Z","cpuCount":1,"memoryMB":256,"diskSizeMB":1024,"envdToken":"tok3"}`},
	{"templates", "base", "ready", `{"id":"base","aliases":["python"],"status":"ready","createdAt":"2025-03-01T11:00:00Z","updatedAt":"2025-03-01T11:00:00Z","image":"python:3.12","rootfs":"/d/rootfs","envd":"/d/envd","checkpoint":"/d/ckpt","sizeBytes":1073741824,"checksum":"abc","cpuCount":2,"memoryMB":512,"diskSizeMB":2048}`},
	{"templates", "snap-1", "ready", `{"id":"snap-1","status":"ready","createdAt":"2025-03-01T12:10:00Z","updatedAt":"2025-03-01T12:10:00Z","rootfs":"/d/rootfs","envd":"/d/envd","checkpoint":"/d/snap","sizeBytes":10,"cpuCount":2,"memoryMB":512,"diskSizeMB":2048,"sourceSandbox":"sb-run","parent":"base"}`},
	{"templates", "owned-tpl", "building", `{"id":"owned-tpl","team":"T2","public":true,"status":"building","createdAt":"2025-03-01T12:10:00Z","updatedAt":"2025-03-01T12:10:00Z","rootfs":"","envd":"","checkpoint":"","sizeBytes":0,"cpuCount":1,"memoryMB":256,"diskSizeMB":1024}`},
	{"jobs", "job-1", "READY", `{"id":"job-1","templateId":"base","phase":"READY","progress":100,"createdAt":"2025-03-01T11:00:00Z","updatedAt":"2025-03-01T11:05:00Z"}`},
	{"jobs", "job-owned", "STEPS", `{"id":"job-owned","team":"T2","templateId":"owned-tpl","phase":"STEPS","progress":40,"createdAt":"2025-03-01T12:10:00Z","updatedAt":"2025-03-01T12:10:00Z","steps":true}`},
	{"volumes", "vol-1", "ready", `{"id":"vol-1","name":"data","state":"ready","token":"vt","sizeBytes":1048576,"createdAt":"2025-03-01T11:00:00Z"}`},
	{"volumes", "vol-owned", "ready", `{"id":"vol-owned","name":"data","state":"ready","team":"T2","token":"vt2","sizeBytes":1048576,"createdAt":"2025-03-01T11:00:00Z"}`},
	{"nodes", "node-a", "ready", `{"id":"node-a","address":"https://a:3000","status":"ready","statusChangedAt":"2025-03-01T11:00:00Z","version":"0.9","startedAt":"2025-03-01T11:00:00Z","heartbeatAt":"2025-03-01T11:00:00Z","usage":{}}`},
	{"teams", "T2", "active", `{"id":"T2","name":"other","createdAt":"2025-03-01T11:00:00Z"}`},
}

const unownedRows = 6

func writeOldRows(t *testing.T, s *Store) {
	t.Helper()
	for i, r := range oldRows {
		// In reverse order of their IDs, so an order kept is the seq's.
		if _, err := s.db.Exec(s.q(`INSERT INTO `+r.table+`(id, state, seq, data) VALUES(?, ?, ?, ?)`), r.id, r.state, 1000-i, r.data); err != nil {
			t.Fatal(err)
		}
	}
}

// The records of an install from before teams become the team's; records
// with a team, and everything else of every record (state column, order,
// every field), stay as they were; running it again does nothing.
func testAdoptUnowned(t *testing.T, b backend) {
	ctx := context.Background()
	s, reopen := b.open(t)
	writeOldRows(t, s)
	before := allRows(t, s)
	beforeOrder := ids(sandboxesOf(t, s))
	n, err := s.AdoptUnowned(ctx, firstTeam)
	if err != nil || n != unownedRows {
		t.Fatalf("AdoptUnowned = %d, %v; want %d (the records without a team)", n, err, unownedRows)
	}
	after := allRows(t, s)
	for table, rows := range before {
		if len(after[table]) != len(rows) {
			t.Errorf("%s: %d records before, %d after", table, len(rows), len(after[table]))
		}
		for id, was := range rows {
			now, ok := after[table][id]
			if !ok {
				t.Errorf("%s %s is gone", table, id)
				continue
			}
			want := maps.Clone(was.data)
			if _, owned := want["team"]; !owned && slices.Contains(ownedTables, table) {
				want["team"] = firstTeam
			}
			if now.state != was.state || now.seq != was.seq || !reflect.DeepEqual(now.data, want) {
				t.Errorf("%s %s:\n was %s %d %v\n now %s %d %v\nwant the team given and nothing else changed", table, id,
					was.state, was.seq, was.data, now.state, now.seq, now.data)
			}
		}
	}
	if got := ids(sandboxesOf(t, s)); !slices.Equal(got, beforeOrder) {
		t.Errorf("sandboxes listed %v after, %v before", got, beforeOrder)
	}
	// As the types read them.
	for id, team := range map[string]string{"sb-run": firstTeam, "sb-paused": firstTeam, "sb-owned": "T2"} {
		if got, err := s.Sandboxes().Get(ctx, id); err != nil || got.Team != team {
			t.Errorf("sandbox %s: %+v, %v; want team %s", id, got, err, team)
		}
	}
	if paused := sandboxesOf(t, s, string(Paused)); len(paused) != 1 || paused[0].Pause != PauseOnDisk {
		t.Errorf("paused sandboxes after adoption: %v", ids(paused))
	}

	// Again, and after a restart: nothing more.
	for i, s := range []*Store{s, reopen()} {
		if n, err := s.AdoptUnowned(ctx, firstTeam); err != nil || n != 0 {
			t.Errorf("AdoptUnowned again (%d) = %d, %v; want 0", i, n, err)
		}
		if again := allRows(t, s); !reflect.DeepEqual(again, after) {
			t.Errorf("AdoptUnowned again (%d) changed records", i)
		}
	}
	// Another team is not given what the first has.
	if n, err := s.AdoptUnowned(ctx, "T2"); err != nil || n != 0 {
		t.Errorf("AdoptUnowned for another team = %d, %v; want 0", n, err)
	}
}

func sandboxesOf(t *testing.T, s *Store, states ...string) []*Sandbox {
	t.Helper()
	l, err := s.Sandboxes().List(context.Background(), states...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// A node changing a record while another adopts it loses nothing of
// either change.
func testAdoptUnownedWhileWritten(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	const records, each = 20, 20
	for i := range records {
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: fmt.Sprint("sb", i), State: Running}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		for range each {
			for i := range records {
				if err := s.Sandboxes().Update(ctx, fmt.Sprint("sb", i), func(v *Sandbox) error { v.Slot++; return nil }); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	wg.Go(func() {
		if _, err := s.AdoptUnowned(ctx, firstTeam); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, sb := range sandboxesOf(t, s) {
		if sb.Team != firstTeam || sb.Slot != each {
			t.Errorf("sandbox %s: team %q slot %d; want %s and %d", sb.ID, sb.Team, sb.Slot, firstTeam, each)
		}
	}
}

// Every node of a cluster adopts at start, several at once: each record
// is the team's once, with nothing else changed.
func testAdoptUnownedOnManyNodes(t *testing.T, b backend) {
	if b.name == "sqlite" {
		t.Skip("a SQLite file is one server's: no other node adopts at the same time")
	}
	ctx := context.Background()
	s, reopen := b.open(t)
	writeOldRows(t, s)
	nodes := []*Store{s, reopen(), reopen(), reopen()}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Go(func() { _, errs[i] = n.AdoptUnowned(ctx, firstTeam) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	for _, table := range ownedTables {
		for id, r := range rowsOf(t, s, table) {
			if want := map[bool]string{true: "T2", false: firstTeam}[id == "sb-owned" || id == "owned-tpl" || id == "job-owned" || id == "vol-owned"]; r.data["team"] != want {
				t.Errorf("%s %s belongs to %v, want %s", table, id, r.data["team"], want)
			}
		}
	}
	if n, err := s.AdoptUnowned(ctx, firstTeam); err != nil || n != 0 {
		t.Errorf("AdoptUnowned after the nodes = %d, %v; want 0", n, err)
	}
}

// Which template a name means to a team: its own by ID or alias, a public
// one of another team's, never another team's private one; the node
// itself (no team) finds any.
func TestFindTemplate(t *testing.T) {
	all := []*Template{
		{ID: "a-private", Team: "A", Aliases: []string{"py", "a-only"}},
		{ID: "b-public-old", Team: "B", Aliases: []string{"py", "shared"}, Public: true},
		{ID: "b-private", Team: "B", Aliases: []string{"secret"}},
		{ID: "c-public", Team: "C", Aliases: []string{"shared", "c-pub"}, Public: true},
		{ID: "b-public-new", Team: "B", Aliases: []string{"shared"}, Public: true},
	}
	for _, c := range []struct{ team, name, want string }{
		{"A", "a-private", "a-private"},
		{"A", "py", "a-private"}, // its own alias before a public one
		{"A", "a-only", "a-private"},
		{"A", "b-private", ""}, // another team's private template by ID
		{"A", "secret", ""},    // or by alias
		{"A", "b-public-old", "b-public-old"},
		{"A", "shared", "b-public-old"}, // the oldest public one
		{"A", "c-pub", "c-public"},
		{"B", "py", "b-public-old"},
		{"B", "shared", "b-public-old"},
		{"C", "shared", "c-public"}, // its own before an older public one
		{"B", "a-only", ""},
		{"B", "a-private", ""},
		{"B", "secret", "b-private"},
		{"D", "py", "b-public-old"},
		{"D", "nothing", ""},
		{"", "secret", "b-private"},
		{"", "a-private", "a-private"},
		{"", "py", "a-private"},
	} {
		got := FindTemplate(all, c.team, c.name)
		if id := idOf(got); id != c.want {
			t.Errorf("team %q, name %q: %q, want %q", c.team, c.name, id, c.want)
		}
		if got != nil && !got.VisibleTo(c.team) {
			t.Errorf("team %q found %s, which it may not see", c.team, got.ID)
		}
	}
	for _, c := range []struct{ team, name, want string }{
		{"A", "py", "a-private"},
		{"A", "shared", ""}, // public templates of others do not clash
		{"A", "b-private", ""},
		{"B", "shared", "b-public-old"},
		{"B", "b-private", "b-private"},
		{"", "c-pub", "c-public"},
	} {
		if id := idOf(OwnTemplate(all, c.team, c.name)); id != c.want {
			t.Errorf("OwnTemplate(%q, %q) = %q, want %q", c.team, c.name, id, c.want)
		}
	}
}

func idOf(t *Template) string {
	if t == nil {
		return ""
	}
	return t.ID
}

// TeamUse totals one team's sandboxes in the states asked, from the
// records' JSON through the index, as the quota check reads them.
func testTeamUse(t *testing.T, b backend) {
	ctx := context.Background()
	s, _ := b.open(t)
	put := func(id, team string, st SandboxState, cpu, mem int) {
		if err := s.Sandboxes().Put(ctx, &Sandbox{ID: id, Team: team, State: st, CPUCount: cpu, MemoryMB: mem}); err != nil {
			t.Fatal(err)
		}
	}
	put("a1", "a", Running, 2, 512)
	put("a2", "a", Creating, 0, 256) // no CPU count: one
	put("a3", "a", Paused, 8, 8192)
	put("b1", "b", Running, 4, 1024)
	n, cpus, mem, err := s.TeamUse(ctx, "a", Creating, Running, Resuming)
	if err != nil || n != 2 || cpus != 3 || mem != 768 {
		t.Fatalf("team a's running use = %d sandboxes, %d vCPUs, %d MiB, %v; want 2, 3, 768", n, cpus, mem, err)
	}
	if n, _, _, err := s.TeamUse(ctx, "a"); err != nil || n != 3 {
		t.Fatalf("team a's sandboxes in any state = %d, %v; want 3", n, err)
	}
	if n, cpus, mem, err := s.TeamUse(ctx, "nobody", Running); err != nil || n != 0 || cpus != 0 || mem != 0 {
		t.Fatalf("a team without sandboxes: %d %d %d %v", n, cpus, mem, err)
	}
}
