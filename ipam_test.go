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
