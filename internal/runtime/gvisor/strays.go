package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What a crashed server's runsc commands leave.
//
// A runsc command is a process of its own, and it outlives a server
// killed while it ran. Killing it with the server would be worse: runsc
// rewrites a container's state file in place, and a pause cut short
// there leaves a running sandbox whose state no later command can read.
// So a command is left to finish, and the next start waits for the
// previous run's commands (orphans: runsc processes under this state root
// that are neither a sandbox nor a gofer, and not this process's own
// children) before it lists containers. A sandbox and gofer whose create
// never wrote its state are found by the state root and container ID on
// their command lines, so the reconciler removes them like any container
// it does not know.

// orphanWait bounds how long a start waits for the previous run's
// commands; a checkpoint of a large sandbox takes seconds.
const orphanWait = time.Minute

// waitOrphanCommands waits until no runsc command of a previous run is
// left under root, then kills what is left after max.
func waitOrphanCommands(ctx context.Context, root string, max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		pids := orphanCommands(root)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			for _, pid := range pids {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orphanCommands returns the runsc commands (not sandbox or gofer
// processes) under root that this process did not start.
func orphanCommands(root string) []int {
	self := os.Getpid()
	var pids []int
	for _, p := range runscProcesses(root) {
		if !p.daemon && parentOf(p.pid) != self {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// parentOf is pid's parent, from /proc (0 when unknown).
func parentOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// unsavedIDs returns the containers under root that runsc holds a lock
// file for and no state: runsc takes the lock first when it creates a
// container, so a create killed before it saved the state (with the
// server, or at Config.StartTimeout) leaves the lock alone, for good
// unless it is listed and removed.
func unsavedIDs(root string) []string {
	locks, _ := filepath.Glob(filepath.Join(root, "*_sandbox:*.lock"))
	var ids []string
	for _, l := range locks {
		id, sandbox, ok := strings.Cut(strings.TrimSuffix(filepath.Base(l), ".lock"), "_sandbox:")
		if !ok || sandbox != id {
			continue // not one of Cube's containers, each its sandbox's root
		}
		state := stateFileIn(root, id)
		if _, err := state.Stat(); os.IsNotExist(err) {
			ids = append(ids, id)
		}
	}
	return ids
}

// strayIDs returns the container IDs that processes under root run for,
// whether or not runsc lists them.
func strayIDs(root string) []string {
	seen := map[string]bool{}
	var ids []string
	for _, p := range rootProcesses(root) {
		if !seen[p.id] {
			seen[p.id] = true
			ids = append(ids, p.id)
		}
	}
	return ids
}

type rootProcess struct {
	pid int
	id  string
	// daemon: a sandbox or gofer process, not a command.
	daemon bool
}

// rootProcesses lists the runsc sandbox and gofer processes whose state
// root is root, with the container each serves: its last argument.
func rootProcesses(root string) []rootProcess {
	var out []rootProcess
	for _, p := range runscProcesses(root) {
		if p.daemon {
			out = append(out, p)
		}
	}
	return out
}

// runscProcesses lists every runsc process whose state root is root.
func runscProcesses(root string) []rootProcess {
	// runsc passes its own processes "--root=<root>"; Cube's commands
	// give it as two arguments.
	root = filepath.Clean(root)
	joined, split := []byte("--root="+root+"\x00"), []byte("\x00--root\x00"+root+"\x00")
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []rootProcess
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, joined) && !bytes.Contains(cmdline, split) {
			continue
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if len(args) < 2 {
			continue
		}
		out = append(out, rootProcess{pid: pid, id: string(args[len(args)-1]), daemon: isSandboxOrGofer(args)})
	}
	return out
}

// isSandboxOrGofer reports whether a runsc command line is the sandbox
// ("boot") or gofer process of a container, not a CLI command.
func isSandboxOrGofer(args [][]byte) bool {
	for _, a := range args[1:] {
		if s := string(a); s == "boot" || s == "gofer" {
			return true
		}
	}
	return false
}

// cgroupDirs lists container id's cgroup (ociSpec names it /cube/<id>) in
// every hierarchy under root that has it: the unified one, and each of
// v1's.
func cgroupDirs(root, id string) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "cube", id))
	if _, err := os.Stat(filepath.Join(root, "cube", id)); err == nil {
		dirs = append(dirs, filepath.Join(root, "cube", id))
	}
	return dirs
}

// removeCgroups removes container id's cgroups (cgroupDirs). runsc removes
// them when it deletes a container it has state for; one whose state a
// crash lost or cut short leaves them, empty, once its processes are gone
// (killStrays). A cgroup whose last tasks are still exiting refuses
// removal for a moment, so each is tried for up to a second.
func removeCgroups(root, id string) error {
	var errs []error
	for _, dir := range cgroupDirs(root, id) {
		deadline := time.Now().Add(time.Second)
		for {
			err := syscall.Rmdir(dir)
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// killStrays kills the processes under root that serve container id and
// waits (a few seconds at most) until they are gone.
func killStrays(root, id string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []int
		for _, p := range rootProcesses(root) {
			if p.id == id {
				left = append(left, p.pid)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
