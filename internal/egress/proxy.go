package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"cube/internal/netslot"
)

// proxied is one sandbox connection through the Filter. A policy change
// may judge and close it from another goroutine at any time.
type proxied struct {
	mu               sync.Mutex
	client, upstream net.Conn
	name             string         // the SNI or Host it was let through for; "" if none
	target           netip.AddrPort // where it was let through to; invalid until decided
	closed           bool
	// cancel ends an intercepted connection's request in flight, so that
	// closing never waits on a slow destination.
	cancel context.CancelFunc
}

func (p *proxied) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.client.Close()
	if p.cancel != nil {
		p.cancel()
	}
	if p.upstream != nil {
		p.upstream.Close()
	}
}

// connect records the decision and the upstream connection; false if the
// connection was closed meanwhile (up is closed then too).
func (p *proxied) connect(name string, target netip.AddrPort, up net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		up.Close()
		return false
	}
	p.name, p.target, p.upstream = name, target, up
	return true
}

// decide records the decision for a connection the Filter serves itself
// (no upstream connection of its own); false if it was closed meanwhile.
func (p *proxied) decide(name string, target netip.AddrPort) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.name, p.target = name, target
	return !p.closed
}

// setCancel stores the cancel of an intercepted connection's requests;
// false (and cancelled) if the connection was closed meanwhile.
func (p *proxied) setCancel(cancel context.CancelFunc) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		cancel()
		return false
	}
	p.cancel = cancel
	return true
}

func (p *proxied) decision() (string, netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name, p.target
}

func (s *slotFilter) serveProxy() {
	defer s.wg.Done()
	for {
		c, err := s.proxy.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Warn("egress proxy accept", "err", err)
			}
			return
		}
		select {
		case s.sem <- struct{}{}:
		default:
			// Too many at once from this sandbox: refuse rather than queue.
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.handle(c.(*net.TCPConn))
		}()
	}
}

// maxPeek bounds what is read from a client before its name is known.
const maxPeek = 64 << 10

// handle judges one redirected connection by its name (TLS SNI or HTTP
// Host) or, without one, by the address it was going to, and then
// connects it.
func (s *slotFilter) handle(c *net.TCPConn) {
	p := &proxied{client: c}
	if !s.track(p) {
		c.Close()
		return
	}
	defer s.untrack(p)
	defer p.close()

	orig, err := originalDst(c)
	if err != nil || orig.Addr() == netslot.Gateway {
		// Dialled the listener itself: there is no destination to judge.
		return
	}
	c.SetReadDeadline(time.Now().Add(peekTimeout))
	rec := &recorder{r: c}
	name := peekName(rec)
	c.SetReadDeadline(time.Time{})

	r := s.rules.Load()
	kind := "tcp"
	switch {
	case isTLSStart(rec.buf):
		kind = "tls"
	case isHTTPStart(rec.buf):
		kind = "http"
	}
	intercepted := kind != "tcp" && r.transforms.match(name) != nil
	target, err := s.f.choose(r, name, orig, intercepted)
	if err != nil {
		s.log.Debug("egress connection denied", "name", name, "to", orig.String(), "reason", err.Error())
		s.f.record(kind, Event{Owner: r.owner, Decision: Denied, Name: name, Dest: orig, Reason: err.Error()})
		return
	}
	if intercepted {
		s.intercept(p, c, rec.buf, name, target, kind == "tls")
		return
	}
	up, err := net.DialTimeout("tcp4", target.String(), dialTimeout)
	if err != nil {
		s.log.Debug("egress connection failed", "name", name, "to", target.String(), "err", err)
		s.f.record(kind, Event{Owner: r.owner, Decision: Failed, Name: name, Dest: target, Reason: err.Error()})
		return
	}
	if !p.connect(name, target, up) {
		return
	}
	// The rules may have changed while dialling.
	if !s.stillAllowed(s.rules.Load(), p) {
		return
	}
	if _, err := up.Write(rec.buf); err != nil {
		return
	}
	out, in := splice(c, up.(*net.TCPConn))
	s.f.record(kind, Event{Owner: r.owner, Decision: Allowed, Name: name, Dest: target,
		BytesOut: out + int64(len(rec.buf)), BytesIn: in})
}

// stillAllowed judges an open connection by rules r again.
func (s *slotFilter) stillAllowed(r *rules, p *proxied) bool {
	name, target := p.decision()
	if !target.IsValid() {
		return true // not decided yet; handle checks after dialling
	}
	switch r.nameVerdict(name) {
	case allowed:
		return true
	case denied:
		return false
	}
	return r.addrAllowed(target.Addr())
}

// choose decides where a connection with this name (maybe "") that was
// going to orig may go, or why it may not go anywhere. A name the policy
// allows goes to the name's own addresses (orig if it is one of them), so
// a forged SNI or Host cannot carry a connection to an address the policy
// denies. So does every connection the Filter intercepts (byName): the
// address a sandbox dialled is tied to the name by nothing over plain
// HTTP (curl --resolve), so only the name's own addresses, of those the
// policy allows, receive what the rules add. A name the resolver says does
// not exist keeps the address dialled (within the policy): what the Filter
// adds to such a request is no secret, since secrets go only over TLS
// verified for the name (see intercept).
func (f *Filter) choose(r *rules, name string, orig netip.AddrPort, byName bool) (netip.AddrPort, error) {
	switch r.nameVerdict(name) {
	case denied:
		return netip.AddrPort{}, fmt.Errorf("name %q is denied", name)
	case allowed:
		return f.nameTarget(name, orig, nil)
	}
	if !r.addrAllowed(orig.Addr()) {
		if name == "" {
			return netip.AddrPort{}, fmt.Errorf("address %s is denied and no allowed name was given", orig.Addr())
		}
		return netip.AddrPort{}, fmt.Errorf("address %s is denied and name %q is not allowed", orig.Addr(), name)
	}
	if byName {
		target, err := f.nameTarget(name, orig, r.addrAllowed)
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			return target, err
		}
	}
	if err := f.reachable(orig.Addr()); err != nil {
		return netip.AddrPort{}, err
	}
	return orig, nil
}

// nameTarget picks one of name's own addresses (as the Filter's resolver
// gives them) on orig's port: orig if it is one, else the first a sandbox
// may reach and, with ok set, ok accepts.
func (f *Filter) nameTarget(name string, orig netip.AddrPort, ok func(netip.Addr) bool) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := f.resolver().LookupNetIP(ctx, "ip4", name)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("resolve %q: %w", name, err)
	}
	var first netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if f.reachable(a) != nil || ok != nil && !ok(a) {
			continue
		}
		if a == orig.Addr() {
			return orig, nil
		}
		if !first.IsValid() {
			first = a
		}
	}
	if !first.IsValid() {
		return netip.AddrPort{}, fmt.Errorf("name %q has no address a sandbox may reach", name)
	}
	return netip.AddrPortFrom(first, orig.Port()), nil
}

// reachable applies the isolation every slot has (netslot) to an address
// the Filter would connect to from the host: no slot link, no private
// range the operator did not allow, no address of the host itself.
func (f *Filter) reachable(a netip.Addr) error {
	if !a.Is4() {
		return fmt.Errorf("address %s is not IPv4", a)
	}
	if f.cfg.HostCIDR.Contains(a) {
		return fmt.Errorf("address %s is a slot link", a)
	}
	blocked := false
	for _, p := range netslot.BlockedRanges {
		if p.Contains(a) {
			blocked = true
			break
		}
	}
	for _, p := range f.cfg.AllowPrivate {
		if p.Contains(a) {
			blocked = false
		}
	}
	if blocked {
		return fmt.Errorf("address %s is in a private or reserved range", a)
	}
	routes, err := netlink.RouteGet(net.IP(a.AsSlice()))
	if err != nil {
		return fmt.Errorf("address %s: route lookup: %w", a, err)
	}
	for _, rt := range routes {
		if rt.Type == unix.RTN_LOCAL || rt.Type == unix.RTN_BROADCAST || rt.Type == unix.RTN_MULTICAST {
			return fmt.Errorf("address %s belongs to the host", a)
		}
	}
	return nil
}

// resolver resolves names from the host through Config.Resolver only.
func (f *Filter) resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			if !f.cfg.Resolver.IsValid() {
				return nil, errors.New("no resolver configured")
			}
			var d net.Dialer
			return d.DialContext(ctx, network, f.cfg.Resolver.String())
		},
	}
}

// originalDst is where a redirected connection was addressed before the
// gateway's nat rule sent it to the listener.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	err = rc.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(sa))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}

// recorder keeps every byte read through it, to be replayed upstream.
type recorder struct {
	r   io.Reader
	buf []byte
}

var errPeekTooLong = errors.New("no name in the first 64 KiB")

func (r *recorder) Read(p []byte) (int, error) {
	if len(r.buf) >= maxPeek {
		return 0, errPeekTooLong
	}
	if room := maxPeek - len(r.buf); len(p) > room {
		p = p[:room]
	}
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// peekName reads the start of a connection and returns the name it is
// for: the SNI of a TLS ClientHello or the Host of an HTTP request,
// normalised; "" when there is none.
func peekName(rec *recorder) string {
	var first [1]byte
	if _, err := io.ReadFull(rec, first[:]); err != nil {
		return ""
	}
	rd := io.MultiReader(bytes.NewReader(first[:]), rec)
	if first[0] == 0x16 { // TLS handshake record
		return normalizeHost(sniOf(rd))
	}
	req, err := http.ReadRequest(bufio.NewReader(rd))
	if err != nil {
		return ""
	}
	return normalizeHost(req.Host)
}

var errHelloRead = errors.New("client hello read")

// sniOf runs the server side of a TLS handshake just far enough to parse
// the ClientHello, and returns its server name.
func sniOf(r io.Reader) string {
	var name string
	cfg := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name = h.ServerName
		return nil, errHelloRead
	}}
	tls.Server(readOnlyConn{r: r}, cfg).Handshake()
	return name
}

// readOnlyConn feeds a TLS server the client's bytes and swallows what it
// would answer (an alert at most, since the handshake is cut short).
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c readOnlyConn) Write(p []byte) (int, error)      { return 0, errors.New("read only") }
func (c readOnlyConn) Close() error                     { return nil }
func (c readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (c readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (c readOnlyConn) SetWriteDeadline(time.Time) error { return nil }

// splice copies both ways until both are done, passing half-closes on,
// and returns the bytes copied from a to b and from b to a.
func splice(a, b *net.TCPConn) (aToB, bToA int64) {
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src *net.TCPConn, n *int64) {
		defer wg.Done()
		*n, _ = io.Copy(dst, src)
		dst.CloseWrite()
	}
	go pipe(a, b, &bToA)
	go pipe(b, a, &aToB)
	wg.Wait()
	return aToB, bToA
}
