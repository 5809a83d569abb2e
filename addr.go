package ipam

import (
	"net/netip"

	num "github.com/ipamkit/ipam/internal/u128"
)

// u128 is an unsigned 128-bit integer: an IPv6 address (or an IPv4 address in
// its IPv4-mapped form) as a number, or a count or offset of addresses. The
// pool layouts (layout.go) and the usage figures (usage.go) count with it.
type u128 = num.U128

var u128Max = num.Max

// u128From returns a as a number (IPv4 in its IPv4-mapped form).
func u128From(a netip.Addr) u128 { return num.From(a) }

// lastAddr returns the last address of p (all host bits set).
func lastAddr(p netip.Prefix) netip.Addr { return num.LastAddr(p) }

// rangeSpan returns the number of addresses from a to b inclusive, minus one
// (so that a full IPv6 space fits).
func rangeSpan(a, b netip.Addr) u128 { return num.Span(a, b) }
