// Package fault crashes the process at named points between the steps of
// an operation that must survive a crash (pause write-out, snapshots,
// template builds, deletes), so tests can kill the server exactly there
// and check what the next start makes of the leftovers.
//
// Nothing is armed unless Arm is called, which cube-server does only when
// the environment variable EnvVar is set; an unarmed Point is one atomic
// load.
package fault

import (
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvVar is the environment variable that arms one point of cube-server.
// Only crash tests set it.
const EnvVar = "CUBE_FAULT_POINT"

// The points, in the order their operation passes them. Each name is
// "<operation>.after-<step>": the process dies once that step is done and
// before the next begins.
const (
	PauseAfterIntent     = "pause.after-intent"     // the store names the image being written
	PauseAfterCheckpoint = "pause.after-checkpoint" // image written beside its final name
	PauseAfterChecksum   = "pause.after-checksum"   // the image's checksum is recorded
	PauseAfterRename     = "pause.after-rename"     // image under its final name, synced
	PauseAfterRecord     = "pause.after-record"     // the store says the sandbox is on disk

	SnapshotAfterIntent     = "snapshot.after-intent"
	SnapshotAfterCheckpoint = "snapshot.after-checkpoint"
	SnapshotAfterChecksum   = "snapshot.after-checksum"
	SnapshotAfterRename     = "snapshot.after-rename"
	SnapshotAfterRecord     = "snapshot.after-record" // ready in the store, not yet answered

	BuildAfterCheckpoint = "build.after-checkpoint"
	BuildAfterRename     = "build.after-rename"
	BuildAfterReady      = "build.after-ready" // template ready, job not yet

	SandboxDeleteAfterIntent = "sandbox.delete.after-intent" // recorded as killing
	SandboxDeleteAfterStop   = "sandbox.delete.after-stop"   // container and slot gone
	SandboxDeleteAfterRemove = "sandbox.delete.after-remove" // files gone, record not yet

	SnapshotDeleteAfterIntent = "snapshot.delete.after-intent"
	SnapshotDeleteAfterRemove = "snapshot.delete.after-remove"
	TemplateDeleteAfterIntent = "template.delete.after-intent"
	TemplateDeleteAfterRemove = "template.delete.after-remove"
)

// Points lists every point, for Arm's check and for tests.
var Points = []string{
	PauseAfterIntent, PauseAfterCheckpoint, PauseAfterChecksum, PauseAfterRename, PauseAfterRecord,
	SnapshotAfterIntent, SnapshotAfterCheckpoint, SnapshotAfterChecksum, SnapshotAfterRename, SnapshotAfterRecord,
	BuildAfterCheckpoint, BuildAfterRename, BuildAfterReady,
	SandboxDeleteAfterIntent, SandboxDeleteAfterStop, SandboxDeleteAfterRemove,
	SnapshotDeleteAfterIntent, SnapshotDeleteAfterRemove,
	TemplateDeleteAfterIntent, TemplateDeleteAfterRemove,
}

var armed atomic.Pointer[string]

// Arm makes Point(name) kill the process; "" disarms. An unknown name is
// an error, so a misspelt point cannot make a crash test pass vacuously.
func Arm(name string) error {
	if name == "" {
		armed.Store(nil)
		return nil
	}
	if !slices.Contains(Points, name) {
		return fmt.Errorf("%s=%q: no such fault point; known points: %v", EnvVar, name, Points)
	}
	armed.Store(&name)
	return nil
}

// Armed is the armed point, or "".
func Armed() string {
	if p := armed.Load(); p != nil {
		return *p
	}
	return ""
}

// Point kills the process with SIGKILL, as a crash would, when name is
// the armed point; otherwise it returns at once.
func Point(name string) {
	p := armed.Load()
	if p == nil || *p != name {
		return
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	// SIGKILL cannot be caught; no further step may run meanwhile.
	for {
		time.Sleep(time.Hour)
	}
}
