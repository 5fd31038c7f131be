// Command cube-server is the Cube daemon: the E2B-compatible control
// plane, the sandbox proxy and the node that runs gVisor sandboxes.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cube/internal/audit"
	"cube/internal/node"
	"cube/internal/oci"
	"cube/internal/secrets"
	"cube/internal/server"
	"cube/internal/template"
	"cube/internal/version"
)

func main() {
	var o server.Options
	flag.StringVar(&o.Listen, "listen", "127.0.0.1:3000", "address of the API and sandbox proxy")
	flag.StringVar(&o.DataDir, "data-dir", "/var/lib/cube", "state, images, templates and snapshots")
	flag.StringVar(&o.NodeID, "node-id", "", "this node's name in the nodes API (default: kept in <data-dir>/node-id, made from the host name at first start)")
	flag.StringVar(&o.Advertise, "advertise", "", "base URL at which other nodes reach this node's API (default http://<listen address>, or https://<peer-listen address>)")
	flag.StringVar(&o.PeerListen, "peer-listen", "", "in a cluster: address of the listener other nodes reach this one at over mutual TLS, each node's certificate trusted through the state database; signed requests are then taken only there")
	flag.BoolVar(&o.ClusterInsecureTransport, "cluster-insecure-transport", false, "in a cluster: run without --peer-listen, peers reaching this node at a plain --advertise address and passing it clients' API keys and sandbox tokens in clear; for test clusters on one host only")
	clusterSecret := &secret{name: "cluster-secret", env: "CUBE_CLUSTER_SECRET"}
	clusterSecret.define(flag.CommandLine, "secret the nodes of a cluster (one --store shared by several servers) sign the requests they pass each other with: the same on every node")
	flag.StringVar(&o.Store, "store", os.Getenv("CUBE_STORE"), "state database: empty for <data-dir>/state.db (SQLite), or postgres://user:password@host:port/db (default $CUBE_STORE, which keeps the password out of the process list)")
	flag.StringVar(&o.Domain, "domain", server.DefaultDomain, "sandbox domain: <port>-<id>.<domain> routes to a sandbox and api.<domain> to the API (names under localhost resolve to this machine; any other domain needs a wildcard DNS record)")
	flag.StringVar(&o.TLSListen, "tls-listen", "127.0.0.1:3443", "address of the HTTPS listener, serving the API and sandbox traffic like --listen ('' for none)")
	flag.StringVar(&o.TLSCert, "tls-cert", "", "certificate (PEM, with its chain) of the HTTPS listener, instead of Cube's local CA; reloaded when it changes")
	flag.StringVar(&o.TLSKey, "tls-key", "", "private key (PEM) of --tls-cert")
	flag.BoolVar(&o.ACME, "acme", false, "get the HTTPS listener's certificates from Let's Encrypt (ACME) for api.<domain> and each <port>-<id>.<domain> of a sandbox this server holds (no other name is ordered): needs a public --domain whose names reach this server on port 80 or 443")
	flag.StringVar(&o.ACMEEmail, "acme-email", "", "contact address given to the ACME certificate authority")
	flag.StringVar(&o.Runsc, "runsc", "", "runsc binary (default: beside cube-server)")
	flag.StringVar(&o.Envd, "cube-envd", "", "cube-envd binary (default: beside cube-server)")
	flag.StringVar(&o.EgressCABundle, "egress-ca-bundle", "", "PEM roots that hosts with network rules are verified against when the egress filter re-originates TLS (default: the host's trust store)")
	secretsKey := &secret{name: "secrets-key", env: secrets.KeyEnv}
	secretsKey.define(flag.CommandLine, "key sealing secrets at rest: 32 bytes, base64 or hex; without one, <data-dir>/secrets.key, made on first start")
	flag.IntVar(&o.MaxSandboxes, "max-sandboxes", 200, "most sandboxes (running and paused) at once")
	flag.IntVar(&o.DiskReserveMB, "disk-reserve-mb", node.DefaultDiskReserveMB, "free space (MB) in the data directory that snapshots leave for pauses to be written to disk; -1 keeps none")
	flag.IntVar(&o.PoolSize, "pool-size", 2, "warm sandboxes kept ready per template (0: none)")
	flag.IntVar(&o.PreparedPerKey, "prepared-pool", 2, "containers made ahead of cold restores, per kind of restore asked for in the last 10 minutes, deepened up to 4 times by restores that find none (0: none)")
	flag.Int64Var(&o.VolumeMB, "volume-size", 1024, "size in MiB of a persistent volume created without sizeMB")
	flag.Int64Var(&o.MaxVolumeMB, "max-volume-size", 100<<10, "largest persistent volume in MiB a create may ask for")
	flag.DurationVar(&o.AuditMaxAge, "audit-max-age", audit.DefaultMaxAge, "how long audit entries are kept")
	flag.Int64Var(&o.AuditMaxRows, "audit-max-rows", audit.DefaultMaxRows, "most audit entries kept (the oldest go first)")
	flag.DurationVar(&o.PauseWriteDelay, "pause-write-delay", 10*time.Second, "how long a paused sandbox stays in memory (resuming at once) before it is written to disk")
	flag.DurationVar(&o.MaxTimeout, "max-timeout", 24*time.Hour, "longest sandbox timeout a request may ask for")
	flag.IntVar(&o.Slots, "slots", 0, "network slots (default: the netslot default)")
	flag.StringVar(&o.SlotPrefix, "slot-prefix", "cube", "name prefix of network namespaces and links")
	flag.StringVar(&o.HostCIDR, "host-cidr", "", "host-side address range of network slots")
	flag.Func("allow-private", "a private range sandboxes may reach, e.g. 10.1.0.0/16 (repeatable)", func(v string) error {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return err
		}
		o.AllowPrivate = append(o.AllowPrivate, p)
		return nil
	})
	flag.Float64Var(&o.RateLimit, "rate-limit", 0, "API requests per second per key (0 = unlimited)")
	flag.StringVar(&o.ImportDir, "import-dir", "", "the only directory template builds read local images (oci-archive:, oci:, docker-archive:) from, and where uploads go (default <data-dir>/imports)")
	o.MaxImageBytes, o.MaxFileBytes = oci.DefaultMaxImageBytes, oci.DefaultMaxFileBytes
	flag.Func("max-image-bytes", "most bytes unpacking one image may write, such as 8G (default "+oci.HumanBytes(oci.DefaultMaxImageBytes)+"); also the largest upload", sizeFlag(&o.MaxImageBytes))
	flag.Func("max-file-bytes", "largest file an image may hold, such as 2G (default "+oci.HumanBytes(oci.DefaultMaxFileBytes)+")", sizeFlag(&o.MaxFileBytes))
	flag.DurationVar(&o.BuildTimeout, "build-timeout", template.DefaultBuildTimeout, "longest a template build by steps may take, from its start to its snapshot")
	o.MaxLayerBytes = template.DefaultMaxLayerBytes
	flag.Func("max-layer-bytes", "most bytes one template build step may write, such as 2G (default "+oci.HumanBytes(template.DefaultMaxLayerBytes)+")", sizeFlag(&o.MaxLayerBytes))
	flag.Func("insecure-registry", "registry host[:port] template builds may reach over plain HTTP or with an untrusted certificate (repeatable)", func(v string) error {
		if v == "" || strings.ContainsAny(v, "/ ") {
			return fmt.Errorf("want a registry host or host:port, such as localhost:5000")
		}
		o.InsecureRegistries = append(o.InsecureRegistries, v)
		return nil
	})
	flag.Float64Var(&o.ProxyRateLimit, "proxy-rate-limit", 0, "proxied sandbox requests per second per source address, per /64 for IPv6 (0 = unlimited; behind a reverse proxy all clients share its address)")
	flag.BoolVar(&o.CodeContextsNeedToken, "code-contexts-need-token", false, "require the sandbox's access token on the code interpreter's context routes too (the official code interpreter SDKs send none there, so their context calls then fail)")
	flag.BoolVar(&o.PrivateMemory, "private-memory", false, "give each sandbox a private copy of its template's or snapshot's memory, as stock gVisor does, instead of sharing it copy-on-write")
	flag.BoolVar(&o.EagerCopy, "eager-copy", true, "copy the pages a restored sandbox is known to write first (its image's hot pages, learnt when a template is built) into its own memory at restore, instead of sharing them until each first write costs a page fault; needs runsc's 0003-cow-eager patch (--eager-copy=false: share them too)")
	flag.BoolVar(&o.Debug, "debug", false, "debug logs, including runsc's")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("cube-server", version.Version)
		return
	}
	level := slog.LevelInfo
	if o.Debug {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	warn := func(msg string) { o.Logger.Warn(msg) }
	var err error
	if o.ClusterSecret, err = clusterSecret.resolve(flag.CommandLine, warn); err == nil {
		o.SecretsKey, err = secretsKey.resolve(flag.CommandLine, warn)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cube-server:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := server.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "cube-server:", err)
		os.Exit(1)
	}
}

// sizeFlag parses a byte count, plain or with a binary unit (K, M, G, T,
// optionally followed by i and B): 8G, 512MiB, 1073741824.
func sizeFlag(dst *int64) func(string) error {
	return func(v string) error {
		s := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "B"), "I")
		shift := 0
		if n := len(s); n > 0 {
			if i := strings.IndexByte("KMGT", s[n-1]); i >= 0 {
				shift, s = 10*(i+1), s[:n-1]
			}
		}
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n <= 0 || n > (1<<62)>>shift {
			return fmt.Errorf("want a positive size such as 8G, 512M or a number of bytes")
		}
		*dst = n << shift
		return nil
	}
}
