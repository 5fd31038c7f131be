package server

import (
	"fmt"
	"net/netip"
)

func parsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("--host-cidr %q: %v", s, err)
	}
	return p, nil
}
