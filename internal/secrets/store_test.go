package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/cube"
)

const plaintext = "sk-live-0123456789abcdef-PLAINTEXT"

// Two teams, as the API hands them to the store.
const (
	teamA = "11111111-1111-4111-8111-111111111111"
	teamB = "22222222-2222-4222-8222-222222222222"
)

func TestEncryptedAtRestAndReopened(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Create(teamA, "OpenAI-Key", plaintext, map[string]string{"team": "ml"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.ID, "sec_") || info.Name != "openai-key" || info.Version != 1 || info.Metadata["team"] != "ml" {
		t.Errorf("created %+v", info)
	}
	for _, f := range []string{KeyFile, DataFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	assertNoPlaintext(t, dir)

	// A restart finds the secret under its ID and name.
	s2, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{info.ID, "openai-key", "OPENAI-KEY"} {
		if v, err := s2.Value(teamA, ref); err != nil || v != plaintext {
			t.Errorf("Value(%q) = %q, %v", ref, v, err)
		}
	}
	up, err := s2.Update(teamA, "openai-key", "second", nil)
	if err != nil || up.Version != 2 || up.Metadata["team"] != "ml" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if v, _ := s2.Value(teamA, info.ID); v != "second" {
		t.Errorf("after update: %q", v)
	}

	// Another key cannot open the file.
	other := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	if _, err := Open(dir, other); err == nil || !strings.Contains(err.Error(), "does not open with this key") {
		t.Errorf("open with a wrong key: %v", err)
	}
}

func TestOperatorKey(t *testing.T) {
	dir := t.TempDir()
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32))
	s, err := Open(dir, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(teamA, "k", plaintext, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !os.IsNotExist(err) {
		t.Errorf("an operator key still wrote %s: %v", KeyFile, err)
	}
	t.Setenv(KeyEnv, key)
	if s2, err := Open(dir, ""); err != nil || !s2.Exists(teamA, "k") {
		t.Errorf("reopen with %s: %v", KeyEnv, err)
	}
	if _, err := Open(t.TempDir(), "short"); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short key: %v", err)
	}
	assertNoPlaintext(t, dir)
}

func TestSealedValueBoundToItsSecret(t *testing.T) {
	s, err := Open(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := s.Create(teamA, "a", "value-a", nil)
	b, _ := s.Create(teamA, "b", "value-b", nil)
	s.recs[b.ID].Sealed = s.recs[a.ID].Sealed
	if v, err := s.Value(teamA, "b"); err == nil {
		t.Errorf("a's sealed value opened as b's: %q", v)
	}
}

func TestValidation(t *testing.T) {
	s, err := Open(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	bigMeta := map[string]string{}
	for i := range MaxMetadata + 1 {
		bigMeta[strings.Repeat("k", i+1)] = "v"
	}
	for _, c := range []struct {
		name, value string
		md          map[string]string
		field       string
	}{
		{"", "v", nil, "name"},
		{"sec_abc", "v", nil, "name"},
		{"a{b}", "v", nil, "name"},
		{"ok", "", nil, "value"},
		{"ok", strings.Repeat("x", MaxValueLen+1), nil, "value"},
		{"ok", "a\r\nb", nil, "value"},
		{"ok", "v", bigMeta, "metadata"},
		{"ok", "v", map[string]string{"k": strings.Repeat("v", MaxMetaValueLen+1)}, "metadata"},
	} {
		_, err := s.Create(teamA, c.name, c.value, c.md)
		var ce *cube.Error
		if !asCube(err, &ce) || ce.Kind != cube.Invalid || ce.Field != c.field {
			t.Errorf("Create(%q, %d bytes): %v, want Invalid on %s", c.name, len(c.value), err, c.field)
		}
	}
	if _, err := s.Create(teamA, "dup", "v", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(teamA, "DUP", "v", nil); cube.KindOf(err) != cube.Conflict {
		t.Errorf("duplicate name: %v", err)
	}
	if _, err := s.Get(teamA, "nope"); cube.KindOf(err) != cube.NotFound {
		t.Errorf("unknown: %v", err)
	}
	if err := s.Delete(teamA, "dup"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(teamA, "dup") || len(s.List(teamA)) != 0 {
		t.Error("deleted secret still listed")
	}
}

// TestTeamsKeepTheirOwn: two teams may hold secrets of one name; each
// finds, lists, changes and resolves only its own, and another team's is
// not found, by name or ID, as one that does not exist.
func TestTeamsKeepTheirOwn(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.Create(teamA, "OPENAI_KEY", "value-of-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(teamB, "OPENAI_KEY", "value-of-b", map[string]string{"k": "b"})
	if err != nil {
		t.Fatalf("the second team's secret of the same name: %v", err)
	}
	if a.ID == b.ID || a.Team != teamA || b.Team != teamB || a.Name != b.Name {
		t.Fatalf("created %+v and %+v", a, b)
	}
	if _, err := s.Create(teamB, "openai_key", "again", nil); cube.KindOf(err) != cube.Conflict {
		t.Errorf("a duplicate within a team: %v, want Conflict", err)
	}

	for _, c := range []struct{ team, want string }{{teamA, "value-of-a"}, {teamB, "value-of-b"}} {
		if v, err := s.Value(c.team, "openai_key"); err != nil || v != c.want {
			t.Errorf("Value(%s, name) = %q, %v; want %q", c.team, v, err, c.want)
		}
	}
	// By ID, across teams: not there.
	if v, err := s.Value(teamB, a.ID); cube.KindOf(err) != cube.NotFound || v != "" {
		t.Errorf("team B resolved team A's secret by ID: %q, %v", v, err)
	}
	if _, err := s.Get(teamB, a.ID); cube.KindOf(err) != cube.NotFound {
		t.Errorf("Get of another team's ID: %v, want NotFound", err)
	}
	if s.Exists(teamB, a.ID) || !s.Exists(teamA, a.ID) || !s.Exists(teamB, "OPENAI_KEY") {
		t.Error("Exists does not keep to the team")
	}
	if _, err := s.Update(teamB, a.ID, "taken-over", nil); cube.KindOf(err) != cube.NotFound {
		t.Errorf("Update of another team's ID: %v, want NotFound", err)
	}
	if err := s.Delete(teamB, a.ID); cube.KindOf(err) != cube.NotFound {
		t.Errorf("Delete of another team's ID: %v, want NotFound", err)
	}
	if v, _ := s.Value(teamA, a.ID); v != "value-of-a" {
		t.Errorf("team A's value after team B's attempts: %q", v)
	}
	if la, lb := s.List(teamA), s.List(teamB); len(la) != 1 || la[0].ID != a.ID || len(lb) != 1 || lb[0].ID != b.ID {
		t.Errorf("lists: A %+v, B %+v", la, lb)
	}
	if l := s.List("33333333-3333-4333-8333-333333333333"); len(l) != 0 {
		t.Errorf("a team without secrets lists %+v", l)
	}
	// No team finds nothing, and makes nothing.
	if s.Exists("", "openai_key") || s.Exists("", a.ID) || len(s.List("")) != 0 {
		t.Error("the empty team finds secrets")
	}
	if _, err := s.Create("", "x", "v", nil); err == nil {
		t.Error("a secret without a team was made")
	}

	// Each team's secret keeps its team across a restart; deleting one
	// team's leaves the other's.
	s2, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Delete(teamA, "openai_key"); err != nil {
		t.Fatal(err)
	}
	if v, err := s2.Value(teamB, "openai_key"); err != nil || v != "value-of-b" {
		t.Errorf("team B's after team A's delete: %q, %v", v, err)
	}
	if got, err := s2.Get(teamB, b.ID); err != nil || got.Team != teamB || got.Metadata["k"] != "b" {
		t.Errorf("team B's after a restart: %+v, %v", got, err)
	}
	if s2.Exists(teamA, "openai_key") {
		t.Error("team A's deleted secret is still there")
	}
}

// TestRecordWithoutTeamIsFirstTeams: secrets written before Cube had
// teams load as the first team's, open as before, and are saved with it.
func TestRecordWithoutTeamIsFirstTeams(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.Create(teamA, "legacy", plaintext, map[string]string{"m": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// Rewrite the file as an install from before teams wrote it.
	path := filepath.Join(dir, DataFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	if err := json.Unmarshal(data, &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		delete(r, "team")
	}
	if data, err = json.Marshal(recs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(dir, "")
	if err != nil {
		t.Fatalf("a record without a team does not load: %v", err)
	}
	got, err := s2.Get(cube.FirstTeam, "legacy")
	if err != nil || got.ID != old.ID || got.Team != cube.FirstTeam || got.Metadata["m"] != "1" {
		t.Fatalf("the first team's view of the old secret: %+v, %v", got, err)
	}
	if v, err := s2.Value(cube.FirstTeam, old.ID); err != nil || v != plaintext {
		t.Errorf("its value: %q, %v", v, err)
	}
	if s2.Exists(teamA, "legacy") || s2.Exists(teamB, old.ID) {
		t.Error("another team finds the first team's secret")
	}
	if l := s2.List(cube.FirstTeam); len(l) != 1 || l[0].ID != old.ID {
		t.Errorf("the first team's list: %+v", l)
	}
	// The next save records the team.
	if _, err := s2.Create(teamB, "other", "v", nil); err != nil {
		t.Fatal(err)
	}
	s3, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s3.Get(cube.FirstTeam, "legacy"); err != nil || got.Team != cube.FirstTeam {
		t.Errorf("after a save and a restart: %+v, %v", got, err)
	}
	if data, _ := os.ReadFile(path); !bytes.Contains(data, []byte(`"team":"`+cube.FirstTeam+`"`)) {
		t.Errorf("the saved file does not record the first team: %s", data)
	}
	assertNoPlaintext(t, dir)
}

func asCube(err error, target **cube.Error) bool {
	ce, ok := err.(*cube.Error)
	if ok {
		*target = ce
	}
	return ok
}

// assertNoPlaintext reads every file under dir.
func assertNoPlaintext(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(plaintext)) {
			t.Errorf("%s holds the secret's value in plain text", p)
		}
		return nil
	})
}
