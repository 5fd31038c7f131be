package server_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

// lan is a network of the test's own: a bridge in a network namespace of
// its own, the host on it at Host, and one network namespace per member
// at Addrs[i]. Traffic between the members stays on the bridge, out of
// the host's firewall; the host reaches them, and they the host.
type lan struct {
	Prefix netip.Prefix
	Host   netip.Addr
	NS     []string
	Addrs  []netip.Addr
}

// newLAN makes a lan of n members; it is taken down when the test ends,
// after what the test started in it (cleanups run last first).
func newLAN(t *testing.T, n int) *lan {
	t.Helper()
	b := make([]byte, 3)
	rand.Read(b)
	sfx := hex.EncodeToString(b[:2])
	l := &lan{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, b[2], 0}), 24)}
	l.Host = l.Prefix.Addr().Next()
	bridgeNS := "cbl-" + sfx
	hostIf := "cbh-" + sfx
	var cleanup []string
	t.Cleanup(func() {
		for i := len(cleanup) - 1; i >= 0; i-- {
			exec.Command("sh", "-c", cleanup[i]).Run()
		}
	})
	run := func(undo string, args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		if undo != "" {
			cleanup = append(cleanup, undo)
		}
	}
	run("ip netns del "+bridgeNS, "netns", "add", bridgeNS)
	run("", "-n", bridgeNS, "link", "add", "br0", "type", "bridge")
	run("", "-n", bridgeNS, "link", "set", "br0", "up")
	run("ip link del "+hostIf, "link", "add", hostIf, "type", "veth", "peer", "name", "p"+hostIf, "netns", bridgeNS)
	run("", "-n", bridgeNS, "link", "set", "p"+hostIf, "master", "br0", "up")
	run("", "addr", "add", netip.PrefixFrom(l.Host, 24).String(), "dev", hostIf)
	run("", "link", "set", hostIf, "up")
	addr := l.Host
	for i := range n {
		addr = addr.Next()
		ns := fmt.Sprintf("cbn%d-%s", i, sfx)
		veth := fmt.Sprintf("cbv%d-%s", i, sfx)
		run("ip netns del "+ns, "netns", "add", ns)
		run("", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", bridgeNS)
		run("", "-n", bridgeNS, "link", "set", veth, "master", "br0", "up")
		run("", "-n", ns, "addr", "add", netip.PrefixFrom(addr, 24).String(), "dev", "eth0")
		run("", "-n", ns, "link", "set", "eth0", "up")
		run("", "-n", ns, "link", "set", "lo", "up")
		l.NS = append(l.NS, ns)
		l.Addrs = append(l.Addrs, addr)
	}
	return l
}
