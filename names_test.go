package ipam_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// A full pool is ErrExhausted whichever rule chose it: named by the
// interface, or selected by an annotation (then also ErrNoCandidates, the
// chain's error). Before, the selected case was ErrNoCandidates only.
func TestExhaustedWhicheverRuleChose(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"green","subnet":"10.1.0.0/24","ips":["10.1.0.10"]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	named := func(uid string) ipam.Request {
		return ipam.Request{Namespace: "default", Name: uid, UID: uid,
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"green"}}}}
	}
	selected := func(uid string) ipam.Request {
		return ipam.Request{Namespace: "default", Name: uid, UID: uid,
			Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4":["green"]}`},
			Interfaces:  []ipam.NIC{{Name: "eth0"}}}
	}
	_, err = a.Allocate(ctx, named("first"))
	require.NoError(t, err)

	_, err = a.Allocate(ctx, named("second"))
	require.ErrorIs(t, err, ipam.ErrExhausted)

	_, err = a.Allocate(ctx, selected("third"))
	require.ErrorIs(t, err, ipam.ErrExhausted)
	require.ErrorIs(t, err, ipam.ErrNoCandidates)
	require.Contains(t, err.Error(), "no pool can serve pod default/third: green: exhausted (1/1 used)")
}

// A selected interface whose candidates are all filtered out, none full, is
// ErrNoCandidates only.
func TestNoCandidatesNotExhausted(t *testing.T) {
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"green","subnet":"10.1.0.0/24","ips":["10.1.0.10"],"nodeName":["n1"]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	_, err = a.Allocate(context.Background(), ipam.Request{Namespace: "default", Name: "p", UID: "p", Node: "n2",
		Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4":["green"]}`},
		Interfaces:  []ipam.NIC{{Name: "eth0"}}})
	require.ErrorIs(t, err, ipam.ErrNoCandidates)
	require.NotErrorIs(t, err, ipam.ErrExhausted)
}

// One ErrNotFound: what the Allocator returns and what a Store returns are
// the same value, so callers test one. Before, ipam.ErrNotFound was another
// value than store.ErrNotFound.
func TestOneErrNotFound(t *testing.T) {
	require.Same(t, store.ErrNotFound, ipam.ErrNotFound)
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	err = a.ReleaseIP(context.Background(), "blue", netip.MustParseAddr("10.0.0.9"))
	require.ErrorIs(t, err, store.ErrNotFound)
}

// AllocationError.Family says the family of a pool the interface names, as
// its trace does; the message stays as it was. Before, Family was 0.
func TestAllocationErrorFamilyOfNamedPool(t *testing.T) {
	cat, err := ipam.NewCatalog(
		ipam.MustParsePool(`{"name":"v4","subnet":"10.1.0.0/24","ips":["10.1.0.10"]}`),
		ipam.MustParsePool(`{"name":"v6","subnet":"2001:db8::/64","ips":["2001:db8::10"]}`))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	ctx := context.Background()
	for _, c := range []struct {
		pool   string
		family int
	}{{"v4", 4}, {"v6", 6}} {
		req := func(uid string) ipam.Request {
			return ipam.Request{Namespace: "default", Name: uid, UID: uid,
				Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{c.pool}}}}
		}
		_, err := a.Allocate(ctx, req("first-"+c.pool))
		require.NoError(t, err)
		_, err = a.Allocate(ctx, req("second-"+c.pool))
		var ae *ipam.AllocationError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, c.family, ae.Family, "%v", err)
		require.Equal(t, c.family, ae.Trace[len(ae.Trace)-1].Family, "the trace's family")
		require.True(t, strings.HasPrefix(err.Error(), `eth0: pool "`+c.pool+`": `), "message %q", err)
	}
}
