package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"cube/internal/netslot"
)

// The test world: an "internet" netns with two web hosts and a resolver in
// 10/8 (like this machine's own), a "private" netns holding a LAN host
// and the cloud metadata address, both routed from the host, and a slot
// pool. No packet leaves the machine: every address a test dials is one
// of these.
var (
	inetA    = netip.MustParseAddr("203.0.113.10")
	inetB    = netip.MustParseAddr("203.0.113.20")
	lanHost  = netip.MustParseAddr("192.168.77.10")
	metadata = netip.MustParseAddr("169.254.169.254")
)

// testNames is what the test resolver knows.
var testNames = map[string]netip.Addr{
	"good.example":    inetA,
	"other.example":   inetA,
	"evil.example":    inetB,
	"a.wild.example":  inetA,
	"private.example": lanHost,
	// Hosts of the rules tests (rules_test.go), served only there.
	"api.rules.example":   rulesHost,
	"plain.rules.example": rulesHost,
	"bad.rules.example":   rulesBadHost,
}

type world struct {
	prefix   string
	inet     string // netns path
	lan      string
	resolver netip.AddrPort
	asked    *queryLog  // every name the resolver was asked
	hostSide netip.Addr // the host's address on the internet link: not private
}

// queryLog records the names a resolver received, so a test can tell
// what left the sandbox by DNS.
type queryLog struct {
	mu    sync.Mutex
	names []string
}

func (l *queryLog) add(name string) {
	l.mu.Lock()
	l.names = append(l.names, name)
	l.mu.Unlock()
}

// containing returns the recorded names that contain s.
func (l *queryLog) containing(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, n := range l.names {
		if strings.Contains(n, s) {
			out = append(out, n)
		}
	}
	return out
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces and nftables need root")
	}
}

func randomName(p string) string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte(p)
	for range 5 {
		b = append(b, chars[mrand.IntN(len(chars))])
	}
	return string(b)
}

func run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newWorld builds the test hosts; everything goes when the test ends.
func newWorld(t *testing.T) *world {
	t.Helper()
	needRoot(t)
	n := byte(mrand.IntN(250))
	w := &world{prefix: randomName("eg")}
	w.resolver = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 253, n, 53}), 53)
	w.inet = w.peer(t, "inet", [4]byte{198, 18, n, 0}, inetA, inetB, w.resolver.Addr())
	w.hostSide = netip.AddrFrom4([4]byte{198, 18, n, 1})
	w.lan = w.peer(t, "lan", [4]byte{198, 18, n, 4}, lanHost, metadata)

	for a, ns := range map[netip.Addr]string{inetA: w.inet, inetB: w.inet, lanHost: w.lan, metadata: w.lan} {
		serveWeb(t, ns, a)
		serveLine(t, ns, netip.AddrPortFrom(a, 8080))
	}
	w.asked = &queryLog{}
	serveDNS(t, w.inet, w.resolver, w.asked)
	return w
}

// peer makes netns <prefix>-<name> linked to the host on the /30 at link
// (.1 host, .2 peer), holding addrs, which the host routes to it.
func (w *world) peer(t *testing.T, name string, link [4]byte, addrs ...netip.Addr) string {
	t.Helper()
	ns := w.prefix + "-" + name
	hostIf := w.prefix + "-" + name[:1]
	at := func(i byte) string { return netip.AddrFrom4([4]byte{link[0], link[1], link[2], link[3] + i}).String() }
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		for _, a := range addrs {
			exec.Command("ip", "route", "del", a.String()+"/32").Run()
		}
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	run(t, "ip", "addr", "add", at(1)+"/30", "dev", hostIf)
	run(t, "ip", "link", "set", hostIf, "up")
	run(t, "ip", "-n", ns, "addr", "add", at(2)+"/30", "dev", "eth0")
	run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	run(t, "ip", "-n", ns, "route", "add", "default", "via", at(1))
	for _, a := range addrs {
		run(t, "ip", "-n", ns, "addr", "add", a.String()+"/32", "dev", "eth0")
		run(t, "ip", "route", "add", a.String()+"/32", "via", at(2))
	}
	return "/run/netns/" + ns
}

// pool makes a slot pool of the world's prefix (plus tag) on a free /24,
// using the world's resolver.
func (w *world) pool(t *testing.T, tag string, allowPrivate ...netip.Prefix) (*netslot.Pool, netip.Prefix) {
	t.Helper()
	var lastErr error
	for range 20 {
		cidr := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + mrand.IntN(50)), byte(mrand.IntN(256)), 0}), 24)
		p, err := netslot.NewPool(netslot.Config{
			Prefix: w.prefix + tag, Size: 4, HostCIDR: cidr, Warm: -1,
			DNS: w.resolver, AllowPrivate: allowPrivate,
		})
		if err == nil {
			t.Cleanup(func() { p.Close() })
			return p, cidr
		}
		lastErr = err
		if !strings.Contains(err.Error(), "overlaps route") {
			break
		}
	}
	t.Fatalf("NewPool: %v", lastErr)
	return nil, netip.Prefix{}
}

// filter starts the Filter for a pool of this world.
func (w *world) filter(t *testing.T, cidr netip.Prefix) *Filter {
	t.Helper()
	f, err := NewFilter(Config{Resolver: w.resolver, HostCIDR: cidr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func acquire(t *testing.T, p *netslot.Pool) *netslot.Slot {
	t.Helper()
	s, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// setPolicy applies p to s through f, or kernel rules only when f is nil.
func setPolicy(t *testing.T, f *Filter, s *netslot.Slot, p Policy) {
	t.Helper()
	if err := f.Apply(s, p); err != nil {
		t.Fatalf("Apply %+v: %v", p, err)
	}
}

// inNS runs fn on a thread in the netns at path; the thread is discarded
// afterwards, so no other goroutine ever runs in that netns. Sockets made
// in fn stay in the netns.
func inNS(t testing.TB, path string, fn func() error) error {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func listenTest(t *testing.T, ns, network, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := inNS(t, ns, func() (err error) { ln, err = net.Listen(network, addr); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serveWeb answers HTTP on a:80 and HTTPS on a:443 with "<address> <Host>",
// so a test sees which host it really reached and for which name.
func serveWeb(t *testing.T, ns string, a netip.Addr) {
	t.Helper()
	h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr).(*net.TCPAddr)
		fmt.Fprintf(rw, "%s %s", local.IP, r.Host)
	})
	for _, port := range []int{80, 443} {
		ln := listenTest(t, ns, "tcp4", netip.AddrPortFrom(a, uint16(port)).String())
		srv := &http.Server{Handler: h}
		if port == 443 {
			ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{testCert()}})
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// serveLine answers each TCP connection with its own address, then echoes
// lines: a stand-in for any non-web service.
func serveLine(t *testing.T, ns string, at netip.AddrPort) net.Listener {
	t.Helper()
	ln := listenTest(t, ns, "tcp4", at.String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "%s\n", at.Addr())
				io.Copy(c, c)
			}()
		}
	}()
	return ln
}

// testCert is a self-signed certificate for the test names.
var testCert = sync.OnceValue(func() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "egress test"},
		DNSNames:     []string{"good.example", "other.example", "evil.example", "*.wild.example"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
})

// serveDNS answers A queries for testNames over UDP and TCP at addr, and
// records every name asked in log.
func serveDNS(t *testing.T, ns string, addr netip.AddrPort, log *queryLog) {
	t.Helper()
	var pc net.PacketConn
	if err := inNS(t, ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr.String()); return }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], log); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	ln := listenTest(t, ns, "tcp4", addr.String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				q, err := readTCPMessage(c)
				if err != nil {
					return
				}
				resp := dnsAnswer(q, log)
				c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...))
			}()
		}
	}()
}

// dnsHold, when set, runs before each test resolver answer, with the
// name asked: a test holds an answer back with it.
var dnsHold atomic.Pointer[func(name string)]

func dnsAnswer(q []byte, log *queryLog) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	log.add(name)
	if hold := dnsHold.Load(); hold != nil {
		(*hold)(name)
	}
	a, known := testNames[name]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.StartQuestions()
	b.Question(question)
	if known && question.Type == dnsmessage.TypeA {
		b.StartAnswers()
		b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: a.As4()})
	}
	resp, _ := b.Finish()
	return resp
}

// sandbox plays the sandbox of a slot: every socket it makes lives in the
// slot netns, and its resolver is the gateway, as in a real sandbox.
type sandbox struct {
	t  *testing.T
	ns string
}

func sb(t *testing.T, s *netslot.Slot) sandbox { return sandbox{t, s.NetNS} }

func (s sandbox) dial(network, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNS(s.t, s.ns, func() (err error) {
		c, err = net.DialTimeout(network, addr, 10*time.Second)
		return
	})
	return c, err
}

// line connects to addr and returns the first line the server sends.
func (s sandbox) line(addr netip.AddrPort) (string, error) {
	c, err := s.dial("tcp4", addr.String())
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	l, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(l), err
}

// resolver asks the gateway, over TCP if tcp is set (a stream connection
// makes Go's resolver use TCP framing).
func (s sandbox) resolver(tcp bool) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		if tcp {
			network = "tcp4"
		}
		return s.dial(network, netip.AddrPortFrom(netslot.Nameserver, 53).String())
	}}
}

// lookup resolves name with the sandbox's resolver.
func (s sandbox) lookup(name string) ([]netip.Addr, error) { return s.lookupVia(name, false) }

func (s sandbox) lookupVia(name string, tcp bool) ([]netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.resolver(tcp).LookupNetIP(ctx, "ip4", name)
}

// get fetches url and returns the body ("<address reached> <Host>"). With
// connectTo, the connection goes there whatever the URL's host (curl's
// --resolve); else the host is resolved with the sandbox's resolver.
func (s sandbox) get(url string, connectTo ...netip.Addr) (string, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			ip, err := netip.ParseAddr(host)
			switch {
			case len(connectTo) > 0:
				ip = connectTo[0]
			case err != nil:
				ips, err := s.lookup(host)
				if err != nil {
					return nil, err
				}
				ip = ips[0]
			}
			return s.dial("tcp4", net.JoinHostPort(ip.String(), port))
		},
	}
	c := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// mustGet expects url to answer from the host at want.
func (s sandbox) mustGet(url string, want netip.Addr, connectTo ...netip.Addr) {
	s.t.Helper()
	body, err := s.get(url, connectTo...)
	if err != nil {
		s.t.Errorf("GET %s %v: %v", url, connectTo, err)
		return
	}
	if got, _, _ := strings.Cut(body, " "); got != want.String() {
		s.t.Errorf("GET %s %v: answered by %q, want %s", url, connectTo, body, want)
	}
}

func (s sandbox) mustNotGet(url string, connectTo ...netip.Addr) {
	s.t.Helper()
	if body, err := s.get(url, connectTo...); err == nil {
		s.t.Errorf("GET %s %v from the sandbox got through: %q", url, connectTo, body)
	}
}

func (s sandbox) mustReach(addr netip.AddrPort) {
	s.t.Helper()
	if got, err := s.line(addr); err != nil || got != addr.Addr().String() {
		s.t.Errorf("sandbox to %s: got %q, %v; want it reachable", addr, got, err)
	}
}

func (s sandbox) mustNotReach(addr netip.AddrPort) {
	s.t.Helper()
	if got, err := s.line(addr); err == nil {
		s.t.Errorf("sandbox reached %s (it answered %q)", addr, got)
	}
}

func (s sandbox) mustResolve(name string, want netip.Addr) {
	s.t.Helper()
	ips, err := s.lookup(name)
	if err != nil || len(ips) == 0 || ips[0] != want {
		s.t.Errorf("sandbox resolving %s: got %v, %v; want %s", name, ips, err, want)
	}
}

func (s sandbox) mustNotResolve(name string) {
	s.t.Helper()
	ips, err := s.lookup(name)
	var dnsErr *net.DNSError
	if err == nil || !errors.As(err, &dnsErr) {
		s.t.Errorf("sandbox resolving %s: got %v, %v; want a DNS error", name, ips, err)
	}
}

func port(a netip.Addr, p uint16) netip.AddrPort { return netip.AddrPortFrom(a, p) }
