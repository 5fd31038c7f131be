package node

import (
	"testing"

	"cube/internal/store"
)

// TestVolumeMountsFollowTheBootRecord checks what decides between a boot
// and a restore, and that the runtime spec of a boot record binds its
// volumes: a template's checkpoint has no mounts, so a sandbox with
// volumes boots; its own images and snapshots carry them and restore.
func TestVolumeMountsFollowTheBootRecord(t *testing.T) {
	mounts := []store.VolumeMount{{VolumeID: "vol-a", Name: "a", Path: "/mnt/a", Source: "/d/volumes/vol-a/mnt"}}
	tpl := &store.Template{ID: "base", Rootfs: "/r", Envd: "/e"}
	withVolumes := *tpl
	withVolumes.Mounts = mounts
	rec := &store.Sandbox{Boot: &withVolumes}
	if !needsBoot(rec, tpl) {
		t.Error("a sandbox with volumes from a template without them must boot")
	}
	if needsBoot(rec, &withVolumes) {
		t.Error("a restore of the sandbox's own image (which has its mounts) must not boot")
	}
	if needsBoot(&store.Sandbox{Boot: tpl}, tpl) {
		t.Error("a sandbox without volumes must restore")
	}
	spec := Spec(&withVolumes, "c", "")
	if len(spec.Mounts) != 1 || spec.Mounts[0].Source != "/d/volumes/vol-a/mnt" || spec.Mounts[0].Destination != "/mnt/a" || spec.Mounts[0].ReadOnly {
		t.Errorf("spec mounts %+v", spec.Mounts)
	}

	other := []store.VolumeMount{{VolumeID: "vol-b", Name: "b", Path: "/mnt/a"}}
	if !sameMounts(mounts, mounts) || sameMounts(mounts, other) || sameMounts(mounts, nil) {
		t.Error("sameMounts compares volume, path and mode")
	}
	snap := &store.Template{ID: "snap-1", Mounts: mounts}
	if !mountsVolume(snap, "vol-a") || mountsVolume(snap, "vol-b") || mountsVolume(nil, "vol-a") {
		t.Error("mountsVolume")
	}
	if v := mountsView(&withVolumes); len(v) != 1 || v[0].Name != "a" || v[0].Path != "/mnt/a" {
		t.Errorf("mountsView %+v", v)
	}
}
