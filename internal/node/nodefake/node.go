package nodefake

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/node"
	"cube/internal/store"
)

// Node is a node.Node on the fakes, with a real state store in a
// temporary directory, and what it is made of.
type Node struct {
	*node.Node
	Store   *store.Store
	Runtime *Runtime
	Slots   *Slots
	Agents  *Agents
	DataDir string

	opts   Options
	envd   string
	closed sync.Once
}

// Options tune New.
type Options struct {
	MaxSandboxes int
	// DiskReserveMB is node.Config's; 0 keeps none, so that fake nodes
	// do not depend on the free space of the host they run on.
	DiskReserveMB int
	PoolSize      int
	// Slots is the size of the slot pool (0 = 8).
	Slots int
	// PauseWriteDelay is how long a paused sandbox stays in memory before
	// it is written to disk: zero keeps it there for the whole test (an
	// hour), negative writes it out at once.
	PauseWriteDelay time.Duration
	// PreparedPerKey turns on prepared containers (node.Config).
	PreparedPerKey int
	// NodeID names the node; Store, when set, is a state store it shares
	// with other nodes (a cluster) instead of one of its own;
	// FetchTemplate is node.Config's.
	NodeID        string
	Store         *store.Store
	FetchTemplate func(ctx context.Context, node, templateID string) (io.ReadCloser, error)
	// FetchSandbox and SandboxMoved are node.Config's.
	FetchSandbox func(ctx context.Context, node, sandboxID string, withTemplate bool) (io.ReadCloser, error)
	SandboxMoved func(ctx context.Context, node, sandboxID string)
	// FetchForkImage is node.Config's.
	FetchForkImage func(ctx context.Context, node, image string) (io.ReadCloser, error)
	// Logger, when set, is where the node logs instead of stderr with
	// CUBE_TEST_LOG=1, for tests that look for what it warned of.
	Logger *slog.Logger
	// LearnHotPages, when set, makes the runtime a runtime.HotPageLearner
	// that answers with it.
	LearnHotPages func(image, probe string) (int64, error)
}

// hotRuntime is a Runtime that learns hot pages (Options.LearnHotPages).
type hotRuntime struct {
	*Runtime
	learn func(image, probe string) (int64, error)
}

func (r hotRuntime) LearnHotPages(image, probe string) (int64, error) { return r.learn(image, probe) }

// New starts a node on fresh fakes; it is closed when the test ends.
func New(t testing.TB, o Options) *Node {
	t.Helper()
	if o.Slots == 0 {
		o.Slots = 8
	}
	dir := t.TempDir()
	st := o.Store
	if st == nil {
		var err error
		if st, err = store.Open(filepath.Join(dir, "state.db")); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
	}
	// The node installs its agent binary by content; any bytes will do.
	envd := filepath.Join(t.TempDir(), "cube-envd")
	if err := os.WriteFile(envd, []byte("fake cube-envd\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	n := &Node{Store: st, Runtime: NewRuntime(), Slots: NewSlots(o.Slots), Agents: NewAgents(),
		DataDir: dir, opts: o, envd: envd}
	n.start(t)
	return n
}

// start makes n.Node on n's store and fakes and starts its background work.
func (n *Node) start(t testing.TB) {
	t.Helper()
	delay := n.opts.PauseWriteDelay
	if delay == 0 {
		delay = time.Hour
	}
	log := n.opts.Logger
	if log == nil {
		log = logger()
	}
	var rt node.Runtime = n.Runtime
	if n.opts.LearnHotPages != nil {
		rt = hotRuntime{n.Runtime, n.opts.LearnHotPages}
	}
	nn, err := node.New(node.Config{DataDir: n.DataDir, Envd: n.envd, Runtime: rt, Slots: n.Slots,
		Store: n.Store, Logger: log, MaxSandboxes: n.opts.MaxSandboxes, DiskReserveMB: cmp.Or(n.opts.DiskReserveMB, -1), PoolSize: n.opts.PoolSize, PreparedPerKey: n.opts.PreparedPerKey,
		EnvdVersion: protocol.Version, PauseWriteDelay: delay, AgentAt: n.Agents.At,
		NodeID: n.opts.NodeID, FetchTemplate: n.opts.FetchTemplate,
		FetchSandbox: n.opts.FetchSandbox, SandboxMoved: n.opts.SandboxMoved, FetchForkImage: n.opts.FetchForkImage})
	if err != nil {
		t.Fatal(err)
	}
	n.Node = nn
	nn.Start()
	t.Cleanup(n.Close)
}

// Close stops the node's background work; containers stay in the fake
// runtime. It is safe to call twice.
func (n *Node) Close() { n.closed.Do(n.Node.Close) }

// Restart plays the server dying and starting again: this node stops,
// the slot pool forgets what it held (the slots stay on the "host"), and
// a new node on the same data directory, store and fakes reconciles and
// starts. The node returned shares the fakes with n.
func (n *Node) Restart(t testing.TB) *Node {
	t.Helper()
	n.Close()
	n.Slots.Crash()
	next := &Node{Store: n.Store, Runtime: n.Runtime, Slots: n.Slots, Agents: n.Agents,
		DataDir: n.DataDir, opts: n.opts, envd: n.envd}
	next.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := next.Reconcile(ctx); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return next
}

// Rootfs is the directory AddTemplate builds tplID from. A test fills it
// before AddTemplate: the build lists the files in the template's
// manifest, and a copy of the template on another node must match it.
func (n *Node) Rootfs(tplID string) string { return filepath.Join(n.DataDir, "rootfs-"+tplID) }

// AddTemplate builds a READY template through the node's own build path
// (a boot in a slot, a checkpoint and the manifest of its files) and
// stores it. Its rootfs is Rootfs(tplID), made empty unless it exists.
func (n *Node) AddTemplate(t testing.TB, tplID string, aliases ...string) *store.Template {
	t.Helper()
	tpl := &store.Template{ID: tplID, Aliases: aliases, Status: store.TemplateBuilding, Node: n.opts.NodeID,
		Rootfs: n.Rootfs(tplID), DiskSizeMB: 64, MemoryMB: 512, CPUCount: 1,
		CreatedAt: time.Now().UTC()}
	if err := os.MkdirAll(tpl.Rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	probe := func(context.Context, netip.Addr) error { return nil }
	if err := n.BuildSnapshot(ctx, tpl, probe, nil); err != nil {
		t.Fatal(err)
	}
	tpl.Status = store.TemplateReady
	if err := n.Store.Templates().Put(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

// logger is where fake nodes log: stderr with CUBE_TEST_LOG=1.
func logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("CUBE_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, nil))
}
