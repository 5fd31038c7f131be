package server_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cube/internal/fault"
)

// kill ends the server with SIGKILL, as a crash anywhere would.
func (d *daemon) kill() {
	d.cmd.Process.Kill()
	d.cmd.Wait()
}

// onlySandboxes asserts that the server lists exactly the sandboxes ids
// and that no other sandbox has a directory left.
func (r *crashRig) onlySandboxes(t *testing.T, d *daemon, ids ...string) {
	t.Helper()
	listed := listSandboxes(t, d)
	slices.Sort(listed)
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(listed, want) {
		t.Errorf("sandboxes listed %v, want %v", listed, want)
	}
	for _, dir := range dirNames(filepath.Join(r.dataDir, "sandboxes")) {
		if !slices.Contains(ids, dir) {
			t.Errorf("directory of sandbox %s left", dir)
		}
	}
}

func listSandboxes(t *testing.T, d *daemon) []string {
	t.Helper()
	code, body := d.do(t, "GET", "/v2/sandboxes?state=running,paused", nil, nil)
	var list []struct{ SandboxID string }
	if code != 200 || json.Unmarshal(body, &list) != nil {
		t.Fatalf("list sandboxes: %d %s", code, body)
	}
	var ids []string
	for _, s := range list {
		ids = append(ids, s.SandboxID)
	}
	return ids
}

// crashCreate crashes a create before the sandbox runs. The create was
// never answered: after the restart no record, container, slot or
// directory of it is left, and a sandbox made before keeps its file and
// memory.
func crashCreate(t *testing.T, r *crashRig, point string) {
	// A server armed at a create point cannot make that sandbox: a plain
	// crash hands it to the armed one, which re-adopts it.
	d := r.start(t, "")
	s := newCrashSandbox(t, d)
	d.kill()
	d = r.start(t, point)
	if code, out, err := d.try("POST", "/sandboxes", map[string]any{"templateID": "tiny", "timeout": 600}); err == nil {
		t.Fatalf("create answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	r.onlySandboxes(t, d, s.ID)
	s.check(t, d, s.ID, s.Token)
	r.stopClean(t, d)
}

// crashRollback rolls a sandbox back to its snapshot and crashes. Until
// the record names the snapshot's container the sandbox is as it was,
// with what it wrote after the snapshot; from then on it is rolled back.
// Either way it runs with the snapshot's file and memory, its snapshot
// stays, and it rolls back again.
func crashRollback(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	s := newCrashSandbox(t, d)
	code, body := d.do(t, "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{}, nil)
	var snap struct{ SnapshotID string }
	if code != 201 || json.Unmarshal(body, &snap) != nil {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	if code, out := d.envd(t, s.ID, s.Token, "POST", "/files?path=/tmp/later", []byte("later")); code != 200 {
		t.Fatalf("upload: %d %s", code, out)
	}
	rollback := map[string]any{"snapshotID": snap.SnapshotID}
	if code, out, err := d.try("POST", "/sandboxes/"+s.ID+"/rollback", rollback); err == nil {
		t.Fatalf("rollback answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 200 || !bytes.Contains(out, []byte(`"state":"running"`)) {
		t.Fatalf("sandbox after a crashed rollback: %d %s", code, out)
	}
	s.check(t, d, s.ID, s.Token)
	code, later := d.envd(t, s.ID, s.Token, "GET", "/files?path=/tmp/later", nil)
	if rolledBack := point == fault.RollbackAfterRecord; rolledBack == (code == 200) || !rolledBack && later != "later" {
		t.Errorf("file written after the snapshot, rolled back %v: %d %q", rolledBack, code, later)
	}
	if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/rollback", rollback, nil); code != 200 {
		t.Fatalf("rollback after the crash: %d %s", code, out)
	}
	s.check(t, d, s.ID, s.Token)
	if code, later := d.envd(t, s.ID, s.Token, "GET", "/files?path=/tmp/later", nil); code == 200 {
		t.Errorf("file written after the snapshot, rolled back: %d %q", code, later)
	}
	r.onlySandboxes(t, d, s.ID)
	if code, out := d.do(t, "DELETE", "/templates/"+snap.SnapshotID, nil, nil); code != 204 {
		t.Errorf("delete the snapshot: %d %s", code, out)
	}
	r.stopClean(t, d)
}

// crashFork clones a sandbox into two and crashes. The parent runs on
// with its file and memory; a child is either absent or whole (recorded
// running, with the parent's file and memory), and the fork's image is
// gone.
func crashFork(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	s := newCrashSandbox(t, d)
	if code, out, err := d.try("POST", "/sandboxes/"+s.ID+"/clone", map[string]any{"count": 2, "concurrency": 2}); err == nil {
		t.Fatalf("clone answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	s.check(t, d, s.ID, s.Token)
	children := slices.DeleteFunc(listSandboxes(t, d), func(id string) bool { return id == s.ID })
	if want := map[bool]int{true: 2, false: 0}[point == fault.ForkAfterChildren]; len(children) != want {
		t.Errorf("after a crash at %s: children %v, want %d", point, children, want)
	}
	for _, id := range children {
		code, body := d.do(t, "GET", "/sandboxes/"+id, nil, nil)
		var c struct{ State, EnvdAccessToken string }
		if code != 200 || json.Unmarshal(body, &c) != nil || c.State != "running" {
			t.Fatalf("child %s: %d %s", id, code, body)
		}
		s.check(t, d, id, c.EnvdAccessToken)
	}
	r.onlySandboxes(t, d, append(children, s.ID)...)
	for _, name := range dirNames(filepath.Join(r.dataDir, "snapshots")) {
		if strings.HasPrefix(name, "fork-") {
			t.Errorf("fork image %s left", name)
		}
	}
	r.stopClean(t, d)
}

// crashVolume is a volume, as the API answers it, with a file in it.
type crashVolume struct{ VolumeID, Token, Name string }

func newCrashVolume(t *testing.T, d *daemon, name string) crashVolume {
	t.Helper()
	code, body := d.do(t, "POST", "/volumes", map[string]any{"name": name, "sizeMB": 16}, nil)
	var v crashVolume
	if code != 201 || json.Unmarshal(body, &v) != nil {
		t.Fatalf("create volume %s: %d %s", name, code, body)
	}
	if code, out := d.do(t, "PUT", "/volumecontent/"+v.VolumeID+"/file?path=/mark", []byte(name), v.auth()); code != 201 {
		t.Fatalf("write into volume %s: %d %s", name, code, out)
	}
	return v
}

// auth is the headers that reach the volume's content with its own token.
func (v crashVolume) auth() map[string]string {
	return map[string]string{"X-API-Key": "", "Authorization": "Bearer " + v.Token, "Content-Type": "application/octet-stream"}
}

// crashVolumeDelete deletes one of two volumes and crashes. The deleted
// one is gone after the restart, disk, loop device and mount included;
// the other is mounted once and keeps its file.
func crashVolumeDelete(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	step := strings.TrimPrefix(point, "volume.delete.after-")
	kept := newCrashVolume(t, d, "kept-"+step)
	doomed := newCrashVolume(t, d, "doomed-"+step)
	if code, out, err := d.try("DELETE", "/volumes/"+doomed.VolumeID, nil); err == nil {
		t.Fatalf("delete answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	volumes := filepath.Join(r.dataDir, "volumes")
	if code, out := d.do(t, "GET", "/volumes/"+doomed.VolumeID, nil, nil); code != 404 {
		t.Errorf("deleted volume after the crash: %d %s", code, out)
	}
	code, body := d.do(t, "GET", "/volumes", nil, nil)
	var listed []crashVolume
	if code != 200 || json.Unmarshal(body, &listed) != nil || len(listed) != 1 || listed[0].VolumeID != kept.VolumeID {
		t.Errorf("volumes listed after the crash: %d %s, want only %s", code, body, kept.VolumeID)
	}
	if got := dirNames(volumes); !slices.Equal(got, []string{kept.VolumeID}) {
		t.Errorf("volume directories %v, want only %s", got, kept.VolumeID)
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(volumes, doomed.VolumeID, "disk.img")).Output(); len(out) != 0 {
		t.Errorf("loop device of the deleted volume left: %s", out)
	}
	if got := mountsUnder(volumes); !slices.Equal(got, []string{filepath.Join(volumes, kept.VolumeID, "mnt")}) {
		t.Errorf("mounts under %s: %v, want only the kept volume's", volumes, got)
	}
	if code, out := d.do(t, "GET", "/volumecontent/"+kept.VolumeID+"/file?path=/mark", nil, kept.auth()); code != 200 || string(out) != kept.Name {
		t.Errorf("file of the kept volume: %d %q", code, out)
	}
	if code, out := d.do(t, "DELETE", "/volumes/"+kept.VolumeID, nil, nil); code != 204 {
		t.Fatalf("delete the kept volume: %d %s", code, out)
	}
	r.stopClean(t, d)
	if left := dirNames(volumes); len(left) != 0 {
		t.Errorf("left in %s: %v", volumes, left)
	}
}

// crashPauseStateHalfWritten crashes a write-out once the store says the
// sandbox is on disk, while its frozen container is being removed: runsc's
// state files of the containers are left half-written, as a runsc command
// cut short while it rewrote them leaves them (a power loss, or a runsc
// killed with the server). The next start keeps the sandbox
// paused on disk and ends those containers (none runs until the resume);
// the resume restores the sandbox's file and memory into a network of
// its own.
func crashPauseStateHalfWritten(t *testing.T, r *crashRig) {
	d := r.start(t, fault.PauseAfterRecord)
	s := newCrashSandbox(t, d)
	if code, body := d.do(t, "POST", "/sandboxes/"+s.ID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	d.waitKilled(t, time.Minute)
	root := filepath.Join(r.dataDir, "runsc")
	states, _ := filepath.Glob(filepath.Join(root, "*.state"))
	if len(states) == 0 {
		t.Fatalf("no runsc state files in %s", root)
	}
	for _, st := range states {
		if err := os.Truncate(st, 0); err != nil {
			t.Fatal(err)
		}
	}
	d = r.start(t, "")
	if left := runscProcesses(root); len(left) > 0 {
		t.Errorf("containers with half-written state still run after the restart: %v", left)
	}
	if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 200 || !bytes.Contains(out, []byte(`"state":"paused"`)) {
		t.Fatalf("acknowledged pause after the crash: %d %s", code, out)
	}
	if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}, nil); code != 201 {
		t.Fatalf("resume after the crash: %d %s", code, out)
	}
	s.check(t, d, s.ID, s.Token)
	r.stopClean(t, d)
}
