// Package nodetest sets up real nodes for tests: gVisor, network slots
// with a private prefix and address range, a state store, and a tiny
// template whose rootfs holds only directories (cube-envd is static and
// serves files and /health without anything else).
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cube/internal/envd/protocol"
	"cube/internal/id"
	"cube/internal/netslot"
	"cube/internal/node"
	"cube/internal/runtime/gvisor"
	"cube/internal/store"
	"cube/internal/testenv"
)

// Node is a node under test and what it is made of.
type Node struct {
	*node.Node
	Store   *store.Store
	Slots   *netslot.Pool
	Runtime *gvisor.Runtime
	DataDir string
	Prefix  string
	CIDR    netip.Prefix
	NodeID  string
}

// Options tune New.
type Options struct {
	DataDir      string // default: a temp dir
	MaxSandboxes int
	PoolSize     int
	// PauseWriteDelay: how long paused sandboxes stay in memory.
	PauseWriteDelay time.Duration
	// CodeContextsNeedToken: see node.Config.
	CodeContextsNeedToken bool
	// Store is a postgres:// state database; empty means the SQLite file
	// in DataDir.
	Store string
	// NodeID names the node among the nodes sharing Store; its templates
	// record it.
	NodeID string
}

// New starts a node on real gVisor; it is torn down when the test ends.
func New(t testing.TB, o Options) *Node {
	testenv.RequireRoot(t)
	runsc := testenv.Bin(t, "runsc")
	envdBin := testenv.Bin(t, "cube-envd")
	dir := o.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	var st *store.Store
	var err error
	if o.Store != "" {
		st, err = store.OpenPostgres(context.Background(), o.Store)
	} else {
		st, err = store.Open(filepath.Join(dir, "state.db"))
	}
	if err != nil {
		t.Fatal(err)
	}
	rt, err := gvisor.New(gvisor.Config{Runsc: runsc, Root: filepath.Join(dir, "runsc"), Bundles: filepath.Join(dir, "bundles")})
	if err != nil {
		t.Fatal(err)
	}
	// Tests of several packages run at once, each on a random range: one
	// that another test holds right now is refused, and another is drawn.
	var slots *netslot.Pool
	var prefix string
	var cidr netip.Prefix
	for try := 0; ; try++ {
		prefix, cidr = SlotRange()
		slots, err = netslot.NewPool(netslot.Config{Prefix: prefix, Size: 16, HostCIDR: cidr, Warm: 1, Logger: Logger()})
		if err == nil {
			break
		}
		if try == 4 || !strings.Contains(err.Error(), "overlaps route") {
			t.Fatal(err)
		}
	}
	n, err := node.New(node.Config{DataDir: dir, Envd: envdBin, Runtime: rt, Slots: slots, Store: st,
		Logger: Logger(), EnvdVersion: protocol.Version, MaxSandboxes: o.MaxSandboxes, PoolSize: o.PoolSize,
		PauseWriteDelay: o.PauseWriteDelay, CodeContextsNeedToken: o.CodeContextsNeedToken, NodeID: o.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	tn := &Node{Node: n, Store: st, Slots: slots, Runtime: rt, DataDir: dir, Prefix: prefix, CIDR: cidr, NodeID: o.NodeID}
	t.Cleanup(tn.Close)
	return tn
}

// Close stops the node and removes every sandbox, slot and mount it made.
// It is safe to call twice.
func (n *Node) Close() {
	if n.Store == nil {
		return
	}
	n.Node.Close()
	ids, _ := n.Runtime.List(context.Background())
	for _, id := range ids {
		n.Runtime.Remove(context.Background(), id)
	}
	n.Slots.Close()
	n.Runtime.Close()
	n.Store.Close()
	n.Store = nil
}

// SlotRange picks a slot name prefix and host address range no other test
// or server on the machine uses.
func SlotRange() (string, netip.Prefix) {
	return "ct" + id.New("", 4), netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 240+rand.IntN(10), rand.IntN(256)))
}

// Logger is where nodes under test log: stderr with CUBE_TEST_LOG=1.
func Logger() *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("CUBE_TEST_LOG") != "" {
		w = os.Stderr
	}
	return slog.New(slog.NewTextHandler(w, nil))
}

// TinyRootfs is where TinyTemplate puts template tplID's rootfs in
// dataDir, for tests that add files to it first. It is one level down: a
// server closes the data directory's top-level folders to other users at
// start, and a template's rootfs keeps the mode its manifest recorded, as
// the builder's rootfs/<digest> do.
func TinyRootfs(dataDir, tplID string) string {
	return filepath.Join(dataDir, "tiny-rootfs", tplID)
}

// TinyTemplate builds and stores a READY template with the given id and
// aliases from a rootfs of empty directories and the holder test program,
// which the template starts: it keeps a random token in memory and serves
// it on port HolderPort, so tests can tell whose memory a sandbox has.
func (n *Node) TinyTemplate(t testing.TB, tplID string, aliases ...string) *store.Template {
	t.Helper()
	rootfs := TinyRootfs(n.DataDir, tplID)
	for _, d := range []string{"tmp", "etc", "home", "proc", "dev", "sys", "root"} {
		os.MkdirAll(filepath.Join(rootfs, d), 0o755)
	}
	os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc", "group"), []byte("root:x:0:\n"), 0o644)
	testenv.BuildStatic(t, "./internal/runtime/gvisor/testdata/holder", rootfs, "holder")
	tpl := &store.Template{ID: tplID, Aliases: aliases, Status: store.TemplateBuilding,
		Rootfs: rootfs, DiskSizeMB: 64, MemoryMB: 512, CPUCount: 1, CreatedAt: time.Now().UTC(),
		StartCmd: []string{"/holder"}, Node: n.NodeID}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := n.BuildSnapshot(ctx, tpl, probeHolder, nil); err != nil {
		t.Fatal(err)
	}
	tpl.Status = store.TemplateReady
	if err := n.Store.Templates().Put(ctx, tpl); err != nil {
		t.Fatal(err)
	}
	return tpl
}

// HolderPort is where a tiny template's start command serves its token.
const HolderPort = 8080

// NoKeepAlive never reuses a connection: a killed sandbox's address goes
// to the next sandbox.
var NoKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

// probeHolder waits until envd answers and the holder serves its token:
// the snapshot is taken only then, so every sandbox of a tiny template
// serves it from its first moment.
func probeHolder(ctx context.Context, addr netip.Addr) error {
	if err := ProbeEnvd(ctx, addr); err != nil {
		return err
	}
	return waitFor(ctx, netip.AddrPortFrom(addr, HolderPort), "/", http.StatusOK, "the holder never served its token")
}

// ProbeEnvd waits until envd answers /health at addr.
func ProbeEnvd(ctx context.Context, addr netip.Addr) error {
	return waitFor(ctx, netip.AddrPortFrom(addr, protocol.EnvdPort), "/health", http.StatusNoContent, "envd never answered /health")
}

// waitFor polls GET path at ap until it answers status, or fails with
// never when ctx ends first.
func waitFor(ctx context.Context, ap netip.AddrPort, path string, status int, never string) error {
	for ctx.Err() == nil {
		resp, err := NoKeepAlive.Get("http://" + ap.String() + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == status {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New(never)
}
