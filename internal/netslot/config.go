// Package netslot hands out network slots for sandboxes: one network
// namespace per sandbox, ready for runsc's --network=sandbox.
//
// Every slot shows its sandbox the same inside network (SandboxAddr,
// Gateway, SandboxMAC, GatewayMAC), so a checkpoint taken in one slot
// restores into any other without re-addressing. runsc takes over every
// addressed interface of the netns it is given and strips the addresses,
// so nothing that must survive the sandbox can live in that netns. Each
// slot therefore has two namespaces:
//
//	slot netns  <prefix>-s<N>   lo, eth0 = SandboxAddr/24, default via Gateway
//	gateway     <prefix>-g<N>   sb  = Gateway/24 (veth peer of eth0)
//	                            up  = HostAddr/30 (veth peer of the host side)
//	host                        <prefix>-h<N> = HostPeer/30
//
// The gateway netns does the NAT that makes identical sandboxes
// distinguishable: traffic to HostAddr is DNATed to SandboxAddr (so the
// host reaches a sandbox's ports at HostAddr), and sandbox egress is
// masqueraded to HostAddr. The host forwards and masquerades HostCIDR to
// the outside. The gateway netns also answers DNS: queries to Gateway:53
// are DNATed to Config.DNS, or rejected at once when there is no resolver,
// so lookups never hang.
//
// Isolation is part of every slot, before any policy: the gateway forwards
// nothing from the sandbox to BlockedRanges (private, loopback, link-local,
// metadata, multicast) or to HostCIDR, except the DNS it forwards itself
// and ranges the operator lists in Config.AllowPrivate; it forwards
// nothing from the host to the sandbox but connections to HostAddr and
// replies. On the host, the pool's table refuses every connection a slot
// opens to the host itself and forwards nothing between slots. The slot
// network is IPv4 only: IPv6 is disabled in the gateway, so no IPv6 packet
// of a sandbox goes anywhere.
//
// The gateway netns is also where per-sandbox policy belongs: re-arming a
// slot deletes every nftables table of the gateway netns but this
// package's own ("slot"), so rules another package adds there
// (Slot.GatewayNetNS) last exactly one tenant. Adopt keeps them.
//
// Use:
//
//	pool, err := netslot.NewPool(netslot.Config{})
//	removed, err := pool.Reconcile(liveSlots) // after a crash: clean the rest
//	slot, err := pool.Adopt(i)                // for each live sandbox
//	slot, err := pool.Acquire(ctx)            // new sandbox: slot.NetNS goes in
//	                                          // the OCI spec, runsc --network=sandbox
//	err = pool.Release(slot)                  // after runsc has exited
//
// Release must come after the sandbox is gone: re-arming puts eth0's
// address back, which a sandbox still running on it would share with the
// host kernel.
package netslot

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
)

// The inside network every sandbox sees. They never appear on the host, so
// they cannot clash with host networks; they only hide the same range
// outside from sandboxes.
var (
	// SandboxPrefix is eth0's address inside every slot.
	SandboxPrefix = netip.MustParsePrefix("10.88.0.2/24")
	// SandboxAddr is the sandbox's own address, the target of inbound NAT.
	SandboxAddr = SandboxPrefix.Addr()
	// Gateway is the sandbox's default gateway and its DNS resolver.
	Gateway = netip.MustParseAddr("10.88.0.1")
	// Nameserver is what a sandbox's resolv.conf should name.
	Nameserver = Gateway
	// SandboxMAC is eth0's MAC in every slot (locally administered).
	SandboxMAC = net.HardwareAddr{0x02, 0xcb, 0x00, 0x00, 0x00, 0x02}
	// GatewayMAC is the gateway's MAC in every slot. It is fixed too, because
	// a restored sandbox keeps the gateway's ARP entry from its checkpoint.
	GatewayMAC = net.HardwareAddr{0x02, 0xcb, 0x00, 0x00, 0x00, 0x01}
)

// Interface names inside the namespaces. Those live in their own netns, so
// they are short and fixed; only the host side carries the prefix and index.
const (
	SandboxIf = "eth0" // in the slot netns
	// GatewaySandboxIf is the gateway's end of the sandbox link: traffic a
	// sandbox sends enters the gateway netns here, which is what policy
	// rules match on (a source address could be forged, the interface not).
	GatewaySandboxIf = "sb"
	gwSandboxIf      = GatewaySandboxIf
	gwUplinkIf       = "up" // in the gateway netns, peer of the host side
)

// BlockedRanges are the destinations no sandbox reaches unless the
// operator allows a range (Config.AllowPrivate): private networks,
// carrier-grade NAT, loopback, link-local (and with it cloud metadata at
// 169.254.169.254), "this network", multicast and reserved space. The IPv6
// equivalents (fc00::/7, fe80::/10, ::1) need no rule: slots carry no IPv6.
var BlockedRanges = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/3"),
}

// Defaults for a zero Config.
const (
	DefaultPrefix = "cube"
	DefaultSize   = 256
	DefaultWarm   = 2
)

const (
	netnsDir     = "/run/netns"
	maxIfNameLen = 15 // IFNAMSIZ - 1
)

// DefaultHostCIDR is where the per-slot /30 links are carved from.
var DefaultHostCIDR = netip.MustParsePrefix("10.231.0.0/16")

// Config sets up a Pool. The zero value is usable: prefix "cube", 256
// slots, HostCIDR 10.231.0.0/16, two slots kept armed, DNS from
// /etc/resolv.conf.
type Config struct {
	// Prefix names everything the pool creates (<prefix>-s<N>, -g<N>, -h<N>
	// and the host nftables table), so pools with different prefixes never
	// touch each other's objects. Lower-case letters and digits.
	Prefix string
	// Size is the highest number of slots at once.
	Size int
	// HostCIDR is an IPv4 range for the host-to-gateway links, 4 addresses
	// per slot. It must not overlap any network the host uses.
	HostCIDR netip.Prefix
	// Warm is how many clean slots are kept armed ahead of Acquire.
	// Negative means none.
	Warm int
	// DNS is where sandboxes' queries to Gateway:53 go. Zero: the first IPv4,
	// non-loopback nameserver of /etc/resolv.conf (or systemd-resolved's
	// upstream list); if there is none, queries are rejected so lookups
	// fail at once instead of timing out. An unspecified address
	// (0.0.0.0:port) sends each slot's queries to its own HostPeer on that
	// port, so a resolver on the host can tell slots apart.
	DNS netip.AddrPort
	// NoDNS rejects every DNS query even when a resolver is known.
	NoDNS bool
	// AllowPrivate lists IPv4 ranges inside BlockedRanges that sandboxes
	// may reach all the same (an internal package mirror, say). HostCIDR
	// and the host's own addresses stay unreachable whatever it says.
	AllowPrivate []netip.Prefix
	// Logger gets one line per decision that changes the host; default
	// slog.Default().
	Logger *slog.Logger
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)

// normalize fills defaults and rejects what cannot work, with the reason.
func (c Config) normalize() (Config, error) {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if !c.HostCIDR.IsValid() {
		c.HostCIDR = DefaultHostCIDR
	}
	if c.Warm == 0 {
		c.Warm = DefaultWarm
	}
	if c.Warm < 0 {
		c.Warm = 0
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if !prefixRE.MatchString(c.Prefix) {
		return c, fmt.Errorf("netslot: prefix %q: want lower-case letters and digits, starting with a letter", c.Prefix)
	}
	if c.Size < 0 {
		return c, fmt.Errorf("netslot: size %d is negative", c.Size)
	}
	if n := len(hostIfName(c.Prefix, c.Size-1)); n > maxIfNameLen {
		return c, fmt.Errorf("netslot: prefix %q with size %d gives interface names of %d characters, the kernel allows %d", c.Prefix, c.Size, n, maxIfNameLen)
	}
	if !c.HostCIDR.Addr().Is4() {
		return c, fmt.Errorf("netslot: host CIDR %s is not IPv4", c.HostCIDR)
	}
	c.HostCIDR = c.HostCIDR.Masked()
	if c.HostCIDR.Bits() > 30 {
		return c, fmt.Errorf("netslot: host CIDR %s is smaller than one /30", c.HostCIDR)
	}
	if capacity := 1 << (32 - c.HostCIDR.Bits()) / 4; c.Size > capacity {
		return c, fmt.Errorf("netslot: host CIDR %s holds %d slots, size is %d", c.HostCIDR, capacity, c.Size)
	}
	if c.HostCIDR.Overlaps(SandboxPrefix) {
		return c, fmt.Errorf("netslot: host CIDR %s overlaps the sandbox network %s", c.HostCIDR, SandboxPrefix.Masked())
	}
	c.AllowPrivate = slices.Clone(c.AllowPrivate)
	for i, p := range c.AllowPrivate {
		if !p.IsValid() || !p.Addr().Is4() {
			return c, fmt.Errorf("netslot: allowed private range %s is not IPv4", p)
		}
		c.AllowPrivate[i] = p.Masked()
	}
	if c.DNS.IsValid() && (!c.DNS.Addr().Is4() || c.DNS.Port() == 0) {
		return c, fmt.Errorf("netslot: DNS %s: want an IPv4 address and a port", c.DNS)
	}
	return c, nil
}

// slotLink returns the host's and the gateway's address on slot i's /30.
func slotLink(cidr netip.Prefix, i int) (hostPeer, hostAddr netip.Addr) {
	b := cidr.Addr().As4()
	base := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	at := func(off uint32) netip.Addr {
		v := base + uint32(i)*4 + off
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	return at(1), at(2)
}

func slotNetnsName(prefix string, i int) string { return prefix + "-s" + strconv.Itoa(i) }
func gwNetnsName(prefix string, i int) string   { return prefix + "-g" + strconv.Itoa(i) }
func hostIfName(prefix string, i int) string    { return prefix + "-h" + strconv.Itoa(i) }

// parseName recognises the names this package gives, for one prefix:
// kind is 's', 'g' or 'h'. Names of other prefixes ("cube2-s1" for prefix
// "cube") do not match.
func parseName(prefix, name string) (kind byte, index int, ok bool) {
	if len(name) < len(prefix)+3 || name[:len(prefix)] != prefix || name[len(prefix)] != '-' {
		return 0, 0, false
	}
	kind = name[len(prefix)+1]
	if kind != 's' && kind != 'g' && kind != 'h' {
		return 0, 0, false
	}
	digits := name[len(prefix)+2:]
	if len(digits) > 1 && digits[0] == '0' {
		return 0, 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || strconv.Itoa(n) != digits {
		return 0, 0, false
	}
	return kind, n, true
}

// ErrExhausted is returned by Acquire when every slot is in use.
var ErrExhausted = errors.New("netslot: all slots in use")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("netslot: pool closed")
