package netslot

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// gwTable is the nftables table in every gateway netns.
const gwTable = "slot"

// gwRules describes one slot's gateway ruleset.
type gwRules struct {
	hostAddr netip.Addr     // inbound traffic to this address goes to the sandbox
	dns      netip.AddrPort // where Gateway:53 goes; invalid = reject
}

// gwChain is one base chain of the gateway table with its rules.
type gwChain struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// gatewayChains is the gateway table's content for one slot.
func gatewayChains(t *nftables.Table, r gwRules) []gwChain {
	pre := gwChain{chain: &nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest,
	}}
	// Host to sandbox: HostAddr is the slot's address as the host sees it.
	pre.rules = append(pre.rules, cat(
		matchIfname(expr.MetaKeyIIFNAME, gwUplinkIf),
		matchAddr(16, r.hostAddr),
		dnat(SandboxAddr, 0),
	))
	if r.dns.IsValid() {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			pre.rules = append(pre.rules, cat(
				matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
				matchAddr(16, Gateway),
				matchL4Proto(proto),
				matchDport(53),
				dnat(r.dns.Addr(), r.dns.Port()),
			))
		}
	}

	post := gwChain{chain: &nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	}}
	// Sandbox egress leaves as HostAddr, which the host then masquerades.
	post.rules = append(post.rules, cat(
		matchIfname(expr.MetaKeyOIFNAME, gwUplinkIf),
		[]expr.Any{&expr.Masq{}},
	))

	in := gwChain{chain: &nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter,
	}}
	// DNS that was not sent to a resolver above is refused at once: a
	// resolver that never answers makes programs in the sandbox hang for
	// seconds (Python's http.server takes ~11 s to bind).
	in.rules = append(in.rules,
		cat(
			matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
			matchL4Proto(unix.IPPROTO_UDP),
			matchDport(53),
			[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* port unreachable */}},
		),
		cat(
			matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
			matchL4Proto(unix.IPPROTO_TCP),
			matchDport(53),
			[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}},
		),
	)
	return []gwChain{pre, post, in}
}

// ruleTag marks each rule this package writes with what it was made from,
// so an intact table can be recognised without decoding expressions.
func ruleTag(r gwRules, chain string, i int) []byte {
	return fmt.Appendf(nil, "netslot/1 %s %s %s %d", r.hostAddr, r.dns, chain, i)
}

// installGateway makes the gateway netns' table hold exactly the slot's
// NAT rules, in one transaction, so a slot never runs with half its rules.
// With fresh, every other table (policy of a previous tenant) is deleted.
//
// An intact table is left alone: a commit that deletes rules or chains
// waits for an RCU grace period (about 10 ms here), and re-arming a slot
// should not pay for that.
func installGateway(fd int, r gwRules, fresh bool) error {
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return fmt.Errorf("netslot: nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: gwTable}
	want := gatewayChains(t, r)
	tables, err := c.ListTables()
	if err != nil {
		return fmt.Errorf("netslot: list gateway tables: %w", err)
	}
	ours := false
	for _, tb := range tables {
		if tb.Name == gwTable && tb.Family == t.Family {
			ours = true
		} else if fresh {
			c.DelTable(tb)
		}
	}
	if !ours || !gatewayIntact(c, t, r, want) {
		if ours {
			c.DelTable(t)
		}
		c.AddTable(t)
		for _, gc := range want {
			ch := c.AddChain(gc.chain)
			for i, exprs := range gc.rules {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs, UserData: ruleTag(r, gc.chain.Name, i)})
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netslot: install gateway rules: %w", err)
	}
	return nil
}

// gatewayIntact reports whether table t holds exactly the chains and
// tagged rules of want, with accepting policies.
func gatewayIntact(c *nftables.Conn, t *nftables.Table, r gwRules, want []gwChain) bool {
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return false
	}
	have := map[string]*nftables.Chain{}
	for _, ch := range chains {
		if ch.Table.Name == t.Name {
			have[ch.Name] = ch
		}
	}
	if len(have) != len(want) {
		return false
	}
	for _, gc := range want {
		ch := have[gc.chain.Name]
		if ch == nil || ch.Hooknum == nil || *ch.Hooknum != *gc.chain.Hooknum ||
			(ch.Policy != nil && *ch.Policy != nftables.ChainPolicyAccept) {
			return false
		}
		rules, err := c.GetRules(t, ch)
		if err != nil || len(rules) != len(gc.rules) {
			return false
		}
		for i, rule := range rules {
			if string(rule.UserData) != string(ruleTag(r, gc.chain.Name, i)) {
				return false
			}
		}
	}
	return true
}

// installHost adds (or replaces) the pool's table on the host: masquerade
// of slot traffic that leaves HostCIDR. The add-delete-add sequence in one
// transaction replaces an existing table without failing when none exists.
func installHost(table string, cidr netip.Prefix) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netslot: nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: table}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	post := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource,
	})
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: cat(
		matchPrefix(12, cidr, expr.CmpOpEq),
		matchPrefix(16, cidr, expr.CmpOpNeq),
		[]expr.Any{&expr.Masq{}},
	)})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netslot: install host table %s: %w", table, err)
	}
	return nil
}

// deleteHostTable removes the pool's host table; a missing one is fine.
func deleteHostTable(table string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("netslot: nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: table}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("netslot: delete host table %s: %w", table, err)
	}
	return nil
}

// hostTableExists reports whether the host has an IPv4 table of that name.
func hostTableExists(table string) (bool, error) {
	c, err := nftables.New()
	if err != nil {
		return false, fmt.Errorf("netslot: nftables: %w", err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("netslot: list nftables tables: %w", err)
	}
	for _, t := range ts {
		if t.Name == table {
			return true, nil
		}
	}
	return false, nil
}

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func matchIfname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// matchAddr compares the IPv4 header field at offset (12 source, 16
// destination) with a.
func matchAddr(offset uint32, a netip.Addr) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b[:]},
	}
}

func matchPrefix(offset uint32, p netip.Prefix, op expr.CmpOp) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	netw := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: netw[:]},
	}
}

func matchL4Proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func matchDport(port uint16) []expr.Any {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, port)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// dnat rewrites the destination to a (and port, unless 0).
func dnat(a netip.Addr, port uint16) []expr.Any {
	b := a.As4()
	out := []expr.Any{&expr.Immediate{Register: 1, Data: b[:]}}
	n := &expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1}
	if port != 0 {
		pb := make([]byte, 2)
		binary.BigEndian.PutUint16(pb, port)
		out = append(out, &expr.Immediate{Register: 2, Data: pb})
		n.RegProtoMin = 2
	}
	return append(out, n)
}
