// Package fault crashes the process at named points between the steps of
// an operation that must survive a crash (creates, pause write-out,
// snapshots, rollbacks, forks, template builds and copies, hand-overs,
// deletes), so tests can kill the server exactly there and check what the
// next start makes of the leftovers.
//
// Nothing is armed unless Arm or Hang is called, which cube-server does
// only when the environment variable EnvVar is set; an unarmed Point is
// one atomic load.
package fault

import (
	"fmt"
	"os"
	"slices"
	"sync"
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

	// A fork's children pass these too: each is created like a sandbox.
	SandboxCreateAfterIntent = "sandbox.create.after-intent" // recorded as creating
	SandboxCreateAfterLaunch = "sandbox.create.after-launch" // container runs, the record names none yet

	// A rollback needs no intent: its new container replaces the old in
	// one write of the record, and until then no record names it.
	RollbackAfterRestore = "rollback.after-restore" // the snapshot runs beside the sandbox's own container
	RollbackAfterRecord  = "rollback.after-record"  // the record names the new container, the old one runs on

	ForkAfterCheckpoint = "fork.after-checkpoint" // the parent's image is written, no record names it
	ForkAfterChildren   = "fork.after-children"   // children recorded running, the image not yet removed

	// In a cluster: another node's template copied here (pullFrom and
	// keepCopy), and a sandbox paused on disk taken over from another
	// node (adoptMoved). Single-node servers never pass them.
	TemplateCopyAfterExtract = "template.copy.after-extract" // files received into a hidden directory
	TemplateCopyAfterRename  = "template.copy.after-rename"  // whole copy under its final name, not yet recorded
	TemplateCopyAfterRecord  = "template.copy.after-record"  // the template's Copies names this node
	SandboxMoveAfterExtract  = "sandbox.move.after-extract"  // image received here, the record names the old node
	SandboxMoveAfterRename   = "sandbox.move.after-rename"   // image under its final name here, record as before
	SandboxMoveAfterRecord   = "sandbox.move.after-record"   // the record names this node, the old one not yet told

	SandboxDeleteAfterIntent = "sandbox.delete.after-intent" // recorded as killing
	SandboxDeleteAfterStop   = "sandbox.delete.after-stop"   // container and slot gone
	SandboxDeleteAfterRemove = "sandbox.delete.after-remove" // files gone, record not yet

	SnapshotDeleteAfterIntent = "snapshot.delete.after-intent"
	SnapshotDeleteAfterRemove = "snapshot.delete.after-remove"
	TemplateDeleteAfterIntent = "template.delete.after-intent"
	TemplateDeleteAfterRemove = "template.delete.after-remove"

	VolumeDeleteAfterIntent = "volume.delete.after-intent" // recorded as deleting
	VolumeDeleteAfterRemove = "volume.delete.after-remove" // disk and loop device gone, record not yet
)

// Points lists every point, for Arm's check and for tests.
var Points = []string{
	PauseAfterIntent, PauseAfterCheckpoint, PauseAfterChecksum, PauseAfterRename, PauseAfterRecord,
	SnapshotAfterIntent, SnapshotAfterCheckpoint, SnapshotAfterChecksum, SnapshotAfterRename, SnapshotAfterRecord,
	BuildAfterCheckpoint, BuildAfterRename, BuildAfterReady,
	SandboxCreateAfterIntent, SandboxCreateAfterLaunch,
	RollbackAfterRestore, RollbackAfterRecord,
	ForkAfterCheckpoint, ForkAfterChildren,
	TemplateCopyAfterExtract, TemplateCopyAfterRename, TemplateCopyAfterRecord,
	SandboxMoveAfterExtract, SandboxMoveAfterRename, SandboxMoveAfterRecord,
	SandboxDeleteAfterIntent, SandboxDeleteAfterStop, SandboxDeleteAfterRemove,
	SnapshotDeleteAfterIntent, SnapshotDeleteAfterRemove,
	TemplateDeleteAfterIntent, TemplateDeleteAfterRemove,
	VolumeDeleteAfterIntent, VolumeDeleteAfterRemove,
}

// arming is the armed point and what reaching it does.
type arming struct {
	name string
	// reached is set by Hang: it is closed when a goroutine reaches the
	// point and stops there, instead of the process being killed.
	reached chan struct{}
	once    sync.Once
}

var armed atomic.Pointer[arming]

// Arm makes Point(name) kill the process; "" disarms. An unknown name is
// an error, so a misspelt point cannot make a crash test pass vacuously.
func Arm(name string) error {
	if name == "" {
		armed.Store(nil)
		return nil
	}
	if err := known(name); err != nil {
		return err
	}
	armed.Store(&arming{name: name})
	return nil
}

// Hang arms point name for a test that plays, inside its own process, the
// crash of one of the nodes it runs: the goroutine that reaches the point
// stops there for good, as it would with the whole process killed, and
// reached is closed. Nothing that goroutine would do next runs, its
// deferred undos included; the test then starts the node again on the
// same store and data directory. Arm("") disarms; a stopped goroutine
// stays stopped. The point is armed for every goroutine, so such a test
// must not run beside others that pass it.
func Hang(name string) (reached <-chan struct{}, err error) {
	if err := known(name); err != nil {
		return nil, err
	}
	ch := make(chan struct{})
	armed.Store(&arming{name: name, reached: ch})
	return ch, nil
}

func known(name string) error {
	if !slices.Contains(Points, name) {
		return fmt.Errorf("%s=%q: no such fault point; known points: %v", EnvVar, name, Points)
	}
	return nil
}

// Armed is the armed point, or "".
func Armed() string {
	if a := armed.Load(); a != nil {
		return a.name
	}
	return ""
}

// Point kills the process with SIGKILL, as a crash would, when name is
// the armed point (or stops the calling goroutine, when armed by Hang);
// otherwise it returns at once.
func Point(name string) {
	a := armed.Load()
	if a == nil || a.name != name {
		return
	}
	if a.reached != nil {
		a.once.Do(func() { close(a.reached) })
		select {}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	// SIGKILL cannot be caught; no further step may run meanwhile.
	for {
		time.Sleep(time.Hour)
	}
}
