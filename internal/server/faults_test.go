package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"cube/internal/fault"
	"cube/internal/nodetest"
	"cube/internal/oci"
	"cube/internal/store"
	"cube/internal/testenv"
)

// crashRig is one data dir that servers are crashed on and restarted on,
// one fault point after another.
type crashRig struct {
	dataDir, prefix, cidr, addr string
	// image is an OCI archive to build templates from.
	image string
}

// start runs cube-server on the rig's data dir with point armed ("" for
// none) and no warm pool, so each start restores only what a test asks for.
func (r *crashRig) start(t *testing.T, point string) *daemon {
	t.Helper()
	var env []string
	if point != "" {
		env = append(env, fault.EnvVar+"="+point)
	}
	return runDaemon(t, r.dataDir, r.addr, []string{"--slot-prefix", r.prefix, "--host-cidr", r.cidr,
		"--slots", "16", "--pause-write-delay", "2s", "--pool-size", "0"}, env,
		fmt.Sprintf("cube-server (fault point %q)", point))
}

// waitKilled waits until the server has killed itself at its fault point.
func (d *daemon) waitKilled(t *testing.T, within time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(within):
		d.cmd.Process.Kill()
		<-done
		t.Fatalf("cube-server did not reach its fault point within %s", within)
	}
	ws, _ := d.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("cube-server ended with %v, want death by SIGKILL at its fault point", d.cmd.ProcessState)
	}
}

// try sends a request the server may die answering.
func (d *daemon) try(method, path string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(method, d.url+path, bytes.NewReader(b))
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := nodetest.NoKeepAlive.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, nil
}

// stopClean stops a server the way an operator would and checks the host
// holds nothing of it: no network objects, mounts or runsc processes, and
// no sandbox record (stop kills every sandbox the server lists, so one
// left is a record the server does not show).
func (r *crashRig) stopClean(t *testing.T, d *daemon) {
	t.Helper()
	d.stop(t)
	if st, err := store.Open(filepath.Join(r.dataDir, "state.db")); err != nil {
		t.Errorf("open the store: %v", err)
	} else {
		recs, _ := st.Sandboxes().List(context.Background())
		for _, rec := range recs {
			t.Errorf("sandbox record left: %s %s (container %q)", rec.ID, rec.State, rec.ContainerID)
		}
		st.Close()
	}
	if left := netObjects(t, r.prefix); len(left) > 0 {
		t.Errorf("network objects left: %v", left)
	}
	if left := mountsUnder(r.dataDir); len(left) > 0 {
		t.Errorf("mounts left: %v", left)
	}
	if left := runscProcesses(filepath.Join(r.dataDir, "runsc")); len(left) > 0 {
		t.Errorf("runsc processes left: %v", left)
	}
}

// crashSandbox is a sandbox with a file on its disk and a token in its
// memory (the holder program's), which must both survive.
type crashSandbox struct{ ID, Token, Memory string }

func newCrashSandbox(t *testing.T, d *daemon) crashSandbox {
	t.Helper()
	code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": "tiny", "timeout": 600}, nil)
	if code != 201 {
		t.Fatalf("create: %d %s", code, body)
	}
	var s struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal(body, &s)
	if code, out := d.envd(t, s.SandboxID, s.EnvdAccessToken, "POST", "/files?path=/tmp/mark", []byte(s.SandboxID)); code != 200 {
		t.Fatalf("upload: %d %s", code, out)
	}
	return crashSandbox{ID: s.SandboxID, Token: s.EnvdAccessToken, Memory: holderToken(t, d, s.SandboxID)}
}

func holderToken(t *testing.T, d *daemon, sandboxID string) string {
	t.Helper()
	code, out := d.do(t, "GET", "/", nil, map[string]string{"E2b-Sandbox-Id": sandboxID, "E2b-Sandbox-Port": "8080"})
	if code != 200 || len(out) != 32 {
		t.Fatalf("holder token of %s: %d %q", sandboxID, code, out)
	}
	return string(out)
}

// check asserts that sandbox id (token envdToken) has src's file and memory.
func (src crashSandbox) check(t *testing.T, d *daemon, id, envdToken string) {
	t.Helper()
	if code, out := d.envd(t, id, envdToken, "GET", "/files?path=/tmp/mark", nil); code != 200 || out != src.ID {
		t.Errorf("file written before the crash, in %s: %d %q, want %q", id, code, out, src.ID)
	}
	if got := holderToken(t, d, id); got != src.Memory {
		t.Errorf("memory of %s: token %q, want %q", id, got, src.Memory)
	}
}

// crashPause pauses a sandbox; the write-out to disk 2 s later crashes.
// The pause was acknowledged, so the sandbox must resume with its memory.
func crashPause(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	s := newCrashSandbox(t, d)
	if code, body := d.do(t, "POST", "/sandboxes/"+s.ID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 200 || !bytes.Contains(out, []byte(`"state":"paused"`)) {
		t.Fatalf("acknowledged pause after the crash: %d %s", code, out)
	}
	if code, out := d.do(t, "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}, nil); code != 201 {
		t.Fatalf("resume after the crash: %d %s", code, out)
	}
	s.check(t, d, s.ID, s.Token)
	if left, _ := filepath.Glob(filepath.Join(r.dataDir, "sandboxes", s.ID, "*.tmp")); len(left) > 0 {
		t.Errorf("half-written images left: %v", left)
	}
	r.stopClean(t, d)
}

// crashPauseLosingContainer crashes a write-out after the checkpoint and
// then removes the frozen container too, as a host reboot would: with
// neither an image nor the container the sandbox is gone, and the next
// start says so in its log and removes it cleanly.
func crashPauseLosingContainer(t *testing.T, r *crashRig) {
	d := r.start(t, fault.PauseAfterCheckpoint)
	s := newCrashSandbox(t, d)
	if code, body := d.do(t, "POST", "/sandboxes/"+s.ID+"/pause", nil, nil); code != 204 {
		t.Fatalf("pause: %d %s", code, body)
	}
	d.waitKilled(t, time.Minute)
	st, err := store.Open(filepath.Join(r.dataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Sandboxes().Get(context.Background(), s.ID)
	st.Close()
	if err != nil || rec.PauseImageTarget == "" || rec.ContainerID == "" {
		t.Fatalf("record of the interrupted write-out: %+v %v", rec, err)
	}
	runsc := exec.Command(testenv.Bin(t, "runsc"), "--root", filepath.Join(r.dataDir, "runsc"), "delete", "--force", rec.ContainerID)
	if out, err := runsc.CombinedOutput(); err != nil {
		t.Fatalf("remove the frozen container: %v %s", err, out)
	}
	d = r.start(t, "")
	if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 404 {
		t.Errorf("sandbox with neither image nor container: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(r.dataDir, "sandboxes", s.ID)); !os.IsNotExist(err) {
		t.Errorf("directory of the lost sandbox left: %v", err)
	}
	r.stopClean(t, d)
	// Read once the server has exited and its output is complete.
	if !strings.Contains(d.logs.String(), "paused sandbox lost") {
		t.Errorf("the loss is not logged")
	}
}

// crashSnapshot takes a snapshot that crashes. Until the image is under
// its final name (with its checksum recorded) the snapshot must be absent,
// its files included; from then on it is complete, listed and restores
// the source's file and memory. The source keeps running either way.
func crashSnapshot(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	s := newCrashSandbox(t, d)
	before := dirNames(filepath.Join(r.dataDir, "snapshots"))
	if code, out, err := d.try("POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{}); err == nil {
		t.Fatalf("snapshot answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	s.check(t, d, s.ID, s.Token)
	code, body := d.do(t, "GET", "/snapshots?sandboxID="+s.ID, nil, nil)
	var snaps []struct{ SnapshotID string }
	if code != 200 || json.Unmarshal(body, &snaps) != nil {
		t.Fatalf("list snapshots: %d %s", code, body)
	}
	complete := slices.Contains([]string{fault.SnapshotAfterRename, fault.SnapshotAfterRecord}, point)
	if want := map[bool]int{true: 1, false: 0}[complete]; len(snaps) != want {
		t.Fatalf("after a crash at %s: %d snapshots listed, want %d: %s", point, len(snaps), want, body)
	}
	images := slices.DeleteFunc(dirNames(filepath.Join(r.dataDir, "snapshots")), func(name string) bool { return slices.Contains(before, name) })
	if len(snaps) == 1 {
		if !slices.Equal(images, []string{snaps[0].SnapshotID}) {
			t.Errorf("snapshot images on disk %v, want only %s's", images, snaps[0].SnapshotID)
		}
		code, body := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": snaps[0].SnapshotID, "timeout": 600}, nil)
		if code != 201 {
			t.Fatalf("create from the snapshot: %d %s", code, body)
		}
		var child struct{ SandboxID, EnvdAccessToken string }
		json.Unmarshal(body, &child)
		s.check(t, d, child.SandboxID, child.EnvdAccessToken)
		d.do(t, "DELETE", "/templates/"+snaps[0].SnapshotID, nil, nil)
	} else if len(images) > 0 {
		t.Errorf("images of an absent snapshot left on disk: %v", images)
	}
	r.stopClean(t, d)
}

// crashBuild builds a template from an image and crashes during its
// snapshot. Before the template is stored ready the build has failed with
// a reason and left no directory; from then on it creates sandboxes.
func crashBuild(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	tplID := "built-" + strings.ReplaceAll(strings.TrimPrefix(point, "build."), "after-", "")
	// Local images are read from the data dir's import directory.
	imports := filepath.Join(r.dataDir, "imports")
	os.MkdirAll(imports, 0o700)
	archive := filepath.Join(imports, tplID+".oci.tar")
	if data, err := os.ReadFile(r.image); err != nil || os.WriteFile(archive, data, 0o600) != nil {
		t.Fatalf("import %s: %v", r.image, err)
	}
	code, body := d.do(t, "POST", "/templates", map[string]any{"image": "oci-archive:" + archive, "templateID": tplID, "writableLayerSize": "64M"}, nil)
	if code != 202 {
		t.Fatalf("build: %d %s", code, body)
	}
	var started struct{ JobID string }
	json.Unmarshal(body, &started)
	d.waitKilled(t, 2*time.Minute)
	d = r.start(t, "")
	code, body = d.do(t, "GET", "/templates/jobs/"+started.JobID, nil, nil)
	var job struct{ Phase, Error string }
	if code != 200 || json.Unmarshal(body, &job) != nil {
		t.Fatalf("build job after the crash: %d %s", code, body)
	}
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{"templateID": tplID, "timeout": 600}, nil)
	if point == fault.BuildAfterReady {
		if job.Phase != "READY" {
			t.Errorf("job of a template stored ready: %+v", job)
		}
		if code != 201 {
			t.Fatalf("create from the ready template: %d %s", code, body)
		}
		var sb struct{ SandboxID, EnvdAccessToken string }
		json.Unmarshal(body, &sb)
		if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/files?path=/hello.txt", nil); code != 200 || out != "hello from the image" {
			t.Errorf("file of the image: %d %q", code, out)
		}
	} else {
		if job.Phase != "FAILED" || !strings.Contains(job.Error, "restart") {
			t.Errorf("interrupted build job: %+v", job)
		}
		if code != 409 {
			t.Errorf("create from an interrupted build: %d %s, want 409", code, body)
		}
		if _, err := os.Stat(filepath.Join(r.dataDir, "templates", tplID)); !os.IsNotExist(err) {
			t.Errorf("directory of an interrupted build left: %v", err)
		}
	}
	r.stopClean(t, d)
}

// crashSandboxDelete kills a sandbox and crashes: it must be gone after
// the restart, not half there.
func crashSandboxDelete(t *testing.T, r *crashRig, point string) {
	d := r.start(t, point)
	s := newCrashSandbox(t, d)
	if code, out, err := d.try("DELETE", "/sandboxes/"+s.ID, nil); err == nil {
		t.Fatalf("delete answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	if code, out := d.do(t, "GET", "/sandboxes/"+s.ID, nil, nil); code != 404 {
		t.Errorf("deleted sandbox after the crash: %d %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(r.dataDir, "sandboxes", s.ID)); !os.IsNotExist(err) {
		t.Errorf("deleted sandbox's directory left: %v", err)
	}
	r.stopClean(t, d)
}

// crashTemplateDelete deletes a snapshot or a template and crashes: it
// must be gone after the restart, files and all, and unusable.
func crashTemplateDelete(t *testing.T, r *crashRig, point string) {
	var d *daemon
	var tplID, dir string
	if strings.HasPrefix(point, "snapshot.") {
		d = r.start(t, point)
		s := newCrashSandbox(t, d)
		code, body := d.do(t, "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{}, nil)
		var snap struct{ SnapshotID string }
		if code != 201 || json.Unmarshal(body, &snap) != nil {
			t.Fatalf("snapshot: %d %s", code, body)
		}
		tplID, dir = snap.SnapshotID, filepath.Join(r.dataDir, "snapshots", snap.SnapshotID)
	} else {
		tplID = doomedTemplate(point)
		dir = filepath.Join(r.dataDir, "templates", tplID)
		d = r.start(t, point)
	}
	if code, out, err := d.try("DELETE", "/templates/"+tplID, nil); err == nil {
		t.Fatalf("delete answered %d %s before the crash", code, out)
	}
	d.waitKilled(t, time.Minute)
	d = r.start(t, "")
	if code, out := d.do(t, "GET", "/templates/"+tplID, nil, nil); code != 404 {
		t.Errorf("deleted %s after the crash: %d %s", tplID, code, out)
	}
	if code, out := d.do(t, "POST", "/sandboxes", map[string]any{"templateID": tplID}, nil); code != 404 {
		t.Errorf("create from deleted %s: %d %s", tplID, code, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("files of deleted %s left: %v", tplID, err)
	}
	r.stopClean(t, d)
}

// dirNames lists the names in dir.
func dirNames(dir string) []string {
	var names []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// doomedTemplate is the template a template-delete case deletes.
func doomedTemplate(point string) string {
	return "doomed-" + strings.TrimPrefix(point, "template.delete.after-")
}

// TestCrashAtEveryFaultPoint kills the server (SIGKILL, armed through
// CUBE_FAULT_POINT) at each point between the steps of create, pause
// write-out, snapshot, rollback, fork, template build and the deletes,
// restarts it on the same data dir and checks that nothing acknowledged
// is lost, nothing half-written is used, nothing deleted comes back, no
// record outlives what it names, and the host holds nothing more than the
// surviving sandboxes.
func TestCrashAtEveryFaultPoint(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := t.TempDir()
	if err := os.Chmod(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	n := nodetest.New(t, nodetest.Options{DataDir: dataDir})
	n.TinyTemplate(t, "tiny")
	for _, p := range []string{fault.TemplateDeleteAfterIntent, fault.TemplateDeleteAfterRemove} {
		n.TinyTemplate(t, doomedTemplate(p))
	}
	n.Close()

	rootfs := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"etc", "tmp", "home"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc", "group"), []byte("root:x:0:\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "hello.txt"), []byte("hello from the image"), 0o644)
	image := filepath.Join(t.TempDir(), "image.oci.tar")
	if err := oci.WriteArchive(rootfs, image, oci.ImageConfig{}, oci.ArchiveOptions{}); err != nil {
		t.Fatal(err)
	}
	prefix, cidr := nodetest.SlotRange()
	r := &crashRig{dataDir: dataDir, prefix: prefix, cidr: cidr.String(), addr: freeAddr(t), image: image}

	cases := map[string]func(*testing.T, *crashRig, string){
		"sandbox.create.":  crashCreate,
		"pause.":           crashPause,
		"snapshot.after-":  crashSnapshot,
		"rollback.":        crashRollback,
		"fork.":            crashFork,
		"build.":           crashBuild,
		"sandbox.delete.":  crashSandboxDelete,
		"snapshot.delete.": crashTemplateDelete,
		"template.delete.": crashTemplateDelete,
		"volume.delete.":   crashVolumeDelete,
	}
	// Points only a node of a cluster passes, taking files from another:
	// internal/node's TestCrashDuringTemplateCopy and
	// TestCrashDuringHandOver drive them on fakes.
	clusterOnly := []string{"template.copy.", "sandbox.move."}
	for _, point := range fault.Points {
		if slices.ContainsFunc(clusterOnly, func(p string) bool { return strings.HasPrefix(point, p) }) {
			continue
		}
		var run func(*testing.T, *crashRig, string)
		for prefix, f := range cases {
			if strings.HasPrefix(point, prefix) {
				run = f
			}
		}
		if run == nil {
			t.Errorf("no crash test drives fault point %s", point)
			continue
		}
		t.Run(point, func(t *testing.T) {
			start := time.Now()
			run(t, r, point)
			t.Logf("%s: %s", point, time.Since(start).Round(100*time.Millisecond))
		})
	}
	t.Run(fault.PauseAfterCheckpoint+"+container-lost", func(t *testing.T) { crashPauseLosingContainer(t, r) })
	t.Run(fault.PauseAfterRecord+"+runsc-state-half-written", func(t *testing.T) { crashPauseStateHalfWritten(t, r) })
}
