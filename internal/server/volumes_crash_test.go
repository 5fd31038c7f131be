package server_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"cube/internal/nodetest"
	"cube/internal/testenv"
	"cube/internal/volume"
)

// TestVolumeSurvivesCrash kills the server with SIGKILL while a sandbox
// has a volume mounted and checks the next start: the volume is
// re-adopted (still mounted once, data intact, readable through the
// sandbox and the content API), a volume directory no record names is
// removed with its loop device, and deleting the volume at the end
// leaves no mount or loop device behind.
func TestVolumeSurvivesCrash(t *testing.T) {
	testenv.RequireRoot(t)
	dataDir := tinyDataDir(t)
	prefix, cidr := nodetest.SlotRange()
	addr := freeAddr(t)
	d := startDaemon(t, dataDir, prefix, cidr.String(), addr)

	code, body := d.do(t, "POST", "/volumes", map[string]any{"name": "crash-vol", "sizeMB": 16}, nil)
	if code != 201 {
		t.Fatalf("create volume: %d %s", code, body)
	}
	var vol struct{ VolumeID, Token string }
	json.Unmarshal(body, &vol)
	code, body = d.do(t, "POST", "/sandboxes", map[string]any{
		"templateID": "tiny", "timeout": 600,
		"volumeMounts": []map[string]any{{"name": "crash-vol", "path": "/mnt/v"}},
	}, nil)
	if code != 201 {
		t.Fatalf("create sandbox with a volume: %d %s", code, body)
	}
	var sb struct {
		SandboxID       string `json:"sandboxID"`
		EnvdAccessToken string `json:"envdAccessToken"`
	}
	json.Unmarshal(body, &sb)
	if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "POST", "/files?path=/mnt/v/mark", []byte("before the crash")); code != 200 {
		t.Fatalf("write into the volume: %d %s", code, out)
	}

	d.cmd.Process.Signal(syscall.SIGKILL)
	d.cmd.Wait()

	volumesDir := filepath.Join(dataDir, "volumes")
	mnt := filepath.Join(volumesDir, vol.VolumeID, "mnt")
	// A volume directory no record names, mounted, as a crash between
	// making a disk and recording it would leave.
	disks, err := volume.NewDisks(volumesDir)
	if err != nil {
		t.Fatal(err)
	}
	orphan := volume.NewID()
	if err := disks.Create(orphan, volume.MinBytes); err != nil {
		t.Fatal(err)
	}
	orphanImage := filepath.Join(volumesDir, orphan, "disk.img")

	d = startDaemon(t, dataDir, prefix, cidr.String(), addr)
	if got := mountsUnder(volumesDir); len(got) != 1 || got[0] != mnt {
		t.Fatalf("mounts under %s after the restart: %v, want only %s", volumesDir, got, mnt)
	}
	if _, err := os.Stat(filepath.Join(volumesDir, orphan)); !os.IsNotExist(err) {
		t.Fatalf("the unrecorded volume directory is still there: %v", err)
	}
	if out, _ := exec.Command("losetup", "-j", orphanImage).Output(); len(out) != 0 {
		t.Fatalf("the unrecorded volume's loop device is still there: %s", out)
	}
	if code, out := d.envd(t, sb.SandboxID, sb.EnvdAccessToken, "GET", "/files?path=/mnt/v/mark", nil); code != 200 || out != "before the crash" {
		t.Fatalf("read through the re-adopted sandbox: %d %q", code, out)
	}
	code, body = d.do(t, "GET", "/volumecontent/"+vol.VolumeID+"/file?path=/mark", nil, map[string]string{"X-API-Key": "", "Authorization": "Bearer " + vol.Token})
	if code != 200 || string(body) != "before the crash" {
		t.Fatalf("read through the content API after the restart: %d %q", code, body)
	}

	if code, body := d.do(t, "DELETE", "/volumes/"+vol.VolumeID, nil, nil); code != 409 || !strings.Contains(string(body), sb.SandboxID) {
		t.Fatalf("delete while mounted: %d %s, want 409 naming %s", code, body, sb.SandboxID)
	}
	if code, body := d.do(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); code != 204 {
		t.Fatalf("kill: %d %s", code, body)
	}
	if code, body := d.do(t, "DELETE", "/volumes/"+vol.VolumeID, nil, nil); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if got := mountsUnder(volumesDir); len(got) != 0 {
		t.Fatalf("mounts left after the delete: %v", got)
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(volumesDir, vol.VolumeID, "disk.img")).Output(); len(out) != 0 {
		t.Fatalf("loop device left after the delete: %s", out)
	}
	if entries, _ := os.ReadDir(volumesDir); len(entries) != 0 {
		t.Fatalf("left in %s: %v", volumesDir, entries)
	}
}
