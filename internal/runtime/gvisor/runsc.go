package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"cube/internal/runtime"
)

// Runsc is one runsc binary with its state root: the command line that
// every call of Cube's shares. cube-bench's raw baseline drives runsc
// through it too, so the baseline runs with the server's flags.
type Runsc struct {
	// Path is the runsc binary; Root its state directory (--root).
	Path, Root string
	// DebugLog, when set, turns on runsc's debug log with this
	// --debug-log pattern.
	DebugLog string
	// SharedMemory restores a sandbox's memory copy-on-write from its
	// image's pages.img (runsc --cow-restore, scripts/runsc-patches):
	// every sandbox restored from one image shares its pages through the
	// host page cache until it writes them. The sandbox process reads the
	// flag when it boots, so a container created ahead of its restore
	// needs it at create too. Images must never be rewritten in place
	// while a sandbox maps them; Cube writes each image once, under a
	// new name, and renames it into place.
	SharedMemory bool
	// EagerCopy, with SharedMemory, copies the pages an image's pages.hot
	// names into the sandbox's own memory at restore (runsc --cow-eager),
	// so that its first writes to them do not each fault; see hot.go.
	EagerCopy bool
}

// Flags are the global flags of a call for a container of spec; nil
// means a call on a container that exists. The overlay size and the
// network mode are global flags in runsc, which is why they are per call.
func (r Runsc) Flags(spec *runtime.Spec) []string {
	// SUID binaries (sudo) work inside: a sandbox's user may already act
	// as root there through envd, so no boundary is crossed, and E2B's
	// templates give their user passwordless sudo.
	f := []string{"--root", r.Root, "--platform", "systrap", "--allow-suid"}
	if spec != nil {
		overlay := "root:memory"
		if spec.WritableRoot {
			overlay = "none"
		} else if spec.WritableMB > 0 {
			overlay += ",size=" + strconv.Itoa(spec.WritableMB) + "m"
		}
		f = append(f, "--overlay2", overlay)
		// runsc reads a writable layer's tar from the spec's annotation
		// (files.go) only when told to; the path is Cube's own, never a
		// user's. A restore of a sandbox booted so needs it too.
		f = append(f, "--allow-rootfs-tar-annotation")
		if spec.NetNS != "" {
			f = append(f, "--network", "sandbox")
			// One packet processor per vCPU. Left to runsc, the number
			// follows GOMAXPROCS when the link is made, which a restore
			// raises for its own work (by one per pages file reader):
			// restored sandboxes got up to 130, each with its GRO
			// buckets, a third of every checkpoint's objects (saved and
			// loaded at every snapshot and restore).
			f = append(f, "--network-processors-per-channel", strconv.Itoa(max(spec.CPUCount, 1)))
		} else {
			f = append(f, "--network", "none")
		}
		if r.SharedMemory {
			f = append(f, "--cow-restore")
			if r.EagerCopy {
				f = append(f, "--cow-eager")
			}
		}
	}
	if r.DebugLog != "" {
		f = append(f, "--debug", "--debug-log", r.DebugLog)
	}
	return f
}

// Command is runsc with the global flags for spec, then args. Callers set
// its streams; a command that leaves a sandbox behind (run or restore
// with --detach) needs files there, since the sandbox inherits them and a
// pipe that exec copies from would never reach EOF while it lives.
func (r Runsc) Command(ctx context.Context, spec *runtime.Spec, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.Path, append(r.Flags(spec), args...)...)
}

// Run runs one runsc command and returns its stdout; a failure carries
// runsc's own last words.
func (r Runsc) Run(ctx context.Context, spec *runtime.Spec, args ...string) ([]byte, error) {
	cmd := r.Command(ctx, spec, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("runsc %s: %w: %s", args[0], err, Reason(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Reason picks the line of runsc's output that says why it failed: the
// last one naming an error, since a crash ends in stack frames.
func Reason(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.Contains(l, "no space left on device") {
			return l
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.Contains(strings.ToLower(l), "error") || strings.Contains(l, "failed") {
			return l
		}
	}
	return lastLine(s)
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}
