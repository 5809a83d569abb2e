package ipam

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
)

// u128 is an unsigned 128-bit integer: an IPv6 address (or an IPv4 address in
// its IPv4-mapped form) as a number, or a count or offset of addresses.
type u128 struct{ hi, lo uint64 }

var u128Max = u128{^uint64(0), ^uint64(0)}

func u128From(a netip.Addr) u128 {
	b := a.As16()
	return u128{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}
}

// addr converts u back to an address; is4 selects the IPv4 form.
func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		v := uint32(u.lo)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func (u u128) add(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}
}

func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

func (u u128) addOne() u128 { return u.add(u128{0, 1}) }
func (u u128) subOne() u128 { return u.sub(u128{0, 1}) }

func (u u128) cmp(v u128) int {
	switch {
	case u.hi < v.hi:
		return -1
	case u.hi > v.hi:
		return 1
	case u.lo < v.lo:
		return -1
	case u.lo > v.lo:
		return 1
	}
	return 0
}

func (u u128) less(v u128) bool { return u.cmp(v) < 0 }
func (u u128) isZero() bool     { return u.hi == 0 && u.lo == 0 }

// shr returns u >> n for 0 <= n < 128.
func (u u128) shr(n uint) u128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return u128{0, u.hi >> (n - 64)}
	}
	return u128{u.hi >> n, u.lo>>n | u.hi<<(64-n)}
}

// shl returns u << n for 0 <= n < 128.
func (u u128) shl(n uint) u128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return u128{u.lo << (n - 64), 0}
	}
	return u128{u.hi<<n | u.lo>>(64-n), u.lo << n}
}

// digit returns the 6-bit digit of u at the given level (level 0 is the lowest).
func (u u128) digit(level int) uint {
	return uint(u.shr(uint(6*level)).lo & 63)
}

// withLowDigits returns u with digit d at level and every lower digit zero.
func (u u128) withLowDigits(level int, d uint) u128 {
	shift := uint(6 * level)
	mask := u128{0, 63}.shl(shift)        // the digit's bits
	low := u128{0, 1}.shl(shift).subOne() // bits below the digit
	keep := u128{^(mask.hi | low.hi), ^(mask.lo | low.lo)}
	v := u128{u.hi & keep.hi, u.lo & keep.lo}
	return v.add(u128{0, uint64(d)}.shl(shift))
}

// String formats u in decimal, for messages.
func (u u128) String() string {
	if u.hi == 0 {
		return uitoa(u.lo)
	}
	// Long division by 10^19 twice is enough for 128 bits.
	const e19 = 10000000000000000000
	q1, r1 := bits.Div64(0, u.hi, e19)
	q2, r2 := bits.Div64(r1, u.lo, e19)
	// value = (q1*2^64 + q2) * e19 + r2, where q1 < e19.
	hi := u128{q1, q2}
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

// lastAddr returns the last address of p (all host bits set).
func lastAddr(p netip.Prefix) netip.Addr {
	p = p.Masked()
	a := p.Addr()
	hostBits := uint(a.BitLen() - p.Bits())
	u := u128From(a)
	if hostBits > 0 {
		ones := u128{0, 1}.shl(hostBits).subOne()
		if hostBits == 128 {
			ones = u128Max
		}
		u = u128{u.hi | ones.hi, u.lo | ones.lo}
	}
	return u.addr(a.Is4())
}

// rangeSize returns the number of addresses from a to b inclusive, minus one
// (so that a full IPv6 space fits).
func rangeSpan(a, b netip.Addr) u128 { return u128From(b).sub(u128From(a)) }
