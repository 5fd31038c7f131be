package teams

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsureKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "api-key")
	k1, created, err := EnsureKeyFile(path)
	if err != nil || !created || !strings.HasPrefix(k1, "e2b_") || len(k1) != 44 {
		t.Fatalf("first call: %q %v %v", k1, created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi.Mode(), err)
	}
	k2, created, err := EnsureKeyFile(path)
	if err != nil || created || k2 != k1 {
		t.Errorf("second call: %q %v %v, want %q", k2, created, err, k1)
	}
	if k, ok := ParseKey(k1 + "\n"); !ok || k != k1 {
		t.Error("a trailing newline is taken as part of the key")
	}
	empty := filepath.Join(t.TempDir(), "api-key")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, _, err := EnsureKeyFile(empty); err == nil {
		t.Error("empty key file accepted")
	}
}
