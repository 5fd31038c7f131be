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
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"cube/internal/api"
	"cube/internal/cluster"
	"cube/internal/egress"
	"cube/internal/envd/protocol"
	"cube/internal/fault"
	"cube/internal/forward"
	"cube/internal/netslot"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/proxy"
	"cube/internal/runtime/gvisor"
	"cube/internal/template"
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
	Debug         bool
	Logger        *slog.Logger
	// Ready, when set, receives the listening address once serving.
	Ready func(addr string)
}

// Check reports, as one actionable line, why the server cannot start here:
// no root, a data dir it cannot write, missing binaries. It creates
// nothing it does not keep.
func (o *Options) Check() error {
	if os.Geteuid() != 0 {
		return errors.New("cube-server needs root (it creates network namespaces and runs gVisor): run it as root, e.g. `sudo make run`")
	}
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
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if err := o.checkPeers(); err != nil {
		return err
	}
	if err := o.Check(); err != nil {
		return err
	}
	// Crash tests arm a point at which the server kills itself.
	if err := fault.Arm(os.Getenv(fault.EnvVar)); err != nil {
		return err
	}
	if p := fault.Armed(); p != "" {
		log.Warn("fault point armed: the server kills itself with SIGKILL when it gets there", "point", p)
	}
	unlock, err := lockDataDir(o.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
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
	defer stopRun(nil)
	st, err := openStore(ctx, o, name, func(err error) {
		log.Error("stopping: the state database is no longer this server's", "err", err)
		stopRun(err)
	})
	if err != nil {
		return err
	}
	defer st.Close()

	key := os.Getenv("CUBE_API_KEY")
	if key == "" {
		k, created, err := api.EnsureAPIKey(filepath.Join(o.DataDir, "api-key"))
		if err != nil {
			return err
		}
		key = k
		if created {
			fmt.Fprintf(os.Stderr, "Generated API key (stored in %s):\n\n    %s\n\n", filepath.Join(o.DataDir, "api-key"), key)
		}
	}

	rt, err := gvisor.New(gvisor.Config{
		Runsc: o.Runsc, Root: filepath.Join(o.DataDir, "runsc"),
		Bundles: filepath.Join(o.DataDir, "bundles"), Debug: o.Debug, Keeper: o.Console,
		PrivateMemory: o.PrivateMemory,
	})
	if err != nil {
		return err
	}
	defer rt.Close()

	slotCfg := netslot.Config{Prefix: o.SlotPrefix, Size: o.Slots, AllowPrivate: o.AllowPrivate, Logger: log}
	if o.HostCIDR != "" {
		p, err := parsePrefix(o.HostCIDR)
		if err != nil {
			return err
		}
		slotCfg.HostCIDR = p
	}
	slots, err := netslot.NewPool(slotCfg)
	if err != nil {
		return fmt.Errorf("network slots: %w", err)
	}
	eg, err := openEgress(o)
	if err != nil {
		slots.Close()
		return err
	}
	// The node, made below, writes the Filter's audit events into sandbox
	// logs.
	events := egress.NewEvents(0)
	filter, err := egress.NewFilter(egress.Config{AllowPrivate: o.AllowPrivate, HostCIDR: slotCfg.HostCIDR, Logger: log,
		CA: eg.ca, UpstreamRoots: eg.roots, Secrets: eg.secrets.Value, Audit: events.Add})
	if err != nil {
		slots.Close()
		return fmt.Errorf("egress filter: %w", err)
	}
	defer filter.Close()
	var nd *node.Node
	// The node shows other nodes' sandboxes lost once their node stops
	// heartbeating; the registry that knows is made after the node.
	var peers atomic.Pointer[cluster.Registry]
	// Copies of templates between nodes go through the forwarding, made
	// after the node.
	var fwd atomic.Pointer[forward.Handler]
	files := newPeerFiles(o, &fwd)
	// Running sandboxes keep their slots across a restart and the next
	// start re-adopts them; with none left, every slot is torn down.
	defer func() {
		if nd == nil || nd.Running() == 0 {
			if err := slots.Close(); err != nil {
				log.Warn("tear down network slots", "err", err)
			}
		}
	}()

	nd, err = node.New(node.Config{
		DataDir: o.DataDir, Envd: o.Envd, Runtime: rt, Slots: slots, Store: st, Logger: log,
		MaxSandboxes: o.MaxSandboxes, DiskReserveMB: o.DiskReserveMB, NodeID: name,
		PeerAlive: func(id string) bool { r := peers.Load(); return r == nil || r.Alive(id) }, EnvdVersion: protocol.Version, Domain: o.Domain, PoolSize: o.PoolSize, PreparedPerKey: o.PreparedPerKey, Egress: filter, EgressEvents: events,
		VolumeBytes: o.VolumeMB << 20, MaxVolumeBytes: o.MaxVolumeMB << 20,
		PauseWriteDelay: o.PauseWriteDelay, CodeContextsNeedToken: o.CodeContextsNeedToken,
		EgressCA: eg.ca, Secrets: eg.secrets,
		FetchTemplate: files.template, FetchSandbox: files.sandbox, SandboxMoved: files.moved, FetchForkImage: files.fork,
	})
	if err != nil {
		return err
	}
	if err := nd.Reconcile(ctx); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	builder, err := template.New(template.Config{DataDir: o.DataDir, Store: st, Snapshotter: nd, Logger: log, NodeID: name,
		ImportDir: o.ImportDir, InsecureRegistries: o.InsecureRegistries,
		Limits:       oci.Limits{MaxBytes: o.MaxImageBytes, MaxFileBytes: o.MaxFileBytes},
		BuildTimeout: o.BuildTimeout, MaxLayerBytes: o.MaxLayerBytes})
	if err != nil {
		return err
	}
	if err := builder.Recover(ctx); err != nil {
		return fmt.Errorf("recover template builds: %w", err)
	}

	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	lns, err := listen(o.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %v: is another cube-server running? choose another address with --listen", o.Listen, err)
	}
	var certs *certificates
	var tlsLns []net.Listener
	reported := reportedDomain(o.Domain, false, lns[0])
	if o.TLSListen != "" {
		if certs, err = loadCertificates(o, liveSandbox(st), log); err != nil {
			return err
		}
		if tlsLns, err = listen(o.TLSListen); err != nil {
			return fmt.Errorf("listen on %s: %v: choose another address with --tls-listen (or --tls-listen '' for no HTTPS)", o.TLSListen, err)
		}
		reported = reportedDomain(o.Domain, true, tlsLns[0])
	}
	var caPEM []byte
	if certs != nil && certs.ca != nil {
		caPEM = certs.ca.CAPEM()
	}

	advertise := o.Advertise
	if advertise == "" {
		advertise = "http://" + lns[0].Addr().String()
	}
	var peer *peerTLS
	var peerLns []net.Listener
	if o.PeerListen != "" {
		if peerLns, err = listen(o.PeerListen); err != nil {
			return fmt.Errorf("listen on %s: %v: choose another address with --peer-listen", o.PeerListen, err)
		}
		if o.Advertise == "" {
			advertise = "https://" + peerLns[0].Addr().String()
		}
		if peer, err = openPeerTLS(o.DataDir, advertise, &peers); err != nil {
			return err
		}
	}
	counts := &creates{}
	reg, err := registerNode(ctx, o, name, st, nd, slots.Size(), counts, advertise, peer)
	if err != nil {
		return err
	}
	peers.Store(reg)
	go reg.Run(ctx)

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics.MustRegister(nd.Collectors()...)
	metrics.MustRegister(filter.Collectors()...)
	metrics.MustRegister(builder.Collectors()...)
	if o.Store != "" {
		metrics.MustRegister(reg.Collector())
	}
	// Per-sandbox series name sandboxes: served only with a key.
	perSandbox := prometheus.NewRegistry()
	perSandbox.MustRegister(nd.SandboxCollector())
	apiSrv, err := api.NewServer(api.Config{
		APIKeyHashes: [][32]byte{api.HashAPIKey(key)}, Domain: reported, CACert: caPEM,
		MaxTimeout: o.MaxTimeout, Logger: log, RateLimit: o.RateLimit, Registry: metrics, SandboxMetrics: perSandbox,
		Console: webui.New(webui.Config{Gatherer: prometheus.Gatherers{metrics, perSandbox}, Version: version.Version, DataDir: o.DataDir,
			Runtime: "gVisor (runsc, systrap platform)", MaxSandboxes: o.MaxSandboxes}),
	}, &service{node: nd, builder: builder, nodes: reg, secrets: eg.secrets, creates: counts, forkAway: newForkAway(o, st, reg, nd, &fwd)})
	if err != nil {
		return err
	}
	px := proxy.New(proxy.Config{
		Domain: o.Domain, Logger: log, IsAPIKey: apiSrv.IsAPIKey, RateLimit: o.ProxyRateLimit,
	}, nd)
	// A stopped container's slot, and with it its address, goes to the
	// next sandbox; the proxy drops the connections it pooled to it.
	nd.OnGone(px.Forget)
	nd.Start()
	defer nd.Close()
	// Builds stop before the node they boot sandboxes on.
	defer builder.Close()
	handler := clusterHandler(o, st, nd, reg, px, api.Mount(apiSrv, px), apiSrv.IsAPIKey, log, &fwd, peer)
	srv := api.NewHTTPServer(o.Listen, handler)
	if certs != nil && certs.acme != nil {
		// ACME's HTTP challenges arrive on the plain listener.
		srv.Handler = certs.acme.HTTPHandler(handler)
	}
	tlsSrv := api.NewHTTPServer(o.TLSListen, handler)
	if certs != nil {
		tlsSrv.TLSConfig = certs.tlsConfig()
	}
	peerSrv := api.NewHTTPServer(o.PeerListen, forward.PeerListener(handler))
	if peer != nil {
		peerSrv.TLSConfig = peer.server
	}
	errc := make(chan error, len(lns)+len(tlsLns)+len(peerLns))
	for _, ln := range peerLns {
		go func() { errc <- peerSrv.ServeTLS(ln, "", "") }()
	}
	for _, ln := range lns {
		go func() { errc <- srv.Serve(ln) }()
	}
	for _, ln := range tlsLns {
		// ServeTLS sets HTTP/2 up; the certificates come from TLSConfig.
		go func() { errc <- tlsSrv.ServeTLS(ln, "", "") }()
	}
	attrs := []any{"addr", lns[0].Addr().String(), "data_dir", o.DataDir, "domain", reported}
	if len(tlsLns) > 0 {
		attrs = append(attrs, "https", tlsLns[0].Addr().String())
	}
	if len(peerLns) > 0 {
		attrs = append(attrs, "peers", peerLns[0].Addr().String())
	}
	log.Info("cube-server listening", attrs...)
	if o.Ready != nil {
		o.Ready(lns[0].Addr().String())
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []*http.Server{srv, tlsSrv, peerSrv} {
		if err := s.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Close()
		}
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
