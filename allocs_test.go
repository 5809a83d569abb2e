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
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/16"}]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
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
