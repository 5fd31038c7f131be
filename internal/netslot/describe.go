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
	link := func(where string, nh *netlink.Handle, name string) {
		l, err := nh.LinkByName(name)
		if err != nil {
			fmt.Fprintf(&b, "%s %s: %v; ", where, name, err)
			return
		}
		a := l.Attrs()
		fmt.Fprintf(&b, "%s %s: %s %s", where, name, a.OperState, a.HardwareAddr)
		if addrs, err := nh.AddrList(l, netlink.FAMILY_V4); err == nil {
			for _, ad := range addrs {
				fmt.Fprintf(&b, " %s", ad.IPNet)
			}
		}
		if where == "gateway" {
			if neigh, err := nh.NeighList(a.Index, netlink.FAMILY_V4); err == nil {
				for _, n := range neigh {
					fmt.Fprintf(&b, " neigh %s %s state %#x", n.IP, n.HardwareAddr, n.State)
				}
			}
		}
		b.WriteString("; ")
	}
	link("slot", h.slot, SandboxIf)
	link("gateway", h.gw, gwSandboxIf)
	fmt.Fprintf(&b, "processes in the slot netns %v", netnsUsers(s.NetNS))
	return b.String()
}
