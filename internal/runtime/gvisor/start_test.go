package gvisor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/runtime"
	"cube/internal/testenv"
)

// hangingRunsc is a runsc whose starts never finish: `run` and `create`
// hang, and so does a restore once it has read its image's name (a
// restore started ahead, `--await-image`, reads it from stdin). Every
// command line goes to the file log.
const hangingRunsc = `#!/bin/sh
echo "$*" >> "$(dirname "$0")/log"
case " $* " in
*" --await-image "*) read image; exec sleep 60 ;;
*" run "*|*" create "*|*" restore "*) exec sleep 60 ;;
esac
exit 0
`

// startFixture is a Runtime on hangingRunsc whose starts are bounded by
// one second.
func startFixture(t *testing.T) (*Runtime, string) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "runsc")
	if err := os.WriteFile(script, []byte(hangingRunsc), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{cfg: Config{Runsc: script, Root: filepath.Join(dir, "root"), Bundles: filepath.Join(dir, "bundles"),
		Keeper: testenv.Bin(t, "cube-console"), PrivateMemory: true, StartTimeout: time.Second}}
	return rt, dir
}

// checkKilledAndRemoved checks that a start cut short said so, did not
// take much longer than its bound, and removed its container and bundle.
func checkKilledAndRemoved(t *testing.T, rt *Runtime, dir, id string, err error, took time.Duration) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "did not start within 1s") {
		t.Fatalf("err = %v, want the start's bound named", err)
	}
	if took > 20*time.Second {
		t.Fatalf("the start took %v with a bound of 1s", took)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	if !strings.Contains(string(log), "delete --force "+id) {
		t.Fatalf("the container was not deleted; runsc ran:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(rt.cfg.Bundles, id)); !os.IsNotExist(err) {
		t.Fatalf("bundle left: %v", err)
	}
	if left := cgroupDirs(cgroupRoot, id); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
}

// withCgroup makes a cgroup of container id where runsc would (the v1
// memory hierarchy, else the unified one), as a start cut short leaves
// it behind with no state that would let runsc remove it.
func withCgroup(t *testing.T, id string) {
	t.Helper()
	parent := filepath.Join(cgroupRoot, "memory")
	if _, err := os.Stat(parent); err != nil {
		parent = cgroupRoot
	}
	dir := filepath.Join(parent, "cube", id)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
}

// A sandbox that does not start within StartTimeout fails its boot and is
// removed, instead of holding the request (and the server's shutdown)
// for good.
func TestBootThatHangsIsKilled(t *testing.T) {
	rt, dir := startFixture(t)
	withCgroup(t, "cthangboot")
	start := time.Now()
	_, err := rt.Boot(context.Background(), runtime.Spec{ID: "cthangboot", Rootfs: dir})
	checkKilledAndRemoved(t, rt, dir, "cthangboot", err, time.Since(start))
}

// The same holds for a container being prepared, and for the restore
// into a prepared container that a rollback or a create from a snapshot
// waits for.
func TestPrepareAndRestoreThatHangAreKilled(t *testing.T) {
	rt, dir := startFixture(t)
	image := filepath.Join(dir, "image")
	os.MkdirAll(image, 0o755)
	for _, f := range []string{specFile, "checkpoint.img"} {
		if err := os.WriteFile(filepath.Join(image, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec := runtime.Spec{ID: "cthangprep", Rootfs: dir}
	withCgroup(t, "cthangprep")
	start := time.Now()
	_, err := rt.Prepare(context.Background(), image, spec)
	checkKilledAndRemoved(t, rt, dir, "cthangprep", err, time.Since(start))

	// A create that finishes, then a restore into it that does not.
	script := rt.cfg.Runsc
	os.WriteFile(script, []byte(strings.Replace(hangingRunsc, `*" run "*|*" create "*|`, `*" run "*|`, 1)), 0o755)
	spec.ID = "cthangrestore"
	p, err := rt.Prepare(context.Background(), image, spec)
	if err != nil {
		t.Fatal(err)
	}
	withCgroup(t, "cthangrestore")
	start = time.Now()
	_, err = p.Restore(context.Background(), image)
	checkKilledAndRemoved(t, rt, dir, "cthangrestore", err, time.Since(start))
}
