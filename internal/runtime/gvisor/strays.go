package gvisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Processes of a container that runsc no longer lists.
//
// A runsc command is a process of its own: a server killed while one ran
// (a create ahead of time, a restore) used to leave it to finish alone,
// registering a container after the next start had listed what there
// was, or leaving a sandbox and gofer process whose state runsc never
// wrote. Commands now die with the server (Pdeathsig, runsc.go), and
// whatever processes they had started are found here, by the state root
// and container ID on their command lines, so the reconciler removes them
// like any container it does not know.

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
}

// rootProcesses lists the runsc sandbox and gofer processes whose state
// root is root, with the container each serves: its last argument.
func rootProcesses(root string) []rootProcess {
	flag := []byte("--root=" + filepath.Clean(root) + "\x00")
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
		if err != nil || !bytes.Contains(cmdline, flag) {
			continue
		}
		args := bytes.Split(bytes.TrimRight(cmdline, "\x00"), []byte{0})
		if len(args) < 2 || !isSandboxOrGofer(args) {
			continue
		}
		out = append(out, rootProcess{pid: pid, id: string(args[len(args)-1])})
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
