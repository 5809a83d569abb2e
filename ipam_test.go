package ipam_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// A requested address that another Allocator on the same Store released is
// granted, although this Allocator's index still believes it taken.
func TestRequestedAfterReleaseElsewhere(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}]}`))
	require.NoError(t, err)
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st, ResyncInterval: -1})
	require.NoError(t, err)
	b, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st.Open(), ResyncInterval: -1})
	require.NoError(t, err)
	x := netip.MustParseAddr("10.0.0.7")
	req := func(id string) ipam.Request {
		return ipam.Request{ContainerID: id, Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{"p"}, IPs: []netip.Addr{x}}}}
	}

	_, err = a.Allocate(ctx, req("first"))
	require.NoError(t, err)
	// b sees the claim (it loads the pool now) and releases it.
	require.NoError(t, b.Release(ctx, store.Owner{ContainerID: "first"}))

	res, err := a.Allocate(ctx, req("second"))
	require.NoError(t, err, "the Store has no claim on %s any more", x)
	require.Equal(t, x, res.IPs[0].Address.Addr())

	// While it is held, the same request by a third owner is refused.
	_, err = b.Allocate(ctx, req("third"))
	require.ErrorIs(t, err, ipam.ErrUnavailable)
}

func TestReleaseClaimChecksRevision(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	require.NoError(t, err)
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	require.NoError(t, err)
	req := ipam.Request{UID: "u1", Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{"p"}}}}
	_, err = a.Allocate(ctx, req)
	require.NoError(t, err)
	claims, err := a.Claims(ctx)
	require.NoError(t, err)
	require.Len(t, claims, 1)
	old := claims[0]

	// Re-point the claim (as a StatefulSet pod's new UID would): the inspected
	// revision is stale, so ReleaseClaim must leave it alone.
	moved := old
	moved.Owner.UID = "u2"
	_, err = st.Update(ctx, moved, old.Revision)
	require.NoError(t, err)
	require.ErrorIs(t, a.ReleaseClaim(ctx, old), ipam.ErrConflict)
	_, err = st.Get(ctx, "p", old.IP)
	require.NoError(t, err, "a changed claim must survive")

	// With the current revision it goes, and the address can be handed out again.
	cur, err := a.Claims(ctx)
	require.NoError(t, err)
	require.NoError(t, a.ReleaseClaim(ctx, cur[0]))
	require.ErrorIs(t, a.ReleaseClaim(ctx, cur[0]), ipam.ErrNotFound)
	left, err := a.Claims(ctx)
	require.NoError(t, err)
	require.Empty(t, left)
}
