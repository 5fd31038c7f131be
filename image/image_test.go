// Package image holds the default template's own files (rootfs/); its test
// runs their Python unit tests (tests/), so `go test ./...` covers them.
package image

import (
	"os"
	"os/exec"
	"testing"
)

// python is Debian's interpreter, which has the image's packages
// (python3-ipykernel, python3-matplotlib, python3-pandas; `make deps`),
// rather than whichever python3 comes first on PATH.
func python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

func TestPythonUnitTests(t *testing.T) {
	cmd := exec.Command(python(), "-m", "unittest", "discover", "-s", "image/tests")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover -s image/tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
