package kubetest_test

import (
	"context"
	"iter"
	"net/netip"
	"slices"
	"sync"
	"testing"

	"github.com/ipamkit/ipam"
)

// changingPools is a PoolSource whose pools are redefined while Allocators
// use them, as SpiderIPPools are: not a Catalog, so Allocators check each
// new claim's address against the other pools.
type changingPools struct {
	mu    sync.Mutex
	pools []*ipam.Pool
}

func (c *changingPools) Pool(name string) (*ipam.Pool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.pools, func(p *ipam.Pool) bool { return p.Name == name })
	if i < 0 {
		return nil, false
	}
	return c.pools[i], true
}

func (c *changingPools) Pools() iter.Seq[*ipam.Pool] {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Values(slices.Clone(c.pools))
}

func (c *changingPools) set(p *ipam.Pool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools[slices.IndexFunc(c.pools, func(q *ipam.Pool) bool { return q.Name == p.Name })] = p
}

func spanPool(name, subnet, first, last string) *ipam.Pool {
	return &ipam.Pool{Name: name, Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix(subnet),
		Start: netip.MustParseAddr(first), End: netip.MustParseAddr(last)}}}
}

// A pool redefined onto an address that another pool's claim holds does not
// hand it out again, through Allocators that follow the Store's watch
// (answered from it) and that do not (answered by the API server): claims
// are named by pool and address, so only the address's claims in every
// pool (kubestore's AddressReader) show it taken.
func TestAddressInTwoPools(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	src := &changingPools{pools: []*ipam.Pool{
		spanPool("a2p-a", "10.98.0.0/24", "10.98.0.10", "10.98.0.11"),
		spanPool("a2p-b", "10.98.1.0/24", "10.98.1.10", "10.98.1.11"),
	}}
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
		return ipam.Request{Namespace: "ns", Name: name, UID: "uid-" + name, Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{pool}}}}
	}
	res, err := newAllocator(false).Allocate(ctx, req("x", "a2p-a"))
	if err != nil {
		t.Fatal(err)
	}
	x := res.IPs[0].Address.Addr()
	src.set(spanPool("a2p-a", "10.98.2.0/24", "10.98.2.10", "10.98.2.11"))
	src.set(spanPool("a2p-b", "10.98.0.0/24", "10.98.0.10", "10.98.0.11"))
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
