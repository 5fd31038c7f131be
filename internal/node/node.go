// Package node runs the sandboxes of one host: it hands them out from
// template snapshots, keeps their lifetimes, and after a crash reconciles
// what the host holds (runsc containers, network slots, directories) with
// the state store.
//
// Every operation records its intent in the store before touching the
// host and registers an undo for each step (the cleanup idiom), so a
// failure half-way leaves nothing behind and a crash half-way is visible
// to the reconciler.
package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cube/internal/egress"
	"cube/internal/envd/protocol"
	"cube/internal/netslot"
	"cube/internal/node/envdclient"
	"cube/internal/runtime"
	"cube/internal/store"
)

// Runtime is what the node needs from the isolation layer: the portable
// interface plus removal of leftovers by ID.
type Runtime interface {
	runtime.Runtime
	Remove(ctx context.Context, id string) error
}

// Slots is what the node needs from the network slot pool.
type Slots interface {
	Acquire(ctx context.Context) (*netslot.Slot, error)
	Release(s *netslot.Slot) error
	Adopt(index int) (*netslot.Slot, error)
	Reconcile(inUse map[int]bool) ([]string, error)
}

// Agent is what the node asks of the envd inside one sandbox. It is an
// interface so the node's logic can be exercised without a sandbox to
// answer.
type Agent interface {
	// Init hands the agent its token and environment, authorised by
	// oldToken, and confirms the new token took.
	Init(ctx context.Context, in protocol.Init, oldToken string) error
	// Metrics reads the agent's resource sample, authorised by token.
	Metrics(ctx context.Context, token string) (*protocol.Metrics, error)
}

// Config configures a Node.
type Config struct {
	DataDir string
	// Envd is the cube-envd binary to install into sandboxes.
	Envd    string
	Runtime Runtime
	Slots   Slots
	Store   *store.Store
	Logger  *slog.Logger
	// AgentAt returns the agent of the sandbox reached at host; nil
	// speaks HTTP to envd on its fixed port.
	AgentAt func(host netip.Addr) Agent
	// MaxSandboxes bounds running plus paused sandboxes (0 = 100).
	MaxSandboxes int
	// EnvdVersion is what sandboxes report as envdVersion.
	EnvdVersion string
	// Domain is reported to SDKs for host-based routing.
	Domain string
	// Egress enforces per-sandbox egress policies; nil leaves every
	// sandbox with the slots' base isolation only.
	Egress *egress.Filter
	// PauseWriteDelay is how long a paused sandbox stays frozen in memory
	// (resuming in milliseconds) before it is written to disk and its
	// memory and slot are freed.
	PauseWriteDelay time.Duration
	// CodeContextsNeedToken makes every sandbox's code interpreter require
	// the access token on its context routes too (sent with /init). The
	// official code interpreter SDKs send none there, so it is off by
	// default.
	CodeContextsNeedToken bool
	// PoolSize is how many warm sandboxes to keep ready per template built
	// from an image; 0 disables the warm pool.
	PoolSize int
}

// Node owns the sandboxes of this host.
type Node struct {
	cfg   Config
	log   *slog.Logger
	store *store.Store
	rt    Runtime
	slots Slots
	// agentDir holds the cube-envd this node boots new templates with.
	agentDir string
	agentAt  func(host netip.Addr) Agent

	mu   sync.Mutex
	live map[string]*live // running sandboxes by ID
	// busy marks sandboxes with an operation in flight, so kill, pause and
	// snapshot of one sandbox are serialised.
	locks map[string]*sync.Mutex

	// warm holds restored, not yet handed out sandboxes per template.
	warm    map[string][]*live
	refill  chan struct{}
	closing bool

	stop chan struct{}
	wg   sync.WaitGroup

	// goneMu guards gone, the functions OnGone registered.
	goneMu sync.Mutex
	gone   []func(containerID string)
}

// live is a running sandbox's host resources.
type live struct {
	sb   runtime.Sandbox
	slot *netslot.Slot
	// frozen is set while the sandbox is paused in memory.
	frozen bool
	// trafficToken and maskHost are what the proxy needs of the sandbox's
	// record on every request; neither changes while it runs.
	trafficToken, maskHost string
	// cpu is the last CPU reading, for utilisation between samples.
	cpuAt   time.Time
	cpuTime time.Duration
}

// New prepares the data directory and returns a Node. Call Reconcile
// before serving.
func New(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxSandboxes == 0 {
		cfg.MaxSandboxes = 100
	}
	for _, d := range []string{"sandboxes", "templates", "snapshots", "envd"} {
		if err := os.MkdirAll(filepath.Join(cfg.DataDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	n := &Node{
		cfg: cfg, log: cfg.Logger, store: cfg.Store, rt: cfg.Runtime, slots: cfg.Slots,
		agentAt: cfg.AgentAt,
		live:    map[string]*live{}, locks: map[string]*sync.Mutex{},
		warm: map[string][]*live{}, refill: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	if n.agentAt == nil {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
		n.agentAt = func(host netip.Addr) Agent { return envdclient.At(hc, host) }
	}
	dir, err := installEnvd(cfg.DataDir, cfg.Envd)
	if err != nil {
		return nil, err
	}
	n.agentDir = dir
	return n, nil
}

// installEnvd copies cube-envd into a directory named by its content hash.
// A checkpoint refers to the exact binary its processes were started from,
// so every binary a template was built with stays where it was.
func installEnvd(dataDir, src string) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("cube-envd not found at %s: build it with `make build` (%w)", src, err)
	}
	sum := sha256.Sum256(data)
	dir := filepath.Join(dataDir, "envd", hex.EncodeToString(sum[:])[:16])
	dst := filepath.Join(dir, "cube-envd")
	if _, err := os.Stat(dst); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Synced like an image: templates built from now on name this copy.
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, data, 0o755); err != nil {
		return "", err
	}
	if err := fsyncPath(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	if err := fsyncPath(dir); err != nil {
		return "", err
	}
	return dir, fsyncPath(filepath.Dir(dir))
}

// AgentDir is the directory holding the cube-envd new templates boot with.
func (n *Node) AgentDir() string { return n.agentDir }

// lock serialises operations on one sandbox.
func (n *Node) lock(id string) func() {
	n.mu.Lock()
	l, ok := n.locks[id]
	if !ok {
		l = &sync.Mutex{}
		n.locks[id] = l
	}
	n.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// release returns a network slot to the pool.
func (n *Node) release(s *netslot.Slot) error {
	err := n.slots.Release(s)
	if n.cfg.Egress != nil {
		n.cfg.Egress.Forget(s)
	}
	return err
}

// retire stops a container that is done (if it still runs), frees its
// slot and tells those registered with OnGone.
func (n *Node) retire(l *live) {
	if err := l.sb.Kill(context.Background()); err != nil {
		n.log.Warn("kill sandbox container", "container", l.sb.ID(), "err", err)
	}
	if err := n.release(l.slot); err != nil {
		n.log.Warn("release network slot", "slot", l.slot.Index, "err", err)
	}
	n.goneMu.Lock()
	gone := n.gone
	n.goneMu.Unlock()
	for _, f := range gone {
		f(l.sb.ID())
	}
}

// OnGone registers f to be called with the container ID of every sandbox
// container that stops, so whoever keeps connections to it (the proxy)
// can drop them: its slot, and so its address, goes to the next sandbox.
// The node is built before what listens to it, hence a registration
// rather than a setting; f runs on the goroutine that retired the
// container and must not block.
func (n *Node) OnGone(f func(containerID string)) {
	n.goneMu.Lock()
	defer n.goneMu.Unlock()
	n.gone = append(n.gone, f)
}

// Close stops background work and the warm pool. Running sandboxes keep
// running and are re-adopted by the next start.
func (n *Node) Close() {
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	n.wg.Wait()
	n.drainWarm("")
}

// event appends a lifecycle line to a sandbox's log.
func (n *Node) event(id, level, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if err := n.store.AddEvent(context.Background(), id, level, msg); err != nil {
		n.log.Warn("record sandbox event", "sandbox", id, "err", err)
	}
}

// sandboxDir is where a sandbox's own files (pause images) live.
func (n *Node) sandboxDir(id string) string { return filepath.Join(n.cfg.DataDir, "sandboxes", id) }

// Spec is the runtime spec that boots or restores tpl as container id in
// netns. Restores must use the same rootfs and agent as the checkpoint.
func Spec(tpl *store.Template, id, netns string) runtime.Spec {
	args := []string{runtime.AgentMount + "/cube-envd"}
	if tpl.User != "" {
		args = append(args, "--start-user", tpl.User)
	}
	if tpl.Cwd != "" {
		args = append(args, "--start-cwd", tpl.Cwd)
	}
	if len(tpl.StartCmd) > 0 {
		args = append(args, "--")
		args = append(args, tpl.StartCmd...)
	}
	env := tpl.Env
	if !hasEnv(env, "PATH") {
		env = append(append([]string{}, env...), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return runtime.Spec{
		ID: id, Rootfs: tpl.Rootfs, AgentDir: tpl.Envd, WritableMB: tpl.DiskSizeMB,
		Args: args, Env: env, Cwd: "/", NetNS: netns,
		CPUCount: tpl.CPUCount, MemoryMB: tpl.MemoryMB,
	}
}

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

// Running is the number of sandboxes with a live container.
func (n *Node) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.live)
}
