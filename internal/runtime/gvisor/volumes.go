package gvisor

import "cube/internal/runtime"

// volumeMounts are the OCI bind mounts of a sandbox's volumes. runsc
// serves each through the gofer with --file-access-mounts=shared (its
// default): the sentry revalidates what it caches against the host, so
// sandboxes mounting one volume see each other's changes. Nothing of a
// volume is in a checkpoint but the mount itself: the source directory
// is bound again on restore.
func volumeMounts(ms []runtime.Mount) []ociMount {
	out := make([]ociMount, 0, len(ms))
	for _, m := range ms {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		out = append(out, ociMount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}
	return out
}
