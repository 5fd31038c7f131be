// Package server assembles a single-node Cube: state store, gVisor
// runtime, network slots, node, template builder, the HTTP control plane
// and the sandbox proxy, mounted on one listener. It holds no logic of its
// own beyond wiring them; cmd/cube-server only parses flags and calls Run.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"cube/internal/api"
	"cube/internal/audit"
	"cube/internal/cube"
	"cube/internal/envd/protocol"
	"cube/internal/fault"
	"cube/internal/netslot"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/proxy"
	"cube/internal/quota"
	"cube/internal/runtime/gvisor"
	"cube/internal/store"
	"cube/internal/teams"
	"cube/internal/template"
	teamusage "cube/internal/usage"
	"cube/internal/version"
	"cube/internal/webui"
)

// Options are cube-server's settings.
type Options struct {
	Listen  string
	DataDir string
	// Store is the state database: empty for the SQLite file
	// <DataDir>/state.db, or a postgres:// URL shared by the nodes of a
	// cluster, each claiming its node name on it (store.Claim).
	Store string
	// NodeID names this node in the nodes API (default: kept in
	// <DataDir>/node-id, made from the host name at first start);
	// Advertise is the base URL other nodes reach its API at (default
	// http://<the listen address>).
	NodeID, Advertise string
	// ClusterSecret signs the requests nodes sharing a PostgreSQL store
	// forward to each other; every node has the same. Needed with one.
	ClusterSecret string
	// PeerListen is the address of the listener other nodes reach this
	// one at over mutual TLS (see peers.go); Advertise then defaults to
	// https://<it>, and signed requests are taken only there. Empty: peers
	// use Advertise as any client does, signed requests only, which a
	// node takes only with ClusterInsecureTransport.
	PeerListen string
	// ClusterInsecureTransport lets a node of a cluster run without
	// PeerListen: its peers then pass it clients' API keys and sandbox
	// tokens in clear. For test clusters on one host only.
	ClusterInsecureTransport bool
	// Domain is the sandbox domain: <port>-<id>.<Domain> routes to a
	// sandbox, api.<Domain> to the API. Default DefaultDomain.
	Domain string
	// TLSListen is the address of the HTTPS listener, which serves the
	// same API and sandbox traffic as Listen; empty serves no HTTPS. Its
	// certificates come from TLSCert and TLSKey, from ACME (with
	// ACMEEmail), or by default from a local CA in <DataDir>/tls.
	TLSListen string
	TLSCert   string
	TLSKey    string
	ACME      bool
	ACMEEmail string
	Runsc     string // path of runsc; default: beside the executable
	Envd      string // path of cube-envd; default: beside the executable
	// Console is the cube-console binary of the console keepers; default
	// beside the executable, and when none is there cube-server itself.
	Console      string
	MaxSandboxes int
	// DiskReserveMB is free space snapshots leave in the data directory
	// (node.Config.DiskReserveMB).
	DiskReserveMB int
	PoolSize      int
	// PreparedPerKey is how many containers are made ahead of cold
	// restores per kind of restore in demand (node.Config.PreparedPerKey).
	PreparedPerKey int
	// VolumeMB and MaxVolumeMB are the size of a volume created without
	// one and the largest volume allowed (node.Config.VolumeBytes).
	VolumeMB, MaxVolumeMB int64
	// AuditMaxAge and AuditMaxRows bound the audit trail (0: audit's
	// defaults, 90 days and a million entries).
	AuditMaxAge  time.Duration
	AuditMaxRows int64
	// PauseWriteDelay is how long a paused sandbox stays in memory.
	PauseWriteDelay time.Duration
	MaxTimeout      time.Duration
	Slots           int
	SlotPrefix      string
	HostCIDR        string
	AllowPrivate    []netip.Prefix
	RateLimit       float64
	// ImportDir is the only directory local image sources are read from;
	// default <DataDir>/imports.
	ImportDir string
	// MaxImageBytes and MaxFileBytes bound what unpacking an image writes,
	// in all and per file; 0 takes oci's defaults.
	MaxImageBytes, MaxFileBytes int64
	// BuildTimeout and MaxLayerBytes bound a template build by steps and
	// what one of its steps may write; zero takes template's defaults.
	BuildTimeout  time.Duration
	MaxLayerBytes int64
	// InsecureRegistries may be pulled from over plain HTTP or with
	// untrusted certificates.
	InsecureRegistries []string
	// ProxyRateLimit is proxied requests per second per source address;
	// 0 means unlimited.
	ProxyRateLimit float64
	// CodeContextsNeedToken: see node.Config.
	CodeContextsNeedToken bool
	// EgressCABundle is a PEM file of the roots that hosts with network
	// rules are verified against; empty: the host's trust store.
	EgressCABundle string
	// SecretsKey seals secrets (32 bytes, base64 or hex); empty:
	// $CUBE_SECRETS_KEY, else <DataDir>/secrets.key, made on first use.
	SecretsKey string
	// PrivateMemory: see gvisor.Config.
	PrivateMemory bool
	// EagerCopy: see gvisor.Config.
	EagerCopy bool
	Debug     bool
	Logger    *slog.Logger
	// Ready, when set, receives the listening address once serving.
	Ready func(addr string)
	// Parts, for simulations and tests, are the runtime, network slots
	// and sandbox agents to use instead of gVisor's, namespaces and envd:
	// nil (cube-server) makes the real ones. See Parts.
	Parts *Parts
}

// Parts are what a node drives on its host, given to Run instead of the
// parts it makes itself (internal/node/nodefake has in-memory ones), so
// that many nodes of the real assembly can run in one process without
// root: a simulation of a cluster (internal/sim), a test. With Parts, Run
// needs no root, runsc or console, and makes no egress Filter: sandboxes
// have no network to filter. Everything else (store, claim, registry,
// forwarding, placement, API, proxy, builder) is as cube-server's.
type Parts struct {
	// Runtime runs the containers.
	Runtime node.Runtime
	// Slots is the network slot pool; Options.Slots is its size, which
	// the node's heartbeat reports.
	Slots node.Slots
	// AgentAt returns the agent of the sandbox reached at host
	// (node.Config.AgentAt); nil speaks to envd over HTTP.
	AgentAt func(host netip.Addr) node.Agent
}

// Check reports, as one actionable line, why the server cannot start here:
// no root, a data dir it cannot write, missing binaries. It creates
// nothing it does not keep.
func (o *Options) Check() error {
	if os.Geteuid() != 0 {
		return errors.New("cube-server needs root (it creates network namespaces and runs gVisor): run it as root, e.g. `sudo make run`")
	}
	if err := o.checkDataDir(); err != nil {
		return err
	}
	exe, _ := os.Executable()
	if o.Runsc == "" {
		o.Runsc = filepath.Join(filepath.Dir(exe), "runsc")
	}
	if o.Envd == "" {
		o.Envd = filepath.Join(filepath.Dir(exe), "cube-envd")
	}
	if o.Console == "" {
		if c := filepath.Join(filepath.Dir(exe), "cube-console"); fileExists(c) {
			o.Console = c
		}
	}
	for _, b := range []string{o.Runsc, o.Envd} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("%s not found: build it with `make build` or point to it with --%s", b, filepath.Base(b))
		}
	}
	return nil
}

// checkParts is Check for a server on Parts: its data directory, and the
// agent binary the node installs (any file will do for fake agents).
func (o *Options) checkParts() error {
	if o.Parts.Runtime == nil || o.Parts.Slots == nil {
		return errors.New("server.Parts needs a Runtime and Slots")
	}
	if err := o.checkDataDir(); err != nil {
		return err
	}
	if _, err := os.Stat(o.Envd); err != nil {
		return fmt.Errorf("the agent binary: %w", err)
	}
	return nil
}

// checkDataDir makes the data directory if need be and checks that it is
// private and writable.
func (o *Options) checkDataDir() error {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("cannot create data dir %s: %v: choose another with --data-dir", o.DataDir, err)
	}
	if err := checkPrivate(o.DataDir); err != nil {
		return err
	}
	probe := filepath.Join(o.DataDir, ".write-test")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return fmt.Errorf("data dir %s is not writable: %v: fix its permissions or choose another with --data-dir", o.DataDir, err)
	}
	os.Remove(probe)
	return nil
}

// checkPeers refuses a node of a cluster whose peers would reach it in
// clear: what they forward to it carries clients' API keys and sandbox
// access tokens.
func (o *Options) checkPeers() error {
	switch {
	case o.Store == "" && (o.PeerListen != "" || o.ClusterInsecureTransport):
		return errors.New("--peer-listen and --cluster-insecure-transport are for the nodes of a cluster: give them a --store postgres://... to share")
	case o.Store == "" || (o.PeerListen != "") != o.ClusterInsecureTransport:
		return nil
	case o.PeerListen != "":
		return errors.New("--cluster-insecure-transport is for nodes without --peer-listen: give one or the other")
	}
	return errors.New("--store postgres://… makes this server a node of a cluster, and nodes pass each other clients' API keys and sandbox tokens: " +
		"give it a --peer-listen address, where its peers reach it over mutual TLS (the --advertise address is then https://<it>), " +
		"or --cluster-insecure-transport for a test cluster on one host only")
}

// Run serves until ctx ends, then shuts down cleanly. Running sandboxes
// are left running and re-adopted by the next start.
//
// It builds the server's parts in the order they depend on each other,
// each from the parts made before it, and closes them in reverse (see
// closers): store, runtime, egress, network slots, listeners, the cluster's
// registry and peer client, the proxy's connection pool, node, template
// builder, API, proxy, and the HTTP servers.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := o.checkPeers(); err != nil {
		return err
	}
	check := o.Check
	if o.Parts != nil {
		check = o.checkParts
	}
	if err := check(); err != nil {
		return err
	}
	// Crash tests arm a point at which the server kills itself.
	if err := fault.Arm(os.Getenv(fault.EnvVar)); err != nil {
		return err
	}
	if p := fault.Armed(); p != "" {
		log.Warn("fault point armed: the server kills itself with SIGKILL when it gets there", "point", p)
	}
	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	var done closers
	defer done.close()
	unlock, err := lockDataDir(o.DataDir)
	if err != nil {
		return err
	}
	done.push(unlock)
	if err := privateSubdirs(o.DataDir); err != nil {
		return err
	}
	name, err := nodeName(o)
	if err != nil {
		return err
	}
	// A server whose claim on a shared database another one took must stop
	// before the two reconcile each other's sandboxes away.
	ctx, stopRun := context.WithCancelCause(ctx)
	done.push(func() { stopRun(nil) })
	st, err := openStore(ctx, o, name, func(err error) {
		log.Error("stopping: the state database is no longer this server's", "err", err)
		stopRun(err)
	})
	if err != nil {
		return err
	}
	done.push(func() { st.Close() })
	keys, err := openTeams(ctx, o, st)
	if err != nil {
		return err
	}
	rt, err := openRuntime(o, &done)
	if err != nil {
		return err
	}
	hostCIDR, err := hostPrefix(o)
	if err != nil {
		return err
	}
	eg, err := openEgress(o, hostCIDR, log, &done)
	if err != nil {
		return err
	}
	slots, err := openSlots(o, hostCIDR, log, &done)
	if err != nil {
		return err
	}
	ls, err := openListeners(o, st, log, &done)
	if err != nil {
		return err
	}
	cl, err := openCluster(ctx, o, name, st, ls)
	if err != nil {
		return err
	}
	// The proxy's connections to sandboxes, which the node tells when a
	// container stops.
	conns := proxy.NewPool(0)
	quotas := quota.New(st, keys.Quotas)
	nd, err := openNode(ctx, o, name, st, quotas, rt, slots, eg, cl, conns, log, &done)
	if err != nil {
		return err
	}
	builder, err := openBuilder(ctx, o, name, st, quotas, nd, log, &done)
	if err != nil {
		return err
	}
	counts := &creates{}
	if err := registerNode(ctx, o, cl.registry, nd, slots.size, counts); err != nil {
		return err
	}
	go cl.registry.Run(ctx)
	own := &service{
		node: nd, builder: builder, nodes: cl.registry, secrets: eg.secrets, creates: counts, forkAway: cl.forkAway(st, nd),
		usage: teamusage.New(st),
	}
	trail := audit.New(st, name, audit.Retention{MaxAge: o.AuditMaxAge, MaxRows: o.AuditMaxRows}, log)
	done.push(trail.Close)
	apiSrv, err := newAPI(o, keys, trail, ls, log, eg, nd, builder, cl, own.usage, cl.service(own, nd, st))
	if err != nil {
		return err
	}
	px := newProxy(o, apiSrv, nd, conns, log)
	nd.Start()
	handler := clusterHandler(o, st, nd, cl, px, api.Mount(apiSrv, px), api.Mount(apiSrv.Over(own), px), own, apiSrv.IsAPIKey, log)
	return serve(ctx, o, ls, handler, cl.serverTLS(), log)
}

// closers undo what Run built, the last built first, so that each part
// closes before the parts it uses.
type closers []func()

func (c *closers) push(f func()) { *c = append(*c, f) }

func (c *closers) close() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// openTeams makes the server's API key the first team's admin key, and
// that team the owner of every record from before teams (see
// teams.Bootstrap), before the node reconciles any of them.
func openTeams(ctx context.Context, o Options, st *store.Store) (*teams.Keys, error) {
	key, err := apiKey(o)
	if err != nil {
		return nil, err
	}
	keys := teams.New(st)
	if err := keys.Bootstrap(ctx, key); err != nil {
		return nil, fmt.Errorf("teams: %w", err)
	}
	return keys, nil
}

// apiKey is $CUBE_API_KEY, else the key kept in the data directory, made
// on first start.
func apiKey(o Options) (string, error) {
	if key := os.Getenv("CUBE_API_KEY"); key != "" {
		return key, nil
	}
	path := filepath.Join(o.DataDir, "api-key")
	key, created, err := teams.EnsureKeyFile(path)
	if err != nil {
		return "", err
	}
	if created {
		fmt.Fprintf(os.Stderr, "Generated API key (stored in %s):\n\n    %s\n\n", path, key)
	}
	return key, nil
}

// openRuntime is gVisor's runtime, or the one Parts give.
func openRuntime(o Options, done *closers) (node.Runtime, error) {
	if o.Parts != nil {
		return o.Parts.Runtime, nil
	}
	rt, err := gvisor.New(gvisor.Config{
		Runsc: o.Runsc, Root: filepath.Join(o.DataDir, "runsc"),
		Bundles: filepath.Join(o.DataDir, "bundles"), Debug: o.Debug, Keeper: o.Console,
		PrivateMemory: o.PrivateMemory, EagerCopy: o.EagerCopy,
	})
	if err != nil {
		return nil, err
	}
	done.push(func() { rt.Close() })
	return rt, nil
}

// hostPrefix is --host-cidr, which the slots and the egress Filter share.
func hostPrefix(o Options) (netip.Prefix, error) {
	if o.HostCIDR == "" {
		return netip.Prefix{}, nil
	}
	return parsePrefix(o.HostCIDR)
}

// netSlots is the network slot pool and whether Close tears it down.
// Running sandboxes keep their slots across a restart and the next start
// re-adopts them; with none left, every slot is torn down. The node, which
// knows, closes after the pool is made and before it is torn down, and
// says.
type netSlots struct {
	pool node.Slots
	size int
	keep bool
}

// openSlots makes the pool of network slots, or takes the one Parts give
// (Options.Slots in size), which it leaves as it is at the end.
func openSlots(o Options, hostCIDR netip.Prefix, log *slog.Logger, done *closers) (*netSlots, error) {
	if o.Parts != nil {
		return &netSlots{pool: o.Parts.Slots, size: o.Slots}, nil
	}
	pool, err := netslot.NewPool(netslot.Config{Prefix: o.SlotPrefix, Size: o.Slots, AllowPrivate: o.AllowPrivate, HostCIDR: hostCIDR, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("network slots: %w", err)
	}
	s := &netSlots{pool: pool, size: pool.Size()}
	done.push(func() {
		if s.keep {
			return
		}
		if err := pool.Close(); err != nil {
			log.Warn("tear down network slots", "err", err)
		}
	})
	return s, nil
}

// openNode makes the node, with the egress Filter and its events, the
// cluster's registry and the peer client it fetches files by, and the
// proxy's pool, whose connections to a container it drops when the
// container stops; and reconciles it with what the host holds.
func openNode(ctx context.Context, o Options, name string, st *store.Store, quotas *quota.Checker, rt node.Runtime, slots *netSlots, eg *egressParts, cl *clusterParts, conns *proxy.Pool, log *slog.Logger, done *closers) (*node.Node, error) {
	files := newPeerFiles(cl.client)
	var agentAt func(netip.Addr) node.Agent
	if o.Parts != nil {
		agentAt = o.Parts.AgentAt
	}
	nd, err := node.New(node.Config{
		DataDir: o.DataDir, Envd: o.Envd, Runtime: rt, Slots: slots.pool, Store: st, Logger: log,
		MaxSandboxes: o.MaxSandboxes, DiskReserveMB: o.DiskReserveMB, NodeID: name, Quota: quotas,
		PeerAlive: cl.registry.Alive, EnvdVersion: protocol.Version, Domain: o.Domain, PoolSize: o.PoolSize, PreparedPerKey: o.PreparedPerKey,
		Egress: eg.filter, EgressEvents: eg.events,
		VolumeBytes: o.VolumeMB << 20, MaxVolumeBytes: o.MaxVolumeMB << 20,
		PauseWriteDelay: o.PauseWriteDelay, CodeContextsNeedToken: o.CodeContextsNeedToken,
		EgressCA: eg.ca, Secrets: eg.secrets,
		FetchTemplate: files.template, FetchSandbox: files.sandbox, SandboxMoved: files.moved, FetchForkImage: files.fork,
		Gone: conns.Forget, AgentAt: agentAt,
	})
	if err != nil {
		return nil, err
	}
	done.push(func() {
		nd.Close()
		slots.keep = nd.Running() > 0
	})
	if err := nd.Reconcile(ctx); err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	return nd, nil
}

// openBuilder makes the template builder, which boots its sandboxes on
// the node, and recovers the builds a crash interrupted. Builds stop
// before the node.
func openBuilder(ctx context.Context, o Options, name string, st *store.Store, quotas *quota.Checker, nd *node.Node, log *slog.Logger, done *closers) (*template.Builder, error) {
	builder, err := template.New(template.Config{DataDir: o.DataDir, Store: st, Snapshotter: nd, Logger: log, NodeID: name, Quota: quotas,
		ImportDir: o.ImportDir, InsecureRegistries: o.InsecureRegistries,
		Limits:       oci.Limits{MaxBytes: o.MaxImageBytes, MaxFileBytes: o.MaxFileBytes},
		BuildTimeout: o.BuildTimeout, MaxLayerBytes: o.MaxLayerBytes})
	if err != nil {
		return nil, err
	}
	done.push(func() { builder.Close() })
	if err := builder.Recover(ctx); err != nil {
		return nil, fmt.Errorf("recover template builds: %w", err)
	}
	return builder, nil
}

// newAPI makes the control plane over svc, with the metrics of every
// part.
func newAPI(o Options, keys *teams.Keys, trail *audit.Log, ls *listeners, log *slog.Logger, eg *egressParts, nd *node.Node, builder *template.Builder, cl *clusterParts, use *teamusage.Reader, svc cube.Backend) (*api.Server, error) {
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.MustRegister(nd.Collectors()...)
	if eg.filter != nil {
		metrics.MustRegister(eg.filter.Collectors()...)
	}
	metrics.MustRegister(builder.Collectors()...)
	if o.Store != "" {
		metrics.MustRegister(cl.registry.Collector())
	}
	// Per-sandbox series name sandboxes: served only with a key.
	perSandbox := prometheus.NewRegistry()
	perSandbox.MustRegister(nd.SandboxCollector())
	perSandbox.MustRegister(use.Collector(cl.registry.Self())) // per-team series name teams: the same
	return api.NewServer(api.Config{
		Teams: keys, Audit: trail, Domain: ls.reported, CACert: ls.caPEM(),
		MaxTimeout: o.MaxTimeout, Logger: log, RateLimit: o.RateLimit, Registry: metrics, SandboxMetrics: perSandbox,
		Console: webui.New(webui.Config{Gatherer: prometheus.Gatherers{metrics, perSandbox}, Version: version.Version, DataDir: o.DataDir,
			Runtime: "gVisor (runsc, systrap platform)", MaxSandboxes: o.MaxSandboxes}),
	}, svc)
}

// newProxy makes the sandbox proxy, which finds sandboxes through the
// node and reaches them through conns. The node, made before the proxy,
// was given conns, so it can drop a stopped container's connections: its
// slot, and with it its address, goes to the next sandbox.
func newProxy(o Options, apiSrv *api.Server, nd *node.Node, conns *proxy.Pool, log *slog.Logger) *proxy.Proxy {
	return proxy.New(proxy.Config{
		Domain: o.Domain, Logger: log, IsAPIKey: apiSrv.IsAPIKey, RateLimit: o.ProxyRateLimit, Pool: conns,
	}, nd)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
