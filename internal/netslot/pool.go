package netslot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
)

type slotState int

const (
	stArming   slotState = iota // being built or re-armed; nobody may use it
	stFree                      // armed and clean, in Pool.free
	stInUse                     // handed out by Acquire or Adopt
	stCleaning                  // being released, torn down or reconciled
)

// Pool owns the slots of one prefix on this host. It keeps Config.Warm
// clean slots armed so Acquire usually returns at once (building a slot
// costs about 10 ms, re-arming a released one about 1 ms).
type Pool struct {
	cfg  Config
	log  *slog.Logger
	dns  netip.AddrPort // where gateway DNS goes; invalid: rejected
	host *netlink.Handle

	mu    sync.Mutex
	owned map[int]slotState
	// leases holds the handle each in-use slot was handed out with, so a
	// release through an older handle of the same index (a double
	// release) is refused rather than cleaning a slot someone else holds.
	leases  map[int]*Slot
	foreign map[int]bool  // found on the host at start, not decided yet
	free    []int         // armed slots, lowest index first
	warming int           // slots the warmer is building
	changed chan struct{} // closed and replaced on every state change
	closed  bool

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// NewPool checks the host can hold slots, installs the host's masquerade
// table and starts arming Config.Warm slots in the background. Objects of
// the same prefix found on the host (a previous run's slots) are left
// alone until Reconcile or Adopt decides about them.
func NewPool(cfg Config) (*Pool, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("netslot: network slots need root (CAP_NET_ADMIN and CAP_SYS_ADMIN); run as root")
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return nil, fmt.Errorf("netslot: this kernel has no network namespaces: %w", err)
	}
	if err := prepareNetnsDir(); err != nil {
		return nil, err
	}
	host, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netslot: netlink: %w", err)
	}
	p := &Pool{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "netslot", "prefix", cfg.Prefix),
		host:    host,
		owned:   map[int]slotState{},
		leases:  map[int]*Slot{},
		foreign: map[int]bool{},
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := p.checkHostCIDR(); err != nil {
		host.Close()
		return nil, err
	}
	switch {
	case cfg.NoDNS:
	case cfg.DNS.IsValid():
		p.dns = cfg.DNS
	default:
		p.dns = hostResolver()
	}
	if p.dns.IsValid() {
		p.log.Info("sandbox DNS forwarded", "resolver", p.dns.String())
	} else {
		p.log.Info("sandbox DNS rejected: no usable resolver")
	}
	if err := p.enableForwarding(); err != nil {
		host.Close()
		return nil, err
	}
	var hostDNSPort uint16
	if p.dns.IsValid() && p.dns.Addr().IsUnspecified() {
		hostDNSPort = p.dns.Port()
	}
	if err := installHost(cfg.Prefix, cfg.HostCIDR, hostDNSPort); err != nil {
		host.Close()
		return nil, err
	}
	found, err := p.scan()
	if err != nil {
		host.Close()
		return nil, err
	}
	for i := range found {
		p.foreign[i] = true
	}
	if len(found) > 0 {
		p.log.Info("slots of a previous run found; waiting for Reconcile or Adopt", "count", len(found))
	}
	go p.warmer()
	p.wakeWarmer()
	return p, nil
}

// checkHostCIDR refuses a HostCIDR that a host route not made by this
// prefix already covers: slot links there would shadow or be shadowed.
func (p *Pool) checkHostCIDR() error {
	routes, err := p.host.RouteList(nil, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("netslot: list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		a, ok := netip.AddrFromSlice(r.Dst.IP.To4())
		if !ok || ones == 0 || !netip.PrefixFrom(a, ones).Overlaps(p.cfg.HostCIDR) {
			continue
		}
		name := ""
		if l, err := p.host.LinkByIndex(r.LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		if kind, _, ok := parseName(p.cfg.Prefix, name); ok && kind == 'h' {
			continue
		}
		return fmt.Errorf("netslot: host CIDR %s overlaps route %s on %q; choose another range", p.cfg.HostCIDR, r.Dst, name)
	}
	return nil
}

// enableForwarding turns on IPv4 forwarding on the host, without which no
// sandbox traffic leaves the host.
func (p *Pool) enableForwarding() error {
	const f = "/proc/sys/net/ipv4/ip_forward"
	b, err := os.ReadFile(f)
	if err != nil {
		return fmt.Errorf("netslot: %w", err)
	}
	if strings.TrimSpace(string(b)) == "1" {
		return nil
	}
	if err := writeSysctl("net.ipv4.ip_forward", "1"); err != nil {
		return fmt.Errorf("netslot: enable forwarding: %w", err)
	}
	p.log.Info("enabled IPv4 forwarding on the host")
	return nil
}

// scan lists the slot indices that have any object of this prefix on the
// host (a slot or gateway netns, or a host veth), with their names.
func (p *Pool) scan() (map[int][]string, error) {
	found := map[int][]string{}
	names, err := listNetns()
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		if kind, i, ok := parseName(p.cfg.Prefix, n); ok && kind != 'h' {
			found[i] = append(found[i], n)
		}
	}
	var links []netlink.Link
	for range 5 {
		if links, err = p.host.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("netslot: list links: %w", err)
	}
	for _, l := range links {
		if kind, i, ok := parseName(p.cfg.Prefix, l.Attrs().Name); ok && kind == 'h' {
			found[i] = append(found[i], l.Attrs().Name)
		}
	}
	return found, nil
}

// notify wakes everyone waiting for a state change. Call with p.mu held.
func (p *Pool) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) wakeWarmer() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// pickIndex returns the lowest index nobody holds. Call with p.mu held.
func (p *Pool) pickIndex() (int, bool) {
	for i := range p.cfg.Size {
		if _, ok := p.owned[i]; !ok && !p.foreign[i] {
			return i, true
		}
	}
	return 0, false
}

// warmer keeps Config.Warm armed slots ready.
func (p *Pool) warmer() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		for {
			p.mu.Lock()
			if p.closed || len(p.free)+p.warming >= p.cfg.Warm {
				p.mu.Unlock()
				break
			}
			i, ok := p.pickIndex()
			if !ok {
				p.mu.Unlock()
				break
			}
			p.owned[i] = stArming
			p.warming++
			p.mu.Unlock()

			err := p.build(i)

			p.mu.Lock()
			p.warming--
			if err != nil {
				delete(p.owned, i)
				if errors.Is(err, errOccupied) {
					p.foreign[i] = true
				}
				p.notify()
				p.mu.Unlock()
				// Retried on the next Acquire or Release, not in a loop.
				p.log.Error("arming slot failed", "slot", i, "err", err)
				break
			}
			p.owned[i] = stFree
			p.free = append(p.free, i)
			slices.Sort(p.free)
			p.notify()
			p.mu.Unlock()
		}
	}
}

// Size is how many slots the pool may hold at once: the configured size,
// or the default when none was given.
func (p *Pool) Size() int { return p.cfg.Size }

// Acquire returns a clean, armed slot: a pre-armed one if there is one,
// else one built now. It fails with ErrExhausted when all Size slots are
// held.
func (p *Pool) Acquire(ctx context.Context) (*Slot, error) {
	p.mu.Lock()
	for {
		if err := ctx.Err(); err != nil {
			p.mu.Unlock()
			return nil, err
		}
		if p.closed {
			p.mu.Unlock()
			return nil, ErrClosed
		}
		if len(p.free) > 0 {
			// Lowest index first: keeps the indices in use compact.
			i := p.free[0]
			p.free = p.free[1:]
			s := p.lease(i)
			p.notify()
			p.mu.Unlock()
			p.wakeWarmer()
			return s, nil
		}
		if i, ok := p.pickIndex(); ok {
			p.owned[i] = stArming
			p.mu.Unlock()
			p.wakeWarmer()
			t0 := time.Now()
			if err := p.build(i); err != nil {
				p.mu.Lock()
				delete(p.owned, i)
				p.notify()
				if errors.Is(err, errOccupied) {
					// Not ours: leave it for Reconcile and try another.
					p.foreign[i] = true
					p.log.Warn("slot index occupied by objects this pool did not make", "slot", i, "err", err)
					continue
				}
				p.mu.Unlock()
				return nil, err
			}
			p.log.Debug("slot armed on demand", "slot", i, "took", time.Since(t0))
			p.mu.Lock()
			if p.closed {
				// Close ran while building; it did not see this slot.
				p.owned[i] = stCleaning
				p.mu.Unlock()
				p.drop(i)
				return nil, ErrClosed
			}
			s := p.lease(i)
			p.notify()
			p.mu.Unlock()
			return s, nil
		}
		if p.warming == 0 {
			p.mu.Unlock()
			return nil, ErrExhausted
		}
		// Every index is taken but the warmer is about to free one up.
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
}

// Release cleans a slot after its sandbox is gone (runsc has exited): it
// re-arms the slot and keeps it for the next Acquire, or tears it down if
// 2×Config.Warm clean slots are already waiting (the slack keeps a steady
// acquire/release load from building and tearing down a slot each time).
// A slot that cannot be cleaned is torn down and the error returned; it is
// never handed out.
func (p *Pool) Release(s *Slot) error {
	if s == nil {
		return errors.New("netslot: release of a nil slot")
	}
	p.mu.Lock()
	if st, ok := p.owned[s.Index]; !ok || st != stInUse {
		p.mu.Unlock()
		return fmt.Errorf("netslot: release of slot %d, which is not in use", s.Index)
	}
	if p.leases[s.Index] != s {
		p.mu.Unlock()
		return fmt.Errorf("netslot: release of slot %d through a handle it was not handed out with (released before and handed out again)", s.Index)
	}
	delete(p.leases, s.Index)
	p.owned[s.Index] = stCleaning
	closed := p.closed
	p.mu.Unlock()

	var err error
	if !closed {
		// A process still in the slot netns (a sandbox that outlived its
		// kill) would share the link with the next sandbox, two network
		// stacks answering one address; such a slot is torn down instead,
		// which cuts the leftover off the network.
		if pids := netnsUsers(s.NetNS); len(pids) > 0 {
			err = fmt.Errorf("processes %v still run in its netns", pids)
		} else {
			err = p.rearm(s.Index)
		}
	}
	if closed || err != nil {
		if err != nil {
			p.log.Error("slot could not be cleaned; removing it", "slot", s.Index, "err", err)
		}
		terr := p.teardown(s.Index)
		if terr != nil {
			err = errors.Join(err, terr)
			p.log.Error("slot teardown failed; left for Reconcile", "slot", s.Index, "err", terr)
		}
		p.mu.Lock()
		delete(p.owned, s.Index)
		if terr != nil {
			// Whatever is left of it must not be reused before Reconcile.
			p.foreign[s.Index] = true
		}
		p.notify()
		p.mu.Unlock()
		p.wakeWarmer()
		if err != nil {
			return fmt.Errorf("netslot: slot %d could not be cleaned and was removed: %w", s.Index, err)
		}
		return nil
	}

	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.drop(s.Index)
		return nil
	}
	p.owned[s.Index] = stFree
	p.free = append(p.free, s.Index)
	slices.Sort(p.free)
	var surplus []int
	for n := len(p.free); n > 2*p.cfg.Warm; n-- {
		// The highest indices go, so reuse stays at the bottom.
		surplus = append(surplus, p.free[n-1])
		p.owned[p.free[n-1]] = stCleaning
		p.free = p.free[:n-1]
	}
	p.notify()
	p.mu.Unlock()
	for _, i := range surplus {
		p.drop(i)
	}
	return nil
}

// lease marks slot i in use and returns the handle its holder releases it
// with. Call with p.mu held.
func (p *Pool) lease(i int) *Slot {
	s := p.slot(i)
	p.owned[i] = stInUse
	p.leases[i] = s
	return s
}

// drop tears down a slot the pool holds and forgets it.
func (p *Pool) drop(i int) {
	err := p.teardown(i)
	p.mu.Lock()
	delete(p.owned, i)
	if err != nil {
		p.foreign[i] = true
		p.log.Error("slot teardown failed; left for Reconcile", "slot", i, "err", err)
	}
	p.notify()
	p.mu.Unlock()
}

// Close stops arming and tears down every slot this pool made or adopted,
// in use or not, and the host table. Slots it never held (found at start
// and not adopted) are left alone. A server that wants its sandboxes to
// survive a restart does not call Close.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.notify()
	p.mu.Unlock()
	close(p.stop)
	<-p.done

	p.mu.Lock()
	var indices []int
	for i, st := range p.owned {
		if st == stFree || st == stInUse {
			indices = append(indices, i)
			p.owned[i] = stCleaning
		}
	}
	p.free = nil
	clear(p.leases)
	p.mu.Unlock()

	var errs []error
	for _, i := range indices {
		if err := p.teardown(i); err != nil {
			errs = append(errs, err)
		}
		p.mu.Lock()
		delete(p.owned, i)
		p.mu.Unlock()
	}
	// Slots this pool never held (a previous run's, not adopted) may still
	// route through the host table.
	others, err := p.scan()
	switch {
	case err != nil:
		errs = append(errs, err)
	case len(others) > 0:
		p.log.Info("kept host table: slots not held by this pool remain", "count", len(others))
	default:
		if err := deleteHostTable(p.cfg.Prefix); err != nil {
			errs = append(errs, err)
		}
	}
	p.host.Close()
	return errors.Join(errs...)
}
