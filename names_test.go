package ipam_test

import (
	"context"
	"net/netip"
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
