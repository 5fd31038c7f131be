// Package testenv finds what tests that drive real sandboxes need: root,
// the binaries `make build` produced, and static builds of test workloads.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BinDir is where `make build` puts binaries (override with CUBE_BIN_DIR).
func BinDir() string {
	if d := os.Getenv("CUBE_BIN_DIR"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "bin")
}

// RequireRoot skips the test unless it runs as root. CI runs as root, so
// these tests always run there.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (CI runs this as root)")
	}
}

// Bin returns the path of a binary from `make build`, failing the test
// with what to do when it is missing.
func Bin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(BinDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found: run `make build` first (%v)", p, err)
	}
	return p
}

// BuildStatic compiles a Go package statically (CGO_ENABLED=0) into dir and
// returns the binary's path: sandboxes cannot load the host's libraries.
func BuildStatic(t testing.TB, pkg, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// Environ is the environment for a process a test starts: this process's
// environment without the caller's E2B_* and CUBE_* variables, plus extra
// ("NAME=value"). An E2B user's shell has E2B_API_KEY set, and a caller's
// CUBE_API_KEY or CUBE_API_URL would win over what a test hands over; a
// test must see only what it sets itself.
func Environ(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "E2B_") || strings.HasPrefix(kv, "CUBE_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}
