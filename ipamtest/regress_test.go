package ipamtest_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// This file holds the regression tests of the Allocator bugs that
// TestManyWriters found: each is the shortest history of one, found by the
// seed its comment names (with the options of that time).

func allocator(t *testing.T, src ipam.PoolSource, st store.Store, quarantine time.Duration) *ipam.Allocator {
	t.Helper()
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st, Quarantine: quarantine})
	require.NoError(t, err)
	return a
}

// plainStore hides memstore's ExclusiveCreator, as filestore has none.
type plainStore struct {
	store.Store
	store.Cursors
}

func plain(s *memstore.Store) plainStore { return plainStore{s, s} }

// A pod that holds an address asks again (its sandbox restarted) once every
// pool it may use is filtered (disabled, terminating, bound to other
// nodes), or refused for overlapping another: it must get its address
// back, as it does on a Store without ExclusiveCreator. Library bug: on a
// Store with ExclusiveCreator (memstore), AllocateAt does not read what the
// owner holds up front, and learns of it only from a CreateExclusive that
// fails with ErrHeld; when no pool is left to create in, it answers
// ErrNoCandidates (selected pools, allocate.go claimSelected) or ErrOverlap
// (pools named in the request, claim). TestManyWriters seeds 7 and 70 ran
// into it (TestSim too, once its Store kept the capability).
func TestWritersRepeatWhenNoPoolIsLeft(t *testing.T) {
	ctx := context.Background()
	for _, st := range []store.Store{memstore.New(), plain(memstore.New())} {
		t.Run("selected, disabled/"+storeKind(st), func(t *testing.T) {
			src := ipamtest.NewSource(ipamtest.V4Pool("a", "10.0.0.0/24", ipamtest.Default()))
			al := allocator(t, src, st, 0)
			req := ipamtest.NewPod("default", "web").Request()
			held := ipOf(t)(al.AllocateAt(ctx, req, t0))
			src.Set(ipamtest.V4Pool("a", "10.0.0.0/24", ipamtest.Default(), ipamtest.Disabled()))
			res, err := al.AllocateAt(ctx, req, t0.Add(time.Second))
			require.NoError(t, err, "a repeated ADD must return the address the pod holds")
			require.Equal(t, held.String(), res.IPs[0].Address.Addr().String())
			require.True(t, res.IPs[0].Reused)
		})
		t.Run("named, refused/"+storeKind(st), func(t *testing.T) {
			src := ipamtest.NewSource(
				ipamtest.V4Pool("a", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19")),
				ipamtest.V4Pool("b", "10.1.0.0/24", ipamtest.Span("10.1.0.10", "10.1.0.19")))
			al := allocator(t, src, st, 0)
			req := ipamtest.NewPod("default", "web").Interface("eth0", "a").Request()
			held := ipOf(t)(al.AllocateAt(ctx, req, t0))
			// b moves onto a's addresses: a fresh Allocator refuses both.
			src.Set(ipamtest.V4Pool("b", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19")))
			res, err := allocator(t, src, st, 0).AllocateAt(ctx, req, t0.Add(time.Second))
			require.NoError(t, err, "a repeated ADD must return the address the pod holds")
			require.Equal(t, held.String(), res.IPs[0].Address.Addr().String())
		})
	}
}

func storeKind(st store.Store) string {
	if _, ok := st.(store.ExclusiveCreator); ok {
		return "exclusive"
	}
	return "plain"
}

// raceStore runs first, once, before the first create through it.
type raceStore struct {
	plainStore
	first func()
}

func (r *raceStore) race() {
	if f := r.first; f != nil {
		r.first = nil
		f()
	}
}

func (r *raceStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	r.race()
	return r.plainStore.Store.Create(ctx, c)
}

func (r *raceStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	r.race()
	return store.CreateAndSetCursor(ctx, r.plainStore.Store, c, nil)
}

// Two agents serve the same ADD at the same moment (a CNI retry through
// another agent), on a Store without ExclusiveCreator (filestore): the
// later must return what the earlier claimed, or fail with ErrConflict
// (retry), as TestWritersSameOwnerConcurrently asks. Library bug: when the
// earlier took the last free address, or the address the request names,
// the later fails with ErrExhausted or ErrUnavailable: AllocateAt read what
// the owner holds before the earlier one's claim existed, and claim reads
// it again only if it has not read it for the task (allocate.go claim: "if
// !t.checked" before ErrExhausted; nothing before unavailable). The same
// holds for a pool refused, or every pool filtered, after the first task of
// the call was served (TestManyWriters seed 408). TestManyWriters seeds 1
// and 3 ran into it.
func TestWritersSameOwnerRace(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		pool    *ipam.Pool
		request netip.Addr
	}{
		{"last free address", ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.10")), netip.Addr{}},
		{"requested address", ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19")), netip.MustParseAddr("10.0.0.12")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := ipam.NewCatalog(tc.pool)
			require.NoError(t, err)
			base := memstore.New()
			rs := &raceStore{plainStore: plain(base.Open())}
			a, b := allocator(t, cat, rs, 0), allocator(t, cat, plain(base.Open()), 0)
			pod := ipamtest.NewPod("default", "web").Interface("eth0", "p")
			req := pod.Request()
			if tc.request.IsValid() {
				req.Interfaces[0].IPs = []netip.Addr{tc.request}
			}
			var first netip.Addr
			rs.first = func() { first = ipOf(t)(b.AllocateAt(ctx, req, t0)) }
			res, err := a.AllocateAt(ctx, req, t0)
			if err != nil {
				require.ErrorIs(t, err, ipam.ErrConflict, "the later of two ADDs of one owner")
				return
			}
			require.Equal(t, first.String(), res.IPs[0].Address.Addr().String())
			held, err := base.Owned(ctx, pod.Owner().Query())
			require.NoError(t, err)
			require.Len(t, held, 1)
		})
	}
}

// An address an Allocator releases stays out of its reuse for the
// quarantine, even if its pool's definition does not cover it at the
// moment of the release and covers it again later. Library bug: retire
// (poolindex.go) records a quarantine only for an address of the layout in
// force, so that an address released while its pool is shrunk comes back at
// once when the pool grows again. TestManyWriters seed 31 ran into it.
func TestWritersQuarantineAcrossRedefinitions(t *testing.T) {
	ctx := context.Background()
	wide := ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19"), ipamtest.Strategy(ipam.LowestFree))
	src := ipamtest.NewSource(wide)
	al := allocator(t, src, memstore.New(), time.Minute)
	w := ipamtest.NewPod("default", "w").Interface("eth0", "p")
	q := ipOf(t)(al.AllocateAt(ctx, w.Request(), t0))
	src.Set(ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.12", "10.0.0.19"), ipamtest.Strategy(ipam.LowestFree)))
	_, err := al.AllocateAt(ctx, ipamtest.NewPod("default", "x").Interface("eth0", "p").Request(), t0) // the Allocator uses the new definition
	require.NoError(t, err)
	require.NoError(t, al.ReleaseAt(ctx, w.Owner(), t0))
	src.Set(wide)
	got := ipOf(t)(al.AllocateAt(ctx, ipamtest.NewPod("default", "v").Interface("eth0", "p").Request(), t0.Add(time.Second)))
	require.NotEqual(t, q.String(), got.String(), "%s was released by this Allocator 1s ago, within its quarantine of 1m", q)
}

// One address never goes to two owners, whatever the PoolSource does (issue
// 12, case 3). Library bug: an overlap is checked between pool
// definitions, not against claims. When pool a moves away from addresses
// its owners still hold (they keep them until their next ADD), and pool b
// moves onto them, b overlaps no definition, is accepted, and hands out an
// address a's owner holds: the Store, keyed by pool and address, takes the
// second claim. TestManyWriters seed 92 ran into it (b moved onto a's
// addresses, refused; then a moved away).
func TestWritersAddressInTwoPools(t *testing.T) {
	ctx := context.Background()
	src := ipamtest.NewSource(
		ipamtest.V4Pool("a", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.11")),
		ipamtest.V4Pool("b", "10.1.0.0/24", ipamtest.Span("10.1.0.10", "10.1.0.11")))
	st := memstore.New()
	al := allocator(t, src, st, 0)
	x := ipOf(t)(al.AllocateAt(ctx, ipamtest.NewPod("default", "x").Interface("eth0", "a").Request(), t0))
	src.Set(ipamtest.V4Pool("a", "10.2.0.0/24", ipamtest.Span("10.2.0.10", "10.2.0.11")))
	src.Set(ipamtest.V4Pool("b", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.11")))
	for _, name := range []string{"y", "z"} {
		res, err := allocator(t, src, st.Open(), 0).AllocateAt(ctx, ipamtest.NewPod("default", name).Interface("eth0", "b").Request(), t0)
		if err == nil {
			require.NotEqual(t, x.String(), res.IPs[0].Address.Addr().String(), "%s got %s, which x holds in pool a", name, x)
		}
	}
}

// A container's CNI DEL leaves nothing behind. Library bug: a host-local
// legacy claim (container ID only) that serves an interface next to a claim
// that names the interface is never released: ReleaseAt of (container,
// eth0) releases the claims of eth0 and, only if there are none, those that
// record no interface (host-local's fallback). Reusing legacy claims makes
// that mix whenever one of them is replaced (its pool no longer covers it)
// and another reused, or a call that took one by its interface fails on
// the next. TestManyWriters seeds 203 and 733 ran into it.
func TestWritersLegacyClaimReleased(t *testing.T) {
	ctx := context.Background()
	src := ipamtest.NewSource(
		ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19")),
		ipamtest.V4Pool("q", "10.1.0.0/24", ipamtest.Span("10.1.0.10", "10.1.0.19")))
	st := memstore.New()
	legacy := store.Owner{ContainerID: "c1"}
	for _, c := range []store.Claim{
		{Pool: "p", IP: netip.MustParseAddr("10.0.0.10"), Owner: legacy},
		{Pool: "q", IP: netip.MustParseAddr("10.1.0.10"), Owner: legacy},
	} {
		_, err := st.Create(ctx, c)
		require.NoError(t, err)
	}
	// p no longer covers the legacy claim in it: that one is replaced.
	src.Set(ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.11", "10.0.0.19")))
	al := allocator(t, src, st, 0)
	req := ipam.Request{ContainerID: "c1", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p", "q"}}}}
	_, err := al.AllocateAt(ctx, req, t0)
	require.NoError(t, err)
	require.NoError(t, al.ReleaseAt(ctx, store.Owner{ContainerID: "c1", Interface: "eth0"}, t0))
	left, err := st.Owned(ctx, store.ByContainer("c1"))
	require.NoError(t, err)
	require.Empty(t, left, "claims of container c1 left after its DEL")
}

// A StatefulSet pod's old incarnation, gone without its DEL, holds a claim
// that records no interface (imported from Spiderpool); its new incarnation
// (same name, new UID) has since taken a claim on net1. A lookup or DEL of
// the old incarnation's net1 must find the old incarnation's claim, the one
// that serves net1 for want of its own: the claims of the UID asked for are
// chosen first, and only among them those of the interface before those that
// record none. Library bug: Allocator.Lookup and ReleaseAt dropped the claims
// recording no interface because the name's claims included one on net1 (the
// new incarnation's), then dropped that one for its UID, and answered
// nothing. TestManyWriters seed 5003 (-writers.seeds 6000) ran into it.
func TestWritersStableLookupByUID(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	src := ipamtest.NewSource(
		ipamtest.V4Pool("p", "10.0.0.0/24", ipamtest.Span("10.0.0.10", "10.0.0.19")),
		ipamtest.V4Pool("q", "10.1.0.0/24", ipamtest.Span("10.1.0.10", "10.1.0.19")))
	al := allocator(t, src, st, 0)
	old := store.Owner{Namespace: "team", Name: "db-1", UID: "u-old", Stable: true}
	recent := store.Owner{Namespace: "team", Name: "db-1", UID: "u-new", Stable: true, Interface: "net1"}
	imported, err := st.Create(ctx, store.Claim{Pool: "p", IP: netip.MustParseAddr("10.0.0.10"), Owner: old, Time: t0})
	require.NoError(t, err)
	_, err = st.Create(ctx, store.Claim{Pool: "q", IP: netip.MustParseAddr("10.1.0.10"), Owner: recent, Time: t0})
	require.NoError(t, err)

	asked := old
	asked.Interface = "net1"
	got, err := al.Lookup(ctx, asked)
	require.NoError(t, err)
	require.Len(t, got, 1, "lookup of the old incarnation on net1: %v", got)
	require.Equal(t, imported.IP, got[0].IP)

	require.NoError(t, al.ReleaseAt(ctx, asked, t0))
	left, err := st.Owned(ctx, store.ByName("team", "db-1"))
	require.NoError(t, err)
	require.Len(t, left, 1, "after the old incarnation's DEL on net1: %v", left)
	require.Equal(t, "u-new", left[0].Owner.UID, "the new incarnation's claim must stay")
}
