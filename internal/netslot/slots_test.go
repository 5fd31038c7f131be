package netslot

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network slots need root")
	}
}

// testPrefix is unique per test so tests never touch a running server's
// slots or each other's.
func testPrefix() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte("ct")
	for range 5 {
		b = append(b, chars[rand.IntN(len(chars))])
	}
	return string(b)
}

// newTestPool makes a pool on a random /24 of 10.200-249.x.0 not used by
// the host; it is closed when the test ends.
func newTestPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix()
	}
	if cfg.Size == 0 {
		cfg.Size = 8
	}
	var lastErr error
	for range 20 {
		cfg.HostCIDR = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + rand.IntN(50)), byte(rand.IntN(256)), 0}), 24)
		p, err := NewPool(cfg)
		if err == nil {
			t.Cleanup(func() { p.Close() })
			return p
		}
		lastErr = err
		if !strings.Contains(err.Error(), "overlaps route") {
			break
		}
	}
	t.Fatalf("NewPool: %v", lastErr)
	return nil
}

// inNS runs fn on a thread inside the netns at path.
func inNS(t *testing.T, path string, fn func() error) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := inNetns(fd, fn); err != nil {
		t.Fatal(err)
	}
}

// serveIn starts a TCP server inside a netns that answers every
// connection with reply followed by the address it sees the client at.
// Sockets stay in the netns they were made in, so only the listen call
// needs the namespace.
func serveIn(t *testing.T, nsPath, addr, reply string) net.Listener {
	t.Helper()
	var ln net.Listener
	inNS(t, nsPath, func() error {
		var err error
		ln, err = net.Listen("tcp4", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", reply, c.RemoteAddr().(*net.TCPAddr).IP)
			c.Close()
		}
	}()
	return ln
}

// ask connects to addr (from the netns at nsPath, or the host if empty)
// and returns the server's one-line answer.
func ask(t *testing.T, nsPath, addr string) string {
	t.Helper()
	var c net.Conn
	dial := func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr, 20*time.Second)
		return err
	}
	if nsPath == "" {
		if err := dial(); err != nil {
			t.Fatalf("dial %s from host: %v", addr, err)
		}
	} else {
		inNS(t, nsPath, dial)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read from %s: %v", addr, err)
	}
	return strings.TrimSpace(line)
}

// inside is what a sandbox would see in its netns.
type inside struct {
	addrs   []string
	mac     string
	gateway string
	loUp    bool
	ethUp   bool
}

func readInside(t *testing.T, nsPath string) inside {
	t.Helper()
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var in inside
	lo, err := h.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	in.loUp = lo.Attrs().Flags&net.FlagUp != 0
	eth, err := h.LinkByName(SandboxIf)
	if err != nil {
		t.Fatal(err)
	}
	in.ethUp = eth.Attrs().Flags&net.FlagUp != 0
	in.mac = eth.Attrs().HardwareAddr.String()
	addrs, err := h.AddrList(eth, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		in.addrs = append(in.addrs, a.IPNet.String())
	}
	routes, err := h.RouteList(eth, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			in.gateway = r.Gw.String()
		}
	}
	return in
}

func wantArmed(t *testing.T, s *Slot) {
	t.Helper()
	in := readInside(t, s.NetNS)
	if !in.loUp || !in.ethUp || len(in.addrs) != 1 || in.addrs[0] != SandboxPrefix.String() ||
		in.mac != SandboxMAC.String() || in.gateway != Gateway.String() {
		t.Fatalf("slot %d is not armed for runsc: %+v", s.Index, in)
	}
}

// stripLikeRunsc removes eth0's addresses, as runsc does when it takes
// the interface over.
func stripLikeRunsc(t *testing.T, s *Slot) {
	t.Helper()
	ns, err := netns.GetFromPath(s.NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	eth, err := h.LinkByName(SandboxIf)
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := h.AddrList(eth, netlink.FAMILY_ALL)
	for _, a := range addrs {
		if err := h.AddrDel(eth, &a); err != nil {
			t.Fatal(err)
		}
	}
	if in := readInside(t, s.NetNS); len(in.addrs) != 0 || in.gateway != "" {
		t.Fatalf("strip left %+v", in)
	}
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// hostObjects lists, with the system tools, every netns, host link and
// nftables table whose name starts with prefix.
func hostObjects(t *testing.T, prefix string) []string {
	t.Helper()
	var found []string
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			found = append(found, "netns "+e.Name())
		}
	}
	for _, line := range strings.Split(run(t, "ip", "-o", "link", "show"), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.HasPrefix(f[1], prefix+"-") {
			found = append(found, "link "+strings.TrimSuffix(strings.SplitN(f[1], "@", 2)[0], ":"))
		}
	}
	for _, line := range strings.Split(run(t, "nft", "list", "tables"), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] == prefix {
			found = append(found, "nft "+line)
		}
	}
	return found
}

func TestTwoSlotsSameInsideReachableFromHost(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: 1})
	ctx := context.Background()
	a, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Index == b.Index || a.NetNS == b.NetNS || a.HostAddr == b.HostAddr {
		t.Fatalf("two acquires gave the same slot: %+v %+v", a, b)
	}
	wantArmed(t, a)
	wantArmed(t, b)
	ia, ib := readInside(t, a.NetNS), readInside(t, b.NetNS)
	if fmt.Sprint(ia) != fmt.Sprint(ib) {
		t.Fatalf("slots differ inside: %+v vs %+v", ia, ib)
	}

	listen := netip.AddrPortFrom(SandboxAddr, 8080).String()
	serveIn(t, a.NetNS, listen, "slot-a")
	serveIn(t, b.NetNS, listen, "slot-b")
	for _, tc := range []struct {
		s    *Slot
		want string
	}{{a, "slot-a"}, {b, "slot-b"}} {
		got := ask(t, "", netip.AddrPortFrom(tc.s.HostAddr, 8080).String())
		// The sandbox sees the host at its end of the slot link.
		if want := tc.want + " " + tc.s.HostPeer.String(); got != want {
			t.Errorf("via %s: got %q, want %q", tc.s.HostAddr, got, want)
		}
	}
}

func TestReleaseCleansBeforeReuse(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: 1})
	ctx := context.Background()
	s, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stripLikeRunsc(t, s)
	// A policy table a previous tenant had in its gateway must not survive.
	inNS(t, s.GatewayNetNS, func() error {
		return exec.Command("nft", "add", "table", "inet", "tenantpolicy").Run()
	})
	if err := p.Release(s); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(s); err == nil {
		t.Fatal("second release of the same slot succeeded")
	}
	// The warmer may have another slot ready first; take slots until the
	// released one comes back (holding the others, so it must).
	var held []*Slot
	again, err := p.Acquire(ctx)
	for err == nil && again.Index != s.Index && len(held) < 8 {
		held = append(held, again)
		again, err = p.Acquire(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	if again.Index != s.Index {
		t.Fatalf("the released slot %d never came back (got %d after holding %d others)", s.Index, again.Index, len(held))
	}
	for _, h := range held {
		p.Release(h)
	}
	wantArmed(t, again)
	out := run(t, "ip", "netns", "exec", gwNetnsName(p.cfg.Prefix, again.Index), "nft", "list", "tables")
	if strings.Contains(out, "tenantpolicy") || !strings.Contains(out, gwTable) {
		t.Fatalf("gateway tables after re-arm: %q", out)
	}
	serveIn(t, again.NetNS, netip.AddrPortFrom(SandboxAddr, 8081).String(), "reused")
	if got := ask(t, "", netip.AddrPortFrom(again.HostAddr, 8081).String()); !strings.HasPrefix(got, "reused ") {
		t.Fatalf("reused slot answered %q", got)
	}
}

// internetHost makes a netns standing for a host on the internet, linked
// to the host at 198.18.<n>.1 (host) / .2 (internet host).
func internetHost(t *testing.T, prefix string) (nsPath string, addr, hostSide netip.Addr) {
	t.Helper()
	n := byte(rand.IntN(250))
	name := prefix + "-inet"
	hostIf, peerIf := prefix+"-i", "eth0"
	hostSide = netip.AddrFrom4([4]byte{198, 18, n, 1})
	addr = netip.AddrFrom4([4]byte{198, 18, n, 2})
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", name).Run()
	})
	run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", peerIf, "netns", name)
	run(t, "ip", "addr", "add", hostSide.String()+"/30", "dev", hostIf)
	run(t, "ip", "link", "set", hostIf, "up")
	run(t, "ip", "-n", name, "addr", "add", addr.String()+"/30", "dev", peerIf)
	run(t, "ip", "-n", name, "link", "set", peerIf, "up")
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return "/run/netns/" + name, addr, hostSide
}

func TestEgressAndDNSForwarding(t *testing.T) {
	needRoot(t)
	prefix := testPrefix()
	inet, inetAddr, hostSide := internetHost(t, prefix)
	serveIn(t, inet, netip.AddrPortFrom(inetAddr, 80).String(), "internet")

	// A stand-in resolver on the internet host echoes queries back.
	var dns net.PacketConn
	inNS(t, inet, func() error {
		var err error
		dns, err = net.ListenPacket("udp4", netip.AddrPortFrom(inetAddr, 5353).String())
		return err
	})
	t.Cleanup(func() { dns.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := dns.ReadFrom(buf)
			if err != nil {
				return
			}
			dns.WriteTo(append([]byte("answer:"), buf[:n]...), from)
		}
	}()

	p := newTestPool(t, Config{Prefix: prefix, Warm: -1, DNS: netip.AddrPortFrom(inetAddr, 5353)})
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Both NATs: the sandbox's address is hidden behind the gateway, then
	// behind the host, so the internet host sees the host's address.
	got := ask(t, s.NetNS, netip.AddrPortFrom(inetAddr, 80).String())
	if want := "internet " + hostSide.String(); got != want {
		t.Fatalf("egress: got %q, want %q", got, want)
	}

	var reply string
	inNS(t, s.NetNS, func() error {
		c, err := net.Dial("udp4", netip.AddrPortFrom(Nameserver, 53).String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := c.Write([]byte("query")); err != nil {
			return err
		}
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		reply = string(buf[:n])
		return err
	})
	if reply != "answer:query" {
		t.Fatalf("DNS via the gateway: got %q", reply)
	}
}

func TestDNSRejectedWithoutResolver(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: -1, NoDNS: true})
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var udpErr, tcpErr error
	inNS(t, s.NetNS, func() error {
		c, err := net.Dial("udp4", netip.AddrPortFrom(Nameserver, 53).String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		c.Write([]byte("query"))
		_, udpErr = c.Read(make([]byte, 512))
		tc, err := net.DialTimeout("tcp4", netip.AddrPortFrom(Nameserver, 53).String(), 20*time.Second)
		if err == nil {
			tc.Close()
		}
		tcpErr = err
		return nil
	})
	// Refused, not timed out: a resolver that never answers stalls programs.
	if !errors.Is(udpErr, syscall.ECONNREFUSED) {
		t.Errorf("UDP DNS: got %v, want connection refused", udpErr)
	}
	if !errors.Is(tcpErr, syscall.ECONNREFUSED) {
		t.Errorf("TCP DNS: got %v, want connection refused", tcpErr)
	}
}

func TestReconcileRemovesLeftoversKeepsInUse(t *testing.T) {
	needRoot(t)
	prefix := testPrefix()
	// Leftovers of a crash: a slot netns with a veth to the host (99, from
	// a run with more slots), and a slot still used by a live sandbox (5).
	for _, i := range []int{5, 99} {
		s, g, h := slotNetnsName(prefix, i), gwNetnsName(prefix, i), hostIfName(prefix, i)
		run(t, "ip", "netns", "add", s)
		run(t, "ip", "netns", "add", g)
		run(t, "ip", "link", "add", h, "type", "veth", "peer", "name", "up", "netns", g)
		t.Cleanup(func() {
			exec.Command("ip", "link", "del", h).Run()
			exec.Command("ip", "netns", "del", s).Run()
			exec.Command("ip", "netns", "del", g).Run()
		})
	}
	p := newTestPool(t, Config{Prefix: prefix, Size: 8, Warm: 1})
	held, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	removed, err := p.Reconcile(map[int]bool{5: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{hostIfName(prefix, 99), gwNetnsName(prefix, 99), slotNetnsName(prefix, 99)}
	for _, w := range want {
		if !strings.Contains(strings.Join(removed, " "), w) {
			t.Errorf("removed %v, missing %s", removed, w)
		}
	}
	objs := strings.Join(hostObjects(t, prefix), " ")
	for _, gone := range want {
		if strings.Contains(objs, gone+" ") || strings.HasSuffix(objs, gone) {
			t.Errorf("%s still there: %s", gone, objs)
		}
	}
	for _, kept := range []string{slotNetnsName(prefix, 5), gwNetnsName(prefix, 5), hostIfName(prefix, 5), slotNetnsName(prefix, held.Index)} {
		if !strings.Contains(objs, kept) {
			t.Errorf("%s removed: %s", kept, objs)
		}
	}
	wantArmed(t, held)
	// A slot kept for adoption is never handed out: the other 7 are.
	for range 6 {
		s, err := p.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s.Index == 5 {
			t.Fatal("Acquire handed out slot 5, kept for adoption")
		}
	}
	if s, err := p.Acquire(context.Background()); !errors.Is(err, ErrExhausted) {
		t.Fatalf("eighth Acquire with one slot kept: %+v, %v", s, err)
	}

	// Once its sandbox is gone, the kept slot goes too, and with it the
	// last reason to keep the host table after Close.
	removed, err = p.Reconcile(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 3 {
		t.Fatalf("second Reconcile removed %v, want slot 5's three objects", removed)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := hostObjects(t, prefix); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
}

// crash stops a pool the way a killed server does: nothing is torn down.
func (p *Pool) crash() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	close(p.stop)
	<-p.done
}

func TestAdoptAfterRestart(t *testing.T) {
	needRoot(t)
	ctx := context.Background()
	first := newTestPool(t, Config{Warm: 2})
	s, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	serveIn(t, s.NetNS, netip.AddrPortFrom(SandboxAddr, 9000).String(), "live")
	first.crash()

	// The restarted server: same prefix and range.
	cfg := first.cfg
	cfg.Warm = 1
	second, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	removed, err := second.Reconcile(map[int]bool{s.Index: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range removed {
		if _, i, _ := parseName(cfg.Prefix, r); i == s.Index {
			t.Fatalf("Reconcile removed %s of the live slot", r)
		}
	}
	adopted, err := second.Adopt(s.Index)
	if err != nil {
		t.Fatal(err)
	}
	if *adopted != *s {
		t.Fatalf("adopted %+v, was %+v", adopted, s)
	}
	if _, err := second.Adopt(s.Index); err == nil {
		t.Fatal("adopting a held slot twice succeeded")
	}
	if _, err := second.Adopt(cfg.Size); err == nil {
		t.Fatal("adopting an index out of range succeeded")
	}
	if got := ask(t, "", netip.AddrPortFrom(adopted.HostAddr, 9000).String()); !strings.HasPrefix(got, "live ") {
		t.Fatalf("adopted slot answered %q", got)
	}
	if err := second.Release(adopted); err != nil {
		t.Fatal(err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if left := hostObjects(t, cfg.Prefix); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: 2})
	ctx := context.Background()
	a, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(a); err != nil {
		t.Fatal(err)
	}
	if len(hostObjects(t, p.cfg.Prefix)) == 0 {
		t.Fatal("no objects before Close")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := hostObjects(t, p.cfg.Prefix); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
	if _, err := p.Acquire(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
}

func TestExhausted(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Size: 2, Warm: -1})
	ctx := context.Background()
	for range 2 {
		if _, err := p.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Acquire(ctx); !errors.Is(err, ErrExhausted) {
		t.Fatalf("third Acquire of 2: %v", err)
	}
}

func TestAcquireSkipsObjectsItDidNotMake(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: -1})
	// Appears after the pool's start-up scan, e.g. made by another process.
	other := slotNetnsName(p.cfg.Prefix, 0)
	run(t, "ip", "netns", "add", other)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", other).Run() })
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Index == 0 {
		t.Fatal("Acquire took over slot 0, which it did not make")
	}
	wantArmed(t, s)
	if _, err := os.Stat("/run/netns/" + other); err != nil {
		t.Fatalf("the other netns was removed: %v", err)
	}
	// Until Reconcile decides it is a leftover.
	if removed, err := p.Reconcile(nil); err != nil || len(removed) != 1 || removed[0] != other {
		t.Fatalf("Reconcile: removed %v, %v", removed, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if left := hostObjects(t, p.cfg.Prefix); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
}

func TestConcurrentAcquireRelease(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Size: 4, Warm: 1})
	var mu sync.Mutex
	held := map[int]bool{}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			// Sent even when a helper's t.Fatal ends this goroutine.
			var err error
			defer func() { errs <- err }()
			err = func() error {
				for range 5 {
					s, err := p.Acquire(context.Background())
					if err != nil {
						return err
					}
					mu.Lock()
					if held[s.Index] {
						mu.Unlock()
						return fmt.Errorf("slot %d handed out twice", s.Index)
					}
					held[s.Index] = true
					mu.Unlock()
					if in := readInside(t, s.NetNS); len(in.addrs) != 1 || in.gateway != Gateway.String() {
						return fmt.Errorf("slot %d handed out unarmed: %+v", s.Index, in)
					}
					stripLikeRunsc(t, s)
					mu.Lock()
					delete(held, s.Index)
					mu.Unlock()
					if err := p.Release(s); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestReconcileFreesIndicesWhoseLeftoversVanished(t *testing.T) {
	needRoot(t)
	prefix := testPrefix()
	name := slotNetnsName(prefix, 1)
	run(t, "ip", "netns", "add", name)
	p := newTestPool(t, Config{Prefix: prefix, Size: 2, Warm: -1})
	run(t, "ip", "netns", "del", name) // someone else cleaned it up
	if _, err := p.Reconcile(nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := p.Acquire(context.Background()); err != nil {
			t.Fatalf("slot 1 still held back: %v", err)
		}
	}
}

// A release through a stale handle (a second release of a slot that has
// since been handed to another sandbox) must not touch the new holder's
// slot: re-arming it would strip a running sandbox's network, and tearing
// it down would leave its egress policy nothing to open.
func TestStaleReleaseLeavesNewHolderAlone(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: -1}) // no warm slots: every release past none tears down
	ctx := context.Background()
	first, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Release(first); err != nil {
		t.Fatal(err)
	}
	second, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if second.Index != first.Index {
		t.Fatalf("expected index %d to be reused, got %d", first.Index, second.Index)
	}
	serveIn(t, second.NetNS, netip.AddrPortFrom(SandboxAddr, 8082).String(), "holder")
	if err := p.Release(first); err == nil {
		t.Fatal("a release through the first holder's handle succeeded while the slot is another's")
	}
	for _, path := range []string{second.NetNS, second.GatewayNetNS} {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the new holder's netns is gone: %v", err)
		}
	}
	if got := ask(t, "", netip.AddrPortFrom(second.HostAddr, 8082).String()); !strings.HasPrefix(got, "holder ") {
		t.Fatalf("the new holder's sandbox answered %q after the stale release", got)
	}
	if err := p.Release(second); err != nil {
		t.Fatal(err)
	}
}

// A sandbox process that outlived its kill (still in the slot netns when
// the slot is released) must never share an interface with the next
// sandbox: two network stacks on one link answer each other's
// connections. Such a slot is torn down, not re-armed.
func TestReleaseWithProcessLeftTearsDown(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: 1})
	ctx := context.Background()
	s, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ghost := exec.Command("nsenter", "--net="+s.NetNS, "sleep", "60")
	if err := ghost.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ghost.Process.Kill(); ghost.Wait() })
	var ghostNS unix.Stat_t
	deadline := time.Now().Add(5 * time.Second)
	for {
		var self unix.Stat_t
		if err := unix.Stat(fmt.Sprintf("/proc/%d/ns/net", ghost.Process.Pid), &ghostNS); err == nil {
			if unix.Stat(s.NetNS, &self) == nil && self.Ino == ghostNS.Ino {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the leftover process never entered the slot netns")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Release(s); err == nil {
		t.Fatal("releasing a slot a process still lives in succeeded")
	}
	// Whatever index comes next, no slot handed out is the ghost's netns.
	var held []*Slot
	for range 3 {
		n, err := p.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, n)
		var st unix.Stat_t
		if err := unix.Stat(n.NetNS, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino == ghostNS.Ino {
			t.Fatalf("slot %d was handed out with a leftover process in its netns", n.Index)
		}
	}
	for _, h := range held {
		p.Release(h)
	}
}

// Describe shows an armed slot's address on eth0 and the gateway's own,
// and no address on eth0 once runsc has taken it.
func TestDescribeShowsTheSlotsAddresses(t *testing.T) {
	needRoot(t)
	p := newTestPool(t, Config{Warm: -1})
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release(s)
	armed := p.Describe(s)
	for _, want := range []string{"slot eth0: up " + SandboxMAC.String() + " " + SandboxPrefix.String() + ";", "gateway sb: up " + GatewayMAC.String() + " " + Gateway.String() + "/", "processes in the slot netns []"} {
		if !strings.Contains(armed, want) {
			t.Fatalf("armed slot described as %q, want %q in it", armed, want)
		}
	}
	stripLikeRunsc(t, s)
	if got := p.Describe(s); !strings.Contains(got, "slot eth0: up "+SandboxMAC.String()+";") {
		t.Fatalf("stripped slot described as %q", got)
	}
}
