package gvisor

import (
	"slices"
	"testing"

	"cube/internal/runtime"
)

// TestVolumeMountsInSpec checks a sandbox's volumes become bind mounts of
// its OCI spec, read-only when asked, after the agent's own mount.
func TestVolumeMountsInSpec(t *testing.T) {
	spec := ociSpec(runtime.Spec{ID: "x", Rootfs: "/r", AgentDir: "/a", Mounts: []runtime.Mount{
		{Source: "/data/volumes/vol-a/mnt", Destination: "/mnt/a"},
		{Source: "/data/volumes/vol-b/mnt", Destination: "/mnt/b", ReadOnly: true},
	}})
	n := len(spec.Mounts)
	if n < 3 || spec.Mounts[n-3].Destination != runtime.AgentMount {
		t.Fatalf("mounts %+v: want the agent's, then the volumes", spec.Mounts)
	}
	a, b := spec.Mounts[n-2], spec.Mounts[n-1]
	if a.Type != "bind" || a.Source != "/data/volumes/vol-a/mnt" || a.Destination != "/mnt/a" || !slices.Contains(a.Options, "rw") {
		t.Errorf("read-write volume: %+v", a)
	}
	if b.Destination != "/mnt/b" || !slices.Contains(b.Options, "ro") || slices.Contains(b.Options, "rw") {
		t.Errorf("read-only volume: %+v", b)
	}
	for _, m := range []ociMount{a, b} {
		if !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
			t.Errorf("volume mount %s without nosuid,nodev: %v", m.Destination, m.Options)
		}
	}
	if got := ociSpec(runtime.Spec{ID: "x", Rootfs: "/r", AgentDir: "/a"}); len(got.Mounts) != n-2 {
		t.Errorf("a sandbox without volumes has %d mounts, want %d", len(got.Mounts), n-2)
	}
}
