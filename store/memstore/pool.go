package memstore

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"sync"
	"time"

	"github.com/ipamkit/ipam/store"
)

// poolClaims holds the claims and the cursor of one pool.
//
// Claims are kept in blocks of blockSize consecutive addresses, found by the
// address with its low blockBits bits cleared, so that an allocator claiming
// addresses in order touches one map entry, and one block's records, for
// blockSize claims in a row instead of a hash-map entry of its own for each. The
// two blocks used last are remembered, which spares even that map lookup while
// an allocator's claims stay in one block and its releases go to another. A
// block holds records only for its claimed addresses, so a pool's memory grows
// with its claims, not with the span of addresses they are scattered over. A block emptied by Delete stays in the map
// until another is emptied, in case its address is claimed again next; then it
// leaves the map and is kept, with the room it had grown, for the next block the
// pool needs. Neither the blocks nor the map shrink, so a pool that is drained
// and refilled does not allocate again.
//
// Addresses with an IPv6 zone, which no pool prefix contains but a Store must
// still keep apart, are kept in a map of their own.
type poolClaims struct {
	name   string
	mu     sync.Mutex
	blocks map[blockKey]*block // blocks holding a claim, and empty.b
	free   []*block            // emptied blocks, to be reused
	recent [2]recentBlock      // the blocks used last, most recent first
	empty  recentBlock         // the block emptied last, still in blocks (maybe refilled since)
	zoned  map[netip.Addr]*record
	n      int // number of claims
	cursor netip.Addr
	// version counts the changes to the pool's claims (PoolVersion).
	version uint64
	// watchers are the watches that follow the pool (see watchers).
	watchers []*watch
}

// record is a stored claim without its pool and address, which are its keys:
// 120 bytes on a 64-bit platform, most of a claim's cost in memory. Records live
// in a block's slice, not as map values, so Go's limit of 128 bytes on a map
// value stored inline no longer bounds them.
type record struct {
	owner store.Owner
	time  time.Time
	rev   int64
}

// blockBits is the number of low address bits that pick an address's slot in
// its block; blockSize is the number of slots.
const (
	blockBits = 6
	blockSize = 1 << blockBits
)

// block holds the records of the claimed addresses among blockSize consecutive
// ones. recs is compact, in no particular order: a Delete moves the last record
// into the hole it leaves, so that Create and Delete take constant time whatever
// the order of the addresses.
type block struct {
	used uint64          // bit i is set if slot i is claimed
	at   [blockSize]byte // at[i] is the index in recs of slot i's record, if used
	slot [blockSize]byte // slot[j] is the slot whose record is recs[j]
	recs []record        // len(recs) is the number of bits set in used
}

// blockKey identifies a block: the 128-bit address of its first slot shifted
// right by blockBits, with its top bit set for an IPv4 address, so that IPv4
// addresses and the IPv4-mapped IPv6 ones never share a block.
type blockKey struct{ hi, lo uint64 }

// is4 is the top bit of blockKey.hi, set for a block of IPv4 addresses.
const is4 = 1 << 63

// keyOf returns the key of the block of ip, which must be valid and have no
// zone, and ip's slot in that block.
func keyOf(ip netip.Addr) (blockKey, uint) {
	if ip.Is4() {
		a := ip.As4()
		v := binary.BigEndian.Uint32(a[:])
		return blockKey{hi: is4, lo: uint64(v >> blockBits)}, uint(v % blockSize)
	}
	a := ip.As16()
	hi, lo := binary.BigEndian.Uint64(a[:8]), binary.BigEndian.Uint64(a[8:])
	return blockKey{hi: hi >> blockBits, lo: lo>>blockBits | hi<<(64-blockBits)}, uint(lo % blockSize)
}

// addr returns the address in slot of the block k.
func (k blockKey) addr(slot uint) netip.Addr {
	hi := (k.hi&^is4)<<blockBits | k.lo>>(64-blockBits)
	lo := k.lo<<blockBits | uint64(slot)
	if k.hi&is4 != 0 {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], uint32(lo))
		return netip.AddrFrom4(a)
	}
	var a [16]byte
	binary.BigEndian.PutUint64(a[:8], hi)
	binary.BigEndian.PutUint64(a[8:], lo)
	return netip.AddrFrom16(a)
}

// recentBlock is an entry of poolClaims.recent, or poolClaims.empty: a block in
// blocks and its key, or a nil block.
type recentBlock struct {
	k blockKey
	b *block
}

// block returns the block with key k, or nil if there is none (it may be empty).
func (p *poolClaims) block(k blockKey) *block {
	switch {
	case p.recent[0].b != nil && p.recent[0].k == k:
		return p.recent[0].b
	case p.recent[1].b != nil && p.recent[1].k == k:
		p.recent[0], p.recent[1] = p.recent[1], p.recent[0]
		return p.recent[0].b
	}
	b := p.blocks[k]
	if b != nil {
		p.touch(k, b)
	}
	return b
}

// touch records that the block b, with key k, was used last.
func (p *poolClaims) touch(k blockKey, b *block) {
	p.recent[1], p.recent[0] = p.recent[0], recentBlock{k, b}
}

// get returns the record of the claim of ip, or nil if there is none. The record
// may be written, until the next add to p.
func (p *poolClaims) get(ip netip.Addr) *record {
	if ip.Zone() != "" {
		return p.zoned[ip]
	}
	k, slot := keyOf(ip)
	b := p.block(k)
	if b == nil || b.used&(1<<slot) == 0 {
		return nil
	}
	return &b.recs[b.at[slot]]
}

// add makes room for the record of a claim of ip and returns it, for the caller
// to write whole, or returns nil if ip has a claim already.
func (p *poolClaims) add(ip netip.Addr) *record {
	if ip.Zone() != "" {
		if p.zoned[ip] != nil {
			return nil
		}
		if p.zoned == nil {
			p.zoned = make(map[netip.Addr]*record)
		}
		r := new(record)
		p.zoned[ip] = r
		p.n++
		return r
	}
	k, slot := keyOf(ip)
	b := p.block(k)
	switch {
	case b == nil:
		if n := len(p.free); n > 0 {
			b, p.free[n-1] = p.free[n-1], nil
			p.free = p.free[:n-1]
		} else {
			b = new(block)
		}
		p.blocks[k] = b
		p.touch(k, b)
	case b.used&(1<<slot) != 0:
		return nil
	}
	p.n++
	j := len(b.recs)
	if j < cap(b.recs) {
		b.recs = b.recs[:j+1]
	} else {
		b.recs = append(b.recs, record{})
	}
	b.used |= 1 << slot
	b.at[slot], b.slot[j] = byte(j), byte(slot)
	return &b.recs[j]
}

// remove removes the claim of ip, which must have one.
func (p *poolClaims) remove(ip netip.Addr) {
	p.n--
	if ip.Zone() != "" {
		delete(p.zoned, ip)
		return
	}
	k, slot := keyOf(ip)
	b := p.block(k)
	j, last := b.at[slot], len(b.recs)-1
	if int(j) != last {
		b.recs[j] = b.recs[last]
		moved := b.slot[last]
		b.at[moved], b.slot[j] = j, moved
	}
	b.recs[last] = record{} // for the garbage collector
	b.recs = b.recs[:last]
	b.used &^= 1 << slot
	if b.used == 0 {
		// Leave the block where it is, in case its address is claimed again
		// next, as an allocator cycling through one address does; and take
		// out the block emptied before, unless it has been refilled since.
		if e := p.empty; e.b != nil && e.b != b && e.b.used == 0 {
			p.drop(e.k, e.b)
		}
		p.empty = recentBlock{k, b}
	}
}

// drop takes the empty block b, with key k, out of the pool and keeps it for
// reuse.
func (p *poolClaims) drop(k blockKey, b *block) {
	delete(p.blocks, k)
	for i := range p.recent {
		if p.recent[i].b == b {
			p.recent[i] = recentBlock{}
		}
	}
	p.free = append(p.free, b)
}

// list returns every claim of p in a new slice.
func (p *poolClaims) list() []store.Claim {
	out := make([]store.Claim, 0, p.n)
	for k, b := range p.blocks {
		for used := b.used; used != 0; used &= used - 1 {
			slot := uint(bits.TrailingZeros64(used))
			out = append(out, p.claim(k.addr(slot), &b.recs[b.at[slot]]))
		}
	}
	for ip, r := range p.zoned {
		out = append(out, p.claim(ip, r))
	}
	return out
}

// claim returns the claim that r records for ip in p.
func (p *poolClaims) claim(ip netip.Addr, r *record) store.Claim {
	return store.Claim{Pool: p.name, IP: ip, Owner: r.owner, Time: r.time, Revision: r.rev}
}
