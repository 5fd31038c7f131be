package egress

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"

	"cube/internal/netslot"
)

// dialWait bounds connections that should succeed.
const dialWait = 20 * time.Second

// hostListener stands for any service of the host (the API, the proxy):
// it listens on every host address.
func hostListener(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "host")
			c.Close()
		}
	}()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

// fromNS connects from the netns at ns (the host if "") and returns the
// first line.
func fromNS(t *testing.T, ns string, addr netip.AddrPort, timeout time.Duration) (string, error) {
	t.Helper()
	var c net.Conn
	var err error
	dial := func() error {
		c, err = net.DialTimeout("tcp4", addr.String(), timeout)
		return nil
	}
	if ns == "" {
		dial()
	} else {
		inNS(t, ns, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	l, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(l), err
}

func TestIsolationByDefault(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "a")
	s, other := acquire(t, pool), acquire(t, pool)
	box := sb(t, s)
	hostPort := hostListener(t)
	serveLine(t, s.NetNS, port(netslot.SandboxAddr, 8080))
	serveLine(t, other.NetNS, port(netslot.SandboxAddr, 8080))

	// The internet and DNS work, through a resolver in 10/8.
	box.mustGet("http://203.0.113.10/", inetA)
	box.mustGet("https://good.example/", inetA)
	box.mustReach(port(inetB, 8080))
	box.mustResolve("evil.example", inetB)

	// The host, on every address it has: its end of this slot and of
	// another, and a public-looking one.
	for _, a := range []netip.Addr{s.HostPeer, other.HostPeer, w.hostSide} {
		box.mustNotReach(port(a, hostPort))
	}
	if got, err := fromNS(t, "", port(w.hostSide, hostPort), dialWait); got != "host" {
		t.Fatalf("the host service does not answer on the host: %q, %v", got, err)
	}
	// Another sandbox, which the host reaches.
	if got, err := fromNS(t, "", port(other.HostAddr, 8080), dialWait); got != netslot.SandboxAddr.String() {
		t.Fatalf("host to the other sandbox: %q, %v", got, err)
	}
	box.mustNotReach(port(other.HostAddr, 8080))
	// Private hosts, the metadata address, and the resolver itself for
	// anything but the DNS the gateway forwards.
	for _, a := range []netip.Addr{lanHost, metadata} {
		box.mustNotReach(port(a, 8080))
		box.mustNotGet("http://" + a.String() + "/")
	}
	if c, err := box.dial("tcp4", w.resolver.String()); err == nil {
		c.Close()
		t.Errorf("sandbox opened a connection to the resolver %s directly", w.resolver)
	}

	// Inbound: the host reaches the sandbox at HostAddr; the internet does
	// not, even though the host routes to it.
	if got, err := fromNS(t, "", port(s.HostAddr, 8080), dialWait); got != netslot.SandboxAddr.String() {
		t.Fatalf("host to the sandbox: %q, %v", got, err)
	}
	// The host drops these rather than refusing them; one that got through
	// would do so at once, so the wait is short.
	if got, err := fromNS(t, w.inet, port(s.HostAddr, 8080), 2*time.Second); err == nil {
		t.Errorf("a host outside reached the sandbox through this host: %q", got)
	}

	// The same with an explicitly open policy.
	setPolicy(t, nil, s, Open)
	box.mustGet("http://203.0.113.10/", inetA)
	box.mustNotReach(port(lanHost, 8080))
	box.mustNotReach(port(s.HostPeer, hostPort))
}

func TestAllowPrivateOpensOnlyThatRange(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "p", netip.MustParsePrefix("192.168.77.0/24"))
	s := acquire(t, pool)
	box := sb(t, s)
	hostPort := hostListener(t)
	box.mustReach(port(lanHost, 8080))
	box.mustGet("http://192.168.77.10/", lanHost)
	box.mustNotReach(port(metadata, 8080))
	box.mustNotReach(port(s.HostPeer, hostPort))
	// A policy narrows it down again.
	setPolicy(t, nil, s, Policy{AllowInternet: true, DenyOut: []string{"192.168.77.10"}})
	box.mustNotReach(port(lanHost, 8080))
}

func TestNoInternet(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "n")
	s := acquire(t, pool)
	box := sb(t, s)
	serveLine(t, s.NetNS, port(netslot.SandboxAddr, 8080))

	setPolicy(t, nil, s, Policy{AllowInternet: false})
	box.mustNotReach(port(inetA, 8080))
	box.mustNotGet("http://203.0.113.10/")
	box.mustNotGet("https://203.0.113.20/")
	box.mustNotResolve("good.example")
	// The sandbox still serves the host (the proxy).
	if got, err := fromNS(t, "", port(s.HostAddr, 8080), dialWait); got != netslot.SandboxAddr.String() {
		t.Fatalf("host to a sandbox without internet: %q, %v", got, err)
	}

	// E2B: allowInternetAccess false is denyOut 0.0.0.0/0, so allowOut
	// still opens exactly what it lists.
	setPolicy(t, nil, s, Policy{AllowInternet: false, AllowOut: []string{"203.0.113.10"}})
	box.mustReach(port(inetA, 8080))
	box.mustNotReach(port(inetB, 8080))
	// No allowed name: nothing resolves (TestDeniedNamesNeverLeaveByDNS).
	box.mustNotResolve("good.example")
}

func TestCIDRPolicy(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "c")
	s := acquire(t, pool)
	box := sb(t, s)

	setPolicy(t, nil, s, Policy{AllowInternet: true, DenyOut: []string{"203.0.113.20"}})
	box.mustReach(port(inetA, 8080))
	box.mustGet("http://203.0.113.10/", inetA)
	box.mustNotReach(port(inetB, 8080))
	box.mustNotGet("http://203.0.113.20/")

	setPolicy(t, nil, s, Policy{AllowInternet: true, AllowOut: []string{"203.0.113.10"}, DenyOut: []string{"0.0.0.0/0"}})
	box.mustReach(port(inetA, 8080))
	box.mustNotReach(port(inetB, 8080))
	// Allowing an address does not open DNS: names are allowed as names.
	box.mustNotResolve("good.example")

	// Allow beats deny.
	setPolicy(t, nil, s, Policy{AllowInternet: true, AllowOut: []string{"203.0.113.10/32"}, DenyOut: []string{"203.0.113.0/24"}})
	box.mustReach(port(inetA, 8080))
	box.mustNotReach(port(inetB, 8080))

	// A policy cannot open what isolation closes.
	setPolicy(t, nil, s, Policy{AllowInternet: true, AllowOut: []string{"192.168.77.0/24", "169.254.169.254", "0.0.0.0/0"}})
	box.mustNotReach(port(lanHost, 8080))
	box.mustNotReach(port(metadata, 8080))
	box.mustReach(port(inetB, 8080))
}

func TestLiveReplacement(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "l")
	s := acquire(t, pool)
	box := sb(t, s)

	c, err := box.dial("tcp4", port(inetA, 8080).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	echo := func(msg string) error {
		if _, err := fmt.Fprintln(c, msg); err != nil {
			return err
		}
		got, err := br.ReadString('\n')
		if err == nil && strings.TrimSpace(got) != msg {
			return fmt.Errorf("echo %q", got)
		}
		return err
	}
	if greeting, err := br.ReadString('\n'); err != nil || strings.TrimSpace(greeting) != inetA.String() {
		t.Fatalf("greeting %q, %v", greeting, err)
	}
	if err := echo("before"); err != nil {
		t.Fatalf("open connection before the change: %v", err)
	}
	setPolicy(t, nil, s, Policy{AllowInternet: true, DenyOut: []string{"203.0.113.10"}})
	if err := echo("after"); err == nil {
		t.Error("a connection the new policy denies kept working")
	}
	box.mustNotReach(port(inetA, 8080))
	box.mustReach(port(inetB, 8080))
	setPolicy(t, nil, s, Open)
	box.mustReach(port(inetA, 8080))
}

func TestDomainAllowList(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "d")
	f := w.filter(t, cidr)
	s := acquire(t, pool)
	box := sb(t, s)
	setPolicy(t, f, s, Policy{
		AllowInternet: true,
		AllowOut:      []string{"good.example", "*.wild.example", "private.example"},
		DenyOut:       []string{"0.0.0.0/0"},
	})

	// DNS: allowed names resolve, others do not.
	box.mustResolve("good.example", inetA)
	box.mustResolve("a.wild.example", inetA)
	box.mustNotResolve("evil.example")
	box.mustNotResolve("other.example")
	if ips, err := box.lookupVia("good.example", true); err != nil || len(ips) != 1 || ips[0] != inetA {
		t.Errorf("good.example over TCP: %v, %v", ips, err)
	}
	if ips, err := box.lookupVia("evil.example", true); err == nil {
		t.Errorf("evil.example over TCP resolved to %v", ips)
	}

	box.mustGet("https://good.example/", inetA)
	box.mustGet("http://good.example/", inetA)
	box.mustGet("https://a.wild.example/", inetA)
	// IP literals, which carry no name, do not dodge the rule.
	box.mustNotGet("https://203.0.113.10/")
	box.mustNotGet("http://203.0.113.10/")
	// Nor do names resolved elsewhere, to an allowed name's address or not.
	box.mustNotGet("https://other.example/", inetA)
	box.mustNotGet("https://evil.example/", inetB)
	box.mustNotGet("http://evil.example/", inetB)
	// A forged SNI or Host gets its own name's address, not the one dialled.
	box.mustGet("http://good.example/", inetA, inetB)
	box.mustGet("https://good.example/", inetA, inetB)
	// Names count on ports 80 and 443 only.
	box.mustNotReach(port(inetA, 8080))
	// An allowed name pointing into a private range stays unreachable.
	box.mustNotGet("http://private.example/")
	box.mustNotGet("http://private.example/", lanHost)
}

func TestDomainDenyList(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "e")
	f := w.filter(t, cidr)
	s := acquire(t, pool)
	box := sb(t, s)

	setPolicy(t, f, s, Policy{AllowInternet: true, DenyOut: []string{"evil.example"}})
	box.mustNotResolve("evil.example")
	box.mustResolve("good.example", inetA)
	box.mustNotGet("https://evil.example/", inetB)
	box.mustNotGet("http://evil.example/", inetB)
	box.mustGet("https://good.example/", inetA)
	box.mustGet("https://other.example/", inetA)
	// Without a name, the address decides (documented limit of deny names).
	box.mustGet("http://203.0.113.20/", inetB)
	box.mustReach(port(inetB, 8080))

	// Allow beats deny for names too.
	setPolicy(t, f, s, Policy{AllowInternet: true, AllowOut: []string{"good.example"}, DenyOut: []string{"*.example"}})
	box.mustGet("https://good.example/", inetA)
	box.mustNotGet("https://other.example/", inetA)
	box.mustNotResolve("other.example")
}

func TestDomainLiveReplacement(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "r")
	f := w.filter(t, cidr)
	s := acquire(t, pool)
	box := sb(t, s)
	setPolicy(t, f, s, Policy{AllowOut: []string{"good.example"}})

	// A kept-alive connection through the filter.
	c, err := box.dial("tcp4", port(inetA, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	request := func() error {
		if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: good.example\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := request(); err != nil {
		t.Fatalf("allowed name: %v", err)
	}
	setPolicy(t, f, s, Policy{AllowOut: []string{"other.example"}})
	if err := request(); err == nil {
		t.Error("a connection to a name the new policy denies kept working")
	}
	box.mustNotGet("https://good.example/")
	box.mustGet("https://other.example/", inetA)

	// A policy without names takes the filter out of the way.
	setPolicy(t, f, s, Open)
	box.mustResolve("evil.example", inetB)
	box.mustGet("https://evil.example/", inetB)
	f.mu.Lock()
	n := len(f.slots)
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("filter still serves %d slots after their policies lost their names", n)
	}
}

func TestReleaseClearsPolicy(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "x")
	f := w.filter(t, cidr)
	s := acquire(t, pool)
	box := sb(t, s)
	setPolicy(t, f, s, Policy{AllowOut: []string{"good.example"}})
	box.mustNotResolve("evil.example")
	box.mustNotReach(port(inetB, 8080))

	if err := pool.Release(s); err != nil {
		t.Fatal(err)
	}
	f.Forget(s)
	again := acquire(t, pool)
	if again.Index != s.Index {
		t.Fatalf("re-acquire gave slot %d, want the released %d", again.Index, s.Index)
	}
	if tables := gatewayTables(t, again); strings.Contains(tables, Table) {
		t.Errorf("policy table survived the release: %s", tables)
	}
	box = sb(t, again)
	box.mustResolve("evil.example", inetB)
	box.mustReach(port(inetB, 8080))
	box.mustGet("https://evil.example/", inetB)
}

// After a restart of the server, Adopt keeps the policy table and the node
// applies the stored policy again: names must be judged by the new Filter.
func TestApplyAgainAfterFilterRestart(t *testing.T) {
	w := newWorld(t)
	pool, cidr := w.pool(t, "f")
	f := w.filter(t, cidr)
	s := acquire(t, pool)
	box := sb(t, s)
	p := Policy{AllowOut: []string{"good.example"}}
	setPolicy(t, f, s, p)
	box.mustGet("https://good.example/", inetA)

	f.Close()
	box.mustNotGet("https://good.example/") // nobody judges names now: closed
	f = w.filter(t, cidr)
	setPolicy(t, f, s, p)
	box.mustResolve("good.example", inetA)
	box.mustNotResolve("evil.example")
	box.mustGet("https://good.example/", inetA)
	box.mustNotGet("https://evil.example/", inetB)
}

func TestApplyRefusesWhatItCannotEnforce(t *testing.T) {
	w := newWorld(t)
	pool, _ := w.pool(t, "z")
	s := acquire(t, pool)
	var none *Filter
	if err := none.Apply(s, Policy{AllowOut: []string{"good.example"}}); err == nil || !strings.Contains(err.Error(), "Filter") {
		t.Errorf("domain rules without a Filter: got %v", err)
	}
	if err := none.Apply(s, Policy{AllowOut: []string{"1.2.3.4/40"}}); err == nil || !strings.Contains(err.Error(), "1.2.3.4/40") {
		t.Errorf("bad CIDR: got %v", err)
	}
	// Neither left a half policy behind.
	if tables := gatewayTables(t, s); strings.Contains(tables, Table) {
		t.Errorf("a refused policy left a table: %s", tables)
	}
	sb(t, s).mustReach(port(inetA, 8080))
}

// gatewayTables lists the nftables tables of a slot's gateway netns.
func gatewayTables(t *testing.T, s *netslot.Slot) string {
	t.Helper()
	var names []string
	err := inNS(t, s.GatewayNetNS, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		ts, err := c.ListTables()
		for _, tb := range ts {
			names = append(names, tb.Name)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, " ")
}

// BenchmarkApply measures replacing a slot's policy: the cost a create or
// a PUT /sandboxes/{id}/network adds.
func BenchmarkApply(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	var cidr netip.Prefix
	var pool *netslot.Pool
	for range 20 {
		cidr = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + mrand.IntN(50)), byte(mrand.IntN(256)), 0}), 24)
		p, err := netslot.NewPool(netslot.Config{Prefix: randomName("eb"), Size: 2, HostCIDR: cidr, Warm: -1, NoDNS: true,
			Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			pool = p
			break
		}
	}
	if pool == nil {
		b.Fatal("no free host CIDR")
	}
	defer pool.Close()
	f, err := NewFilter(Config{HostCIDR: cidr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s, err := pool.Acquire(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	cidrs := Policy{AllowInternet: true, AllowOut: []string{"1.1.1.1"}, DenyOut: []string{"0.0.0.0/0"}}
	names := Policy{AllowOut: []string{"example.com", "*.example.org", "8.8.8.0/24"}}
	for _, bc := range []struct {
		name string
		p    func(i int) Policy
		// fresh: the slot has no policy yet, as after Acquire.
		fresh bool
	}{
		{"first-cidr", func(int) Policy { return cidrs }, true},
		{"first-domains", func(int) Policy { return names }, true},
		{"same-cidr", func(int) Policy { return cidrs }, false},
		{"same-domains", func(int) Policy { return names }, false},
		{"replace", func(i int) Policy { return []Policy{cidrs, names}[i%2] }, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				if bc.fresh {
					b.StopTimer()
					if err := f.Apply(s, Open); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				if err := f.Apply(s, bc.p(i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
