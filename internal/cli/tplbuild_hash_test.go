package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// copyHashTree is the files hash the CLI names a known tree's COPY
// archive by. A build's cache of a COPY step is keyed by this hash, so
// if the archive's bytes change, every COPY layer built by an earlier
// release is built again: the archive is part of the CLI's contract.
const copyHashTree = "763fa14e8f4585a5c18def421b99b68c068897a4100d0cab93c45979533b952f"

// writeHashTree makes a tree holding every kind of entry a COPY source
// may: nested and empty directories, an executable, a hidden file, a
// symbolic link and a file with two names, with fixed owners, modes and
// times.
func writeHashTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub", "deeper"), 0o755))
	must(os.Mkdir(filepath.Join(root, "empty"), 0o700))
	// Chmod, not the umask, decides the modes.
	for _, d := range []string{"", "sub", "sub/deeper"} {
		must(os.Chmod(filepath.Join(root, d), 0o755))
	}
	files := map[string]struct {
		data string
		mode os.FileMode
	}{
		"app.py":           {"print(1)\n", 0o755},
		".hidden":          {"secret", 0o600},
		"sub/data":         {"x", 0o644},
		"sub/deeper/z.txt": {"zzz\n", 0o640},
		"sub/deeper/a.bin": {"\x00\x01\x02", 0o644},
	}
	for name, f := range files {
		p := filepath.Join(root, name)
		must(os.WriteFile(p, []byte(f.data), 0o600))
		must(os.Chmod(p, f.mode))
	}
	must(os.Link(filepath.Join(root, "sub", "data"), filepath.Join(root, "sub", "data-again")))
	must(os.Symlink("sub/data", filepath.Join(root, "link")))
	at := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
	// Deepest first, so that setting a name's times does not change its
	// directory's again.
	var paths []string
	must(filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		must(os.Lchown(paths[i], 1000, 1000))
		must(unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return dir
}

func TestTplBuildCopyHashIsStable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving the tree fixed owners needs root")
	}
	s := stepSetup(t)
	dir := writeHashTree(t)
	tf := map[string]any{
		"name": "app", "fromImage": "python:3.12",
		"steps": []map[string]any{{"type": "COPY", "args": []string{"src", "/app"}}},
	}
	data, _ := json.Marshal(tf)
	file := filepath.Join(t.TempDir(), "template.json")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := run(t, "tpl", "build", "--file", file, "--context", dir, "--no-wait"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := s.started[0].Steps[0].FilesHash; got != copyHashTree {
		t.Fatalf("the COPY archive of the known tree hashes to %s, want %s", got, copyHashTree)
	}
}
