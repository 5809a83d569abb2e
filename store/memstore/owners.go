package memstore

import (
	"hash/maphash"
	"net/netip"
	"sync"

	"github.com/ipamkit/ipam/store"
)

// owners indexes claims by each identity of their owner (store.Owner
// Identities), so that Owned costs what one owner holds, not what the backend
// holds. It is split into shards, each behind a lock of its own, chosen by a
// hash of the identity; within a shard, entries are found by that same hash,
// so an identity's string is hashed once per call.
//
// The index lags the pools by design: a write changes a pool first, under the
// pool's lock, and the index after, so an entry may name a claim that is gone
// or has changed owner, and a new claim may be missing for the moment its
// write takes. Readers therefore check every entry against the pool, and a
// write is complete, and so visible to Owned, only once its index entries are
// in. CreateExclusive holds the shard of the owner's primary identity from its
// check until the new claim's entry is in, which is what makes it exclusive:
// any other write that gives that identity a claim adds its entry under the
// same lock, before it returns.
type owners struct {
	seed   maphash.Seed
	shards [ownerShards]ownerShard
}

const ownerShards = 64

type ownerShard struct {
	mu sync.Mutex
	m  map[uint64]entry // by identity hash
	_  [48]byte         // keep shards on separate cache lines
}

// ident is one identity and its hash.
type ident struct {
	kind store.IdentityKind
	id   string
	h    uint64
}

// entry is the claims of one identity. Identities whose hashes collide are
// chained through next.
type entry struct {
	kind store.IdentityKind
	id   string
	refs refs
	next *entry
}

// ref names a claim: its pool and address.
type ref struct {
	pool *poolClaims
	ip   netip.Addr
}

// refs is the claims of one identity. The first is stored inline, so an owner
// with one claim costs no allocation of its own; the others are in more. An
// identity with more than refsScan claims (an operator's reservation, a VM
// with many addresses) gets an index of its entries too, so that adding and
// removing one stays O(1) however many it holds.
type refs struct {
	first ref
	more  *moreRefs
	n     int
}

// moreRefs is the claims of an identity after its first.
type moreRefs struct {
	list []ref
	idx  map[ref]int // position of each entry in refs, once there are more than refsScan
}

// refsScan is how many entries refs searches one by one before it indexes them.
const refsScan = 8

func (rs *refs) at(i int) ref {
	if i == 0 {
		return rs.first
	}
	return rs.more.list[i-1]
}

func (rs *refs) set(i int, r ref) {
	if i == 0 {
		rs.first = r
	} else {
		rs.more.list[i-1] = r
	}
	if rs.more != nil && rs.more.idx != nil {
		rs.more.idx[r] = i
	}
}

// find returns the position of r, or -1.
func (rs *refs) find(r ref) int {
	if rs.more != nil && rs.more.idx != nil {
		if i, ok := rs.more.idx[r]; ok {
			return i
		}
		return -1
	}
	for i := range rs.n {
		if rs.at(i) == r {
			return i
		}
	}
	return -1
}

func (rs *refs) add(r ref) {
	if rs.find(r) >= 0 {
		return
	}
	if rs.n > 0 {
		if rs.more == nil {
			rs.more = &moreRefs{}
		}
		rs.more.list = append(rs.more.list, ref{})
	}
	rs.n++
	rs.set(rs.n-1, r)
	if rs.n > refsScan && rs.more.idx == nil {
		rs.more.idx = make(map[ref]int, 2*rs.n)
		for i := range rs.n {
			rs.more.idx[rs.at(i)] = i
		}
	}
}

// remove drops r, if present, moving the last entry into its place.
func (rs *refs) remove(r ref) {
	i := rs.find(r)
	if i < 0 {
		return
	}
	if rs.more != nil && rs.more.idx != nil {
		delete(rs.more.idx, r)
	}
	if last := rs.n - 1; i != last {
		rs.set(i, rs.at(last))
	}
	rs.n--
	switch {
	case rs.n == 0:
		rs.first = ref{}
		rs.more = nil
	case rs.n == 1:
		rs.more = nil // the first entry is the one left
	default:
		rs.more.list[rs.n-1] = ref{}
		rs.more.list = rs.more.list[:rs.n-1]
		if rs.n <= refsScan/2 {
			rs.more.idx = nil
		}
	}
}

func newOwners() *owners {
	return &owners{seed: maphash.MakeSeed()}
}

// ident returns q's identity (its interface aside) with its hash.
func (o *owners) ident(q store.OwnerQuery) ident {
	return ident{q.Kind, q.ID, maphash.String(o.seed, q.ID) ^ uint64(q.Kind)}
}

func (o *owners) shard(id ident) *ownerShard {
	return &o.shards[id.h%ownerShards]
}

// identities returns the identities of owner, as store.Owner.Identities
// yields them, without a closure and without their hashes.
func identities(owner store.Owner) (qs [3]store.OwnerQuery, n int) {
	if owner.UID != "" {
		qs[n] = store.ByUID(owner.UID)
		n++
	}
	if owner.Stable && owner.Name != "" {
		qs[n] = store.ByName(owner.Namespace, owner.Name)
		n++
	}
	if owner.ContainerID != "" {
		qs[n] = store.ByContainer(owner.ContainerID)
		n++
	}
	return qs, n
}

// add indexes the claim of ip in p under every identity of owner but skip
// (whose shard the caller holds and has updated already; the zero ident
// skips nothing).
func (o *owners) add(owner store.Owner, p *poolClaims, ip netip.Addr, skip ident) {
	qs, n := identities(owner)
	for _, q := range qs[:n] {
		if q.Kind == skip.kind && q.ID == skip.id {
			continue
		}
		id := o.ident(q)
		sh := o.shard(id)
		sh.mu.Lock()
		sh.addLocked(id, ref{p, ip})
		sh.mu.Unlock()
	}
}

// remove drops the entries of the claim of ip in p from every identity of
// owner that no longer holds it. It checks the pool under the shard's lock,
// so that an entry is never dropped for a claim that a later write gave the
// same identity again: that write's own entry may already be in.
func (o *owners) remove(owner store.Owner, p *poolClaims, ip netip.Addr) {
	qs, n := identities(owner)
	for _, q := range qs[:n] {
		id := o.ident(q)
		sh := o.shard(id)
		sh.mu.Lock()
		p.mu.Lock()
		rec := p.get(ip)
		held := rec != nil && rec.owner.Has(q)
		p.mu.Unlock()
		if !held {
			sh.removeLocked(id, ref{p, ip})
		}
		sh.mu.Unlock()
	}
}

// slotOf is where the entry of an identity is: the head entry of its hash in
// the map (chained nil), or an entry chained to it.
type slotOf struct {
	head    entry
	chained *entry
	found   bool
}

// lookup finds the entry of id. Called with the lock held.
func (sh *ownerShard) lookup(id ident) slotOf {
	head, ok := sh.m[id.h]
	if !ok {
		return slotOf{}
	}
	if head.kind == id.kind && head.id == id.id {
		return slotOf{head: head, found: true}
	}
	for c := head.next; c != nil; c = c.next {
		if c.kind == id.kind && c.id == id.id {
			return slotOf{head: head, chained: c, found: true}
		}
	}
	return slotOf{head: head}
}

func (s slotOf) refs() refs {
	if s.chained != nil {
		return s.chained.refs
	}
	if s.found {
		return s.head.refs
	}
	return refs{}
}

// store puts rs as the claims of id, found at s, dropping the entry if rs is
// empty. Called with the lock held.
func (sh *ownerShard) store(id ident, s slotOf, rs refs) {
	switch {
	case s.chained != nil:
		s.chained.refs = rs
		if rs.n > 0 {
			return
		}
		head := s.head
		if head.next == s.chained {
			head.next = s.chained.next
			sh.m[id.h] = head
			return
		}
		for p := head.next; p != nil; p = p.next {
			if p.next == s.chained {
				p.next = s.chained.next
				return
			}
		}
	case s.found:
		head := s.head
		switch {
		case rs.n > 0:
			head.refs = rs
			sh.m[id.h] = head
		case head.next != nil:
			sh.m[id.h] = *head.next
		default:
			delete(sh.m, id.h)
		}
	case rs.n == 0:
	case s.head.kind != 0:
		// Another identity has the same hash: chain this one.
		head := s.head
		head.next = &entry{kind: id.kind, id: id.id, refs: rs, next: head.next}
		sh.m[id.h] = head
	default:
		if sh.m == nil {
			sh.m = make(map[uint64]entry)
		}
		sh.m[id.h] = entry{kind: id.kind, id: id.id, refs: rs}
	}
}

func (sh *ownerShard) addLocked(id ident, r ref) {
	s := sh.lookup(id)
	rs := s.refs()
	rs.add(r)
	sh.store(id, s, rs)
}

func (sh *ownerShard) removeLocked(id ident, r ref) {
	s := sh.lookup(id)
	if !s.found {
		return
	}
	rs := s.refs()
	rs.remove(r)
	sh.store(id, s, rs)
}

// collect appends to out the claims that q matches among the entries of id,
// q's identity, found at s, read from their pools, and drops the entries
// whose claim is gone or no longer has that identity (see owners). Called
// with sh's lock held.
func (sh *ownerShard) collect(s slotOf, id ident, q store.OwnerQuery, out []store.Claim) []store.Claim {
	if !s.found {
		return out
	}
	rs := s.refs()
	var stale []ref
	for i := range rs.n {
		r := rs.at(i)
		r.pool.mu.Lock()
		rec := r.pool.get(r.ip)
		var c store.Claim
		if rec != nil {
			c = r.pool.claim(r.ip, rec)
		}
		r.pool.mu.Unlock()
		switch {
		case rec == nil || !c.Owner.Has(q):
			stale = append(stale, r)
		case q.Matches(c):
			out = append(out, c)
		}
	}
	for _, r := range stale {
		sh.removeLocked(id, r)
	}
	return out
}
