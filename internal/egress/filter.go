package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"cube/internal/netslot"
)

// Config sets up a Filter.
type Config struct {
	// Resolver answers the DNS queries the Filter lets through and resolves
	// the names it connects to. Zero: the first IPv4 nameserver of
	// /etc/resolv.conf that is not loopback (as netslot picks it).
	Resolver netip.AddrPort
	// AllowPrivate and HostCIDR must be the netslot pool's: the Filter
	// connects on the sandbox's behalf from the host, and keeps to the same
	// isolation. Zero HostCIDR: netslot.DefaultHostCIDR.
	AllowPrivate []netip.Prefix
	HostCIDR     netip.Prefix
	// MaxConns caps the web connections one slot has open through the
	// Filter at once; beyond it a connection is closed as it comes. Zero:
	// DefaultMaxConns.
	MaxConns int
	Logger   *slog.Logger

	// CA issues the certificates the Filter answers a sandbox's TLS with
	// for hosts that have rules (see OpenCA). Without one, a policy with
	// rules is refused.
	CA *CA
	// UpstreamRoots verifies the destinations of intercepted connections;
	// nil: the host's trust store.
	UpstreamRoots *x509.CertPool
	// Secrets resolves a rule's ${e2b.secrets.<ref>} placeholder, by name
	// or ID, when a request leaves, among the secrets of team (the
	// policy's Team): another team's secret must not be found. nil: every
	// placeholder fails.
	Secrets func(team, ref string) (string, error)
	// Audit receives every audit event (see Event); it must not block.
	Audit func(Event)
}

// Filter judges the names in sandboxes' DNS queries and web connections
// for every slot whose policy has domain entries. It listens inside each
// such slot's gateway netns (where the policy table redirects DNS and TCP
// 80/443), so the listener a connection arrives on tells which slot it is
// from, and SO_ORIGINAL_DST tells where it was going. It connects and
// resolves from the host's own network namespace.
type Filter struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu     sync.Mutex
	slots  map[string]*slotFilter // by gateway netns path
	closed bool
}

// NewFilter starts a Filter. Its holder applies policies through it
// (Apply); one Filter serves the slots of one pool.
func NewFilter(cfg Config) (*Filter, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !cfg.HostCIDR.IsValid() {
		cfg.HostCIDR = netslot.DefaultHostCIDR
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	for _, p := range cfg.AllowPrivate {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("egress: allowed private range %s is not IPv4", p)
		}
	}
	if !cfg.Resolver.IsValid() {
		cfg.Resolver = hostResolver()
	}
	f := &Filter{cfg: cfg, log: cfg.Logger.With("component", "egress"), metrics: newMetrics(), slots: map[string]*slotFilter{}}
	if cfg.Resolver.IsValid() {
		f.log.Info("egress filter started", "resolver", cfg.Resolver.String())
	} else {
		f.log.Warn("egress filter started without a resolver: names in domain rules will not resolve")
	}
	return f, nil
}

// Close stops every listener and cuts every connection through the
// Filter. Policy tables stay in the gateways; names in them stop resolving
// until a new Filter is started and Apply is called again.
func (f *Filter) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	slots := f.slots
	f.slots = map[string]*slotFilter{}
	f.mu.Unlock()
	for _, s := range slots {
		s.close()
	}
	return nil
}

// Forget stops judging a slot's names; call it after the slot is released.
// Not calling it only keeps the slot's idle listeners until the next Apply
// for that slot or Close.
func (f *Filter) Forget(slot *netslot.Slot) {
	f.mu.Lock()
	s := f.slots[slot.GatewayNetNS]
	delete(f.slots, slot.GatewayNetNS)
	f.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// gatewayLocks serialise Apply per slot: two transactions that both
// found no table would both add one. The tables live in the slot's gateway
// netns, which belongs to the process rather than to any one Filter (a nil
// Filter writes them too), so the locks are kept beside the kernel state
// they guard.
var gatewayLocks sync.Map // gateway netns path → *sync.Mutex

func slotLock(slot *netslot.Slot) *sync.Mutex {
	mu, _ := gatewayLocks.LoadOrStore(slot.GatewayNetNS, &sync.Mutex{})
	return mu.(*sync.Mutex)
}

// Apply gives slot policy p: the kernel rules in the slot's gateway and,
// when p has domain entries, this Filter judging its names. A nil Filter
// applies kernel rules only and refuses a policy with domain entries. It
// replaces the slot's previous policy at once, and is idempotent. Call it
// after netslot's Acquire (or Adopt) and before the sandbox runs, and
// again for each change of policy.
//
// Connections the new policy denies stop working: their next packets are
// rejected. Connections through the Filter (names on ports 80 and 443)
// are judged again and closed if now denied. On error the slot keeps the
// policy it had. Calls for one slot are serialised.
func (f *Filter) Apply(slot *netslot.Slot, p Policy) error {
	if slot == nil {
		return errors.New("egress: apply to a nil slot")
	}
	r, err := compile(p)
	if err != nil {
		return err
	}
	mu := slotLock(slot)
	mu.Lock()
	defer mu.Unlock()

	fd, err := unix.Open(slot.GatewayNetNS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("egress: slot %d: open gateway netns: %w", slot.Index, err)
	}
	defer unix.Close(fd)
	var undo func()
	if r.hasNames() {
		if f == nil {
			return errors.New("egress: domain rules need a running Filter (egress.NewFilter)")
		}
		if !r.transforms.empty() && f.cfg.CA == nil {
			return errors.New("egress: network rules need the Filter's CA (egress.Config.CA)")
		}
		// The listeners must be up before the rules point at them.
		if undo, err = f.register(slot, fd, r); err != nil {
			return err
		}
	}
	if err := installPolicy(fd, r); err != nil {
		// The previous policy is still in the kernel; so it stays in the
		// Filter.
		if undo != nil {
			undo()
		}
		return fmt.Errorf("egress: slot %d: %w", slot.Index, err)
	}
	if !r.hasNames() && f != nil {
		f.Forget(slot)
	}
	return nil
}

// register makes sure the slot's gateway has the Filter's listeners and
// hands them the new rules. A gateway netns that was torn down and built
// again under the same name gets new listeners. undo puts back what was
// there before.
func (f *Filter) register(slot *netslot.Slot, fd int, r *rules) (undo func(), err error) {
	id, err := nsID(fd)
	if err != nil {
		return nil, fmt.Errorf("egress: slot %d: %w", slot.Index, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, errors.New("egress: filter closed")
	}
	s := f.slots[slot.GatewayNetNS]
	if s != nil && s.ns != id {
		s.close()
		s = nil
	}
	if s == nil {
		if s, err = f.newSlotFilter(slot, fd, id); err != nil {
			return nil, err
		}
		f.slots[slot.GatewayNetNS] = s
		s.setRules(r)
		return func() { f.Forget(slot) }, nil
	}
	prev := s.rules.Load()
	s.setRules(r)
	return func() { s.setRules(prev) }, nil
}

// netnsID identifies a network namespace across names.
type netnsID struct{ dev, ino uint64 }

func nsID(fd int) (netnsID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return netnsID{}, fmt.Errorf("stat gateway netns: %w", err)
	}
	return netnsID{uint64(st.Dev), st.Ino}, nil
}

// listenIn opens the Filter's listeners inside the netns open at fd. The
// sockets stay in that netns; the thread that made them is thrown away.
func listenIn(fd int) (proxy, dnsTCP net.Listener, dnsUDP net.PacketConn, err error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread exits with the goroutine.
		runtime.LockOSThread()
		if err = unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("setns: %w", err)
			return
		}
		gw := netslot.Gateway.String()
		var lc net.ListenConfig
		ctx := context.Background()
		if proxy, err = lc.Listen(ctx, "tcp4", net.JoinHostPort(gw, fmt.Sprint(proxyPort))); err != nil {
			return
		}
		if dnsTCP, err = lc.Listen(ctx, "tcp4", net.JoinHostPort(gw, fmt.Sprint(dnsPort))); err != nil {
			proxy.Close()
			return
		}
		if dnsUDP, err = lc.ListenPacket(ctx, "udp4", net.JoinHostPort(gw, fmt.Sprint(dnsPort))); err != nil {
			proxy.Close()
			dnsTCP.Close()
		}
	}()
	<-done
	return proxy, dnsTCP, dnsUDP, err
}

// slotFilter serves one slot's gateway.
type slotFilter struct {
	f     *Filter
	index int
	ns    netnsID
	log   *slog.Logger
	rules atomic.Pointer[rules]

	proxy, dnsTCP net.Listener
	dnsUDP        net.PacketConn
	sem           chan struct{} // web connections at once
	dnsSem        chan struct{} // DNS queries at once, apart so web cannot starve DNS

	mu     sync.Mutex
	conns  map[*proxied]struct{}
	closed bool
	wg     sync.WaitGroup

	tOnce sync.Once
	t     *http.Transport // see transport
}

// owner is the sandbox the slot's current policy is for.
func (s *slotFilter) owner() string {
	if r := s.rules.Load(); r != nil {
		return r.owner
	}
	return ""
}

func (f *Filter) newSlotFilter(slot *netslot.Slot, fd int, id netnsID) (*slotFilter, error) {
	proxy, dnsTCP, dnsUDP, err := listenIn(fd)
	if err != nil {
		return nil, fmt.Errorf("egress: slot %d: listen in gateway: %w", slot.Index, err)
	}
	s := &slotFilter{
		f: f, index: slot.Index, ns: id, log: f.log.With("slot", slot.Index),
		proxy: proxy, dnsTCP: dnsTCP, dnsUDP: dnsUDP,
		sem:    make(chan struct{}, f.cfg.MaxConns),
		dnsSem: make(chan struct{}, maxDNSInFlight),
		conns:  map[*proxied]struct{}{},
	}
	s.wg.Add(3)
	go s.serveProxy()
	go s.serveDNSTCP()
	go s.serveDNSUDP()
	return s, nil
}

// setRules switches the slot to r and closes connections through the
// Filter that r no longer allows.
func (s *slotFilter) setRules(r *rules) {
	s.rules.Store(r)
	s.mu.Lock()
	var cut []*proxied
	for p := range s.conns {
		if !s.stillAllowed(r, p) {
			cut = append(cut, p)
		}
	}
	s.mu.Unlock()
	for _, p := range cut {
		name, target := p.decision()
		s.log.Info("connection closed by a new policy", "name", name, "to", target.String())
		p.close()
	}
}

func (s *slotFilter) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := s.conns
	s.conns = map[*proxied]struct{}{}
	s.mu.Unlock()
	s.proxy.Close()
	s.dnsTCP.Close()
	s.dnsUDP.Close()
	for p := range conns {
		p.close()
	}
	s.wg.Wait()
	if s.t != nil {
		s.t.CloseIdleConnections()
	}
}

// track remembers an open connection so a policy change or close can cut
// it; it fails once the slot filter is closed.
func (s *slotFilter) track(p *proxied) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[p] = struct{}{}
	return true
}

func (s *slotFilter) untrack(p *proxied) {
	s.mu.Lock()
	delete(s.conns, p)
	s.mu.Unlock()
}

// Timeouts of the Filter's own waits.
const (
	peekTimeout    = 10 * time.Second // for a client's first bytes
	dialTimeout    = 10 * time.Second
	resolveTimeout = 5 * time.Second
)

// DefaultMaxConns is Config.MaxConns unless set. Each connection costs
// the Filter a goroutine or two and, intercepted, up to
// maxRequestHeaderBytes (plus a 4 KiB read buffer) of a request being
// read: with 256, about 17 MiB per slot.
const DefaultMaxConns = 256

// maxDNSInFlight caps one slot's DNS queries being answered at once (UDP
// queries and TCP connections together), each at most maxDNSMessage.
const maxDNSInFlight = 64
