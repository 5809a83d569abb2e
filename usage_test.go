package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

func ExampleAllocator_Usage() {
	cat, _ := ipam.NewCatalog(ipam.MustParsePool(`{"name":"blue","subnet":"10.0.0.0/24","ips":["10.0.0.2-10.0.0.11"],
		"excludeIPs":["10.0.0.11"],"gateway":"10.0.0.1"}`))
	cat, _ = cat.WithReserved(&ipam.ReservedIP{IPVersion: 4, IPs: []netipx.IPRange{netipx.MustParseIPRange("10.0.0.9-10.0.0.9")}})
	alloc, _ := ipam.NewAllocator(ipam.Options{Pools: cat, Quarantine: time.Minute})
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, id := range []string{"a", "b", "c"} {
		alloc.AllocateAt(ctx, ipam.Request{ContainerID: id, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}}}, now)
	}
	alloc.ReleaseAt(ctx, store.Owner{ContainerID: "c", Interface: "eth0"}, now)
	for _, at := range []time.Time{now, now.Add(2 * time.Minute)} {
		us, _ := alloc.Usage(ctx, at)
		for _, u := range us {
			fmt.Printf("%s %s IPv%d: capacity %s, reserved %s, allocated %d, quarantined %d, free %s\n",
				u.Pool, u.Subnet, u.Family, u.Capacity, u.Reserved, u.Allocated, u.Quarantined, u.Free)
		}
	}
	// Output:
	// blue 10.0.0.0/24 IPv4: capacity 9, reserved 1, allocated 2, quarantined 1, free 5
	// blue 10.0.0.0/24 IPv4: capacity 9, reserved 1, allocated 2, quarantined 0, free 6
}

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		pool     string
		capacity string
		fits     bool
	}{
		{`{"name":"a","ranges":[{"subnet":"10.0.0.0/24"}]}`, "253", true}, // .1-.254 less the gateway .1
		{`{"name":"b","ranges":[{"subnet":"2001:db8::/64"}]}`, "18446744073709551614", true},
		{`{"name":"c","ranges":[{"subnet":"2001:db8::/63"}]}`, "36893488147419103230", false},
		{`{"name":"d","subnet":"2001:db8::/32","ips":["2001:db8::-2001:db8:ffff:ffff:ffff:ffff:ffff:ffff"]}`, "79228162514264337593543950336", false},
	} {
		u, err := ipam.UsageOf(ipam.MustParsePool(tc.pool), nil, 3, 0)
		require.NoError(t, err)
		require.Equal(t, tc.capacity, u.Capacity.String())
		want, _ := new(big.Int).SetString(tc.capacity, 10)
		require.Zero(t, want.Cmp(u.Capacity.Big()), "Big")
		wantF, _ := new(big.Float).SetInt(want).Float64()
		require.Equal(t, wantF, u.Capacity.Float64(), "Float64")
		n, ok := u.Capacity.Uint64()
		require.Equal(t, tc.fits, ok)
		if ok {
			require.Equal(t, want.Uint64(), n)
		} else {
			require.Equal(t, uint64(math.MaxUint64), n)
		}
		free := new(big.Int).Sub(want, big.NewInt(3))
		require.Equal(t, free.String(), u.Free.String())
	}
	require.True(t, ipam.Size{}.IsZero())
	require.Equal(t, -1, ipam.Size{}.Add(1).Compare(ipam.Size{}.Add(2)))
}

func TestUsageOfBadInput(t *testing.T) {
	p := ipam.MustParsePool(`{"name":"a","ranges":[{"subnet":"10.0.0.0/30"}]}`)
	_, err := ipam.UsageOf(nil, nil, 0, 0)
	require.ErrorContains(t, err, "nil pool")
	_, err = ipam.UsageOf(p, nil, -1, 0)
	require.ErrorContains(t, err, `pool "a": allocated "-1"`)
	_, err = ipam.UsageOf(p, nil, 0, -2)
	require.ErrorContains(t, err, `quarantined "-2"`)
	// More claims than addresses (a pool redefined smaller): nothing free,
	// never a negative or wrapped number.
	u, err := ipam.UsageOf(p, nil, 5, 1)
	require.NoError(t, err)
	require.Equal(t, "1", u.Capacity.String()) // .1 is the gateway, .2 the only one left
	require.True(t, u.Free.IsZero())

	a, err := ipam.NewAllocator(ipam.Options{Pools: must(ipam.NewCatalog(p))})
	require.NoError(t, err)
	_, err = a.PoolUsage(context.Background(), "nope", time.Time{})
	require.ErrorIs(t, err, ipam.ErrNotFound)
	require.ErrorContains(t, err, `"nope"`)
	var nilCtx context.Context
	_, err = a.Usage(nilCtx, time.Time{})
	require.Error(t, err)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// listOnlyStore is a Store without the Counter capability that counts its
// Lists: PoolUsage must fall back to List on it, and count through Count
// on a Store that has it.
type listOnlyStore struct {
	store.Store // a memstore wrapped so that only Store's methods show
	lists       int
}

func (s *listOnlyStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.lists++
	return s.Store.List(ctx, pool)
}

type listCounter struct {
	*memstore.Store
	lists int
}

func (s *listCounter) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.lists++
	return s.Store.List(ctx, pool)
}

func TestUsageCountsWithoutList(t *testing.T) {
	ctx := context.Background()
	cat := must(ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/28"}]}`)))
	req := ipam.Request{ContainerID: "c", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}

	counter := &listCounter{Store: memstore.New()}
	a := must(ipam.NewAllocator(ipam.Options{Pools: cat, Store: counter}))
	_, err := a.Allocate(ctx, req)
	require.NoError(t, err)
	before := counter.lists
	u, err := a.PoolUsage(ctx, "p", time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, u.Allocated)
	require.Equal(t, before, counter.lists, "a Store with Count was listed")

	plain := &listOnlyStore{Store: memstore.New()}
	b := must(ipam.NewAllocator(ipam.Options{Pools: cat, Store: plain}))
	_, err = b.Allocate(ctx, req)
	require.NoError(t, err)
	before = plain.lists
	u, err = b.PoolUsage(ctx, "p", time.Now())
	require.NoError(t, err)
	require.Equal(t, 1, u.Allocated)
	require.Equal(t, before+1, plain.lists, "a Store without Count is listed once")
}

// capacityByHand counts the addresses p hands out, one by one: every
// address of its range set but the gateways and the excluded ones, and of
// those, how many reserved holds. Only for small pools.
func capacityByHand(t *testing.T, p *ipam.Pool, reserved *netipx.IPSet) (capacity, res int) {
	t.Helper()
	rs, err := p.RangeSet()
	require.NoError(t, err)
	seen := map[netip.Addr]bool{}
	for _, r := range rs {
		for ip := r.Start; ip.IsValid() && ip.Compare(r.End) <= 0; ip = ip.Next() {
			if ip == r.Gateway || seen[ip] {
				continue
			}
			excluded := false
			for _, x := range p.ExcludeIPs {
				excluded = excluded || x.Contains(ip)
			}
			if excluded {
				continue
			}
			seen[ip] = true
			capacity++
			if reserved != nil && reserved.Contains(ip) {
				res++
			}
		}
	}
	return capacity, res
}

// TestUsageOverSimulation: over simulator histories (random options, some
// with a quarantine, pools redefined in the many-writers mode), at every
// step, every pool's usage as the Allocator reports it matches the Store
// and the pool counted by hand: Allocated is the number of claims List
// returns, Capacity the addresses counted one by one, and Free the rest.
func TestUsageOverSimulation(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	if testing.Short() {
		seeds = seeds[:2]
	}
	for _, seed := range seeds {
		for _, writers := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/writers=%t", seed, writers), func(t *testing.T) {
				opts := ipamtest.RandomOptions(seed)
				pools := map[string]*ipam.Pool{}
				for _, p := range opts.Pools {
					pools[p.Name] = p
				}
				st := memstore.New()
				opts.Store = st
				opts.Writers = writers
				sim, err := ipamtest.NewSim(seed, opts)
				require.NoError(t, err)
				defer sim.Close()
				ctx := context.Background()
				checked := 0
				for step := 0; step < 300; step++ {
					if err := sim.Step(); err != nil {
						t.Fatalf("seed %d step %d: %v", seed, step, err)
					}
					us, err := sim.Allocator().Usage(ctx, sim.Now())
					require.NoError(t, err)
					for _, u := range us {
						claims, err := st.List(ctx, u.Pool)
						require.NoError(t, err)
						require.Equal(t, len(claims), u.Allocated, "seed %d step %d pool %s: Allocated", seed, step, u.Pool)
						// Pools keep their definitions but in the
						// many-writers mode, which redefines them.
						capacity, ok := uint64(0), false
						if p := pools[u.Pool]; p != nil && !writers {
							c, _ := capacityByHand(t, p, nil)
							capacity = uint64(c)
							require.Equal(t, fmt.Sprint(capacity), u.Capacity.String(), "seed %d step %d pool %s: Capacity", seed, step, u.Pool)
						} else if capacity, ok = u.Capacity.Uint64(); !ok {
							t.Fatalf("pool %s: capacity %s", u.Pool, u.Capacity)
						}
						free := max(0, int(capacity)-len(claims)-u.Quarantined)
						require.Equal(t, fmt.Sprint(free), u.Free.String(), "seed %d step %d pool %s: Free", seed, step, u.Pool)
						require.LessOrEqual(t, u.Quarantined, int(capacity))
						checked++
					}
				}
				require.NoError(t, sim.Settle())
				require.Positive(t, checked)
			})
		}
	}
}

// TestUsageReservedAndQuarantine checks Reserved and Quarantined against
// hand counts: a cluster reservation over part of a pool, a quarantine that
// ends, and a reserved address claimed before it was reserved.
func TestUsageReservedAndQuarantine(t *testing.T) {
	ctx := context.Background()
	p := ipam.MustParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.29"],"excludeIPs":["10.0.0.20-10.0.0.21"]}`)
	rsv := &ipam.ReservedIP{IPVersion: 4, IPs: []netipx.IPRange{netipx.MustParseIPRange("10.0.0.25-10.0.0.40")}}
	plain := must(ipam.NewCatalog(p))
	st := memstore.New()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// 10.0.0.28 is claimed before it is reserved.
	a := must(ipam.NewAllocator(ipam.Options{Pools: plain, Store: st}))
	_, err := a.AllocateAt(ctx, ipam.Request{ContainerID: "old", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.28")}}}}, now)
	require.NoError(t, err)

	cat := must(plain.WithReserved(rsv))
	b := must(ipam.NewAllocator(ipam.Options{Pools: cat, Store: st, Quarantine: time.Minute}))
	for i := range 4 {
		_, err := b.AllocateAt(ctx, ipam.Request{ContainerID: fmt.Sprint(i), Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}, now)
		require.NoError(t, err)
	}
	require.NoError(t, b.ReleaseAt(ctx, store.Owner{ContainerID: "0"}, now))
	require.NoError(t, b.ReleaseAt(ctx, store.Owner{ContainerID: "1"}, now))

	capacity, reserved := capacityByHand(t, p, cat.Reserved(4))
	require.Equal(t, 18, capacity)
	require.Equal(t, 5, reserved)
	want := ipam.Usage{Pool: "p", Family: 4, Subnet: netip.MustParsePrefix("10.0.0.0/24"),
		Capacity: ipam.Size{}.Add(18), Reserved: ipam.Size{}.Add(5), Allocated: 3, Quarantined: 2, Free: ipam.Size{}.Add(18 - 5 - 3 - 2)}
	got, err := b.PoolUsage(ctx, "p", now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, want, got)
	// The quarantine is b's: a, which released nothing, has none; a has no
	// reservations either.
	got, err = a.PoolUsage(ctx, "p", now.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, 0, got.Quarantined)
	require.Equal(t, "0", got.Reserved.String())
	require.Equal(t, "15", got.Free.String())
	// After the quarantine.
	want.Quarantined, want.Free = 0, ipam.Size{}.Add(18-5-3)
	got, err = b.PoolUsage(ctx, "p", now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	clock     time.Time
	allocated []ipam.AllocateEvent
	released  []ipam.ReleaseEvent
}

func (r *recorder) Start() time.Time                { r.clock = r.clock.Add(time.Second); return r.clock }
func (r *recorder) Allocated(ev ipam.AllocateEvent) { r.allocated = append(r.allocated, ev) }
func (r *recorder) Released(ev ipam.ReleaseEvent)   { r.released = append(r.released, ev) }

func TestObserver(t *testing.T) {
	ctx := context.Background()
	cat := must(ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/30"}]}`)))
	rec := &recorder{}
	a := must(ipam.NewAllocator(ipam.Options{Pools: cat, Observer: rec}))
	req := func(id string) ipam.Request {
		return ipam.Request{ContainerID: id, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}}
	}
	res, err := a.Allocate(ctx, req("a"))
	require.NoError(t, err)
	_, err = a.Allocate(ctx, req("b"))
	require.ErrorIs(t, err, ipam.ErrExhausted)
	require.Len(t, rec.allocated, 2)
	require.Equal(t, res.IPs[0].Address, rec.allocated[0].Result.IPs[0].Address)
	require.NoError(t, rec.allocated[0].Err)
	require.ErrorIs(t, rec.allocated[1].Err, ipam.ErrExhausted)
	require.True(t, rec.allocated[1].Start.After(rec.allocated[0].Start), "each call has its own Start")

	require.NoError(t, a.Release(ctx, store.Owner{ContainerID: "a"}))
	err = a.ReleaseIP(ctx, "p", netip.MustParseAddr("10.0.0.2"))
	require.ErrorIs(t, err, ipam.ErrNotFound)
	err = a.ReleaseClaim(ctx, store.Claim{Pool: "p", IP: netip.MustParseAddr("10.0.0.2")})
	require.ErrorIs(t, err, ipam.ErrNotFound)
	require.Len(t, rec.released, 3)
	require.NoError(t, rec.released[0].Err)
	require.Equal(t, "", rec.released[0].Pool)
	require.Equal(t, "p", rec.released[1].Pool)
	require.True(t, errors.Is(rec.released[2].Err, ipam.ErrNotFound))

	// AllocateAt is observed too; an Allocator without an Observer calls
	// none (TestAllocateAllocations pins that it costs nothing).
	_, err = a.AllocateAt(ctx, req("c"), time.Now())
	require.NoError(t, err)
	require.Len(t, rec.allocated, 3)
}

// pagerStore is a Store that is a store.ClaimPager but no store.Counter
// (kubestore's capabilities for usage), which counts its Lists and its
// passes: Usage must count every pool in one paged pass, listing none.
type pagerStore struct {
	store.Store // a memstore wrapped so that only Store's methods show
	all         *memstore.Store
	lists       int
	passes      int
	pages       []int // the length of each page given
	corrupt     error // reported at the end of a pass, if set
}

func (s *pagerStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.lists++
	return s.Store.List(ctx, pool)
}

func (s *pagerStore) ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error {
	s.passes++
	claims, err := s.all.ListAll(ctx)
	if err != nil {
		return err
	}
	for len(claims) > 0 {
		n := min(size, len(claims))
		s.pages = append(s.pages, n)
		if err := page(claims[:n]); err != nil {
			return err
		}
		claims = claims[n:]
	}
	return s.corrupt
}

func TestUsageCountsPagesWithoutList(t *testing.T) {
	ctx := context.Background()
	big := ipam.MustParsePool(`{"name":"big","ranges":[{"subnet":"10.0.0.0/22"}]}`)
	small := ipam.MustParsePool(`{"name":"small","ranges":[{"subnet":"10.1.0.0/24"}]}`)
	empty := ipam.MustParsePool(`{"name":"empty","ranges":[{"subnet":"10.2.0.0/28"}]}`)
	v6 := ipam.MustParsePool(`{"name":"v6","ranges":[{"subnet":"fd00::/64"}]}`)
	cat := must(ipam.NewCatalog(big, small, empty, v6))
	mem := memstore.New()
	ps := &pagerStore{Store: mem, all: mem}
	a := must(ipam.NewAllocator(ipam.Options{Pools: cat, Store: ps}))
	for i, pools := range map[int][]string{1000: {"big"}, 100: {"small", "v6"}} {
		for k := range i {
			req := ipam.Request{ContainerID: fmt.Sprintf("%v-%d", pools, k)}
			for j, p := range pools {
				req.Interfaces = append(req.Interfaces, ipam.NIC{Name: fmt.Sprintf("eth%d", j), Pools: []string{p}})
			}
			_, err := a.Allocate(ctx, req)
			require.NoError(t, err)
		}
	}
	// A claim of a pool the PoolSource does not name is counted for none.
	cs, err := mem.List(ctx, "small")
	require.NoError(t, err)
	c := cs[0]
	c.Pool = "gone"
	_, err = mem.Create(ctx, c)
	require.NoError(t, err)

	now := time.Now()
	lists, pages := ps.lists, len(ps.pages)
	got, err := a.Usage(ctx, now)
	require.NoError(t, err)
	require.Equal(t, lists, ps.lists, "Usage listed a pool of a ClaimPager")
	require.Equal(t, 1, ps.passes, "Usage made not one pass")
	require.Greater(t, len(ps.pages)-pages, 2, "1,200 claims in pages of 500")
	for _, n := range ps.pages[pages:] {
		require.LessOrEqual(t, n, 500)
	}

	// The same figures as a List of each pool.
	plain := &listOnlyStore{Store: mem}
	b := must(ipam.NewAllocator(ipam.Options{Pools: cat, Store: plain}))
	want, err := b.Usage(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 4, plain.lists, "a Store with neither capability is listed per pool")
	require.Equal(t, want, got)
	allocated := map[string]int{}
	for _, u := range got {
		allocated[u.Pool] = u.Allocated
	}
	require.Equal(t, map[string]int{"big": 1000, "small": 100, "empty": 0, "v6": 100}, allocated)

	// PoolUsage of one pool lists it, as before.
	u, err := a.PoolUsage(ctx, "small", now)
	require.NoError(t, err)
	require.Equal(t, 100, u.Allocated)
	require.Equal(t, lists+1, ps.lists)

	// Unreadable records fail the call, as a List that reports them does.
	ps.corrupt = fmt.Errorf("record x: %w", store.ErrCorrupt)
	_, err = a.Usage(ctx, now)
	require.ErrorIs(t, err, store.ErrCorrupt)
}
