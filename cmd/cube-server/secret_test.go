package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// parse defines s on a new flag set and parses args.
func parse(t *testing.T, s *secret, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("cube-server", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.define(fs, "a secret")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestSecretFile: --cluster-secret-file gives the secret without putting
// it on the command line, where ps shows it; the command-line form still
// works with a warning, and the environment is the fallback.
func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(file, []byte("0123456789abcdef0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CUBE_TEST_SECRET", "from-env-0123456789")
	var warned []string
	warn := func(msg string) { warned = append(warned, msg) }
	resolve := func(args ...string) (string, error) {
		warned = nil
		s := &secret{name: "cluster-secret", env: "CUBE_TEST_SECRET"}
		return s.resolve(parse(t, s, args...), warn)
	}

	if got, err := resolve("--cluster-secret-file", file); err != nil || got != "0123456789abcdef0123" || len(warned) != 0 {
		t.Errorf("from the file: %q %v, warnings %q", got, err, warned)
	}
	if got, err := resolve(); err != nil || got != "from-env-0123456789" || len(warned) != 0 {
		t.Errorf("from the environment: %q %v, warnings %q", got, err, warned)
	}
	if got, err := resolve("--cluster-secret", "on-the-command-line"); err != nil || got != "on-the-command-line" ||
		len(warned) != 1 || !strings.Contains(warned[0], "ps") || !strings.Contains(warned[0], "--cluster-secret-file") {
		t.Errorf("on the command line: %q %v, warnings %q", got, err, warned)
	}
	if _, err := resolve("--cluster-secret", "x", "--cluster-secret-file", file); err == nil {
		t.Error("both forms at once accepted")
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := resolve("--cluster-secret-file", empty); err == nil || !strings.Contains(err.Error(), empty) {
		t.Errorf("an empty file: %v", err)
	}
	if _, err := resolve("--cluster-secret-file", filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file accepted")
	}
	open := filepath.Join(dir, "open")
	os.WriteFile(open, []byte("0123456789abcdef0123"), 0o644)
	if got, err := resolve("--cluster-secret-file", open); err != nil || got != "0123456789abcdef0123" || len(warned) != 1 || !strings.Contains(warned[0], "0644") {
		t.Errorf("a file others can read: %q %v, warnings %q", got, err, warned)
	}
}
