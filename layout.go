package ipam

import (
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"
)

// This file holds a pool's layout (its addresses numbered in allocation
// order) and the tree of its used addresses, which together find free
// addresses without looking at addresses one at a time.
//
// A pool's allocatable addresses (its ranges minus excluded, reserved and
// gateway addresses) are laid out as segments in allocation order and numbered
// 0..total-1 ("ordinals"). Used ordinals live in a sparse 64-ary tree: a node's
// bit says "this child is completely used", an absent child is completely free.
// Finding the next free ordinal from any position, marking and clearing all cost
// O(log64 total): 2 levels for a /24, 4 for a /12, 11 for an IPv6 /64. Memory
// grows with the number of used addresses, never with the size of the range, so
// IPv6 ranges of any size are never enumerated.

// segment is a run of allocatable addresses inside one range of the set.
type segment struct {
	from, to netip.Addr
	rng      int  // index of the Range it belongs to
	base     u128 // ordinal of from
	start    u128 // from as a number (u128From), for addr
}

// layout maps ordinals to addresses for one pool. It is immutable.
type layout struct {
	is4         bool
	ranges      []Range   // canonical, in allocation order
	segs        []segment // in allocation order
	byAddr      []int     // segment indices sorted by address
	total       u128      // number of allocatable addresses (may be 2^128-1 at most)
	levels      int       // tree height: 64^levels > total-1
	allocatable *netipx.IPSet
}

func newLayout(ranges []Range, exclude *netipx.IPSet) *layout {
	l := &layout{ranges: ranges}
	if len(ranges) > 0 {
		l.is4 = ranges[0].Start.Is4()
	}
	var all netipx.IPSetBuilder
	for i, r := range ranges {
		var b netipx.IPSetBuilder
		b.AddRange(r.IPRange())
		b.Remove(r.Gateway)
		if exclude != nil {
			b.RemoveSet(exclude)
		}
		set, _ := b.IPSet()
		for _, sr := range set.Ranges() {
			l.segs = append(l.segs, segment{from: sr.From(), to: sr.To(), rng: i, base: l.total, start: u128From(sr.From())})
			l.total = l.total.Add(rangeSpan(sr.From(), sr.To())).AddOne()
			all.AddRange(sr)
		}
	}
	l.allocatable, _ = all.IPSet()
	l.byAddr = make([]int, len(l.segs))
	for i := range l.byAddr {
		l.byAddr[i] = i
	}
	slices.SortFunc(l.byAddr, func(a, b int) int { return l.segs[a].from.Compare(l.segs[b].from) })
	l.levels = 1
	if !l.total.IsZero() {
		maxOrd := l.total.SubOne()
		for l.levels < 22 && !maxOrd.Shr(uint(6*l.levels)).IsZero() {
			l.levels++
		}
	}
	return l
}

// ordinal returns the ordinal of ip, or false if ip is not allocatable.
func (l *layout) ordinal(ip netip.Addr) (u128, bool) {
	if ip.Is4() != l.is4 {
		return u128{}, false
	}
	i, ok := l.segAt(ip)
	if !ok {
		return u128{}, false
	}
	s := l.segs[i]
	return s.base.Add(rangeSpan(s.from, ip)), true
}

// segAt returns the index of the segment holding ip.
func (l *layout) segAt(ip netip.Addr) (int, bool) {
	if len(l.segs) == 1 {
		s := l.segs[0]
		return 0, !ip.Less(s.from) && !s.to.Less(ip)
	}
	k, _ := slices.BinarySearchFunc(l.byAddr, ip, func(si int, ip netip.Addr) int {
		s := l.segs[si]
		if s.to.Less(ip) {
			return -1
		}
		if ip.Less(s.from) {
			return 1
		}
		return 0
	})
	if k < len(l.byAddr) {
		s := l.segs[l.byAddr[k]]
		if !ip.Less(s.from) && !s.to.Less(ip) {
			return l.byAddr[k], true
		}
	}
	return 0, false
}

// addr returns the address of ordinal o < total, and the range it is in.
func (l *layout) addr(o u128) (netip.Addr, int) {
	// The last segment whose base <= o.
	i := 0
	if len(l.segs) > 1 {
		var found bool
		i, found = slices.BinarySearchFunc(l.segs, o, func(s segment, o u128) int { return s.base.Cmp(o) })
		if !found {
			i--
		}
	}
	s := &l.segs[i]
	if l.is4 {
		v := uint32(s.start.Lo) + uint32(o.Lo-s.base.Lo) // an IPv4 pool has under 2^32 ordinals
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), s.rng
	}
	return s.start.Add(o.Sub(s.base)).Addr(false), s.rng
}

// rangeOf returns the index of the range that contains ip (host-local's
// Contains: the gateway and excluded addresses count), or -1.
func (l *layout) rangeOf(ip netip.Addr) int {
	for i, r := range l.ranges {
		if r.Contains(ip) {
			return i
		}
	}
	return -1
}

// after returns the first ordinal that comes after ip in allocation order, for
// round-robin resumption: ip is in range k (host-local's Contains), and the next
// allocatable address after it in range k, or else the first of the following
// ranges, is where the search starts. ok is false if ip is in no range.
func (l *layout) after(ip netip.Addr) (u128, bool) {
	k := l.rangeOf(ip)
	if k < 0 {
		return u128{}, false
	}
	// Segments of range k are contiguous in l.segs and ascending.
	for _, s := range l.segs {
		if s.rng < k {
			continue
		}
		if s.rng > k {
			return s.base, true
		}
		if ip.Less(s.from) {
			return s.base, true
		}
		if ip.Less(s.to) {
			return s.base.Add(rangeSpan(s.from, ip)).AddOne(), true
		}
	}
	return u128{}, true // wrap to the start
}

// String lists the ranges as host-local prints a range set: "s1-e1,s2-e2".
func (l *layout) String() string {
	var b strings.Builder
	for i, r := range l.ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.String())
	}
	return b.String()
}

// node is one node of the used-ordinal tree. At level 0, bit i of full says
// ordinal i of the node is used; above, that child i is completely used.
type node struct {
	full uint64
	kids *[64]*node // nil at level 0
}

// usedTree is the set of used ordinals of one layout.
type usedTree struct {
	root   *node
	levels int
	used   u128 // number of used ordinals
}

func newUsedTree(levels int) *usedTree { return &usedTree{levels: levels} }

// has reports whether ordinal o is used.
func (t *usedTree) has(o u128) bool {
	n := t.root
	for level := t.levels - 1; n != nil; level-- {
		d := o.Digit(level)
		if n.full>>d&1 == 1 {
			return true
		}
		if level == 0 {
			return false
		}
		n = n.kids[d]
	}
	return false
}

// set marks o used; it reports whether o was free before.
func (t *usedTree) set(o u128) bool {
	if t.root == nil {
		t.root = newNode(t.levels - 1)
	}
	if !setIn(t.root, t.levels-1, o) {
		return false
	}
	t.used = t.used.AddOne()
	return true
}

func newNode(level int) *node {
	if level == 0 {
		return &node{}
	}
	return &node{kids: new([64]*node)}
}

func setIn(n *node, level int, o u128) bool {
	d := o.Digit(level)
	bit := uint64(1) << d
	if n.full&bit != 0 {
		return false
	}
	if level == 0 {
		n.full |= bit
		return true
	}
	k := n.kids[d]
	if k == nil {
		k = newNode(level - 1)
		n.kids[d] = k
	}
	if !setIn(k, level-1, o) {
		return false
	}
	if k.full == ^uint64(0) {
		n.full |= bit
		n.kids[d] = nil // a full child needs no storage
	}
	return true
}

// clear marks o free; it reports whether o was used before.
func (t *usedTree) clear(o u128) bool {
	if t.root == nil || !clearIn(t.root, t.levels-1, o) {
		return false
	}
	t.used = t.used.SubOne()
	return true
}

func clearIn(n *node, level int, o u128) bool {
	d := o.Digit(level)
	bit := uint64(1) << d
	if level == 0 {
		if n.full&bit == 0 {
			return false
		}
		n.full &^= bit
		return true
	}
	if n.full&bit != 0 {
		// The child was full and dropped: rebuild it as full, then clear.
		k := newNode(level - 1)
		k.full = ^uint64(0)
		n.kids[d] = k
		n.full &^= bit
	}
	k := n.kids[d]
	if k == nil {
		return false
	}
	return clearIn(k, level-1, o)
}

// nextFree returns the smallest free ordinal >= o, or false if there is none
// below 64^levels. Callers compare the result with the layout's total.
func (t *usedTree) nextFree(o u128) (u128, bool) {
	if t.root == nil {
		return o, true
	}
	return nextFreeIn(t.root, t.levels-1, o)
}

func nextFreeIn(n *node, level int, o u128) (u128, bool) {
	if n == nil {
		return o, true
	}
	d := o.Digit(level)
	if level == 0 {
		free := ^n.full &^ (uint64(1)<<d - 1)
		if free == 0 {
			return u128{}, false
		}
		return o.WithLowDigits(0, uint(bits.TrailingZeros64(free))), true
	}
	if n.full>>d&1 == 0 {
		if r, ok := nextFreeIn(n.kids[d], level-1, o); ok {
			return r, true
		}
	}
	// Children after d that are not full; a child that is not full has a free
	// ordinal, except that an expanded full child (kids[d] with full bits) might
	// have been counted as not full: the loop handles that too.
	rest := ^n.full
	if d == 63 {
		rest = 0
	} else {
		rest &^= uint64(1)<<(d+1) - 1
	}
	for rest != 0 {
		c := uint(bits.TrailingZeros64(rest))
		start := o.WithLowDigits(level, c)
		if r, ok := nextFreeIn(n.kids[c], level-1, start); ok {
			return r, true
		}
		rest &= rest - 1
	}
	return u128{}, false
}

// freeIn returns the first free ordinal in [from, to), or false.
func (t *usedTree) freeIn(from, to u128) (u128, bool) {
	if !from.Less(to) {
		return u128{}, false
	}
	r, ok := t.nextFree(from)
	if !ok || !r.Less(to) {
		return u128{}, false
	}
	return r, true
}

// pick returns the next free ordinal by strategy: LowestFree from 0;
// RoundRobin from start, wrapping round to just before start. It does not mark
// the ordinal used.
func (t *usedTree) pick(total, start u128, s Strategy) (u128, bool) {
	if s == LowestFree || !start.Less(total) {
		start = u128{}
	}
	if r, ok := t.freeIn(start, total); ok {
		return r, true
	}
	return t.freeIn(u128{}, start)
}

func (l *layout) describe(t *usedTree) string {
	return fmt.Sprintf("%s (%s/%s used)", l, t.used, l.total)
}
