package secrets

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/cube"
)

const plaintext = "sk-live-0123456789abcdef-PLAINTEXT"

func TestEncryptedAtRestAndReopened(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Create("OpenAI-Key", plaintext, map[string]string{"team": "ml"})
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
		if v, err := s2.Value(ref); err != nil || v != plaintext {
			t.Errorf("Value(%q) = %q, %v", ref, v, err)
		}
	}
	up, err := s2.Update("openai-key", "second", nil)
	if err != nil || up.Version != 2 || up.Metadata["team"] != "ml" {
		t.Fatalf("update: %+v %v", up, err)
	}
	if v, _ := s2.Value(info.ID); v != "second" {
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
	if _, err := s.Create("k", plaintext, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !os.IsNotExist(err) {
		t.Errorf("an operator key still wrote %s: %v", KeyFile, err)
	}
	t.Setenv(KeyEnv, key)
	if s2, err := Open(dir, ""); err != nil || !s2.Exists("k") {
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
	a, _ := s.Create("a", "value-a", nil)
	b, _ := s.Create("b", "value-b", nil)
	s.recs[b.ID].Sealed = s.recs[a.ID].Sealed
	if v, err := s.Value("b"); err == nil {
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
		_, err := s.Create(c.name, c.value, c.md)
		var ce *cube.Error
		if !asCube(err, &ce) || ce.Kind != cube.Invalid || ce.Field != c.field {
			t.Errorf("Create(%q, %d bytes): %v, want Invalid on %s", c.name, len(c.value), err, c.field)
		}
	}
	if _, err := s.Create("dup", "v", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create("DUP", "v", nil); cube.KindOf(err) != cube.Conflict {
		t.Errorf("duplicate name: %v", err)
	}
	if _, err := s.Get("nope"); cube.KindOf(err) != cube.NotFound {
		t.Errorf("unknown: %v", err)
	}
	if err := s.Delete("dup"); err != nil {
		t.Fatal(err)
	}
	if s.Exists("dup") || len(s.List()) != 0 {
		t.Error("deleted secret still listed")
	}
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
