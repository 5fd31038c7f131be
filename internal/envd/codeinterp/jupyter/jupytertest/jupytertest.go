// Package jupytertest provides a python3 kernelspec for tests that need a
// real kernel.
package jupytertest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Python is the interpreter the tests run kernels with: Debian's, which is
// where python3-ipykernel is installed (a pyenv python3 on PATH may lack it).
const Python = "/usr/bin/python3"

// SpecDir returns a directory holding a python3 kernelspec that runs
// Python's ipykernel. It fails the test, rather than skipping it, when
// ipykernel is missing: CI installs it and a silent skip would hide that.
func SpecDir(t testing.TB) string {
	t.Helper()
	if out, err := exec.Command(Python, "-c", "import ipykernel, matplotlib, pandas").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import ipykernel, matplotlib and pandas (%v: %s); run `make deps` to install python3-ipykernel, python3-matplotlib and python3-pandas", Python, err, out)
	}
	dir := filepath.Join(t.TempDir(), "kernels")
	spec := map[string]any{
		"argv":         []string{Python, "-m", "ipykernel_launcher", "-f", "{connection_file}"},
		"display_name": "Python 3 (ipykernel)",
		"language":     "python",
	}
	data, _ := json.Marshal(spec)
	if err := os.MkdirAll(filepath.Join(dir, "python3"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "python3", "kernel.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
