// Package image holds the default template's own files (rootfs/); its test
// runs their Python unit tests (tests/), so `go test ./...` covers them.
package image

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
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

// readAll reads every file under the given directories, so that go test's
// cache, which records the files a test opens, knows a change to them
// invalidates the result: the Python run itself is out of its sight.
func readAll(t *testing.T, dirs ...string) {
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestPythonUnitTests(t *testing.T) {
	readAll(t, "tests", "rootfs")
	cmd := exec.Command(python(), "-m", "unittest", "discover", "-s", "image/tests")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "PYDEVD_DISABLE_FILE_VALIDATION=1", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover -s image/tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
