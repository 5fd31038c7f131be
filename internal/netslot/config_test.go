package netslot

import (
	"net/netip"
	"strings"
	"testing"
)

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if c.Prefix != "cube" || c.Size != DefaultSize || c.HostCIDR != DefaultHostCIDR || c.Warm != DefaultWarm || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = Config{Warm: -1}.normalize()
	if err != nil || c.Warm != 0 {
		t.Fatalf("Warm -1: got %d, %v", c.Warm, err)
	}
}

func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Prefix: "Cube"}, "lower-case"},
		{Config{Prefix: "cu-be"}, "lower-case"},
		{Config{Prefix: "1cube"}, "starting with a letter"},
		{Config{Prefix: "averyverylongprefix"}, "interface names"},
		{Config{Prefix: "cubecubecu", Size: 10000}, "interface names"},
		{Config{Size: -1}, "negative"},
		{Config{HostCIDR: netip.MustParsePrefix("fd00::/64")}, "not IPv4"},
		{Config{HostCIDR: netip.MustParsePrefix("10.1.0.0/31")}, "smaller than one /30"},
		{Config{HostCIDR: netip.MustParsePrefix("10.1.0.0/24"), Size: 65}, "holds 64 slots"},
		{Config{HostCIDR: netip.MustParsePrefix("10.88.0.0/16")}, "overlaps the sandbox network"},
		{Config{DNS: netip.MustParseAddrPort("[fd00::1]:53")}, "IPv4"},
		{Config{DNS: netip.MustParseAddrPort("10.1.1.1:0")}, "port"},
	} {
		_, err := tc.cfg.normalize()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want error containing %q", tc.cfg, err, tc.want)
		}
	}
	if _, err := (Config{HostCIDR: netip.MustParsePrefix("10.1.0.0/24"), Size: 64}).normalize(); err != nil {
		t.Errorf("64 slots in a /24: %v", err)
	}
}

func TestSlotLink(t *testing.T) {
	cidr := netip.MustParsePrefix("10.231.0.0/16")
	for _, tc := range []struct {
		i          int
		peer, addr string
	}{
		{0, "10.231.0.1", "10.231.0.2"},
		{1, "10.231.0.5", "10.231.0.6"},
		{64, "10.231.1.1", "10.231.1.2"},
		{16383, "10.231.255.253", "10.231.255.254"},
	} {
		peer, addr := slotLink(cidr, tc.i)
		if peer.String() != tc.peer || addr.String() != tc.addr {
			t.Errorf("slot %d: got %s %s, want %s %s", tc.i, peer, addr, tc.peer, tc.addr)
		}
	}
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		name  string
		kind  byte
		index int
		ok    bool
	}{
		{"cube-s0", 's', 0, true},
		{"cube-g12", 'g', 12, true},
		{"cube-h99", 'h', 99, true},
		{"cube-x1", 0, 0, false},
		{"cube2-s1", 0, 0, false},
		{"cube-s", 0, 0, false},
		{"cube-s01", 0, 0, false},
		{"cube-s-1", 0, 0, false},
		{"cube-s1a", 0, 0, false},
		{"cub-s1", 0, 0, false},
		{"eth0", 0, 0, false},
	} {
		kind, i, ok := parseName("cube", tc.name)
		if ok != tc.ok || (ok && (kind != tc.kind || i != tc.index)) {
			t.Errorf("%s: got %c %d %v", tc.name, kind, i, ok)
		}
	}
}

func TestFirstNameserver(t *testing.T) {
	for _, tc := range []struct {
		conf string
		want string
	}{
		{"nameserver 192.0.2.53\n", "192.0.2.53"},
		{"# comment\nnameserver 127.0.0.53\noptions edns0\n", ""},
		{"nameserver 127.0.0.53\nnameserver ::1\nnameserver 10.0.0.1\n", "10.0.0.1"},
		{"nameserver 10.88.0.1\nnameserver 1.1.1.1\n", "1.1.1.1"},
		{"nameserver bogus\nsearch example.com\n", ""},
		{"", ""},
	} {
		a, ok := firstNameserver([]byte(tc.conf))
		got := ""
		if ok {
			got = a.String()
		}
		if got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.conf, got, tc.want)
		}
	}
}
