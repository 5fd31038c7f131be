package netslot

import (
	"fmt"
	"strings"

	"github.com/vishvananda/netlink"
)

// Describe says what slot s's network looks like now, for the log when a
// sandbox in it cannot be reached: eth0 in the slot netns (a running
// sandbox's runsc has taken its addresses away, so none is normal then),
// the gateway's link towards the sandbox and what it knows of the
// sandbox's neighbour entry, and the processes in the slot netns.
func (p *Pool) Describe(s *Slot) string {
	h, err := openNS(s.NetNS, s.GatewayNetNS)
	if err != nil {
		return err.Error()
	}
	defer h.close()
	var b strings.Builder
	// link writes one link's state and IPv4 addresses, and returns it
	// (nil when it is missing).
	link := func(where string, nh *netlink.Handle, name string) netlink.Link {
		l, err := nh.LinkByName(name)
		if err != nil {
			fmt.Fprintf(&b, "%s %s: %v; ", where, name, err)
			return nil
		}
		fmt.Fprintf(&b, "%s %s: %s %s", where, name, l.Attrs().OperState, l.Attrs().HardwareAddr)
		if addrs, err := nh.AddrList(l, netlink.FAMILY_V4); err == nil {
			for _, ad := range addrs {
				fmt.Fprintf(&b, " %s", ad.IPNet)
			}
		}
		b.WriteString("; ")
		return l
	}
	link("slot", h.slot, SandboxIf)
	if gw := link("gateway", h.gw, gwSandboxIf); gw != nil {
		if neigh, err := h.gw.NeighList(gw.Attrs().Index, netlink.FAMILY_V4); err == nil {
			for _, n := range neigh {
				fmt.Fprintf(&b, "gateway neighbour %s %s state %#x; ", n.IP, n.HardwareAddr, n.State)
			}
		}
	}
	fmt.Fprintf(&b, "processes in the slot netns %v", netnsUsers(s.NetNS))
	return b.String()
}
