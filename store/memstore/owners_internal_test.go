package memstore

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ipamkit/ipam/store"
)

// TestOwnerHashCollisions drives one shard with identities whose hashes
// collide, which real hashes make too rare to meet in a test: each keeps its
// own claims, whichever is the head of the chain, as they come and go.
func TestOwnerHashCollisions(t *testing.T) {
	var sh ownerShard
	ids := []ident{
		{kind: store.KindUID, id: "a", h: 7},
		{kind: store.KindContainer, id: "a", h: 7},
		{kind: store.KindUID, id: "b", h: 7},
	}
	p := &poolClaims{name: "p"}
	r := func(i int) ref { return ref{p, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})} }
	want := func(id ident, n int) {
		t.Helper()
		s := sh.lookup(id)
		if got := s.refs().n; got != n || s.found != (n > 0) {
			t.Fatalf("%s %q: %d claims (found %t), want %d", id.kind, id.id, got, s.found, n)
		}
	}
	for i, id := range ids {
		sh.addLocked(id, r(i))
		sh.addLocked(id, r(i+10))
	}
	for _, id := range ids {
		want(id, 2)
	}
	// Drop the head: the next becomes the head.
	sh.removeLocked(ids[0], r(0))
	sh.removeLocked(ids[0], r(10))
	want(ids[0], 0)
	want(ids[1], 2)
	want(ids[2], 2)
	// A chained entry, then the last one.
	sh.removeLocked(ids[2], r(2))
	want(ids[2], 1)
	sh.removeLocked(ids[2], r(12))
	want(ids[2], 0)
	want(ids[1], 2)
	sh.addLocked(ids[0], r(5))
	want(ids[0], 1)
	sh.removeLocked(ids[1], r(1))
	sh.removeLocked(ids[1], r(11))
	sh.removeLocked(ids[0], r(5))
	for _, id := range ids {
		want(id, 0)
	}
	if len(sh.m) != 0 {
		t.Fatalf("%d entries left", len(sh.m))
	}
}

// TestRefsMany adds and removes the entries of one identity holding many
// claims in a seeded random order, checking them against a set after every
// step, across the point where refs starts indexing its entries and back.
func TestRefsMany(t *testing.T) {
	p := &poolClaims{name: "p"}
	r := func(i int) ref { return ref{p, netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})} }
	rng := rand.New(rand.NewPCG(1, 2))
	var rs refs
	want := map[ref]bool{}
	for step := range 20000 {
		x := r(rng.IntN(300))
		if step%5000 > 3000 || rng.IntN(2) == 0 {
			rs.remove(x)
			delete(want, x)
		} else {
			rs.add(x)
			want[x] = true
		}
		if rs.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, rs.n, len(want))
		}
		for i := range rs.n {
			e := rs.at(i)
			if !want[e] {
				t.Fatalf("step %d: entry %v at %d was removed", step, e.ip, i)
			}
			if rs.more != nil && rs.more.idx != nil && rs.more.idx[e] != i {
				t.Fatalf("step %d: index puts %v at %d, it is at %d", step, e.ip, rs.more.idx[e], i)
			}
		}
		if rs.more != nil && rs.more.idx != nil && len(rs.more.idx) != rs.n {
			t.Fatalf("step %d: index of %d entries for %d", step, len(rs.more.idx), rs.n)
		}
	}
}
