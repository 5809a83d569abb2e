// Package u128 is an unsigned 128-bit integer for counting and stepping
// through IP addresses: the root package's pool layouts and usage figures,
// and package subnet's auto-pool sizes.
package u128

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// U128 is an unsigned 128-bit integer: an IPv6 address (or an IPv4 address in
// its IPv4-mapped form) as a number, or a count or offset of addresses.
type U128 struct{ Hi, Lo uint64 }

// Max is 2^128-1.
var Max = U128{^uint64(0), ^uint64(0)}

// From returns a as a number (IPv4 in its IPv4-mapped form).
func From(a netip.Addr) U128 {
	b := a.As16()
	return U128{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}

// Addr converts u back to an address; is4 selects the IPv4 form.
func (u U128) Addr(is4 bool) netip.Addr {
	if is4 {
		v := uint32(u.Lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.Hi)
	binary.BigEndian.PutUint64(b[8:], u.Lo)
	return netip.AddrFrom16(b)
}

// Add returns u+v, wrapping.
func (u U128) Add(v U128) U128 {
	lo, c := bits.Add64(u.Lo, v.Lo, 0)
	hi, _ := bits.Add64(u.Hi, v.Hi, c)
	return U128{hi, lo}
}

// Sub returns u-v, wrapping.
func (u U128) Sub(v U128) U128 {
	lo, b := bits.Sub64(u.Lo, v.Lo, 0)
	hi, _ := bits.Sub64(u.Hi, v.Hi, b)
	return U128{hi, lo}
}

func (u U128) AddOne() U128 { return u.Add(U128{0, 1}) }
func (u U128) SubOne() U128 { return u.Sub(U128{0, 1}) }

// Cmp returns -1, 0 or 1.
func (u U128) Cmp(v U128) int {
	switch {
	case u.Hi < v.Hi:
		return -1
	case u.Hi > v.Hi:
		return 1
	case u.Lo < v.Lo:
		return -1
	case u.Lo > v.Lo:
		return 1
	}
	return 0
}

func (u U128) Less(v U128) bool { return u.Cmp(v) < 0 }
func (u U128) IsZero() bool     { return u.Hi == 0 && u.Lo == 0 }

// Shr returns u >> n for 0 <= n < 128.
func (u U128) Shr(n uint) U128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return U128{0, u.Hi >> (n - 64)}
	}
	return U128{u.Hi >> n, u.Lo>>n | u.Hi<<(64-n)}
}

// Shl returns u << n for 0 <= n < 128.
func (u U128) Shl(n uint) U128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return U128{u.Lo << (n - 64), 0}
	}
	return U128{u.Hi<<n | u.Lo>>(64-n), u.Lo << n}
}

// Digit returns the 6-bit digit of u at the given level (level 0 is the
// lowest), as the root package's used-address tree indexes its nodes.
func (u U128) Digit(level int) uint {
	return uint(u.Shr(uint(6*level)).Lo & 63)
}

// WithLowDigits returns u with digit d at level and every lower digit zero.
func (u U128) WithLowDigits(level int, d uint) U128 {
	shift := uint(6 * level)
	mask := U128{0, 63}.Shl(shift)        // the digit's bits
	low := U128{0, 1}.Shl(shift).SubOne() // bits below the digit
	keep := U128{^(mask.Hi | low.Hi), ^(mask.Lo | low.Lo)}
	v := U128{u.Hi & keep.Hi, u.Lo & keep.Lo}
	return v.Add(U128{0, uint64(d)}.Shl(shift))
}

// String formats u in decimal, for messages.
func (u U128) String() string {
	if u.Hi == 0 {
		return uitoa(u.Lo)
	}
	// Long division by 10^19 twice is enough for 128 bits.
	const e19 = 10000000000000000000
	q1, r1 := bits.Div64(0, u.Hi, e19)
	q2, r2 := bits.Div64(r1, u.Lo, e19)
	// value = (q1*2^64 + q2) * e19 + r2, where q1 < e19.
	hi := U128{q1, q2}
	pad := uitoa(r2)
	for len(pad) < 19 {
		pad = "0" + pad
	}
	return hi.String() + pad
}

func uitoa(v uint64) string {
	if v == 0 {
		return "0"
	}
	var buf [20]byte
	i := len(buf)
	for v > 0 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	return string(buf[i:])
}

// LastAddr returns the last address of p (all host bits set).
func LastAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	a := p.Addr()
	hostBits := uint(a.BitLen() - p.Bits())
	u := From(a)
	if hostBits > 0 {
		ones := U128{0, 1}.Shl(hostBits).SubOne()
		if hostBits == 128 {
			ones = Max
		}
		u = U128{u.Hi | ones.Hi, u.Lo | ones.Lo}
	}
	return u.Addr(a.Is4())
}

// Span returns the number of addresses from a to b inclusive, minus one
// (so that a full IPv6 space fits).
func Span(a, b netip.Addr) U128 { return From(b).Sub(From(a)) }
