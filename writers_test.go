package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// This file holds the regression tests of issue 12, "many writers, one
// truth": each case of the issue, on Allocators that share one Store.

// newChangingSource returns an ipamtest.Source of the pools docs define:
// a PoolSource that is not a *Catalog, whose pools may overlap and change.
func newChangingSource(docs ...string) *ipamtest.Source {
	src := ipamtest.NewSource()
	for _, d := range docs {
		src.Set(ipam.MustParsePool(d))
	}
	return src
}

func mustAllocator(t testing.TB, src ipam.PoolSource, st store.Store) *ipam.Allocator {
	t.Helper()
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st})
	require.NoError(t, err)
	return a
}

func onPool(uid, iface, pool string) ipam.Request {
	return ipam.Request{Namespace: "default", Name: "pod-" + uid, UID: uid, Interfaces: []ipam.NIC{{Name: iface, Pools: []string{pool}}}}
}

// Case 1: two Allocators on one memstore, both with the pool loaded.
// Allocate through one then the other gives the owner one address; Release
// and Lookup through the other see it.
func TestWritersOneOwnerTwoAllocators(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	base := memstore.New()
	for _, excl := range []bool{true, false} {
		t.Run(fmt.Sprintf("exclusive=%t", excl), func(t *testing.T) {
			st := func() store.Store {
				if excl {
					return base.Open()
				}
				return withoutExclusive(base.Open())
			}
			a, b := mustAllocator(t, src, st()), mustAllocator(t, src, st())
			// Both load the pool first.
			_, err := a.Allocate(ctx, onPool("warm-a-"+t.Name(), "eth0", "p"))
			require.NoError(t, err)
			_, err = b.Allocate(ctx, onPool("warm-b-"+t.Name(), "eth0", "p"))
			require.NoError(t, err)

			x := "pod-x-" + t.Name()
			ra, err := a.Allocate(ctx, onPool(x, "eth0", "p"))
			require.NoError(t, err)
			rb, err := b.Allocate(ctx, onPool(x, "eth0", "p"))
			require.NoError(t, err)
			require.Equal(t, ra.IPs[0].Address, rb.IPs[0].Address, "the second Allocator must return the held address")
			require.True(t, rb.IPs[0].Reused)

			held, err := b.Lookup(ctx, store.Owner{UID: x})
			require.NoError(t, err)
			require.Len(t, held, 1, "Lookup through the other Allocator")
			require.NoError(t, b.Release(ctx, store.Owner{UID: x}))
			held, err = a.Lookup(ctx, store.Owner{UID: x})
			require.NoError(t, err)
			require.Empty(t, held, "Release through the other Allocator must free it")
			_, err = base.Get(ctx, "p", ra.IPs[0].Address.Addr())
			require.ErrorIs(t, err, store.ErrNotFound)
		})
	}
}

// hideExclusive hides a memstore's ExclusiveCreator (and CursorCreator),
// so that the Allocator checks ownership before and after Create. It keeps
// its ordered revisions.
type hideExclusive struct {
	store.Store
	store.Cursors
	store.OrderedRevisions
}

func withoutExclusive(s *memstore.Store) hideExclusive { return hideExclusive{s, s, s} }

// Case 1, at scale: four Allocators on one Store, every operation through a
// random one; no claim leaks and no allocation fails while the pool has room.
func TestWritersRandomAllocators(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(`{"name":"p","ranges":[{"subnet":"10.0.0.0/26"}]}`) // .1-.62, gateway .1: 61 addresses
	base := memstore.New()
	var allocs []*ipam.Allocator
	for i := range 4 {
		var st store.Store = base.Open()
		if i%2 == 1 {
			st = withoutExclusive(base.Open())
		}
		allocs = append(allocs, mustAllocator(t, src, st))
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	held := map[string]netip.Addr{}
	for step := range 2000 {
		a := allocs[rng.IntN(len(allocs))]
		uid := fmt.Sprintf("u%d", rng.IntN(80))
		switch rng.IntN(3) {
		case 0, 1:
			res, err := a.Allocate(ctx, onPool(uid, "eth0", "p"))
			if _, ok := held[uid]; !ok && len(held) >= 61 {
				require.ErrorIs(t, err, ipam.ErrExhausted, "step %d", step)
				continue
			}
			require.NoError(t, err, "step %d: %d held", step, len(held))
			if ip, ok := held[uid]; ok {
				require.Equal(t, ip, res.IPs[0].Address.Addr(), "step %d: %s asked again", step, uid)
			}
			held[uid] = res.IPs[0].Address.Addr()
		case 2:
			require.NoError(t, a.Release(ctx, store.Owner{UID: uid}), "step %d", step)
			delete(held, uid)
		}
	}
	cs, err := base.List(ctx, "p")
	require.NoError(t, err)
	require.Len(t, cs, len(held), "claims in the Store against owners that hold one")
	for uid := range held {
		require.NoError(t, allocs[0].Release(ctx, store.Owner{UID: uid}))
	}
	cs, err = base.List(ctx, "p")
	require.NoError(t, err)
	require.Empty(t, cs, "claims left after every owner released")
}

// Case 1, concurrently: Allocators on one Store serve the same owner at the
// same moment. On a Store that checks the owner as it creates, or whose
// revisions are ordered, it ends with one address, and every call returned
// it. On a Store with neither, every address a call returned is still held
// (none given back under it), though the owner may hold a second one.
func TestWritersSameOwnerConcurrently(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	for _, kind := range []string{"exclusive", "ordered", "ordered-at-least", "neither"} {
		t.Run(kind, func(t *testing.T) {
			base := memstore.New()
			var allocs []*ipam.Allocator
			for range 4 {
				var st store.Store = base.Open()
				switch kind {
				case "ordered":
					st = withoutExclusive(base.Open())
				case "ordered-at-least":
					st = atLeast{withoutExclusive(base.Open())}
				case "neither":
					st = unordered{withoutExclusive(base.Open())}
				}
				allocs = append(allocs, mustAllocator(t, src, st))
			}
			for round := range 50 {
				uid := fmt.Sprintf("u%d", round)
				var wg sync.WaitGroup
				got := make([]netip.Addr, 8)
				errs := make([]error, 8)
				for g := range got {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, err := allocs[g%len(allocs)].Allocate(ctx, onPool(uid, "eth0", "p"))
						errs[g] = err
						if err == nil {
							got[g] = res.IPs[0].Address.Addr()
						}
					}()
				}
				wg.Wait()
				cs, err := base.Owned(ctx, store.ByUID(uid))
				require.NoError(t, err)
				held := map[netip.Addr]bool{}
				for _, c := range cs {
					held[c.IP] = true
				}
				if kind != "neither" {
					require.Len(t, cs, 1, "round %d: the owner holds %v", round, cs)
				}
				for g := range got {
					if errs[g] != nil {
						// Losing every race is allowed, as a retryable conflict.
						require.ErrorIs(t, errs[g], ipam.ErrConflict, "round %d", round)
						continue
					}
					require.True(t, held[got[g]], "round %d: call %d returned %s, which the owner does not hold: %v", round, g, got[g], cs)
				}
			}
		})
	}
}

// atLeast is a Store with ordered revisions and OwnedAtLeast, without
// ExclusiveCreator, as kubestore is: an Allocator creates first and settles
// afterwards.
type atLeast struct{ hideExclusive }

func (s atLeast) OwnedAtLeast(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, error) {
	return s.Owned(ctx, q)
}

// unordered is a Store that does not say its revisions are ordered.
type unordered struct{ hideExclusive }

func (unordered) RevisionsOrdered() bool { return false }

// Case 2: a stable pod with two interfaces whose held claim records no
// interface, in net1's pool only: eth0 must not take it, net1 must, and the
// Store must keep it (the next pod must not get it).
func TestWritersInterfaceLessClaim(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(
		ipam.MustParsePool(`{"name":"front","subnet":"10.1.0.0/24","ips":["10.1.0.10-10.1.0.20"]}`),
		ipam.MustParsePool(`{"name":"back","subnet":"10.2.0.0/24","ips":["10.2.0.10-10.2.0.20"]}`),
	)
	require.NoError(t, err)
	ann := map[string]string{ipam.AnnotationIPPools: `[{"interface":"eth0","ipv4":["front"]},{"interface":"net1","ipv4":["back"]}]`}
	for _, tc := range []struct {
		stable, createFirst bool
	}{{true, false}, {false, false}, {false, true}} {
		stable := tc.stable
		t.Run(fmt.Sprintf("stable=%t/create-first=%t", stable, tc.createFirst), func(t *testing.T) {
			st := memstore.New()
			imported, err := st.Create(ctx, store.Claim{Pool: "back", IP: netip.MustParseAddr("10.2.0.10"),
				Owner: store.Owner{Namespace: "db", Name: "db-0", UID: "uid-0", Stable: stable}})
			require.NoError(t, err)
			var over store.Store = st
			if tc.createFirst {
				over = atLeast{withoutExclusive(st)}
			}
			a := mustAllocator(t, cat, over)
			req := ipam.Request{Namespace: "db", Name: "db-0", UID: "uid-1", Stable: stable, Annotations: ann,
				Interfaces: []ipam.NIC{{Name: "eth0"}, {Name: "net1"}}}
			if !stable {
				req.UID = "uid-0"
			}
			res, err := a.Allocate(ctx, req)
			require.NoError(t, err)
			byIface := map[string]ipam.IPConfig{}
			for _, c := range res.IPs {
				byIface[c.Interface] = c
			}
			require.Equal(t, "front", byIface["eth0"].Pool, "eth0 must be served from its own pool")
			require.Equal(t, imported.IP, byIface["net1"].Address.Addr(), "net1 must get the imported address back")
			require.True(t, byIface["net1"].Reused)
			c, err := st.Get(ctx, "back", imported.IP)
			require.NoError(t, err, "the imported claim must stay in the Store")
			require.Equal(t, "net1", c.Owner.Interface)

			// The next pod must not get the same address.
			next, err := a.Allocate(ctx, ipam.Request{Namespace: "db", Name: "db-1", UID: "uid-2", Annotations: ann,
				Interfaces: []ipam.NIC{{Name: "net1"}}})
			require.NoError(t, err)
			require.NotEqual(t, imported.IP, next.IPs[0].Address.Addr())
			owned, err := st.Owned(ctx, req.Owner().Query())
			require.NoError(t, err)
			require.Len(t, owned, 2)
		})
	}
}

// Case 3: a PoolSource that is not a Catalog returns overlapping pools, or
// redefines one pool onto another's addresses: no address goes to two owners,
// and the refused pool says why.
func TestWritersOverlappingPools(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(
		`{"name":"a","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.11"]}`,
		`{"name":"b","subnet":"10.1.0.0/24","ips":["10.1.0.10-10.1.0.11"]}`,
	)
	st := memstore.New()
	al := mustAllocator(t, src, st)
	_, err := al.Allocate(ctx, onPool("u1", "eth0", "a"))
	require.NoError(t, err)
	_, err = al.Allocate(ctx, onPool("u2", "eth0", "b"))
	require.NoError(t, err)

	// b is redefined onto a's addresses.
	src.Set(ipam.MustParsePool(`{"name":"b","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.11"]}`))
	_, err = al.Allocate(ctx, onPool("u3", "eth0", "b"))
	require.ErrorIs(t, err, ipam.ErrOverlap)
	require.ErrorContains(t, err, `pool "b" overlaps pool "a" at 10.0.0.10-10.0.0.11`)

	// Selected: the overlapping pool is filtered with its reason in the
	// trace, and the next candidate serves.
	src.Set(ipam.MustParsePool(`{"name":"c","subnet":"10.2.0.0/24","ips":["10.2.0.10"]}`))
	res, err := al.Allocate(ctx, ipam.Request{Namespace: "default", Name: "pod-u4", UID: "u4",
		Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["b","c"]}`}, Interfaces: []ipam.NIC{{Name: "eth0"}}})
	require.NoError(t, err)
	require.Equal(t, "c", res.IPs[0].Pool)
	require.Contains(t, traceLines(res.Trace), `eth0 IPv4 b: filtered (rank 1): pool "b" overlaps pool "a" at 10.0.0.10-10.0.0.11`)

	// A new Allocator, that sees the overlapping pools first, refuses both
	// ways: no address is held twice.
	fresh := mustAllocator(t, src, st.Open())
	for i := range 4 {
		for _, pool := range []string{"a", "b"} {
			_, _ = fresh.Allocate(ctx, onPool(fmt.Sprintf("f%d-%s", i, pool), "eth0", pool))
		}
	}
	seen := map[netip.Addr]string{}
	for _, pool := range []string{"a", "b", "c"} {
		cs, err := st.List(ctx, pool)
		require.NoError(t, err)
		for _, c := range cs {
			require.NotContains(t, seen, c.IP, "%s held in %s and %s", c.IP, seen[c.IP], pool)
			seen[c.IP] = pool
		}
	}
}

func traceLines(tr []ipam.TraceEntry) []string {
	var out []string
	for _, e := range tr {
		out = append(out, e.String())
	}
	return out
}

// Case 4: a pool redefined so that it no longer covers an owner's address:
// a repeat Allocate gives a valid new address and releases the old claim.
func TestWritersPoolNoLongerCovers(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]}`)
	st := memstore.New()
	for _, stable := range []bool{false, true} {
		t.Run(fmt.Sprintf("stable=%t", stable), func(t *testing.T) {
			src.Set(ipam.MustParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]}`))
			al := mustAllocator(t, src, st.Open())
			req := onPool(fmt.Sprintf("u-%t", stable), "eth0", "p")
			req.Stable = stable
			first, err := al.Allocate(ctx, req)
			require.NoError(t, err)
			old := first.IPs[0].Address.Addr()
			src.Set(ipam.MustParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.30-10.0.0.40"]}`))
			again, err := al.Allocate(ctx, req)
			require.NoError(t, err)
			got := again.IPs[0]
			require.True(t, got.Address.IsValid() && got.Address.Addr().IsValid(), "an invalid address: %+v", got)
			require.False(t, got.Reused)
			require.True(t, netip.MustParsePrefix("10.0.0.0/24").Contains(got.Address.Addr()))
			require.False(t, got.Address.Addr().Less(netip.MustParseAddr("10.0.0.30")), "%s outside the new ips", got.Address)
			_, err = st.Get(ctx, "p", old)
			require.ErrorIs(t, err, store.ErrNotFound, "the old claim must be released")
			require.Contains(t, strings.Join(traceLines(again.Trace), "\n"), "released "+old.String())
			require.NoError(t, al.Release(ctx, req.Owner()))
		})
	}
}

// Case 5: a cold Allocator (a CNI plugin starting per call) pays O(1) Store
// operations per allocation with round-robin, not a List of the pool.
func TestWritersColdAllocatorDoesNotList(t *testing.T) {
	ctx := context.Background()
	for _, strategy := range []string{"round-robin", "lowest-free"} {
		t.Run(strategy, func(t *testing.T) {
			cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","strategy":"` + strategy + `","ranges":[{"subnet":"10.0.0.0/16"}]}`))
			require.NoError(t, err)
			base := memstore.New()
			warm := mustAllocator(t, cat, base)
			for i := range 4000 {
				_, err := warm.Allocate(ctx, onPool(fmt.Sprintf("w%d", i), "eth0", "p"))
				require.NoError(t, err)
			}
			for i := range 20 {
				cs := &countingStore{Store: base.Open()}
				cold := mustAllocator(t, cat, cs)
				_, err := cold.Allocate(ctx, onPool(fmt.Sprintf("c%d", i), "eth0", "p"))
				require.NoError(t, err)
				if strategy == "round-robin" {
					require.Zero(t, cs.lists.Load(), "a cold round-robin Allocate listed the pool")
					require.LessOrEqual(t, cs.calls.Load(), int64(3), "Store calls of a cold Allocate")
				} else {
					require.EqualValues(t, 1, cs.lists.Load(), "a cold lowest-free Allocate lists the pool once")
				}
			}
		})
	}
}

// countingStore counts the Store calls made through it.
type countingStore struct {
	*memstore.Store
	calls, lists, exists atomic.Int64
}

func (s *countingStore) count() { s.calls.Add(1) }

// lost counts a create that found its address taken.
func (s *countingStore) lost(err error) {
	if errors.Is(err, store.ErrExists) {
		s.exists.Add(1)
	}
}

func (s *countingStore) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	s.count()
	return s.Store.Get(ctx, pool, ip)
}

func (s *countingStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.count()
	s.lists.Add(1)
	return s.Store.List(ctx, pool)
}

func (s *countingStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.count()
	c, err := s.Store.Create(ctx, c)
	s.lost(err)
	return c, err
}

func (s *countingStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.count()
	c, err := s.Store.CreateAndSetCursor(ctx, c)
	s.lost(err)
	return c, err
}

func (s *countingStore) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.count()
	c, err := s.Store.CreateExclusive(ctx, c)
	s.lost(err)
	return c, err
}

func (s *countingStore) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	s.count()
	return s.Store.Owned(ctx, q)
}

func (s *countingStore) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	s.count()
	return s.Store.Cursor(ctx, pool)
}

// Item 4: smaller defects.
func TestWritersSmallerDefects(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20"}]}`))
	require.NoError(t, err)
	al := mustAllocator(t, cat, nil)

	t.Run("nil context", func(t *testing.T) {
		var nilCtx context.Context
		require.NotPanics(t, func() {
			_, err := al.Allocate(nilCtx, onPool("u", "eth0", "p"))
			require.ErrorIs(t, err, ipam.ErrInvalid)
			require.ErrorIs(t, al.Release(nilCtx, store.Owner{UID: "u"}), ipam.ErrInvalid)
			_, err = al.Lookup(nilCtx, store.Owner{UID: "u"})
			require.ErrorIs(t, err, ipam.ErrInvalid)
			require.ErrorIs(t, al.ReleaseIP(nilCtx, "p", netip.MustParseAddr("10.0.0.10")), ipam.ErrInvalid)
			_, err = al.Claims(nilCtx)
			require.ErrorIs(t, err, ipam.ErrInvalid)
		})
	})

	t.Run("pool problems all at once", func(t *testing.T) {
		_, err := ipam.ParsePool([]byte(`{"name":"p","vlan":5000,"strategy":"nope","subnet":"10.0.0.0/24","gateway":"10.1.0.1","ips":["10.0.0.10"]}`))
		require.Error(t, err)
		for _, want := range []string{`vlan "5000"`, `strategy "nope"`, `gateway "10.1.0.1"`} {
			require.ErrorContains(t, err, want)
		}
		bad := &ipam.Pool{Name: "x", Subnet: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.1.0.1"),
			IPs: []netipx.IPRange{netipx.MustParseIPRange("10.0.0.10-10.0.0.20")}}
		good := ipam.MustParsePool(`{"name":"y","subnet":"10.0.0.0/24","ips":["10.0.0.15-10.0.0.30"]}`)
		err = ipam.ValidatePools([]*ipam.Pool{bad, good})
		require.ErrorContains(t, err, `gateway "10.1.0.1"`)
		require.ErrorContains(t, err, `overlaps the addresses of pool "x"`)
	})

	t.Run("requested address rules", func(t *testing.T) {
		req := func(ips ...string) ipam.Request {
			r := onPool("r", "eth0", "p")
			for _, ip := range ips {
				r.Interfaces[0].IPs = append(r.Interfaces[0].IPs, netip.MustParseAddr(ip))
			}
			return r
		}
		for ip, want := range map[string]string{
			"10.9.0.5":   `requested IP address 10.9.0.5: not in any range of pools "p" (10.0.0.10-10.0.0.20)`,
			"10.0.0.0":   `requested IP address 10.0.0.0: it is the network address of subnet 10.0.0.0/24 (pool "p")`,
			"10.0.0.255": `requested IP address 10.0.0.255: it is the broadcast address of subnet 10.0.0.0/24 (pool "p")`,
			"10.0.0.30":  `requested IP address 10.0.0.30: it is in subnet 10.0.0.0/24 but outside range 10.0.0.10-10.0.0.20 of pool "p"`,
		} {
			_, err := al.Allocate(ctx, req(ip))
			require.ErrorIs(t, err, ipam.ErrNotInRange, ip)
			require.ErrorContains(t, err, want)
		}
		_, err := al.Allocate(ctx, req("10.0.0.11", "10.0.0.12"))
		require.ErrorIs(t, err, ipam.ErrNotInRange)
		require.ErrorContains(t, err, `requested IP address 10.0.0.12: pool "p", the one whose ranges contain it, already serves requested address 10.0.0.11`)
		_, err = al.Allocate(ctx, req("fe80::1%eth0"))
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, `interfaces[0].ips[0] "fe80::1%eth0": an address with a zone is never in a pool`)
	})

	t.Run("unknown pool named once", func(t *testing.T) {
		_, err := al.Allocate(ctx, onPool("u", "eth0", "nope"))
		require.ErrorIs(t, err, ipam.ErrNotFound)
		require.EqualError(t, err, `eth0: pool "nope": no such pool`)
	})
}

// An Allocator asked again and again for a full pool confirms with the
// Store each time, but lists the pool only when the Store's version of it
// changed (a memstore has versions): a full pool that stays a candidate costs
// no List per request. A release elsewhere is seen at once.
func TestWritersFullPoolConfirmedByVersion(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/29"}]}`)) // .2-.6
	require.NoError(t, err)
	base := memstore.New()
	cs := &countingStore{Store: base.Open()}
	a := mustAllocator(t, cat, cs)
	other := mustAllocator(t, cat, base.Open())
	for i := range 5 {
		_, err := other.Allocate(ctx, onPool(fmt.Sprintf("o%d", i), "eth0", "p"))
		require.NoError(t, err)
	}
	for i := range 50 {
		_, err := a.Allocate(ctx, onPool(fmt.Sprintf("late%d", i), "eth0", "p"))
		require.ErrorIs(t, err, ipam.ErrExhausted)
	}
	require.EqualValues(t, 1, cs.lists.Load(), "Lists for 50 requests to a pool that stayed full")
	require.NoError(t, other.Release(ctx, store.Owner{UID: "o2"}))
	res, err := a.Allocate(ctx, onPool("after", "eth0", "p"))
	require.NoError(t, err, "a release by another Allocator must be seen")
	require.Equal(t, "10.0.0.4", res.IPs[0].Address.Addr().String())
	require.EqualValues(t, 2, cs.lists.Load())
}

// shrinkingStore shrinks a pool of its source the first time it is asked to
// create a claim: a pool redefined between the moment an Allocator picks an
// address and the moment the Store creates its claim.
type shrinkingStore struct {
	*memstore.Store
	src  *ipamtest.Source
	doc  string
	once sync.Once
}

func (s *shrinkingStore) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.once.Do(func() { s.src.Set(ipam.MustParsePool(s.doc)) })
	return s.Store.CreateExclusive(ctx, c)
}

func TestWritersPoolShrunkDuringCreate(t *testing.T) {
	ctx := context.Background()
	src := newChangingSource(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]}`)
	st := &shrinkingStore{Store: memstore.New(), src: src, doc: `{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.15-10.0.0.20"]}`}
	a := mustAllocator(t, src, st)
	res, err := a.Allocate(ctx, onPool("u", "eth0", "p"))
	require.NoError(t, err)
	got := res.IPs[0].Address.Addr()
	require.False(t, got.Less(netip.MustParseAddr("10.0.0.15")), "%s is outside the pool as it is now", got)
	cs, err := st.List(ctx, "p")
	require.NoError(t, err)
	require.Len(t, cs, 1, "the claim outside the shrunk pool must be given back: %v", cs)
}

// A repeat request whose candidate pools are all filtered now (disabled,
// another node) gets the address its owner holds, as Spiderpool returns the
// endpoint's allocation, on a Store with or without the exclusive check.
func TestWritersRepeatWithPoolsFiltered(t *testing.T) {
	ctx := context.Background()
	for _, excl := range []bool{true, false} {
		t.Run(fmt.Sprintf("exclusive=%t", excl), func(t *testing.T) {
			src := newChangingSource(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]}`)
			var st store.Store = memstore.New()
			if !excl {
				st = withoutExclusive(st.(*memstore.Store))
			}
			a := mustAllocator(t, src, st)
			req := ipam.Request{Namespace: "default", Name: "web", UID: "u1",
				Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["p"]}`}, Interfaces: []ipam.NIC{{Name: "eth0"}}}
			first, err := a.Allocate(ctx, req)
			require.NoError(t, err)
			src.Set(ipam.MustParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"],"disable":true}`))
			again, err := a.Allocate(ctx, req)
			require.NoError(t, err)
			require.Equal(t, first.IPs[0].Address, again.IPs[0].Address)
			require.True(t, again.IPs[0].Reused)
		})
	}
}

// Allocators with different Options.Spread that share a pool start in
// different parts of it, so that racing for one address is rare; without
// Spread they all follow the Store's cursor and race for the same one.
func TestWritersSpread(t *testing.T) {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/20"}]}`))
	require.NoError(t, err)
	conflicts := func(spread bool) (float64, map[string]bool) {
		base := memstore.New()
		var stores []*countingStore
		var allocs []*ipam.Allocator
		for i := range 8 {
			cs := &countingStore{Store: base.Open()}
			opts := ipam.Options{Pools: cat, Store: cs}
			if spread {
				opts.Spread = fmt.Sprintf("node-%d", i)
			}
			a, err := ipam.NewAllocator(opts)
			require.NoError(t, err)
			stores, allocs = append(stores, cs), append(allocs, a)
		}
		var (
			mu    sync.Mutex
			first = map[string]bool{}
			wg    sync.WaitGroup
		)
		for i, a := range allocs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range 200 {
					res, err := a.Allocate(ctx, onPool(fmt.Sprintf("a%d-%d", i, k), "eth0", "p"))
					if err != nil {
						t.Error(err)
						return
					}
					if k == 0 {
						mu.Lock()
						first[res.IPs[0].Address.Addr().String()] = true
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		var exists int64
		for _, cs := range stores {
			exists += cs.exists.Load()
		}
		return float64(exists) / float64(8*200), first
	}
	withSpread, firsts := conflicts(true)
	require.Len(t, firsts, 8, "each Allocator starts in its own place")
	require.Less(t, withSpread, 0.2, "ErrExists per allocation with Spread")
	t.Logf("ErrExists per allocation: %.3f with Spread", withSpread)
}
