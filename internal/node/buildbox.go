package node

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"cube/internal/id"
	"cube/internal/runtime"
	"cube/internal/store"
)

// BuildBox describes the sandbox a template build step runs in.
type BuildBox struct {
	// Rootfs is written to directly: a host overlay mount whose upper
	// directory collects what the step changes.
	Rootfs string
	// Env is the environment of the sandbox's agent, and so the default
	// of every process the step starts.
	Env      []string
	CPUCount int
	MemoryMB int
}

// WithBuildBox boots a sandbox on box.Rootfs with a writable root and its
// own network slot, calls fn with the sandbox's host-side address (envd
// answers there), and removes the sandbox and its slot whatever fn
// returns. Nothing of it outlives the call but what it wrote to Rootfs.
func (n *Node) WithBuildBox(ctx context.Context, box BuildBox, fn func(ctx context.Context, addr netip.Addr) error) error {
	slot, err := n.acquireSlot(ctx, true)
	if err != nil {
		return err
	}
	defer func() {
		if err := n.release(slot); err != nil {
			n.log.Warn("build step: release network slot", "slot", slot.Index, "err", err)
		}
	}()
	env := box.Env
	if !hasEnv(env, "PATH") {
		env = append(append([]string{}, env...), "PATH="+defaultPath)
	}
	cid := "build-step-" + id.New("", 10)
	sb, err := n.rt.Boot(ctx, runtime.Spec{
		ID: cid, Rootfs: box.Rootfs, WritableRoot: true, AgentDir: n.agentDir,
		Args: []string{runtime.AgentMount + "/cube-envd"}, Env: env, Cwd: "/", NetNS: slot.NetNS,
		CPUCount: box.CPUCount, MemoryMB: box.MemoryMB,
	})
	if err != nil {
		return fmt.Errorf("boot build sandbox: %w", err)
	}
	defer func() {
		if err := sb.Kill(context.Background()); err != nil {
			n.log.Warn("build step: kill build sandbox", "container", cid, "err", err)
		}
	}()
	err = fn(ctx, slot.HostAddr)
	if errors.Is(err, syscall.EHOSTUNREACH) {
		// Nothing answered for the sandbox's address on its link: what
		// the slot looks like says whether the sandbox has its network.
		n.log.Warn("build sandbox unreachable", "container", cid, "slot", slot.Index, "network", n.slots.Describe(slot))
	}
	return err
}

// defaultPath is the PATH of sandboxes whose image sets none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RetireBuild lets go of a template build that a newer build replaced,
// as a delete lets go of a template's image; the rootfs stays while
// anything uses it.
func (n *Node) RetireBuild(old *store.Template) {
	n.releaseImage(old)
	// A build of its own directory goes with it.
	own := filepath.Join(n.cfg.DataDir, "templates", old.ID)
	if dir := filepath.Dir(old.Checkpoint); old.Checkpoint != "" && dir != own && strings.HasPrefix(dir, own+string(os.PathSeparator)) {
		n.removeDir(dir)
	}
}
