package gvisor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cube/internal/runtime"
)

func TestRunscFlags(t *testing.T) {
	r := Runsc{Path: "/bin/runsc", Root: "/r"}
	for _, c := range []struct {
		spec *runtime.Spec
		want string
	}{
		{nil, "--root /r --platform systrap --allow-suid"},
		{&runtime.Spec{}, "--root /r --platform systrap --allow-suid --overlay2 root:memory --allow-rootfs-tar-annotation --network none"},
		{&runtime.Spec{WritableMB: 64, NetNS: "/run/netns/x"}, "--root /r --platform systrap --allow-suid --overlay2 root:memory,size=64m --allow-rootfs-tar-annotation --network sandbox --network-processors-per-channel 1"},
		{&runtime.Spec{CPUCount: 2, NetNS: "/run/netns/x"}, "--root /r --platform systrap --allow-suid --overlay2 root:memory --allow-rootfs-tar-annotation --network sandbox --network-processors-per-channel 2"},
		{&runtime.Spec{WritableRoot: true, WritableMB: 64}, "--root /r --platform systrap --allow-suid --overlay2 none --allow-rootfs-tar-annotation --network none"},
	} {
		if got := strings.Join(r.Flags(c.spec), " "); got != c.want {
			t.Errorf("flags for %+v = %q, want %q", c.spec, got, c.want)
		}
	}
	// Sharing memory is a flag of every call that makes a sandbox (a
	// container created ahead of its restore reads it at create).
	shared := Runsc{Path: "/bin/runsc", Root: "/r", SharedMemory: true}
	if got := strings.Join(shared.Flags(&runtime.Spec{}), " "); !strings.HasSuffix(got, "--network none --cow-restore") {
		t.Errorf("flags with shared memory = %q", got)
	}
	if got := strings.Join(shared.Flags(nil), " "); strings.Contains(got, "cow") {
		t.Errorf("flags of a call on a container = %q", got)
	}
	// Eager copies ride on shared memory, and only there.
	eager := Runsc{Path: "/bin/runsc", Root: "/r", SharedMemory: true, EagerCopy: true}
	if got := strings.Join(eager.Flags(&runtime.Spec{}), " "); !strings.HasSuffix(got, "--cow-restore --cow-eager") {
		t.Errorf("flags with eager copies = %q", got)
	}
	if got := strings.Join(Runsc{Path: "/bin/runsc", Root: "/r", EagerCopy: true}.Flags(&runtime.Spec{}), " "); strings.Contains(got, "cow") {
		t.Errorf("flags with eager copies and private memory = %q", got)
	}
	r.DebugLog = "/b/x/runsc.%COMMAND%.log"
	cmd := r.Command(t.Context(), nil, "pause", "x")
	if got := strings.Join(cmd.Args, " "); got != "/bin/runsc --root /r --platform systrap --allow-suid --debug --debug-log /b/x/runsc.%COMMAND%.log pause x" {
		t.Errorf("command = %q", got)
	}
}

// A bare bundle is a sandbox's spec less what the service adds: the
// baseline and the server must not drift apart in the rest.
func TestBareBundleIsTheSandboxShapeWithoutCube(t *testing.T) {
	s := runtime.Spec{ID: "x", Rootfs: "/rootfs", AgentDir: "/agent", Args: []string{"python3"}, Env: []string{"HOME=/root"}, MemoryMB: 512, WritableMB: 64}
	dir := t.TempDir()
	if err := WriteBareBundle(filepath.Join(dir, "b"), s); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "b", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var bare ociSpecT
	if err := json.Unmarshal(data, &bare); err != nil {
		t.Fatal(err)
	}
	if bare.Annotations != nil || bare.Process.Rlimits != nil || bare.Linux.CgroupsPath != "" || bare.Linux.Resources != nil {
		t.Errorf("bare spec carries Cube's additions: %s", data)
	}
	for _, m := range bare.Mounts {
		if m.Destination == runtime.AgentMount {
			t.Errorf("bare spec mounts the agent: %+v", m)
		}
	}
	full := ociSpec(s)
	full.Mounts = full.Mounts[:len(full.Mounts)-1]
	full.Annotations, full.Process.Rlimits, full.Linux.CgroupsPath, full.Linux.Resources = nil, nil, "", nil
	want, _ := json.MarshalIndent(full, "", "  ")
	if string(want) != string(data) {
		t.Errorf("bare spec\n%s\ndiffers from the sandbox's beyond Cube's additions\n%s", data, want)
	}
}
