package netslot

import (
	"bufio"
	"bytes"
	"net/netip"
	"os"
	"strings"
)

// resolvConfs are read in order to find a resolver sandboxes can use. A
// loopback nameserver (systemd-resolved's 127.0.0.53) is unreachable from
// a gateway netns, so the second file, resolved's upstream list, is the
// fallback.
var resolvConfs = []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"}

// hostResolver returns the first usable nameserver of the host, port 53,
// or the zero AddrPort if there is none.
func hostResolver() netip.AddrPort {
	for _, f := range resolvConfs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if a, ok := firstNameserver(data); ok {
			return netip.AddrPortFrom(a, 53)
		}
	}
	return netip.AddrPort{}
}

// firstNameserver picks the first IPv4 nameserver a gateway netns can
// reach through the host: not loopback, not unspecified, not inside the
// sandbox network.
func firstNameserver(resolvConf []byte) (netip.Addr, bool) {
	sc := bufio.NewScanner(bytes.NewReader(resolvConf))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || a.IsLoopback() || a.IsUnspecified() || SandboxPrefix.Masked().Contains(a) {
			continue
		}
		return a, true
	}
	return netip.Addr{}, false
}
