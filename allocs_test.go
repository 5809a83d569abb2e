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
	req := ipam.Request{ContainerID: "c1", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}
	allocs := allocsPerCycle(t, req, func(ctx context.Context, a *ipam.Allocator, res ipam.Result, now time.Time) error {
		return a.ReleaseIPAt(ctx, "p", res.IPs[0].Address.Addr(), now)
	})
	require.LessOrEqual(t, allocs, 1.0, "allocations per Allocate + ReleaseIP")
}

// TestReleaseAllocations pins the heap allocations of an Allocate and a
// Release of its owner: the Result and the Store's answer of what the owner
// holds. Naming the read for a log line that only an unreadable claim
// writes once cost five more on every Release.
func TestReleaseAllocations(t *testing.T) {
	req := ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}
	allocs := allocsPerCycle(t, req, func(ctx context.Context, a *ipam.Allocator, _ ipam.Result, now time.Time) error {
		return a.ReleaseAt(ctx, req.Owner(), now)
	})
	require.LessOrEqual(t, allocs, 2.0, "allocations per Allocate + Release")
}

// allocsPerCycle returns the heap allocations of one Allocate of req and one
// release of what it got, on an Allocator over the default store with one
// pool, "p", a /16, once a first cycle has made the pool's index and the
// store's maps.
func allocsPerCycle(t *testing.T, req ipam.Request, release func(context.Context, *ipam.Allocator, ipam.Result, time.Time) error) float64 {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/16"}]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cycle := func() {
		res, err := a.AllocateAt(ctx, req, now)
		if err != nil {
			t.Fatal(err)
		}
		if err := release(ctx, a, res, now); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	return testing.AllocsPerRun(200, cycle)
}
