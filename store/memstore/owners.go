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
// hash of the identity.
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
	m  map[ownerKey]refs
	_  [40]byte // keep shards on separate cache lines
}

// ownerKey is one identity: a kind and an ID.
type ownerKey struct {
	kind store.IdentityKind
	id   string
}

// ref names a claim: its pool and address.
type ref struct {
	pool *poolClaims
	ip   netip.Addr
}

// refs is the claims of one identity. The first is stored inline, so an owner
// with one claim costs no allocation of its own.
type refs struct {
	first ref
	rest  []ref
	n     int
}

func (rs *refs) at(i int) ref {
	if i == 0 {
		return rs.first
	}
	return rs.rest[i-1]
}

func (rs *refs) add(r ref) {
	for i := range rs.n {
		if rs.at(i) == r {
			return
		}
	}
	if rs.n == 0 {
		rs.first = r
	} else {
		rs.rest = append(rs.rest, r)
	}
	rs.n++
}

// remove drops r, if present, moving the last entry into its place.
func (rs *refs) remove(r ref) {
	for i := range rs.n {
		if rs.at(i) != r {
			continue
		}
		last := rs.at(rs.n - 1)
		if i == 0 {
			rs.first = last
		} else {
			rs.rest[i-1] = last
		}
		if rs.n > 1 {
			rs.rest[rs.n-2] = ref{}
			rs.rest = rs.rest[:rs.n-2]
		} else {
			rs.first = ref{}
		}
		rs.n--
		return
	}
}

func newOwners() *owners {
	return &owners{seed: maphash.MakeSeed()}
}

func (o *owners) shard(q store.OwnerQuery) *ownerShard {
	return &o.shards[maphash.String(o.seed, q.ID)%ownerShards]
}

// add indexes the claim of ip in p under every identity of owner.
func (o *owners) add(owner store.Owner, p *poolClaims, ip netip.Addr) {
	for q := range owner.Identities {
		sh := o.shard(q)
		sh.mu.Lock()
		sh.addLocked(q, ref{p, ip})
		sh.mu.Unlock()
	}
}

// addExcept is add, except for the identity skip, whose shard the caller
// holds and has already updated.
func (o *owners) addExcept(owner store.Owner, p *poolClaims, ip netip.Addr, skip store.OwnerQuery) {
	for q := range owner.Identities {
		if q == skip {
			continue
		}
		sh := o.shard(q)
		sh.mu.Lock()
		sh.addLocked(q, ref{p, ip})
		sh.mu.Unlock()
	}
}

// remove drops the entries of the claim of ip in p from every identity of
// owner that no longer holds it. It checks the pool under the shard's lock,
// so that an entry is never dropped for a claim that a later write gave the
// same identity again: that write's own entry may already be in.
func (o *owners) remove(owner store.Owner, p *poolClaims, ip netip.Addr) {
	for q := range owner.Identities {
		sh := o.shard(q)
		sh.mu.Lock()
		p.mu.Lock()
		rec := p.get(ip)
		held := rec != nil && rec.owner.Has(q)
		p.mu.Unlock()
		if !held {
			sh.removeLocked(q, ref{p, ip})
		}
		sh.mu.Unlock()
	}
}

func (sh *ownerShard) removeLocked(q store.OwnerQuery, r ref) {
	k := ownerKey{q.Kind, q.ID}
	rs, ok := sh.m[k]
	if !ok {
		return
	}
	rs.remove(r)
	if rs.n == 0 {
		delete(sh.m, k)
	} else {
		sh.m[k] = rs
	}
}

func (sh *ownerShard) addLocked(q store.OwnerQuery, r ref) {
	if sh.m == nil {
		sh.m = make(map[ownerKey]refs)
	}
	k := ownerKey{q.Kind, q.ID}
	rs := sh.m[k]
	rs.add(r)
	sh.m[k] = rs
}

// collectLocked appends to out the claims that q matches among the entries of
// q's identity, read from their pools, and drops the entries whose claim is
// gone or no longer has that identity (see owners). Called with sh's lock
// held.
func (sh *ownerShard) collectLocked(q store.OwnerQuery, out []store.Claim) []store.Claim {
	rs, ok := sh.m[ownerKey{q.Kind, q.ID}]
	if !ok {
		return out
	}
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
		sh.removeLocked(q, r)
	}
	return out
}
