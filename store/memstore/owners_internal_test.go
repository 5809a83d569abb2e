package memstore

import (
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
