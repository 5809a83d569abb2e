package storetest

import (
	"net/netip"
	"testing"

	"github.com/ipamkit/ipam/store"
)

// RunCount checks a store.Counter: through two instances of one backend
// (open is called twice), as claims of addrs in pool are created one by one
// and deleted again, Count of pool equals the length of List after every
// write, through either instance, and a pool with no claims counts none.
// The Store that open returns must be a store.Counter and must accept the
// addresses under pool name pool; owners have only a container ID and an
// interface, which every Store keeps.
func RunCount(t *testing.T, open Opener, pool string, addrs []netip.Addr) {
	t.Helper()
	ctx := t.Context()
	a, b := open(), open()
	for _, s := range []store.Store{a, b} {
		if _, ok := s.(store.Counter); !ok {
			t.Fatalf("%T is not a store.Counter", s)
		}
	}
	check := func(when string) {
		t.Helper()
		claims, err := a.List(ctx, pool)
		if err != nil {
			t.Fatalf("%s: List: %v", when, err)
		}
		for i, s := range []store.Store{a, b} {
			n, err := s.(store.Counter).Count(ctx, pool)
			if err != nil {
				t.Fatalf("%s: Count through instance %d: %v", when, i, err)
			}
			if n != len(claims) {
				t.Fatalf("%s: Count through instance %d = %d, List has %d claims", when, i, n, len(claims))
			}
		}
		if n, err := store.Count(ctx, b, pool+"-none"); err != nil || n != 0 {
			t.Fatalf("%s: Count of a pool without claims = %d, %v; want 0, nil", when, n, err)
		}
	}
	check("empty")
	created := make([]store.Claim, 0, len(addrs))
	for i, ip := range addrs {
		s := []store.Store{a, b}[i%2]
		c, err := s.Create(ctx, store.Claim{Pool: pool, IP: ip, Owner: store.Owner{ContainerID: "count" + ip.String(), Interface: "eth0"}})
		if err != nil {
			t.Fatalf("Create %s: %v", ip, err)
		}
		created = append(created, c)
		check("after creating " + ip.String())
	}
	if len(created) > 0 {
		if n, _ := store.Count(ctx, a, pool); n != len(addrs) {
			t.Fatalf("Count = %d after %d creates", n, len(addrs))
		}
	}
	for i, c := range created {
		s := []store.Store{b, a}[i%2]
		if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
			t.Fatalf("Delete %s: %v", c.IP, err)
		}
		check("after deleting " + c.IP.String())
	}
}
