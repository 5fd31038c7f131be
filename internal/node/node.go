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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"cube/internal/egress"
	"cube/internal/envd/protocol"
	"cube/internal/envdclient"
	"cube/internal/netslot"
	"cube/internal/quota"
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
	// Describe says what a slot's network looks like, for the log.
	Describe(s *netslot.Slot) string
}

// SecretNames is what the node needs of the secret store: a create or
// network update whose rules name a secret that its sandbox's team does
// not have (another team's is not there) is refused before anything is
// applied.
type SecretNames interface {
	Exists(team, ref string) bool
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
	// Quota holds each team to its quotas (running sandboxes, their vCPUs
	// and memory, timeouts, disk); nil holds none.
	Quota *quota.Checker
	// DiskReserveMB is free space in the data directory that snapshots
	// leave alone (0 = DefaultDiskReserveMB, negative = none), so that a
	// run of snapshots cannot take the room the pauses of running
	// sandboxes need to be written out.
	DiskReserveMB int
	// NodeID names this node among the nodes sharing Store: its sandboxes
	// and snapshots record it, and it reconciles, reaps and counts only
	// the sandboxes that do.
	NodeID string
	// PeerAlive reports whether another node sharing Store heartbeats;
	// the sandboxes of one that does not are shown lost. Nil: every
	// sandbox is this node's.
	PeerAlive func(nodeID string) bool
	// FetchTemplate streams the files of a template that node holds (the
	// archive its ExportTemplate writes), so this node can run sandboxes
	// of it too. Nil: templates are used only where they were built.
	FetchTemplate func(ctx context.Context, node, templateID string) (io.ReadCloser, error)
	// FetchSandbox streams a sandbox paused on disk that node hands over
	// (the archive its HandOver writes), and SandboxMoved tells that node
	// the move is over; both nil: sandboxes resume where they paused.
	FetchSandbox func(ctx context.Context, node, sandboxID string, withTemplate bool) (io.ReadCloser, error)
	SandboxMoved func(ctx context.Context, node, sandboxID string)
	// FetchForkImage streams the fork image another node offers (see
	// forkaway.go); nil: forks start on their sandbox's node only.
	FetchForkImage func(ctx context.Context, node, image string) (io.ReadCloser, error)
	// EnvdVersion is what sandboxes report as envdVersion.
	EnvdVersion string
	// Domain is reported to SDKs for host-based routing.
	Domain string
	// Egress enforces per-sandbox egress policies; nil leaves every
	// sandbox with the slots' base isolation only. EgressEvents is the
	// queue its audit events arrive in (egress.Config.Audit), written into
	// sandbox logs; nil: only EgressAudit feeds them.
	Egress       *egress.Filter
	EgressEvents *egress.Events
	// EgressCA and Secrets serve network.rules: the CA sandboxes trust for
	// intercepted hosts, and the names of the secrets rules may insert
	// (the Filter reads their values as requests leave). Both may be nil.
	EgressCA *egress.CA
	Secrets  SecretNames
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
	// PreparedPerKey is how many prepared containers (see prepared.go) to
	// keep per kind of restore asked for recently; 0 disables them.
	PreparedPerKey int
	// VolumeBytes is the size of a volume created without one (0: 1 GiB);
	// MaxVolumeBytes the largest a volume may be (0: 100 GiB).
	VolumeBytes    int64
	MaxVolumeBytes int64
	// Gone is told the container ID of every sandbox container that
	// stops, so whoever keeps connections to it (the proxy's pool) can
	// drop them: its slot, and so its address, goes to the next sandbox.
	// It runs on the goroutine that retired the container and must not
	// block. Nil tells no one.
	Gone func(containerID string)
}

// Node owns the sandboxes of this host: it finds them (the registry),
// decides where new ones come from (the pools, copies of other nodes'
// templates, volumes) and puts the host right after a crash (Reconcile).
// What a sandbox does to itself is the sandbox's (sandbox.go); the node
// looks it up and asks it.
type Node struct {
	// host is shared with every sandbox; embedded so the node's own code
	// reads the runtime, store and configuration as its own.
	*host
	// copies are the templates of other nodes copied here.
	copies *templateCopies
	// moveMu takes sandboxes over from other nodes one at a time.
	moveMu sync.Mutex
	// offered are the fork images other nodes may fetch, by name.
	offered sync.Map
	// placement remembers template records for placing creates
	// (PlacementTemplate).
	placement placementTemplates
	// audit queues the egress Filter's events for sandbox logs.
	audit *auditLog
	// vols holds the persistent volumes (volumes.go).
	vols *volumeSet
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
	h := &host{
		cfg: cfg, log: cfg.Logger, tel: newTelemetry(), store: cfg.Store, rt: cfg.Runtime, slots: cfg.Slots,
		agentAt:   cfg.AgentAt,
		sandboxes: map[string]*sandbox{},
	}
	h.pools = newPools(h)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if h.agentAt == nil {
		h.agentAt = func(addr netip.Addr) Agent { return envdclient.At(envdclient.NoKeepAlive, addr) }
	}
	events := cfg.EgressEvents
	if events == nil {
		events = egress.NewEvents(0)
	}
	n := &Node{host: h, copies: &templateCopies{h: h}, audit: &auditLog{h: h, q: events}, vols: &volumeSet{h: h}}
	dir, err := installEnvd(cfg.DataDir, cfg.Envd)
	if err != nil {
		return nil, err
	}
	n.agentDir = dir
	if err := n.installEgressTrust(); err != nil {
		return nil, err
	}
	go n.audit.run()
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
	// The same mode whatever the umask: templates' manifests record it,
	// and a copy of a template from another node is checked against it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", err
		}
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

// retire stops a container that is done (if it still runs), frees its
// slot and tells Config.Gone.
func (h *host) retire(c *container) error {
	var errs []error
	if err := c.sb.Kill(context.Background()); err != nil {
		errs = append(errs, fmt.Errorf("kill container %s: %w", c.sb.ID(), err))
	}
	if err := h.release(c.slot); err != nil {
		errs = append(errs, fmt.Errorf("release network slot %d: %w", c.slot.Index, err))
	}
	if h.cfg.Gone != nil {
		h.cfg.Gone(c.sb.ID())
	}
	return errors.Join(errs...)
}

// Start begins background work, each piece on its own goroutine until
// Close: the reaper that ends sandboxes at their end time, the check for
// sandboxes whose container died, the warm pool's refiller and the
// preparer of containers for cold restores, and in a cluster the removal
// of copies of templates that are gone. Pause
// write-outs are scheduled as sandboxes pause.
func (n *Node) Start() {
	n.background(func() { n.reaper(n.ctx) })
	n.background(func() { n.watchAlive(n.ctx) })
	if n.cfg.PoolSize > 0 {
		n.background(func() { n.pools.refiller(n.ctx) })
		nudge(n.pools.refill)
	}
	if n.pools.preparer() != nil {
		n.background(func() { n.pools.prepareLoop(n.ctx) })
	}
	if n.cfg.FetchTemplate != nil {
		n.background(func() {
			every(n.ctx, time.Minute, nil, func(ctx context.Context) {
				if err := n.copies.dropStaleCopies(ctx); err != nil {
					n.log.Warn("copies of templates", "err", err)
				}
			})
		})
	}
}

// background runs f on its own goroutine, which Close waits for, and
// reports whether it did; once Close has begun it runs nothing, so Close
// never waits for work started after it.
func (h *host) background(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return false
	}
	h.wg.Go(f)
	return true
}

// Close stops background work, waits for it, and empties the warm pool
// and the prepared containers.
// Running sandboxes keep running, and paused ones stay frozen, to be
// re-adopted by the next start. It is safe to call twice.
func (n *Node) Close() {
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	n.pools.drainWarm("")
	n.pools.drainPrepared()
}

// event appends a lifecycle line to a sandbox's log.
func (h *host) event(id, level, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if err := h.store.AddEvent(context.Background(), id, level, msg); err != nil {
		h.log.Warn("record sandbox event", "sandbox", id, "err", err)
	}
}

// sandboxDir is where a sandbox's own files (pause images) live.
func (h *host) sandboxDir(id string) string { return filepath.Join(h.cfg.DataDir, "sandboxes", id) }

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
		env = append(append([]string{}, env...), "PATH="+defaultPath)
	}
	return runtime.Spec{
		ID: id, Rootfs: tpl.Rootfs, AgentDir: tpl.Envd, WritableMB: tpl.DiskSizeMB,
		Args: args, Env: env, Cwd: "/", NetNS: netns,
		CPUCount: tpl.CPUCount, MemoryMB: tpl.MemoryMB,
		Mounts: runtimeMounts(tpl.Mounts),
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

// Running is the number of sandboxes with a live container, frozen ones
// included.
func (n *Node) Running() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	running := 0
	for _, sb := range n.sandboxes {
		if sb.box != nil {
			running++
		}
	}
	return running
}
