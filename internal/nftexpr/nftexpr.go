// Package nftexpr builds the nftables expressions that Cube's network
// rules share: the slots' base isolation (netslot) and the per-sandbox
// egress policy (egress) match connections and refuse traffic the same way.
package nftexpr

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Cat joins expression lists into one rule.
func Cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// L4Proto matches the transport protocol (unix.IPPROTO_TCP, ...).
func L4Proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// CtReply matches packets going in the reply direction of their
// connection: answers to whoever opened it.
func CtReply() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeyDIRECTION, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{1 /* IP_CT_DIR_REPLY */}},
	}
}

// CtDNAT matches connections whose destination a nat rule changed.
// (Matching the original destination itself would need conntrack's
// direction attribute, which github.com/google/nftables cannot read back,
// and then no rule of the chain can be listed.)
func CtDNAT() []expr.Any {
	mask := binary.NativeEndian.AppendUint32(nil, 1<<5 /* IPS_DST_NAT */)
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// Reject refuses what match matches at once rather than dropping it, so a
// program in the sandbox fails fast instead of waiting for a timeout: TCP
// with a reset, the rest with ICMP "administratively prohibited".
func Reject(match []expr.Any) [][]expr.Any {
	return [][]expr.Any{
		Cat(match, L4Proto(unix.IPPROTO_TCP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}),
		Cat(match, []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 13}}),
	}
}
