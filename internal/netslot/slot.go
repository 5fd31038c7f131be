package netslot

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Slot is one sandbox's network. Pass NetNS as the OCI spec's network
// namespace path and run runsc with --network=sandbox.
type Slot struct {
	Index int
	// NetNS is the slot netns path (/run/netns/<prefix>-s<N>).
	NetNS string
	// GatewayNetNS is the slot's gateway netns path, where per-sandbox
	// nftables policy goes; its ruleset is replaced each time the slot is
	// re-armed.
	GatewayNetNS string
	// HostAddr is where the host reaches the sandbox's ports; it is also the
	// source address of the sandbox's traffic as the host sees it.
	HostAddr netip.Addr
	// HostPeer is the host's own address on the slot's link.
	HostPeer netip.Addr
	// HostIf is the host end of the slot's link (<prefix>-h<N>), for
	// host-side rules about the slot's traffic.
	HostIf string
}

func (p *Pool) slot(i int) *Slot {
	peer, addr := slotLink(p.cfg.HostCIDR, i)
	return &Slot{
		Index:        i,
		NetNS:        netnsPath(slotNetnsName(p.cfg.Prefix, i)),
		GatewayNetNS: netnsPath(gwNetnsName(p.cfg.Prefix, i)),
		HostAddr:     addr,
		HostPeer:     peer,
		HostIf:       hostIfName(p.cfg.Prefix, i),
	}
}

// nsHandles holds open descriptors and netlink handles for one slot's two
// namespaces.
type nsHandles struct {
	slotFd, gwFd int
	slot, gw     *netlink.Handle
}

func openNS(slotPath, gwPath string) (*nsHandles, error) {
	h := &nsHandles{slotFd: -1, gwFd: -1}
	var err error
	if slotPath != "" {
		if h.slotFd, err = unix.Open(slotPath, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			h.close()
			return nil, fmt.Errorf("netslot: open %s: %w", slotPath, err)
		}
		if h.slot, err = netlink.NewHandleAt(netns.NsHandle(h.slotFd)); err != nil {
			h.close()
			return nil, fmt.Errorf("netslot: netlink in %s: %w", slotPath, err)
		}
	}
	if h.gwFd, err = unix.Open(gwPath, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		h.close()
		return nil, fmt.Errorf("netslot: open %s: %w", gwPath, err)
	}
	if h.gw, err = netlink.NewHandleAt(netns.NsHandle(h.gwFd)); err != nil {
		h.close()
		return nil, fmt.Errorf("netslot: netlink in %s: %w", gwPath, err)
	}
	return h, nil
}

func (h *nsHandles) close() {
	if h.slot != nil {
		h.slot.Close()
	}
	if h.gw != nil {
		h.gw.Close()
	}
	if h.slotFd >= 0 {
		unix.Close(h.slotFd)
	}
	if h.gwFd >= 0 {
		unix.Close(h.gwFd)
	}
}

// build creates slot i from nothing and arms it. On failure everything it
// made is removed again, so no half-built slot is left behind.
func (p *Pool) build(i int) (err error) {
	s := p.slot(i)
	// Objects this pool did not make are never touched, not even to undo.
	if names := p.existing(i); len(names) > 0 {
		return fmt.Errorf("netslot: slot %d: %v %w", i, names, errOccupied)
	}
	defer func() {
		if err != nil {
			if terr := p.teardown(i); terr != nil {
				err = errors.Join(err, terr)
			}
		}
	}()
	if err := createNetns(gwNetnsName(p.cfg.Prefix, i)); err != nil {
		return err
	}
	if err := createNetns(slotNetnsName(p.cfg.Prefix, i)); err != nil {
		return err
	}
	h, err := openNS(s.NetNS, s.GatewayNetNS)
	if err != nil {
		return err
	}
	defer h.close()

	// IPv6 is off everywhere but on the slot's lo: runsc copies lo's
	// addresses (::1) into the sandbox, and the slot network is IPv4 only.
	if err := inNetns(h.gwFd, func() error {
		return errors.Join(
			writeSysctl("net.ipv4.ip_forward", "1"),
			writeSysctl("net.ipv6.conf.all.disable_ipv6", "1"),
			writeSysctl("net.ipv6.conf.default.disable_ipv6", "1"),
		)
	}); err != nil {
		return fmt.Errorf("netslot: slot %d gateway: %w", i, err)
	}
	if err := inNetns(h.slotFd, func() error {
		return writeSysctl("net.ipv6.conf.default.disable_ipv6", "1")
	}); err != nil {
		return fmt.Errorf("netslot: slot %d: %w", i, err)
	}

	if err := h.gw.LinkAdd(&netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: gwSandboxIf, HardwareAddr: GatewayMAC},
		PeerName:         SandboxIf,
		PeerHardwareAddr: SandboxMAC,
		PeerNamespace:    netlink.NsFd(h.slotFd),
	}); err != nil {
		return fmt.Errorf("netslot: slot %d: add veth %s/%s: %w", i, gwSandboxIf, SandboxIf, err)
	}
	hostIf := hostIfName(p.cfg.Prefix, i)
	if err := p.host.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: hostIf},
		PeerName:      gwUplinkIf,
		PeerNamespace: netlink.NsFd(h.gwFd),
	}); err != nil {
		return fmt.Errorf("netslot: slot %d: add veth %s/%s: %w", i, hostIf, gwUplinkIf, err)
	}
	// A host without IPv6 has no such file; that is fine.
	if err := writeSysctl("net.ipv6.conf."+hostIf+".disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netslot: slot %d: %w", i, err)
	}

	if err := p.armHost(s); err != nil {
		return err
	}
	if err := p.armGateway(s, h, true); err != nil {
		return err
	}
	return armSlot(s, h)
}

// errOccupied means a slot index has objects on the host that this pool
// did not make (another process with the same prefix, or a leftover that
// appeared after the start-up scan). Such an index waits for Reconcile.
var errOccupied = errors.New("already exist on the host")

// existing names the objects of slot i present on the host.
func (p *Pool) existing(i int) []string {
	var names []string
	for _, n := range []string{slotNetnsName(p.cfg.Prefix, i), gwNetnsName(p.cfg.Prefix, i)} {
		if netnsExists(n) {
			names = append(names, n)
		}
	}
	if h := hostIfName(p.cfg.Prefix, i); !isNotFound(p.linkErr(h)) {
		names = append(names, h)
	}
	return names
}

func (p *Pool) linkErr(name string) error {
	_, err := p.host.LinkByName(name)
	return err
}

// rearm makes a used slot clean again: the sandbox side as on creation,
// the gateway's rules replaced and its connection tracking forgotten.
func (p *Pool) rearm(i int) error {
	s := p.slot(i)
	h, err := openNS(s.NetNS, s.GatewayNetNS)
	if err != nil {
		return err
	}
	defer h.close()
	if err := p.armHost(s); err != nil {
		return err
	}
	if err := p.armGateway(s, h, true); err != nil {
		return err
	}
	return armSlot(s, h)
}

// armHost (re)sets the host end of the slot's link.
func (p *Pool) armHost(s *Slot) error {
	name := hostIfName(p.cfg.Prefix, s.Index)
	l, err := p.host.LinkByName(name)
	if err != nil {
		return fmt.Errorf("netslot: slot %d: host link %s: %w", s.Index, name, err)
	}
	if err := p.host.AddrReplace(l, addrOf(netip.PrefixFrom(s.HostPeer, 30))); err != nil {
		return fmt.Errorf("netslot: slot %d: address on %s: %w", s.Index, name, err)
	}
	if err := p.host.LinkSetUp(l); err != nil {
		return fmt.Errorf("netslot: slot %d: up %s: %w", s.Index, name, err)
	}
	return nil
}

// armGateway (re)sets the gateway netns: addresses, default route towards
// the host and the NAT rules. fresh also replaces every nftables table in
// the netns (policy of a previous tenant) and forgets tracked connections;
// adopting a live sandbox keeps both.
func (p *Pool) armGateway(s *Slot, h *nsHandles, fresh bool) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("netslot: slot %d gateway: %s: %w", s.Index, what, err)
	}
	for _, name := range []string{"lo", gwSandboxIf, gwUplinkIf} {
		l, err := h.gw.LinkByName(name)
		if err != nil {
			return fail("link "+name, err)
		}
		switch name {
		case gwSandboxIf:
			if !bytes.Equal(l.Attrs().HardwareAddr, GatewayMAC) {
				if err := h.gw.LinkSetHardwareAddr(l, GatewayMAC); err != nil {
					return fail("mac of "+name, err)
				}
			}
			if err := h.gw.AddrReplace(l, addrOf(netip.PrefixFrom(Gateway, SandboxPrefix.Bits()))); err != nil {
				return fail("address on "+name, err)
			}
		case gwUplinkIf:
			if err := h.gw.AddrReplace(l, addrOf(netip.PrefixFrom(s.HostAddr, 30))); err != nil {
				return fail("address on "+name, err)
			}
		}
		if err := h.gw.LinkSetUp(l); err != nil {
			return fail("up "+name, err)
		}
		if name == gwUplinkIf {
			if err := h.gw.RouteReplace(&netlink.Route{
				LinkIndex: l.Attrs().Index,
				Dst:       defaultDst,
				Gw:        net.IP(s.HostPeer.AsSlice()),
			}); err != nil {
				return fail("default route", err)
			}
		}
	}
	rules := gwRules{hostAddr: s.HostAddr, dns: p.dns, hostCIDR: p.cfg.HostCIDR, allowPrivate: p.cfg.AllowPrivate}
	if p.dns.IsValid() && p.dns.Addr().IsUnspecified() {
		rules.dns = netip.AddrPortFrom(s.HostPeer, p.dns.Port())
	}
	if err := installGateway(h.gwFd, rules, fresh); err != nil {
		return fmt.Errorf("netslot: slot %d: %w", s.Index, err)
	}
	if fresh {
		if err := h.gw.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fail("flush conntrack", err)
		}
	}
	return nil
}

// armSlot puts the slot netns in the state runsc reads when a sandbox
// boots or is restored: lo up, eth0 up with the fixed MAC, exactly the
// sandbox address, and the default route via the gateway. runsc strips
// eth0's addresses (and with them the routes) and never restores them.
func armSlot(s *Slot, h *nsHandles) error {
	fail := func(what string, err error) error {
		return fmt.Errorf("netslot: slot %d: %s: %w", s.Index, what, err)
	}
	links, err := h.slot.LinkList()
	if err != nil {
		return fail("list links", err)
	}
	var lo, eth netlink.Link
	for _, l := range links {
		switch l.Attrs().Name {
		case "lo":
			lo = l
		case SandboxIf:
			eth = l
		default:
			// Nothing else belongs here; a sandbox must not find it.
			if err := h.slot.LinkDel(l); err != nil {
				return fail("remove stray link "+l.Attrs().Name, err)
			}
		}
	}
	if lo == nil || eth == nil {
		return fail("links", errors.New("lo or "+SandboxIf+" missing"))
	}
	if err := h.slot.LinkSetUp(lo); err != nil {
		return fail("up lo", err)
	}
	if !bytes.Equal(eth.Attrs().HardwareAddr, SandboxMAC) {
		if err := h.slot.LinkSetHardwareAddr(eth, SandboxMAC); err != nil {
			return fail("mac", err)
		}
	}
	if err := h.slot.LinkSetUp(eth); err != nil {
		return fail("up "+SandboxIf, err)
	}
	addrs, err := h.slot.AddrList(eth, netlink.FAMILY_ALL)
	if err != nil {
		return fail("list addresses", err)
	}
	want := addrOf(SandboxPrefix)
	for _, a := range addrs {
		if a.IPNet.String() == want.IPNet.String() {
			continue
		}
		if err := h.slot.AddrDel(eth, &a); err != nil {
			return fail("remove address "+a.IPNet.String(), err)
		}
	}
	if err := h.slot.AddrReplace(eth, want); err != nil {
		return fail("address", err)
	}
	if err := h.slot.RouteReplace(&netlink.Route{
		LinkIndex: eth.Attrs().Index,
		Dst:       defaultDst,
		Gw:        net.IP(Gateway.AsSlice()),
	}); err != nil {
		return fail("default route", err)
	}
	return nil
}

var defaultDst = &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}

func addrOf(p netip.Prefix) *netlink.Addr {
	return &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)}}
}

// teardown removes everything of slot i that exists. Deleting the veths
// explicitly (rather than leaving it to namespace destruction, which the
// kernel does asynchronously) means no interface outlives the call.
func (p *Pool) teardown(i int) error {
	var errs []error
	hostIf := hostIfName(p.cfg.Prefix, i)
	if l, err := p.host.LinkByName(hostIf); err == nil {
		if err := p.host.LinkDel(l); err != nil {
			errs = append(errs, fmt.Errorf("netslot: delete %s: %w", hostIf, err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, fmt.Errorf("netslot: find %s: %w", hostIf, err))
	}
	gwName := gwNetnsName(p.cfg.Prefix, i)
	if netnsExists(gwName) {
		if h, err := openNS("", netnsPath(gwName)); err == nil {
			if l, err := h.gw.LinkByName(gwSandboxIf); err == nil {
				if err := h.gw.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("netslot: delete %s in %s: %w", gwSandboxIf, gwName, err))
				}
			}
			h.close()
		}
	}
	for _, name := range []string{gwName, slotNetnsName(p.cfg.Prefix, i)} {
		if err := deleteNetns(name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf)
}
