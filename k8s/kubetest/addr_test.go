package kubetest_test

import (
	"context"
	"testing"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
)

// A pool redefined onto an address that another pool's claim holds does not
// hand it out again, through Allocators that follow the Store's watch
// (answered from it) and that do not (answered by the API server): claims
// are named by pool and address, so only the address's claims in every
// pool (kubestore's AddressReader) show it taken.
func TestAddressInTwoPools(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	src := ipamtest.NewSource(
		ipamtest.V4Pool("a2p-a", "10.98.0.0/24", ipamtest.Span("10.98.0.10", "10.98.0.11")),
		ipamtest.V4Pool("a2p-b", "10.98.1.0/24", ipamtest.Span("10.98.1.10", "10.98.1.11")))
	newAllocator := func(follow bool) *ipam.Allocator {
		a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
		if err != nil {
			t.Fatal(err)
		}
		if follow {
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); a.Follow(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}
		return a
	}
	req := func(name, pool string) ipam.Request {
		return ipam.Request{Namespace: "ns", Name: name, UID: "uid-" + name, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}}
	}
	res, err := newAllocator(false).Allocate(ctx, req("x", "a2p-a"))
	if err != nil {
		t.Fatal(err)
	}
	x := res.IPs[0].Address.Addr()
	src.Set(ipamtest.V4Pool("a2p-a", "10.98.2.0/24", ipamtest.Span("10.98.2.10", "10.98.2.11")))
	src.Set(ipamtest.V4Pool("a2p-b", "10.98.0.0/24", ipamtest.Span("10.98.0.10", "10.98.0.11")))
	for _, tc := range []struct {
		pod    string
		follow bool
	}{{"y", true}, {"z", false}} {
		res, err := newAllocator(tc.follow).Allocate(ctx, req(tc.pod, "a2p-b"))
		if err == nil && res.IPs[0].Address.Addr() == x {
			t.Errorf("%s (following the watch: %v) got %s, which x holds in pool a2p-a", tc.pod, tc.follow, x)
		}
	}
}
