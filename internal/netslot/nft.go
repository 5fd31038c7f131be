package netslot

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"cube/internal/nftexpr"
)

// gwTable is the nftables table in every gateway netns.
const gwTable = "slot"

// gwRules describes one slot's gateway ruleset.
type gwRules struct {
	hostAddr     netip.Addr     // inbound traffic to this address goes to the sandbox
	dns          netip.AddrPort // where Gateway:53 goes; invalid = reject
	hostCIDR     netip.Prefix   // every slot's link: never reachable from a sandbox
	allowPrivate []netip.Prefix // parts of BlockedRanges sandboxes may reach
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
	pre.rules = append(pre.rules, nftexpr.Cat(
		matchIfname(expr.MetaKeyIIFNAME, gwUplinkIf),
		matchAddr(16, r.hostAddr),
		dnat(SandboxAddr, 0),
	))
	if r.dns.IsValid() {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			pre.rules = append(pre.rules, nftexpr.Cat(
				matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
				matchAddr(16, Gateway),
				nftexpr.L4Proto(proto),
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
	post.rules = append(post.rules, nftexpr.Cat(
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
		nftexpr.Cat(
			matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
			nftexpr.L4Proto(unix.IPPROTO_UDP),
			matchDport(53),
			[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3 /* port unreachable */}},
		),
		nftexpr.Cat(
			matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf),
			nftexpr.L4Proto(unix.IPPROTO_TCP),
			matchDport(53),
			[]expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}},
		),
	)

	return []gwChain{pre, post, in, isolationChain(t, r)}
}

// isolationChain is the gateway's forward filter: what may pass between
// the sandbox and the host at all, before any per-sandbox policy (which
// lives in tables of its own and can only narrow this down further: a
// packet leaves only if every forward chain lets it).
func isolationChain(t *nftables.Table, r gwRules) gwChain {
	fwd := gwChain{chain: &nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
	}}
	add := func(rules ...[]expr.Any) { fwd.rules = append(fwd.rules, rules...) }
	// From the host side only replies to the sandbox's own connections and
	// connections the host opened to HostAddr (the proxy) reach the sandbox.
	add(
		nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwUplinkIf), nftexpr.CtReply(), verdict(expr.VerdictAccept)),
		// The only nat rule for traffic from the host is HostAddr's DNAT.
		nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwUplinkIf), nftexpr.CtDNAT(), verdict(expr.VerdictAccept)),
		nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwUplinkIf), verdict(expr.VerdictDrop)),
	)
	// From the sandbox: replies to connections the host opened pass, so do
	// the DNS queries the gateway itself forwards (the resolver may well be
	// in 10/8); a forged source address does not.
	notSandbox := nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), matchAddrOp(12, SandboxAddr, expr.CmpOpNeq))
	add(
		nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), nftexpr.CtReply(), verdict(expr.VerdictAccept)),
		nftexpr.Cat(notSandbox, verdict(expr.VerdictDrop)),
		// The only nat rule for forwarded sandbox traffic is the DNS one
		// (policy tables may redirect to the gateway itself, which is
		// input, not forward).
		nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), nftexpr.CtDNAT(), verdict(expr.VerdictAccept)),
	)
	// Other slots and the host's slot links, whatever the operator allows.
	add(nftexpr.Reject(nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), matchPrefix(16, r.hostCIDR, expr.CmpOpEq)))...)
	for _, p := range r.allowPrivate {
		add(nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), matchPrefix(16, p, expr.CmpOpEq), verdict(expr.VerdictAccept)))
	}
	for _, p := range BlockedRanges {
		add(nftexpr.Reject(nftexpr.Cat(matchIfname(expr.MetaKeyIIFNAME, gwSandboxIf), matchPrefix(16, p, expr.CmpOpEq)))...)
	}
	return fwd
}

// ruleTag marks each rule this package writes with what it was made from,
// so an intact table can be recognised without decoding expressions. The
// inputs are hashed: nftables keeps at most 256 bytes of user data.
func ruleTag(r gwRules, chain string, i int) []byte {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s %s %s %v", r.hostAddr, r.dns, r.hostCIDR, r.allowPrivate)
	return fmt.Appendf(nil, "netslot/2 %s %d %016x", chain, i, h.Sum64())
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
// of slot traffic that leaves HostCIDR, no connection from a slot to the
// host itself (but dnsPort, when the host answers the slots' DNS), none
// forwarded into a slot from elsewhere, nothing from one slot to another.
// Slots are recognised by their host interface (<prefix>-h*), which a
// sandbox cannot forge. The add-delete-add sequence in one transaction
// replaces an existing table without failing when none exists.
func installHost(table string, cidr netip.Prefix, dnsPort uint16) error {
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
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: nftexpr.Cat(
		matchPrefix(12, cidr, expr.CmpOpEq),
		matchPrefix(16, cidr, expr.CmpOpNeq),
		[]expr.Any{&expr.Masq{}},
	)})
	fromSlot := matchIfnamePrefix(expr.MetaKeyIIFNAME, table+"-h")
	in := c.AddChain(&nftables.Chain{
		Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter,
	})
	var inRules [][]expr.Any
	inRules = append(inRules, nftexpr.Cat(fromSlot, matchCtEstablished(), verdict(expr.VerdictAccept)))
	if dnsPort != 0 {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			inRules = append(inRules, nftexpr.Cat(fromSlot, nftexpr.L4Proto(proto), matchDport(dnsPort), verdict(expr.VerdictAccept)))
		}
	}
	inRules = append(inRules, nftexpr.Reject(fromSlot)...)
	for _, exprs := range inRules {
		c.AddRule(&nftables.Rule{Table: t, Chain: in, Exprs: exprs})
	}
	fwd := c.AddChain(&nftables.Chain{
		Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
	})
	toSlot := matchIfnamePrefix(expr.MetaKeyOIFNAME, table+"-h")
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: nftexpr.Cat(fromSlot, toSlot, verdict(expr.VerdictDrop))})
	// Connections into a slot come from the host itself (the proxy), never
	// through it: with forwarding on, a neighbour routing HostCIDR via this
	// host would otherwise reach sandboxes past the proxy.
	c.AddRule(&nftables.Rule{Table: t, Chain: fwd, Exprs: nftexpr.Cat(toSlot, matchCtNotEstablished(), verdict(expr.VerdictDrop))})
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

func matchIfname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// matchIfnamePrefix matches interface names starting with prefix, as
// nft's "name*" does: the comparison covers only the prefix's bytes.
func matchIfnamePrefix(key expr.MetaKey, prefix string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(prefix)},
	}
}

// matchAddr compares the IPv4 header field at offset (12 source, 16
// destination) with a.
func matchAddr(offset uint32, a netip.Addr) []expr.Any {
	return matchAddrOp(offset, a, expr.CmpOpEq)
}

func matchAddrOp(offset uint32, a netip.Addr, op expr.CmpOp) []expr.Any {
	b := a.As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Cmp{Op: op, Register: 1, Data: b[:]},
	}
}

// matchCtEstablished matches packets of connections already let through
// (and the ICMP errors about them).
func matchCtEstablished() []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// matchCtNotEstablished matches what matchCtEstablished does not.
func matchCtNotEstablished() []expr.Any {
	m := matchCtEstablished()
	m[len(m)-1].(*expr.Cmp).Op = expr.CmpOpEq
	return m
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

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
