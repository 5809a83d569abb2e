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
// Claims are kept in blocks of blockSize consecutive addresses, so that an
// allocator claiming addresses in order touches one block, and one block's
// records, for blockSize claims in a row instead of a hash-map entry of its
// own for each. Blocks are found through chunks of chunkSize consecutive
// blocks, in a map by the address with its low chunkBits+blockBits bits
// cleared: a pool of a million addresses has a couple of thousand chunks,
// whose map stays in the processor's caches, where a map of its blocks, with
// eight times as many entries, would not. Finding a block then
// costs a read of its chunk's slot, not a miss in the map's control word and
// another in its entry. The chunk and the two blocks used last are
// remembered, which spares even that while an allocator's claims stay in one
// block and its releases go to another. A block holds records only for its
// claimed addresses, and a chunk exists only while one of its blocks does, so
// a pool's memory grows with its claims, not with the span of addresses they
// are scattered over. A block emptied by Delete stays in its chunk until
// another is emptied, in case its address is claimed again next; then it
// leaves, and is kept, with the room it had grown, for the next block the
// pool needs; so is a chunk left with no block. Neither the blocks nor the
// map shrink, so a pool that is drained and refilled does not allocate again.
//
// Addresses with an IPv6 zone, which no pool prefix contains but a Store must
// still keep apart, are kept in a map of their own.
type poolClaims struct {
	name       string
	mu         sync.Mutex
	chunks     map[blockKey]*chunk // by the key of their first block, shifted right by chunkBits
	free       []*block            // emptied blocks, to be reused
	freeChunks []*chunk            // chunks left with no block, to be reused
	recent     [2]recentBlock      // the blocks used last, most recent first
	chunk      recentChunk         // the chunk used last
	empty      recentBlock         // the block emptied last, still in its chunk (maybe refilled since)
	zoned      map[netip.Addr]*record
	n          int // number of claims
	cursor     netip.Addr
	// version counts the changes to the pool's claims (PoolVersion).
	version uint64
	// watchers are the watches that follow the pool (see watchers).
	watchers []*watch
}

// chunkBits is the number of low bits of a block's key that pick its slot in
// its chunk; chunkSize is the number of slots: a chunk is a cache line of
// pointers and a count. More slots would spare more of the map, and cost
// more to a claim alone in its chunk, as a scattered IPv6 address is (see
// TestMemory).
const (
	chunkBits = 3
	chunkSize = 1 << chunkBits
)

// chunk is the blocks among chunkSize consecutive ones that hold a claim (or
// that were emptied last, see poolClaims.empty), and how many they are.
type chunk struct {
	blocks [chunkSize]*block
	n      int
}

// recentChunk is poolClaims.chunk: a chunk in chunks and its key, or a nil
// chunk.
type recentChunk struct {
	k blockKey
	c *chunk
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
//
// The fields that every Create and Get reads, used, recs and the first half
// of at, share the block's first cache line.
type block struct {
	used uint64          // bit i is set if slot i is claimed
	recs []record        // len(recs) is the number of bits set in used
	at   [blockSize]byte // at[i] is the index in recs of slot i's record, if used
	slot [blockSize]byte // slot[j] is the slot whose record is recs[j]
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

// chunkOf returns the key of the chunk of the block k, and k's slot in it.
// The flag is4 stays where it is; the rest of the key shifts as one 127-bit
// number.
func chunkOf(k blockKey) (blockKey, uint) {
	hi := k.hi &^ is4
	return blockKey{hi: hi>>chunkBits | k.hi&is4, lo: k.lo>>chunkBits | hi<<(64-chunkBits)}, uint(k.lo % chunkSize)
}

// blockOf returns the key of the block in slot i of the chunk ck.
func blockOf(ck blockKey, i uint) blockKey {
	hi := ck.hi &^ is4
	return blockKey{hi: hi<<chunkBits | ck.lo>>(64-chunkBits) | ck.hi&is4, lo: ck.lo<<chunkBits | uint64(i)}
}

// recentBlock is an entry of poolClaims.recent, or poolClaims.empty: a block in
// a chunk and its key, or a nil block.
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
	ck, i := chunkOf(k)
	c := p.chunkAt(ck)
	if c == nil {
		return nil
	}
	b := c.blocks[i]
	if b != nil {
		p.touch(k, b)
	}
	return b
}

// chunkAt returns the chunk with key ck, or nil if there is none.
func (p *poolClaims) chunkAt(ck blockKey) *chunk {
	if p.chunk.c != nil && p.chunk.k == ck {
		return p.chunk.c
	}
	c := p.chunks[ck]
	if c != nil {
		p.chunk = recentChunk{ck, c}
	}
	return c
}

// put adds the new block b, with key k, to its chunk, adding the chunk if it
// is new.
func (p *poolClaims) put(k blockKey, b *block) {
	ck, i := chunkOf(k)
	c := p.chunkAt(ck)
	if c == nil {
		c = take(&p.freeChunks)
		p.chunks[ck] = c
		p.chunk = recentChunk{ck, c}
	}
	c.blocks[i] = b
	c.n++
	p.touch(k, b)
}

// take removes the last of the kept items in free and returns it, or returns
// a new one if none is kept.
func take[T any](free *[]*T) *T {
	n := len(*free)
	if n == 0 {
		return new(T)
	}
	x := (*free)[n-1]
	(*free)[n-1] = nil
	*free = (*free)[:n-1]
	return x
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
		b = take(&p.free)
		p.put(k, b)
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
// reuse, and its chunk too if it was the chunk's last block.
func (p *poolClaims) drop(k blockKey, b *block) {
	ck, i := chunkOf(k)
	c := p.chunkAt(ck)
	c.blocks[i] = nil
	if c.n--; c.n == 0 {
		delete(p.chunks, ck)
		p.chunk = recentChunk{}
		p.freeChunks = append(p.freeChunks, c)
	}
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
	for ck, c := range p.chunks {
		for i, b := range c.blocks {
			if b == nil {
				continue
			}
			k := blockOf(ck, uint(i))
			for used := b.used; used != 0; used &= used - 1 {
				slot := uint(bits.TrailingZeros64(used))
				out = append(out, p.claim(k.addr(slot), &b.recs[b.at[slot]]))
			}
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
