// Package runtime is the boundary between Cube's node and the isolation
// technology under it. The node speaks only these interfaces, so a KVM
// microVM backend can later stand beside gVisor without touching callers.
package runtime

import (
	"context"
	"time"
)

// Spec describes one sandbox to boot or restore.
type Spec struct {
	// ID is the container ID, unique on the host.
	ID string
	// Rootfs is a read-only root filesystem directory; it may be shared by
	// many sandboxes and is never written.
	Rootfs string
	// WritableMB caps the in-sandbox writable layer (the template's
	// writable-layer size). Writes past it fail with ENOSPC inside.
	WritableMB int
	// WritableRoot makes writes to the root land in the Rootfs directory
	// itself, with no writable layer in between. Template builds use it
	// with a host overlay mount as Rootfs, whose upper directory becomes
	// the step's layer; no sandbox of a user ever runs with it.
	WritableRoot bool
	// AgentDir is a host directory mounted read-only at AgentMount; it holds
	// cube-envd, the sandbox's PID 1.
	AgentDir string
	// Args is PID 1's argv; Env and Cwd its environment and directory.
	Args []string
	Env  []string
	Cwd  string
	// NetNS is the path of the network namespace to run in; empty means no
	// network at all.
	NetNS string
	// CPUCount and MemoryMB limit the sandbox; zero means no limit.
	CPUCount int
	MemoryMB int
	// Hostname seen inside.
	Hostname string
	// Mounts are host directories bound into the sandbox through its
	// gofer (persistent volumes). A checkpoint keeps them: a restore binds
	// the same sources at the same places.
	Mounts []Mount
	// Files is a file written by Sandbox.SaveFiles. A Boot starts with it
	// as the writable layer over Rootfs: the sandbox's files are back,
	// its memory is not (a fresh kernel, a fresh boot ID).
	Files string
}

// FilesImage is the one file of an image that holds a sandbox's files
// without its memory: what Sandbox.SaveFiles writes into a directory.
const FilesImage = "files.tar"

// ParentsDir is the folder of an image that holds the images it builds
// on (an incremental checkpoint's parents), each under its own name. Their
// bytes belong to the images they came from: an image's size leaves them
// out.
const ParentsDir = "parents"

// Mount is one host directory bound into a sandbox at Destination.
type Mount struct {
	Source      string
	Destination string
	ReadOnly    bool
}

// AgentMount is where Spec.AgentDir appears inside every sandbox.
const AgentMount = "/.cube"

// Stats is a point-in-time resource reading of one sandbox.
type Stats struct {
	CPUTime     time.Duration // cumulative CPU time
	MemoryBytes uint64        // memory in use
	Pids        uint64
}

// Runtime boots and restores sandboxes.
type Runtime interface {
	// Boot starts a fresh sandbox from spec.
	Boot(ctx context.Context, spec Spec) (Sandbox, error)
	// Restore starts a new sandbox from a checkpoint image directory. The
	// spec must describe the same root filesystem and agent as the
	// checkpointed sandbox; the network namespace may differ.
	Restore(ctx context.Context, image string, spec Spec) (Sandbox, error)
	// Attach returns a handle to a sandbox that is already running, e.g.
	// after the server restarted.
	Attach(ctx context.Context, id string) (Sandbox, error)
	// List returns the IDs of every sandbox this runtime knows of.
	List(ctx context.Context) ([]string, error)
}

// Preparer is a Runtime that can do the set-up of a restore ahead of
// time, so that a restore on the request path only loads the image.
type Preparer interface {
	// PrepareKey names what a restore of image with spec needs: a
	// prepared container of the same key can take it. The spec's ID and
	// network namespace do not count.
	PrepareKey(image string, spec Spec) (string, error)
	// Prepare makes a container for spec (its own ID and namespace) that
	// waits for a restore of an image with the same key.
	Prepare(ctx context.Context, image string, spec Spec) (Prepared, error)
}

// HotPageLearner is a Runtime whose restores can copy the pages a restored
// sandbox is known to write first into its own memory at once, instead of
// sharing them with the image until each first write (which costs a page
// fault each).
type HotPageLearner interface {
	// LearnHotPages records, as image's hot pages, the pages of image that
	// a sandbox restored from it wrote before it was checkpointed into
	// probe (an image of that sandbox, which LearnHotPages may remove). It
	// returns the bytes recorded. Restores of image read them if the
	// runtime copies hot pages; an image without them restores as before.
	LearnHotPages(image, probe string) (int64, error)
}

// Prepared is a container made ahead of a restore.
type Prepared interface {
	ID() string
	// Restore loads image into the container, which is then a running
	// Sandbox. On failure the container is gone.
	Restore(ctx context.Context, image string) (Sandbox, error)
	// Kill discards the container unused.
	Kill(ctx context.Context) error
}

// Sandbox is one running (or paused) sandbox.
type Sandbox interface {
	ID() string
	// Checkpoint writes memory and the writable filesystem to dir
	// (uncompressed). With leaveRunning the sandbox continues afterwards;
	// otherwise it is gone when Checkpoint returns.
	Checkpoint(ctx context.Context, dir string, leaveRunning bool) error
	// SaveFiles writes the sandbox's writable layer (its changes to the
	// root filesystem, whiteouts of deleted files included; not its
	// memory) to dir/FilesImage. The sandbox stays as it is, running or
	// paused.
	SaveFiles(ctx context.Context, dir string) error
	// Pause freezes every process; Resume thaws them.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// Kill stops the sandbox and releases everything the runtime holds for
	// it. Killing a sandbox that is already gone is not an error.
	Kill(ctx context.Context) error
	Stats(ctx context.Context) (Stats, error)
	// Console returns what the sandbox's PID 1 wrote to its stdout and
	// stderr since this container started, or only the newest of it: a
	// runtime bounds what it keeps (gVisor: gvisor.ConsoleLimit bytes).
	Console() ([]byte, error)
	// Exec runs a command inside the sandbox and returns its combined
	// output: for diagnostics and tests, not the user path (that is envd).
	Exec(ctx context.Context, args ...string) ([]byte, error)
}
