//go:build !race

package ipam_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

// TestAllocateAllocations pins the heap allocations of one Allocate of a pool
// the request names: the Result only (issue 2 allows two).
func TestAllocateAllocations(t *testing.T) {
	ctx := context.Background()
	a := allocsAllocator(t)
	req := ipam.Request{ContainerID: "c1", Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{"p"}}}}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// Warm up: the pool's index and the store's maps exist.
	res, err := a.AllocateAt(ctx, req, now)
	require.NoError(t, err)
	require.NoError(t, a.ReleaseIPAt(ctx, "p", res.IPs[0].Address.Addr(), now))
	var ip ipam.IPConfig
	allocs := testing.AllocsPerRun(200, func() {
		res, err := a.AllocateAt(ctx, req, now)
		if err != nil {
			t.Fatal(err)
		}
		ip = res.IPs[0]
		if err := a.ReleaseIPAt(ctx, "p", ip.Address.Addr(), now); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 1.0, "allocations per Allocate + ReleaseIP")
}

// TestReleaseAllocations pins the heap allocations of an Allocate and a
// Release of its owner: the Result and the Store's answer of what the owner
// holds. Naming the read for a log line that only an unreadable claim
// writes once cost five more on every Release.
func TestReleaseAllocations(t *testing.T) {
	ctx := context.Background()
	a := allocsAllocator(t)
	req := ipam.Request{UID: "u1", Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{"p"}}}}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	// Warm up: the pool's index and the store's maps exist.
	_, err := a.AllocateAt(ctx, req, now)
	require.NoError(t, err)
	require.NoError(t, a.ReleaseAt(ctx, req.Owner(), now))
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := a.AllocateAt(ctx, req, now); err != nil {
			t.Fatal(err)
		}
		if err := a.ReleaseAt(ctx, req.Owner(), now); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0, "allocations per Allocate + Release")
}

// allocsAllocator returns an Allocator over the default store with one pool,
// "p", a /16.
func allocsAllocator(t *testing.T) *ipam.Allocator {
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/16"}]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	return a
}
