package egress

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"cube/internal/netslot"
	"cube/internal/nftexpr"
)

// Table is the nftables table (family ip) that holds a slot's policy in
// its gateway netns. netslot deletes it when the slot is re-armed, so a
// policy lasts exactly one tenant.
const Table = "policy"

// Ports of the Filter's listeners inside every gateway netns, on
// netslot.Gateway. Redirected traffic arrives there; the sandbox could
// also dial them directly, which gets it nothing it could not get anyway.
const (
	proxyPort = 15001
	dnsPort   = 15053
)

// installPolicy replaces the policy table of the gateway netns open at fd
// in one transaction, so the sandbox never runs under half a policy or
// none between two. An open policy removes the table.
//
// Deleting anything from nftables waits for an RCU grace period (10-20 ms
// here) while adding a table takes about 1 ms, so the first policy of a
// fresh slot is only added, and a policy identical to the one in place
// (Apply again after Adopt) changes nothing.
func installPolicy(fd int, r *rules) error {
	c, err := nftables.New(nftables.WithNetNSFd(fd))
	if err != nil {
		return fmt.Errorf("egress: nftables: %w", err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: Table}
	tag := r.tag()
	present, same, err := currentPolicy(c, t, tag)
	if err != nil {
		return err
	}
	switch {
	case r.open() && !present, !r.open() && same:
		return nil
	case present:
		c.DelTable(t)
	}
	if !r.open() {
		c.AddTable(t)
		for _, ch := range policyChains(t, r) {
			chain := c.AddChain(ch.chain)
			for _, exprs := range ch.rules {
				c.AddRule(&nftables.Rule{Table: t, Chain: chain, Exprs: exprs, UserData: tag})
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: install policy: %w", err)
	}
	return nil
}

// currentPolicy reports whether the gateway has a policy table and whether
// it is the one tagged tag: every chain of policyChains there, each rule
// carrying the tag.
func currentPolicy(c *nftables.Conn, t *nftables.Table, tag []byte) (present, same bool, err error) {
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return false, false, fmt.Errorf("egress: list gateway tables: %w", err)
	}
	for _, tb := range tables {
		present = present || tb.Name == t.Name
	}
	if !present {
		return false, false, nil
	}
	chains, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return true, false, nil
	}
	n := 0
	for _, ch := range chains {
		if ch.Table.Name != t.Name {
			continue
		}
		n++
		rules, err := c.GetRules(t, ch)
		if err != nil || len(rules) == 0 {
			return true, false, nil
		}
		for _, rule := range rules {
			if string(rule.UserData) != string(tag) {
				return true, false, nil
			}
		}
	}
	return true, n > 0, nil
}

type chainRules struct {
	chain *nftables.Chain
	rules [][]expr.Any
}

// policyChains is the policy table's content. The forward chain judges
// every connection the sandbox opens by address; with domain entries, a
// prerouting chain (ahead of netslot's DNS forwarding) first hands DNS and
// web traffic to the Filter's listeners in the gateway, which judge it by
// name.
func policyChains(t *nftables.Table, r *rules) []chainRules {
	fromSandbox := matchIfname(netslot.GatewaySandboxIf)
	fwd := chainRules{chain: &nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
	}}
	add := func(rs ...[]expr.Any) { fwd.rules = append(fwd.rules, rs...) }
	// Traffic from the host side and replies are netslot's business.
	add(
		nftexpr.Cat(matchIfnameOp(netslot.GatewaySandboxIf, expr.CmpOpNeq), accept()),
		nftexpr.Cat(nftexpr.CtReply(), accept()),
	)
	// The gateway's own DNS forwarding (netslot's DNS DNAT is the only nat
	// rule for forwarded sandbox traffic) sends every name upstream, and a
	// query is data leaving the sandbox. So it is kept only while the
	// internet is open; a policy that denies everything not allowed gets
	// its names judged by the Filter (domain entries, redirected above
	// this) or none resolved, refused at once (a resolver that never
	// answers stalls programs for seconds).
	if !r.denyAll() {
		add(nftexpr.Cat(fromSandbox, nftexpr.CtDNAT(), accept()))
	} else {
		add(nftexpr.Reject(nftexpr.Cat(fromSandbox, nftexpr.CtDNAT()))...)
	}
	for _, p := range r.allowNets {
		add(nftexpr.Cat(fromSandbox, matchDst(p), accept()))
	}
	for _, p := range r.denyNets {
		add(nftexpr.Reject(nftexpr.Cat(fromSandbox, matchDst(p)))...)
	}
	chains := []chainRules{fwd}
	if !r.hasNames() {
		return chains
	}

	pre := chainRules{chain: &nftables.Chain{
		Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATDest - 1),
	}}
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		pre.rules = append(pre.rules, nftexpr.Cat(fromSandbox, matchDstAddr(netslot.Gateway), nftexpr.L4Proto(proto), matchDport(53), redirect(dnsPort)))
	}
	// Addresses the policy allows outright need no name check.
	for _, p := range r.allowNets {
		pre.rules = append(pre.rules, nftexpr.Cat(fromSandbox, nftexpr.L4Proto(unix.IPPROTO_TCP), matchDst(p), accept()))
	}
	for _, port := range []uint16{80, 443} {
		pre.rules = append(pre.rules, nftexpr.Cat(fromSandbox, nftexpr.L4Proto(unix.IPPROTO_TCP), matchDport(port), redirect(proxyPort)))
	}
	return append(chains, pre)
}

func accept() []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}} }

func matchIfname(name string) []expr.Any { return matchIfnameOp(name, expr.CmpOpEq) }

func matchIfnameOp(name string, op expr.CmpOp) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: b},
	}
}

func matchDstAddr(a netip.Addr) []expr.Any { return matchDst(netip.PrefixFrom(a, 32)) }

// matchDst matches IPv4 destinations inside p.
func matchDst(p netip.Prefix) []expr.Any {
	netw := p.Masked().Addr().As4()
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4}}
	if p.Bits() < 32 {
		out = append(out, &expr.Bitwise{
			SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.BigEndian.AppendUint32(nil, ^uint32(0)<<(32-p.Bits())), Xor: make([]byte, 4),
		})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: netw[:]})
}

func matchDport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
	}
}

// redirect sends the packet to port on the address of the interface it
// came in on (netslot.Gateway).
func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}
