package teams

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"cube/internal/cube"
	"cube/internal/store"
	"cube/internal/testenv"
)

// backend opens the state store that a test's nodes share.
type backend struct {
	name string
	// open returns a new, empty store and a function that opens the same
	// database again: another node of a cluster, or a restarted server.
	open func(t *testing.T) (st *store.Store, another func() *store.Store)
}

// sqliteBackend is a SQLite file, which one server holds open: another
// node of it is another Keys over the same store.
func sqliteBackend() backend {
	return backend{"sqlite", func(t *testing.T) (*store.Store, func() *store.Store) {
		st, err := store.Open(filepath.Join(t.TempDir(), "state.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st, func() *store.Store { return st }
	}}
}

// postgresBackend gives each test a database of its own on one server
// (which needs root; without it the tests are skipped).
func postgresBackend(t *testing.T) backend {
	admin := testenv.Postgres(t)
	n := 0
	return backend{"postgres", func(t *testing.T) (*store.Store, func() *store.Store) {
		n++
		name := fmt.Sprintf("teams%d", n)
		db, err := sql.Open("pgx", admin)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE DATABASE ` + name); err != nil {
			t.Fatal(err)
		}
		dsn := strings.Replace(admin, "/cube?", "/"+name+"?", 1)
		return openOrFail(t, func() (*store.Store, error) { return store.OpenPostgres(context.Background(), dsn) })
	}}
}

// openOrFail opens a store, and returns it with a function that opens
// another handle on the same database.
func openOrFail(t *testing.T, open func() (*store.Store, error)) (*store.Store, func() *store.Store) {
	t.Helper()
	another := func() *store.Store {
		st, err := open()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	return another(), another
}

// suite is every test of teams and keys that holds on any backend.
var suite = []struct {
	name string
	test func(t *testing.T, b backend)
}{
	{"FirstStartMakesTheFirstTeamAndItsAdminKey", testFirstStart},
	{"BootstrapAgainChangesNothing", testBootstrapAgain},
	{"BootstrapOnManyNodesAtOnce", testBootstrapOnManyNodesAtOnce},
	{"ChangedServerKeyReplacesTheOldOne", testChangedServerKey},
	{"UpgradeGivesUnownedRecordsToTheFirstTeam", testUpgrade},
	{"CreateKey", testCreateKey},
	{"ListKeysMasksThem", testListKeysMasks},
	{"RenameKey", testRenameKey},
	{"DeleteKeyRevokesItOnEveryNode", testDeleteKey},
	{"KeysOfAnotherTeamAreNotFound", testKeysOfAnotherTeam},
	{"LastAdminKeyStays", testLastAdminKey},
	{"LastUsed", testLastUsed},
	{"CreateTeam", testCreateTeam},
	{"CreateTeamRefusesNegativeQuotas", testCreateTeamNegativeQuotas},
	{"SetQuotas", testSetQuotas},
	{"DeleteTeam", testDeleteTeam},
	{"CreateTeamAtOnceMakesOneTeamOfAName", testCreateTeamAtOnce},
	{"KeysMadeWhileTheirTeamIsDeletedFail", testKeysMadeWhileTeamDeleted},
	{"JunkKeysAreRefusedWithoutTheStore", testJunkKeys},
}

func runSuite(t *testing.T, b backend) {
	for _, c := range suite {
		t.Run(c.name, func(t *testing.T) { c.test(t, b) })
	}
}

func TestTeamsOnSQLite(t *testing.T) { runSuite(t, sqliteBackend()) }

// TestTeamsOnPostgres runs the suite against a real PostgreSQL server, a
// cluster's state database (root only).
func TestTeamsOnPostgres(t *testing.T) { runSuite(t, postgresBackend(t)) }

var ctx = context.Background()

// started is a server's first start: its teams, bootstrapped with a fresh
// server key.
func started(t *testing.T, st *store.Store) (k *Keys, serverKey string) {
	t.Helper()
	k = New(st)
	serverKey = NewKey()
	if err := k.Bootstrap(ctx, serverKey); err != nil {
		t.Fatal(err)
	}
	return k, serverKey
}

func authOK(t *testing.T, k *Keys, key string) cube.Caller {
	t.Helper()
	c, err := k.Authenticate(ctx, key)
	if err != nil {
		t.Fatalf("key %q refused: %v", key, err)
	}
	return c
}

func authRefused(t *testing.T, k *Keys, key, why string) {
	t.Helper()
	c, err := k.Authenticate(ctx, key)
	if err == nil {
		t.Fatalf("%s: key %q still authenticates as %+v", why, key, c)
	}
	if cube.KindOf(err) != cube.Forbidden {
		t.Fatalf("%s: key %q refused with %v (kind %v), want Forbidden", why, key, err, cube.KindOf(err))
	}
}

func wantKind(t *testing.T, err error, want cube.Kind, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s succeeded, want %v", what, want)
	}
	if got := cube.KindOf(err); got != want {
		t.Fatalf("%s: %v (kind %v), want %v", what, err, got, want)
	}
}

// onlyAdmin checks that the store holds exactly one team, the first, and
// one key, its admin key, and returns them.
func onlyAdmin(t *testing.T, k *Keys) (cube.Team, cube.APIKey) {
	t.Helper()
	all, err := k.ListTeams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all[0].ID != cube.FirstTeam {
		t.Fatalf("teams = %+v, want the first team alone", all)
	}
	keys, err := k.ListKeys(ctx, cube.FirstTeam)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !keys[0].Admin {
		t.Fatalf("keys of the first team = %+v, want its admin key alone", keys)
	}
	return all[0], keys[0]
}

func testFirstStart(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, key := started(t, st)
	c := authOK(t, k, key)
	if c.Team != cube.FirstTeam || !c.Admin || c.KeyID == "" {
		t.Fatalf("the server key authenticates as %+v, want an admin of the first team", c)
	}
	team, admin := onlyAdmin(t, k)
	if team.Name == "" || team.CreatedAt.IsZero() || team.Quotas != (cube.Quotas{}) {
		t.Errorf("first team %+v: want a name, a creation time and no limits", team)
	}
	if admin.ID != c.KeyID || admin.Name != c.KeyName || admin.Team != cube.FirstTeam || admin.CreatedBy != "" {
		t.Errorf("admin key listed as %+v, caller %+v", admin, c)
	}
	// Surrounding white space (a key file's newline) is not part of it.
	if c2 := authOK(t, k, " "+key+"\n"); c2 != c {
		t.Errorf("key with surrounding space authenticates as %+v, want %+v", c2, c)
	}
	authRefused(t, k, NewKey(), "a key never made")
	if err := New(st).Bootstrap(ctx, "   "); err == nil {
		t.Error("Bootstrap with an empty key succeeded")
	}
	if err := New(st).Bootstrap(ctx, "e2b_\x01"); err == nil {
		t.Error("Bootstrap with a key of control characters succeeded")
	}
	authOK(t, k, key)
}

func testBootstrapAgain(t *testing.T, b backend) {
	st, another := b.open(t)
	k, key := started(t, st)
	team, admin := onlyAdmin(t, k)
	// The same server again, a restarted server, and a second node.
	for i, k := range []*Keys{k, New(st), New(another())} {
		if err := k.Bootstrap(ctx, key); err != nil {
			t.Fatalf("bootstrap %d: %v", i+2, err)
		}
		team2, admin2 := onlyAdmin(t, k)
		admin2.LastUsed = admin.LastUsed // the uses below set it
		if !reflect.DeepEqual(team2, team) || !reflect.DeepEqual(admin2, admin) {
			t.Fatalf("bootstrap %d changed the first team or its key:\n%+v %+v\nwas\n%+v %+v", i+2, team2, admin2, team, admin)
		}
		if c := authOK(t, k, key); c.Team != cube.FirstTeam || !c.Admin || c.KeyID != admin.ID {
			t.Fatalf("after bootstrap %d the key is %+v", i+2, c)
		}
	}
}

// Every node of a cluster bootstraps at start, several at once: there is
// still one first team and one admin key.
func testBootstrapOnManyNodesAtOnce(t *testing.T, b backend) {
	st, another := b.open(t)
	key := NewKey()
	nodes := []*Keys{New(st), New(another()), New(another()), New(another())}
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, k := range nodes {
		wg.Go(func() { errs[i] = k.Bootstrap(ctx, key) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
	}
	for _, k := range nodes {
		onlyAdmin(t, k)
		if c := authOK(t, k, key); c.Team != cube.FirstTeam || !c.Admin {
			t.Fatalf("key authenticates as %+v", c)
		}
	}
}

// The operator changed CUBE_API_KEY and restarted: the new key is the
// admin key, the old one fails on the restarted server at once and on a
// node that did not restart within CacheFor.
func testChangedServerKey(t *testing.T, b backend) {
	st, another := b.open(t)
	old, oldKey := started(t, st)
	other := New(another())
	authOK(t, old, oldKey)
	authOK(t, other, oldKey)
	// The first team's other keys are not touched.
	member, err := old.CreateKey(ctx, cube.FirstTeam, "ci", "")
	if err != nil {
		t.Fatal(err)
	}

	restarted := New(another())
	newKey := NewKey()
	if err := restarted.Bootstrap(ctx, newKey); err != nil {
		t.Fatal(err)
	}
	c := authOK(t, restarted, newKey)
	if c.Team != cube.FirstTeam || !c.Admin {
		t.Fatalf("the new key authenticates as %+v", c)
	}
	authRefused(t, restarted, oldKey, "the old server key on the restarted server")
	time.Sleep(CacheFor)
	authRefused(t, old, oldKey, "the old server key, CacheFor later, on the server that made it")
	authRefused(t, other, oldKey, "the old server key, CacheFor later, on another node")
	authOK(t, other, newKey)
	authOK(t, old, member.Key)

	teams, err := restarted.ListTeams(ctx)
	if err != nil || len(teams) != 1 {
		t.Fatalf("teams after the key changed: %+v, %v", teams, err)
	}
	keys, err := restarted.ListKeys(ctx, cube.FirstTeam)
	if err != nil {
		t.Fatal(err)
	}
	admins := 0
	for _, k := range keys {
		if k.Admin {
			admins++
		}
	}
	if len(keys) != 2 || admins != 1 {
		t.Fatalf("keys after the key changed: %+v, want the new admin key and the member key", keys)
	}
	// And changing it back works too.
	if err := New(st).Bootstrap(ctx, oldKey); err != nil {
		t.Fatal(err)
	}
	authOK(t, New(st), oldKey)
	authRefused(t, New(st), newKey, "the replaced key after the old one came back")
}

// records is every record that a team owns, by table and ID, as the store
// reads them.
type records map[string]any

func recordsOf(t *testing.T, st *store.Store) records {
	t.Helper()
	out := records{}
	collect(t, out, "sandbox", st.Sandboxes(), func(v *store.Sandbox) string { return v.ID })
	collect(t, out, "template", st.Templates(), func(v *store.Template) string { return v.ID })
	collect(t, out, "job", st.Jobs(), func(v *store.Job) string { return v.ID })
	collect(t, out, "volume", st.Volumes(), func(v *store.Volume) string { return v.ID })
	return out
}

func collect[T any](t *testing.T, out records, kind string, table store.Table[T], id func(*T) string) {
	t.Helper()
	all, err := table.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range all {
		out[kind+" "+id(v)] = *v
	}
}

func teamField(v any) string { return reflect.ValueOf(v).FieldByName("Team").String() }

func withTeam(v any, team string) any {
	c := reflect.New(reflect.TypeOf(v)).Elem()
	c.Set(reflect.ValueOf(v))
	c.FieldByName("Team").SetString(team)
	return c.Interface()
}

// checkAdopted checks that after holds the records of before, none lost or
// added, each unowned one now the first team's and every other field as
// it was.
func checkAdopted(t *testing.T, before, after records) {
	t.Helper()
	if len(after) != len(before) {
		t.Errorf("%d records before, %d after", len(before), len(after))
	}
	for id, was := range before {
		now, ok := after[id]
		if !ok {
			t.Errorf("%s is gone", id)
			continue
		}
		want := teamField(was)
		if want == "" {
			want = cube.FirstTeam
		}
		if teamField(now) != want {
			t.Errorf("%s belongs to %q, want %q", id, teamField(now), want)
		}
		if !reflect.DeepEqual(now, withTeam(was, teamField(now))) {
			t.Errorf("%s changed beyond its team:\n was %+v\n now %+v", id, was, now)
		}
	}
}

// oldInstall writes the records of an install from before teams: none
// names a team (as before, the field is left out of the record).
func oldInstall(t *testing.T, st *store.Store, suffix, team string) {
	t.Helper()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tpl := store.Template{ID: "base" + suffix, Team: team, Aliases: []string{"python" + suffix}, Status: store.TemplateReady,
		CreatedAt: at, UpdatedAt: at, Image: "python:3.12", Rootfs: "/data/t/rootfs", Checkpoint: "/data/t/ckpt",
		SizeBytes: 1 << 30, Checksum: "abc", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 2048, StartCmd: []string{"sleep", "1"}}
	snap := store.Template{ID: "snap-" + suffix, Team: team, Status: store.TemplateReady, CreatedAt: at, UpdatedAt: at,
		SourceSandbox: "sb1" + suffix, Parent: tpl.ID, Checkpoint: "/data/snap/ckpt", Public: team != ""}
	for _, v := range []*store.Template{&tpl, &snap} {
		if err := st.Templates().Put(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	for _, v := range []*store.Sandbox{
		{ID: "sb1" + suffix, Team: team, TemplateID: tpl.ID, State: store.Running, ContainerID: "c1", Slot: 3,
			CreatedAt: at, StartedAt: at, EndAt: at.Add(time.Hour), CPUCount: 2, MemoryMB: 512,
			Metadata: map[string]string{"user": "ann"}, EnvVars: map[string]string{"A": "1"}, EnvdToken: "tok", Boot: &tpl},
		{ID: "sb2" + suffix, Team: team, TemplateID: tpl.ID, State: store.Paused, Pause: store.PauseOnDisk, Slot: -1,
			PauseImage: "/data/sb2/pause", PauseChecksum: "def", CreatedAt: at, PausedAt: at.Add(time.Minute), AutoResume: true},
	} {
		if err := st.Sandboxes().Put(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Jobs().Put(ctx, &store.Job{ID: "job" + suffix, Team: team, TemplateID: tpl.ID, Phase: store.PhaseReady,
		Progress: 100, CreatedAt: at, UpdatedAt: at, Tags: []string{"v1"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Volumes().Put(ctx, &store.Volume{ID: "vol" + suffix, Team: team, Name: "data" + suffix,
		State: store.VolumeReady, Token: "vt", SizeBytes: 1 << 20, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
}

// An install from before teams is upgraded: at its first start every
// record becomes the first team's and nothing else changes. Records an
// older node of the cluster writes later, without a team, go to the first
// team at the next start; records with a team keep it.
func testUpgrade(t *testing.T, b backend) {
	st, another := b.open(t)
	oldInstall(t, st, "", "")
	before := recordsOf(t, st)
	if len(before) != 6 {
		t.Fatalf("old install has %d records", len(before))
	}
	k, key := started(t, st)
	checkAdopted(t, before, recordsOf(t, st))
	// What the state column says is kept (lists by state still find them).
	if paused, err := st.Sandboxes().List(ctx, string(store.Paused)); err != nil || len(paused) != 1 || paused[0].Team != cube.FirstTeam {
		t.Errorf("paused sandboxes after the upgrade: %+v, %v", paused, err)
	}

	other, err := k.CreateTeam(ctx, "other", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	oldInstall(t, st, "-other", other.ID)
	oldInstall(t, st, "-older-node", "")
	before = recordsOf(t, st)
	if err := New(another()).Bootstrap(ctx, key); err != nil {
		t.Fatal(err)
	}
	after := recordsOf(t, st)
	checkAdopted(t, before, after)
	if got := teamField(after["sandbox sb1-other"]); got != other.ID {
		t.Errorf("another team's sandbox now belongs to %q", got)
	}
	// And once more changes nothing at all.
	if err := New(st).Bootstrap(ctx, key); err != nil {
		t.Fatal(err)
	}
	if again := recordsOf(t, st); !reflect.DeepEqual(again, after) {
		t.Errorf("a third start changed records")
	}
}

var keyRE = regexp.MustCompile(`^e2b_[0-9a-f]{40}$`)

func testCreateKey(t *testing.T, b backend) {
	st, another := b.open(t)
	k, serverKey := started(t, st)
	admin := authOK(t, k, serverKey)
	team, err := k.CreateTeam(ctx, "acme", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	nk, err := k.CreateKey(ctx, team.ID, "laptop", admin.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if !keyRE.MatchString(nk.Key) {
		t.Fatalf("new key %q, want e2b_ and 40 hex digits", nk.Key)
	}
	if nk.ID == "" || nk.Team != team.ID || nk.Name != "laptop" || nk.Admin || nk.CreatedBy != admin.KeyID ||
		nk.CreatedAt.Before(before.Add(-time.Second)) || !nk.LastUsed.IsZero() {
		t.Errorf("new key record %+v", nk.APIKey)
	}
	// It works at once, on this node and on another.
	for _, k := range []*Keys{k, New(another())} {
		c := authOK(t, k, nk.Key)
		if c != (cube.Caller{Team: team.ID, KeyID: nk.ID, KeyName: "laptop"}) {
			t.Errorf("new key authenticates as %+v", c)
		}
	}
	// Shown once: no list carries it.
	keys, err := k.ListKeys(ctx, team.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 1 {
		keys[0].LastUsed = time.Time{} // the uses above set it
	}
	if len(keys) != 1 || !reflect.DeepEqual(keys[0], nk.APIKey) {
		t.Errorf("keys of the team = %+v, want %+v", keys, nk.APIKey)
	}
	if s := fmt.Sprintf("%+v", keys); strings.Contains(s, nk.Key) || strings.Contains(s, nk.Key[4:]) {
		t.Errorf("the key list shows the key: %s", s)
	}
	// Nor does the store: its records hold the digest alone.
	recs, err := st.APIKeys().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if s := fmt.Sprintf("%+v", *r); strings.Contains(s, nk.Key[4:]) || strings.Contains(s, serverKey[4:]) {
			t.Errorf("the store keeps a key: %s", s)
		}
	}
	// Each key is new.
	nk2, err := k.CreateKey(ctx, team.ID, "laptop", admin.KeyID)
	if err != nil || nk2.Key == nk.Key || nk2.ID == nk.ID {
		t.Errorf("second key with the same name: %+v, %v", nk2, err)
	}

	_, err = k.CreateKey(ctx, team.ID, " ", "")
	wantKind(t, err, cube.Invalid, "CreateKey without a name")
	_, err = k.CreateKey(ctx, team.ID, strings.Repeat("n", 129), "")
	wantKind(t, err, cube.Invalid, "CreateKey with a 129-byte name")
	_, err = k.CreateKey(ctx, "no-such-team", "x", "")
	wantKind(t, err, cube.NotFound, "CreateKey for a team that does not exist")
}

func testListKeysMasks(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, serverKey := started(t, st)
	var made []cube.NewAPIKey
	for _, name := range []string{"a", "b", "c"} {
		nk, err := k.CreateKey(ctx, cube.FirstTeam, name, "")
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, nk)
	}
	keys, err := k.ListKeys(ctx, cube.FirstTeam)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 || !keys[0].Admin {
		t.Fatalf("keys = %+v, want the admin key first and the three made", keys)
	}
	full := map[string]string{keys[0].ID: serverKey}
	for _, nk := range made {
		full[nk.ID] = nk.Key
	}
	for i, l := range keys {
		if i > 0 && (l.Name != made[i-1].Name || l.CreatedAt.Before(keys[i-1].CreatedAt)) {
			t.Errorf("key %d is %q made %v: want oldest first", i, l.Name, l.CreatedAt)
		}
		key := full[l.ID]
		m := l.Mask
		rest := strings.TrimPrefix(key, "e2b_")
		if m.Prefix != "e2b_" || m.ValueLength != 40 || m.ValueLength != len(rest) ||
			m.MaskedPrefix == "" || m.MaskedSuffix == "" ||
			!strings.HasPrefix(rest, m.MaskedPrefix) || !strings.HasSuffix(rest, m.MaskedSuffix) ||
			len(m.MaskedPrefix)+len(m.MaskedSuffix) > len(rest)/4 {
			t.Errorf("key %s is masked as %+v", key, m)
		}
	}
	// A server key of another shape is masked by the same rule.
	other := "my-own-admin-secret"
	if err := New(st).Bootstrap(ctx, other); err != nil {
		t.Fatal(err)
	}
	keys, err = k.ListKeys(ctx, cube.FirstTeam)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range keys {
		if l.Admin {
			if m := l.Mask; m.Prefix != "" || m.ValueLength != len(other) || !strings.HasPrefix(other, m.MaskedPrefix) ||
				!strings.HasSuffix(other, m.MaskedSuffix) || m.MaskedPrefix == "" || strings.Contains(fmt.Sprint(m), "secret") {
				t.Errorf("key %q is masked as %+v", other, m)
			}
		}
	}
}

func testRenameKey(t *testing.T, b backend) {
	st, another := b.open(t)
	k, _ := started(t, st)
	nk, err := k.CreateKey(ctx, cube.FirstTeam, "old name", "")
	if err != nil {
		t.Fatal(err)
	}
	other := New(another())
	authOK(t, k, nk.Key)
	authOK(t, other, nk.Key)
	if err := k.RenameKey(ctx, cube.FirstTeam, nk.ID, "new name"); err != nil {
		t.Fatal(err)
	}
	keys, err := k.ListKeys(ctx, cube.FirstTeam)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range keys {
		if l.ID == nk.ID && (l.Name != "new name" || l.Mask != nk.Mask || !l.CreatedAt.Equal(nk.CreatedAt)) {
			t.Errorf("after rename: %+v, was %+v", l, nk.APIKey)
		}
	}
	if c := authOK(t, k, nk.Key); c.KeyName != "new name" || c.KeyID != nk.ID {
		t.Errorf("renamed key authenticates on its node as %+v", c)
	}
	time.Sleep(CacheFor)
	if c := authOK(t, other, nk.Key); c.KeyName != "new name" {
		t.Errorf("renamed key authenticates on another node, CacheFor later, as %+v", c)
	}
	wantKind(t, k.RenameKey(ctx, cube.FirstTeam, nk.ID, ""), cube.Invalid, "renaming to the empty name")
	wantKind(t, k.RenameKey(ctx, cube.FirstTeam, "no-such-key", "x"), cube.NotFound, "renaming a key that does not exist")
}

func testDeleteKey(t *testing.T, b backend) {
	st, another := b.open(t)
	k, serverKey := started(t, st)
	nk, err := k.CreateKey(ctx, cube.FirstTeam, "doomed", "")
	if err != nil {
		t.Fatal(err)
	}
	kept, err := k.CreateKey(ctx, cube.FirstTeam, "kept", "")
	if err != nil {
		t.Fatal(err)
	}
	other := New(another())
	// Both nodes have checked (and cached) the key.
	authOK(t, k, nk.Key)
	authOK(t, other, nk.Key)
	if err := k.DeleteKey(ctx, cube.FirstTeam, nk.ID); err != nil {
		t.Fatal(err)
	}
	authRefused(t, k, nk.Key, "the deleted key on the node that deleted it")
	authRefused(t, New(another()), nk.Key, "the deleted key on a node that never saw it")
	time.Sleep(CacheFor)
	authRefused(t, other, nk.Key, "the deleted key on another node CacheFor later")
	for _, k := range []*Keys{k, other} {
		authOK(t, k, kept.Key)
		authOK(t, k, serverKey)
	}
	keys, err := k.ListKeys(ctx, cube.FirstTeam)
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys after delete: %+v, %v", keys, err)
	}
	for _, l := range keys {
		if l.ID == nk.ID {
			t.Errorf("deleted key still listed: %+v", l)
		}
	}
	wantKind(t, k.DeleteKey(ctx, cube.FirstTeam, nk.ID), cube.NotFound, "deleting a deleted key")
}

func testKeysOfAnotherTeam(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, _ := started(t, st)
	a, err := k.CreateTeam(ctx, "a", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	bt, err := k.CreateTeam(ctx, "b", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	ka, err := k.CreateKey(ctx, a.ID, "a's key", "")
	if err != nil {
		t.Fatal(err)
	}
	kb, err := k.CreateKey(ctx, bt.ID, "b's key", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := authOK(t, k, ka.Key); c.Team != a.ID || c.Admin {
		t.Fatalf("a's key authenticates as %+v", c)
	}
	for team, want := range map[string]string{a.ID: ka.ID, bt.ID: kb.ID} {
		keys, err := k.ListKeys(ctx, team)
		if err != nil || len(keys) != 1 || keys[0].ID != want {
			t.Errorf("keys of team %s: %+v, %v; want its own key alone", team, keys, err)
		}
	}
	// Through b (or the first team), a's key does not exist.
	for _, through := range []string{bt.ID, cube.FirstTeam} {
		wantKind(t, k.RenameKey(ctx, through, ka.ID, "stolen"), cube.NotFound, "renaming a's key through "+through)
		wantKind(t, k.DeleteKey(ctx, through, ka.ID), cube.NotFound, "deleting a's key through "+through)
	}
	keys, err := k.ListKeys(ctx, a.ID)
	if err != nil || len(keys) != 1 || keys[0].Name != "a's key" {
		t.Errorf("a's keys after b's attempts: %+v, %v", keys, err)
	}
	if c := authOK(t, k, ka.Key); c.Team != a.ID || c.KeyName != "a's key" {
		t.Errorf("a's key after b's attempts: %+v", c)
	}
	_, err = k.ListKeys(ctx, "no-such-team")
	wantKind(t, err, cube.NotFound, "listing the keys of a team that does not exist")
}

func testLastAdminKey(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, serverKey := started(t, st)
	admin := authOK(t, k, serverKey)
	err := k.DeleteKey(ctx, cube.FirstTeam, admin.KeyID)
	wantKind(t, err, cube.Conflict, "deleting the last admin key")
	if c := authOK(t, k, serverKey); !c.Admin {
		t.Fatalf("after the refused delete the key is %+v", c)
	}
	time.Sleep(CacheFor)
	authOK(t, New(st), serverKey)
	// A member key of the first team is no admin key, and goes.
	nk, err := k.CreateKey(ctx, cube.FirstTeam, "member", admin.KeyID)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.DeleteKey(ctx, cube.FirstTeam, nk.ID); err != nil {
		t.Fatalf("deleting a member key of the first team: %v", err)
	}
}

// lastUsed polls for a key's last-used time, which is written after the
// request, for up to a second.
func lastUsed(t *testing.T, k *Keys, team, keyID string, wait bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		keys, err := k.ListKeys(ctx, team)
		if err != nil {
			t.Fatal(err)
		}
		var at time.Time
		for _, l := range keys {
			if l.ID == keyID {
				at = l.LastUsed
			}
		}
		if !wait || !at.IsZero() || time.Now().After(deadline) {
			return at
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func testLastUsed(t *testing.T, b backend) {
	st, another := b.open(t)
	k, serverKey := started(t, st)
	nk, err := k.CreateKey(ctx, cube.FirstTeam, "used", "")
	if err != nil {
		t.Fatal(err)
	}
	unused, err := k.CreateKey(ctx, cube.FirstTeam, "unused", "")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	authOK(t, k, nk.Key)
	after := time.Now()
	at := lastUsed(t, k, cube.FirstTeam, nk.ID, true)
	if at.IsZero() {
		t.Fatal("a used key's LastUsed is not set a second later")
	}
	if at.Before(before) || at.After(after) {
		t.Errorf("LastUsed %v, want between %v and %v", at, before, after)
	}
	if got := lastUsed(t, New(another()), cube.FirstTeam, nk.ID, false); !got.Equal(at) {
		t.Errorf("another node lists LastUsed %v, want %v", got, at)
	}
	if got := lastUsed(t, k, cube.FirstTeam, unused.ID, false); !got.IsZero() {
		t.Errorf("an unused key has LastUsed %v", got)
	}
	// It is not rewritten by each request (once a minute at most).
	time.Sleep(CacheFor)
	authOK(t, k, nk.Key)
	authOK(t, New(another()), nk.Key)
	time.Sleep(200 * time.Millisecond)
	if got := lastUsed(t, k, cube.FirstTeam, nk.ID, false); !got.Equal(at) {
		t.Errorf("LastUsed rewritten within the minute: %v, was %v", got, at)
	}
	// The server key's use is recorded too.
	admin := authOK(t, k, serverKey)
	if lastUsed(t, k, cube.FirstTeam, admin.KeyID, true).IsZero() {
		t.Error("the server key's LastUsed is not set")
	}
}

func testCreateTeam(t *testing.T, b backend) {
	st, another := b.open(t)
	k, _ := started(t, st)
	q := cube.Quotas{RunningSandboxes: 3, VCPUs: 8, MaxTimeout: time.Hour}
	team, err := k.CreateTeam(ctx, "acme", q)
	if err != nil {
		t.Fatal(err)
	}
	if team.ID == "" || team.ID == cube.FirstTeam || team.Name != "acme" || team.Quotas != q || team.CreatedAt.IsZero() {
		t.Fatalf("new team %+v", team)
	}
	got, err := New(another()).GetTeam(ctx, team.ID)
	if err != nil || !reflect.DeepEqual(got, team) {
		t.Fatalf("another node reads the team as %+v, %v; want %+v", got, err, team)
	}
	all, err := k.ListTeams(ctx)
	if err != nil || len(all) != 2 || all[0].ID != cube.FirstTeam || all[1].ID != team.ID {
		t.Fatalf("teams = %+v, %v; want the first team, then acme", all, err)
	}
	first := all[0]
	_, err = k.CreateTeam(ctx, "acme", cube.Quotas{})
	wantKind(t, err, cube.Conflict, "creating a second team named acme")
	_, err = k.CreateTeam(ctx, first.Name, cube.Quotas{})
	wantKind(t, err, cube.Conflict, "creating a team named as the first team")
	for _, name := range []string{"", "  ", "\t\n"} {
		_, err = k.CreateTeam(ctx, name, cube.Quotas{})
		wantKind(t, err, cube.Invalid, fmt.Sprintf("creating a team named %q", name))
	}
	_, err = k.CreateTeam(ctx, strings.Repeat("x", 129), cube.Quotas{})
	wantKind(t, err, cube.Invalid, "creating a team with a 129-byte name")
	if all, _ := k.ListTeams(ctx); len(all) != 2 {
		t.Errorf("refused creates made teams: %+v", all)
	}
	_, err = k.GetTeam(ctx, "no-such-team")
	wantKind(t, err, cube.NotFound, "getting a team that does not exist")
	_, err = k.SetQuotas(ctx, "no-such-team", cube.Quotas{})
	wantKind(t, err, cube.NotFound, "setting the quotas of a team that does not exist")
	wantKind(t, k.DeleteTeam(ctx, "no-such-team"), cube.NotFound, "deleting a team that does not exist")
}

// everyQuota returns quotas with every field set, each to a value of its
// own, failing when a field is of a type this test cannot set.
func everyQuota(t *testing.T) cube.Quotas {
	t.Helper()
	var q cube.Quotas
	v := reflect.ValueOf(&q).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(1000*(i+1)) + 7)
		case reflect.Float64:
			f.SetFloat(float64(i) + 2.5)
		default:
			t.Fatalf("quota %s is a %s: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	return q
}

// negativeQuotas returns, by field name, quotas with that field alone
// negative.
func negativeQuotas() map[string]cube.Quotas {
	out := map[string]cube.Quotas{}
	typ := reflect.TypeFor[cube.Quotas]()
	for i := range typ.NumField() {
		var q cube.Quotas
		f := reflect.ValueOf(&q).Elem().Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(-1)
		case reflect.Float64:
			f.SetFloat(-0.5)
		}
		out[typ.Field(i).Name] = q
	}
	return out
}

func testSetQuotas(t *testing.T, b backend) {
	st, another := b.open(t)
	k, _ := started(t, st)
	team, err := k.CreateTeam(ctx, "acme", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	q := everyQuota(t)
	got, err := k.SetQuotas(ctx, team.ID, q)
	if err != nil || got.Quotas != q || got.ID != team.ID || got.Name != team.Name {
		t.Fatalf("SetQuotas = %+v, %v; want quotas %+v", got, err, q)
	}
	check := func(what string, want cube.Quotas) {
		t.Helper()
		for _, k := range []*Keys{k, New(another())} {
			got, err := k.GetTeam(ctx, team.ID)
			if err != nil || got.Quotas != want {
				t.Fatalf("%s: GetTeam reads quotas %+v, %v; want %+v", what, got.Quotas, err, want)
			}
			all, err := k.ListTeams(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, tm := range all {
				if tm.ID == team.ID && tm.Quotas != want {
					t.Fatalf("%s: ListTeams reads quotas %+v; want %+v", what, tm.Quotas, want)
				}
				if tm.ID == cube.FirstTeam && tm.Quotas != (cube.Quotas{}) {
					t.Fatalf("%s: the first team's quotas changed to %+v", what, tm.Quotas)
				}
			}
		}
	}
	check("after SetQuotas", q)
	for field, neg := range negativeQuotas() {
		_, err := k.SetQuotas(ctx, team.ID, neg)
		wantKind(t, err, cube.Invalid, "SetQuotas with a negative "+field)
	}
	check("after refused negative quotas", q)
	// Quotas replace the others: zero is no limit.
	one := cube.Quotas{VCPUs: 4}
	if got, err := k.SetQuotas(ctx, team.ID, one); err != nil || got.Quotas != one {
		t.Fatalf("SetQuotas(%+v) = %+v, %v", one, got, err)
	}
	check("after setting one quota", one)
	if _, err := k.SetQuotas(ctx, team.ID, cube.Quotas{}); err != nil {
		t.Fatal(err)
	}
	check("after clearing the quotas", cube.Quotas{})
	// Quotas given at creation round-trip as well.
	made, err := k.CreateTeam(ctx, "with quotas", q)
	if err != nil || made.Quotas != q {
		t.Fatalf("CreateTeam with quotas: %+v, %v", made, err)
	}
	if got, err := New(another()).GetTeam(ctx, made.ID); err != nil || got.Quotas != q {
		t.Fatalf("team created with quotas reads %+v, %v", got.Quotas, err)
	}
}

// CreateTeam refuses what SetQuotas refuses: POST /teams passes its body's
// quotas to it unchecked.
func testCreateTeamNegativeQuotas(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, _ := started(t, st)
	for field, neg := range negativeQuotas() {
		team, err := k.CreateTeam(ctx, "neg "+field, neg)
		if err == nil {
			t.Errorf("CreateTeam with a negative %s made team %+v", field, team)
			continue
		}
		wantKind(t, err, cube.Invalid, "CreateTeam with a negative "+field)
	}
}

func testDeleteTeam(t *testing.T, b backend) {
	st, another := b.open(t)
	k, serverKey := started(t, st)
	wantKind(t, k.DeleteTeam(ctx, cube.FirstTeam), cube.Forbidden, "deleting the first team")
	authOK(t, k, serverKey)
	onlyAdmin(t, k)

	team, err := k.CreateTeam(ctx, "acme", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	nk, err := k.CreateKey(ctx, team.ID, "ci", "")
	if err != nil {
		t.Fatal(err)
	}
	nk2, err := k.CreateKey(ctx, team.ID, "laptop", "")
	if err != nil {
		t.Fatal(err)
	}
	// What the team owns holds it: each kind is named.
	owned := []struct {
		put, del func() error
		word     string
	}{
		{func() error {
			return st.Sandboxes().Put(ctx, &store.Sandbox{ID: "sb", Team: team.ID, State: store.Running})
		},
			func() error { return st.Sandboxes().Delete(ctx, "sb") }, "sandbox"},
		{func() error {
			return st.Templates().Put(ctx, &store.Template{ID: "snap-1", Team: team.ID, Status: store.TemplateReady})
		}, func() error { return st.Templates().Delete(ctx, "snap-1") }, "snapshot"},
		{func() error {
			return st.Volumes().Put(ctx, &store.Volume{ID: "v", Team: team.ID, State: store.VolumeReady})
		},
			func() error { return st.Volumes().Delete(ctx, "v") }, "volume"},
	}
	// Another team's records do not hold it.
	if err := st.Sandboxes().Put(ctx, &store.Sandbox{ID: "first's", Team: cube.FirstTeam, State: store.Running}); err != nil {
		t.Fatal(err)
	}
	for _, o := range owned {
		if err := o.put(); err != nil {
			t.Fatal(err)
		}
		err := k.DeleteTeam(ctx, team.ID)
		wantKind(t, err, cube.Conflict, "deleting a team that owns a "+o.word)
		if msg := err.Error(); !strings.Contains(msg, "1 ") || !strings.Contains(msg, o.word) {
			t.Errorf("the refusal %q does not name the %s it owns", err, o.word)
		}
		if got, err := k.GetTeam(ctx, team.ID); err != nil || got.ID != team.ID {
			t.Fatalf("after a refused delete: %+v, %v", got, err)
		}
		authOK(t, k, nk.Key)
		if err := o.del(); err != nil {
			t.Fatal(err)
		}
	}
	other := New(another())
	authOK(t, other, nk.Key)
	if err := k.DeleteTeam(ctx, team.ID); err != nil {
		t.Fatalf("deleting a team that owns nothing: %v", err)
	}
	_, err = k.GetTeam(ctx, team.ID)
	wantKind(t, err, cube.NotFound, "getting a deleted team")
	_, err = k.ListKeys(ctx, team.ID)
	wantKind(t, err, cube.NotFound, "listing a deleted team's keys")
	_, err = k.CreateKey(ctx, team.ID, "late", "")
	wantKind(t, err, cube.NotFound, "making a key for a deleted team")
	authRefused(t, k, nk.Key, "a deleted team's key on the node that deleted it")
	authRefused(t, k, nk2.Key, "a deleted team's other key")
	time.Sleep(CacheFor)
	authRefused(t, other, nk.Key, "a deleted team's key on another node CacheFor later")
	recs, err := st.APIKeys().List(ctx)
	if err != nil || len(recs) != 1 {
		t.Errorf("key records after the team went: %d, %v; want the admin key's alone", len(recs), err)
	}
	onlyAdmin(t, k)
	authOK(t, k, serverKey)
	// Its name is free again.
	if _, err := k.CreateTeam(ctx, "acme", cube.Quotas{}); err != nil {
		t.Errorf("creating a team named as the deleted one: %v", err)
	}
}

// Teams of one name made at once, on one node or several: one is made,
// the others are refused (Conflict).
func testCreateTeamAtOnce(t *testing.T, b backend) {
	st, another := b.open(t)
	k, _ := started(t, st)
	nodes := []*Keys{k, New(another()), New(another()), New(another())}
	const each = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, len(nodes)*each)
	for _, n := range nodes {
		for range each {
			wg.Go(func() {
				<-start
				_, err := n.CreateTeam(ctx, "same", cube.Quotas{})
				errs <- err
			})
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	made := 0
	for err := range errs {
		if err == nil {
			made++
		} else if cube.KindOf(err) != cube.Conflict {
			t.Errorf("a refused create: %v (kind %v), want Conflict", err, cube.KindOf(err))
		}
	}
	all, err := k.ListTeams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	named := 0
	for _, tm := range all {
		if tm.Name == "same" {
			named++
		}
	}
	if made != 1 || named != 1 {
		t.Fatalf("%d creates of one name at once: %d succeeded, %d teams of that name; want one", len(nodes)*each, made, named)
	}
}

// Keys being made for a team (by its own keys, or an admin) while it is
// deleted: once both are done, none of them works, on any node.
func testKeysMadeWhileTeamDeleted(t *testing.T, b backend) {
	st, another := b.open(t)
	k, _ := started(t, st)
	team, err := k.CreateTeam(ctx, "doomed", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var made []string
	var wg sync.WaitGroup
	going := make(chan struct{})
	var once sync.Once
	for range 6 {
		node := New(another())
		wg.Go(func() {
			for n := 0; ; n++ {
				nk, err := node.CreateKey(ctx, team.ID, "made during the delete", "")
				if err != nil {
					if cube.KindOf(err) != cube.NotFound {
						t.Errorf("CreateKey while the team is deleted: %v", err)
					}
					once.Do(func() { close(going) })
					return
				}
				mu.Lock()
				made = append(made, nk.Key)
				mu.Unlock()
				if n == 3 {
					once.Do(func() { close(going) })
				}
			}
		})
	}
	<-going
	if err := k.DeleteTeam(ctx, team.ID); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	time.Sleep(CacheFor)
	working := 0
	checker := New(another())
	for _, key := range made {
		if _, err := checker.Authenticate(ctx, key); err == nil {
			working++
		}
	}
	if working > 0 {
		t.Fatalf("%d of the %d keys made while their team was deleted still authenticate", working, len(made))
	}
}

// junk is what a request may present as a key that cannot be one.
var junk = []string{
	"", " ", "\t\r\n",
	strings.Repeat("a", 300),
	strings.Repeat("a", MaxKeyLen+1),
	"e2b_" + strings.Repeat("0", MaxKeyLen),
	"e2b_\x00deadbeef", "e2b_dead\x7fbeef", "\x1b[31me2b_abc", "e2b_ab\ncd",
	"e2b_ab cd", "Bearer e2b_abcd",
	"e2b_ключ", "🔑🔑🔑", "e2b_\u00a0abc", "e2b_abc\xff", "\xc3\x28",
}

func testJunkKeys(t *testing.T, b backend) {
	st, _ := b.open(t)
	k, serverKey := started(t, st)
	for _, j := range junk {
		authRefused(t, k, j, "junk")
	}
	// None of them needs the store: with it closed they are refused the
	// same way, not as a failure of the store.
	st.Close()
	for _, j := range junk {
		authRefused(t, k, j, "junk with the store closed")
		authRefused(t, New(st), j, "junk on a new Keys with the store closed")
	}
	// A key that can be one does need it, and its failure is not taken for
	// a refused key.
	_, err := New(st).Authenticate(ctx, serverKey)
	if err == nil || cube.KindOf(err) == cube.Forbidden {
		t.Errorf("a well-formed key with the store closed: %v (kind %v); want the store's failure", err, cube.KindOf(err))
	}
}

// TestKeysAreNotStored: the state database file holds no key, only its
// digest and masked ends, whatever is done with the keys.
func TestKeysAreNotStored(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	k, serverKey := started(t, st)
	team, err := k.CreateTeam(ctx, "acme", cube.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{serverKey}
	for i := range 3 {
		nk, err := k.CreateKey(ctx, team.ID, fmt.Sprint("key ", i), "")
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, nk.Key)
		authOK(t, k, nk.Key)
		if err := k.RenameKey(ctx, team.ID, nk.ID, "renamed"); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := k.DeleteKey(ctx, team.ID, nk.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	authOK(t, k, serverKey)
	lastUsed(t, k, cube.FirstTeam, BootstrapKeyID, true)
	// Another server key replaces the first (its record deleted).
	other := NewKey()
	if err := New(st).Bootstrap(ctx, other); err != nil {
		t.Fatal(err)
	}
	keys = append(keys, other)
	scanFiles(t, dir, keys)
	st.Close() // the WAL is written back into the database file
	scanFiles(t, dir, keys)
}

func scanFiles(t *testing.T, dir string, keys []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "state.db*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no database files in %s: %v", dir, err)
	}
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		for _, key := range keys {
			rest := strings.TrimPrefix(key, "e2b_")
			// The key, its value, and the part of it that no mask shows.
			for _, s := range []string{key, rest, rest[2 : len(rest)-4]} {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s holds %q of key %s", filepath.Base(f), s, key)
				}
			}
		}
	}
	// The files scanned are the ones written: they hold the digest.
	if !strings.Contains(all.String(), Digest(keys[len(keys)-1])) {
		t.Errorf("the files %v hold no digest of the server key", files)
	}
}
