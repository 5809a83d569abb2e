package ipam_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// TestFollow: an Allocator that follows the Store's watch learns what other
// Allocators claim and release, so its own Creates do not meet taken
// addresses and a pool it uses for the first time needs no List.
func TestFollow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := ipam.NewCatalog(
		ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}]}`),
		ipam.MustParsePool(`{"name":"q","strategy":"lowest-free","ranges":[{"subnet":"10.1.0.0/24"}]}`),
	)
	require.NoError(t, err)
	base := memstore.New()
	watched := &countingStore{Store: base.Open()}
	a := mustAllocator(t, cat, watched)
	b := mustAllocator(t, cat, base.Open())

	// a uses p before it follows: the first Reset gives it the whole pool.
	_, err = a.Allocate(ctx, onPool("a0", "eth0", "p"))
	require.NoError(t, err)
	_, err = b.Allocate(ctx, onPool("b-early", "eth0", "p"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Follow(ctx) }()
	waitKnown(t, a, "p", 2)

	// b claims and releases while a follows.
	for i := range 30 {
		_, err := b.Allocate(ctx, onPool(fmt.Sprintf("b%d", i), "eth0", "p"))
		require.NoError(t, err)
	}
	require.NoError(t, b.Release(ctx, store.Owner{UID: "b3"}))
	waitKnown(t, a, "p", 31)
	watched.calls.Store(0)
	res, err := a.Allocate(ctx, onPool("a1", "eth0", "p"))
	require.NoError(t, err)
	require.Equal(t, "10.0.0.34", res.IPs[0].Address.Addr().String(), "round-robin after the last address a saw claimed")
	require.EqualValues(t, 1, watched.calls.Load(), "one Store call: the create, which found the address free")

	// q, which a never used, starts from what the watch saw: lowest-free
	// needs no List.
	for i := range 20 {
		_, err := b.Allocate(ctx, onPool(fmt.Sprintf("bq%d", i), "eth0", "q"))
		require.NoError(t, err)
	}
	require.NoError(t, b.Release(ctx, store.Owner{UID: "bq5"}))
	require.Eventually(t, func() bool {
		watched.calls.Store(0)
		watched.lists.Store(0)
		// Ask for the lowest free address of q as a new owner; give it
		// back if the watch had not caught up yet.
		res, err := a.Allocate(ctx, onPool("aq", "eth0", "q"))
		require.NoError(t, err)
		ok := res.IPs[0].Address.Addr().String() == "10.1.0.7" && watched.lists.Load() == 0
		if !ok {
			require.NoError(t, a.Release(ctx, store.Owner{UID: "aq"}))
		}
		return ok
	}, 30*time.Second, 10*time.Millisecond, "a's first allocation in q must take the address b released, without listing q")

	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("Follow did not return after its context was canceled")
	}
}

func waitKnown(t *testing.T, a *ipam.Allocator, pool string, n uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		used, complete := ipam.KnownUsed(a, pool)
		return used == n && complete
	}, 30*time.Second, time.Millisecond, "the Allocator's view of %s did not reach %d used addresses", pool, n)
}

func TestFollowErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}]}`))
	require.NoError(t, err)
	noWatch := mustAllocator(t, cat, withoutExclusive(memstore.New()))
	require.ErrorIs(t, noWatch.Follow(ctx), ipam.ErrNotSupported)

	// Two at once: one follows, the other is refused.
	a := mustAllocator(t, cat, nil)
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- a.Follow(ctx) }()
	}
	first := <-done
	require.ErrorIs(t, first, ipam.ErrConflict, "a second Follow must be refused while the first runs")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}
