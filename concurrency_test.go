package ipam_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// concCountingStore is a store.Store that counts the Creates that found the
// address taken, so that a test can show the stale-index path ran. Cursors
// come from the embedded memstore.
type concCountingStore struct {
	*memstore.Store
	creates, exists, lists atomic.Int64
}

func (s *concCountingStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, pool)
}

// CreateExclusive counts as Create does.
func (s *concCountingStore) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	got, err := s.Store.CreateExclusive(ctx, c)
	s.creates.Add(1)
	if errors.Is(err, store.ErrExists) {
		s.exists.Add(1)
	}
	return got, err
}

func (s *concCountingStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	got, err := s.Store.Create(ctx, c)
	s.creates.Add(1)
	if errors.Is(err, store.ErrExists) {
		s.exists.Add(1)
	}
	return got, err
}

// CreateAndSetCursor counts as Create does: the embedded memstore's would
// bypass the count.
func (s *concCountingStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	got, err := s.Create(ctx, c)
	if err == nil {
		err = s.SetCursor(ctx, c.Pool, c.IP)
	}
	return got, err
}

var _ store.CursorCreator = (*concCountingStore)(nil)

func concAllocator(t testing.TB, pools ipam.PoolSource, st store.Store) *ipam.Allocator {
	t.Helper()
	a, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st})
	require.NoError(t, err)
	return a
}

func concCatalog(t testing.TB, pools ...string) *ipam.Catalog {
	t.Helper()
	var ps []*ipam.Pool
	for _, s := range pools {
		ps = append(ps, ipam.MustParsePool(s))
	}
	cat, err := ipam.NewCatalog(ps...)
	require.NoError(t, err)
	return cat
}

// concSlot is one interface's address in one pool.
type concSlot struct{ iface, pool string }

// concWorker is one goroutine of TestConcurrentAllocators. It alone acts for
// its owners, so it knows exactly what they hold.
type concWorker struct {
	id     int
	alloc  *ipam.Allocator
	st     store.Store // for checks: the same backend as every Allocator
	rng    *rand.Rand
	owners []store.Owner
	held   []map[concSlot]netip.Addr // per owner
	stats  concStats
	failed string // the first failure; the worker stops after it
}

type concStats struct {
	ops, allocated, reused, exhausted, released, releasedIP int
}

func (s *concStats) add(o concStats) {
	s.ops += o.ops
	s.allocated += o.allocated
	s.reused += o.reused
	s.exhausted += o.exhausted
	s.released += o.released
	s.releasedIP += o.releasedIP
}

var concPoolSets = [][]string{{"v4"}, {"v6"}, {"v4", "v6"}, {"v6", "v4"}}

func (w *concWorker) fail(op int, format string, args ...any) {
	if w.failed == "" {
		w.failed = fmt.Sprintf("worker %d, op %d: %s", w.id, op, fmt.Sprintf(format, args...))
	}
}

// run does n random operations, each one call to the Allocator: Allocate
// (45%), Allocate again for what the owner holds (15%), Release of one
// interface or all (25%), ReleaseIP of one of the owner's addresses (15%).
// An operation that needs holdings, for an owner that has none, allocates.
func (w *concWorker) run(ctx context.Context, n int) {
	for range n {
		if w.failed != "" {
			return
		}
		w.stats.ops++
		op := w.stats.ops
		o := w.rng.IntN(len(w.owners))
		r := w.rng.IntN(100)
		if len(w.held[o]) == 0 && (r >= 45 && r < 60 || r >= 85) {
			r = 0
		}
		switch {
		case r < 45:
			var ifaces []ipam.NIC
			for _, name := range modelIfaces[:1+w.rng.IntN(2)] {
				ifaces = append(ifaces, ipam.NIC{Name: name, Pools: concPoolSets[w.rng.IntN(len(concPoolSets))]})
			}
			w.allocate(ctx, op, o, ifaces, false)
		case r < 60:
			var ifaces []ipam.NIC
			for _, name := range modelIfaces {
				var pools []string
				for s := range w.held[o] {
					if s.iface == name {
						pools = append(pools, s.pool)
					}
				}
				if pools != nil {
					slices.Sort(pools)
					w.rng.Shuffle(len(pools), func(i, j int) { pools[i], pools[j] = pools[j], pools[i] })
					ifaces = append(ifaces, ipam.NIC{Name: name, Pools: pools})
				}
			}
			w.allocate(ctx, op, o, ifaces, true)
		case r < 85:
			iface := ""
			if w.rng.IntN(2) == 0 {
				iface = modelIfaces[w.rng.IntN(2)]
			}
			w.release(ctx, op, o, iface)
		default:
			w.releaseIP(ctx, op, o)
		}
	}
}

func (w *concWorker) allocate(ctx context.Context, op, o int, ifaces []ipam.NIC, repeat bool) {
	owner := w.owners[o]
	res, err := w.alloc.Allocate(ctx, ipam.Request{Namespace: owner.Namespace, Name: owner.Name, UID: owner.UID, Interfaces: ifaces})
	if err != nil {
		if repeat || !errors.Is(err, ipam.ErrExhausted) {
			w.fail(op, "Allocate(%s, %v) (repeat %v): unexpected error %v", owner.UID, ifaces, repeat, err)
			return
		}
		w.stats.exhausted++
		// All or nothing: what the owner held before is still its own.
		for s, ip := range w.held[o] {
			w.checkHeld(ctx, op, o, s, ip, "after a failed Allocate")
		}
		return
	}
	k := 0
	for _, ifc := range ifaces {
		for _, pool := range ifc.Pools {
			if k >= len(res.IPs) {
				w.fail(op, "Allocate(%s, %v) returned %d addresses", owner.UID, ifaces, len(res.IPs))
				return
			}
			c := res.IPs[k]
			k++
			s := concSlot{ifc.Name, pool}
			if c.Interface != s.iface || c.Pool != s.pool {
				w.fail(op, "Allocate(%s): address %d is for %s/%s, want %s/%s", owner.UID, k, c.Interface, c.Pool, s.iface, s.pool)
				return
			}
			ip := c.Address.Addr()
			prev, had := w.held[o][s]
			switch {
			case had && (!c.Reused || ip != prev):
				w.fail(op, "Allocate(%s) %s %s: got %s (reused %v), want %s reused", owner.UID, s.iface, s.pool, ip, c.Reused, prev)
				return
			case !had && c.Reused:
				w.fail(op, "Allocate(%s) %s %s: got %s marked reused, but the owner held nothing there", owner.UID, s.iface, s.pool, ip)
				return
			}
			if c.Reused {
				w.stats.reused++
			} else {
				w.stats.allocated++
			}
			w.checkHeld(ctx, op, o, s, ip, "right after Allocate returned it")
			w.held[o][s] = ip
		}
	}
	if k != len(res.IPs) {
		w.fail(op, "Allocate(%s, %v) returned %d addresses, want %d", owner.UID, ifaces, len(res.IPs), k)
	}
}

// checkHeld checks that the Store has ip in s.pool claimed by owner o for
// s.iface.
func (w *concWorker) checkHeld(ctx context.Context, op, o int, s concSlot, ip netip.Addr, when string) {
	c, err := w.st.Get(ctx, s.pool, ip)
	if err != nil {
		w.fail(op, "%s %s %s %s %s: store: %v", w.owners[o].UID, s.iface, s.pool, ip, when, err)
		return
	}
	if c.Owner.UID != w.owners[o].UID || c.Owner.Interface != s.iface {
		w.fail(op, "%s %s %s %s %s: the store says it belongs to %s", w.owners[o].UID, s.iface, s.pool, ip, when, c.Owner)
	}
}

// checkGone checks that the Store no longer has ip claimed by owner o; someone
// else may have claimed it since.
func (w *concWorker) checkGone(ctx context.Context, op, o int, s concSlot, ip netip.Addr, when string) {
	c, err := w.st.Get(ctx, s.pool, ip)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		w.fail(op, "%s %s %s %s %s: store: %v", w.owners[o].UID, s.iface, s.pool, ip, when, err)
	case c.Owner.UID == w.owners[o].UID:
		w.fail(op, "%s %s %s %s %s: still claimed by it (%s)", w.owners[o].UID, s.iface, s.pool, ip, when, c.Owner)
	}
}

func (w *concWorker) release(ctx context.Context, op, o int, iface string) {
	owner := w.owners[o]
	owner.Interface = iface
	if err := w.alloc.Release(ctx, owner); err != nil {
		w.fail(op, "Release(%s %q): %v", owner.UID, iface, err)
		return
	}
	for s, ip := range w.held[o] {
		if iface == "" || s.iface == iface {
			w.checkGone(ctx, op, o, s, ip, "after Release")
			delete(w.held[o], s)
			w.stats.released++
		}
	}
}

func (w *concWorker) releaseIP(ctx context.Context, op, o int) {
	var slots []concSlot
	for s := range w.held[o] {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b concSlot) int {
		return cmp.Or(strings.Compare(a.iface, b.iface), strings.Compare(a.pool, b.pool))
	})
	s := slots[w.rng.IntN(len(slots))]
	ip := w.held[o][s]
	if err := w.alloc.ReleaseIP(ctx, s.pool, ip); err != nil {
		w.fail(op, "ReleaseIP(%s, %s) held by %s: %v", s.pool, ip, w.owners[o].UID, err)
		return
	}
	w.checkGone(ctx, op, o, s, ip, "after ReleaseIP")
	delete(w.held[o], s)
	w.stats.releasedIP++
}

// TestConcurrentAllocators runs 100,000 random Allocate, repeated Allocate,
// Release and ReleaseIP calls from 8 goroutines: 6 share one Allocator, 2 share
// a second Allocator on a second memstore opened on the same backend, all
// racing for the same two pools of about 1,000 addresses each, with more
// owners than addresses so that the pools run out. Each goroutine acts for its
// own owners and checks every call against the Store at once; every 10,000
// calls all goroutines pause and the Store's claims are checked whole: no
// address twice, no owner with two addresses for one interface in one pool,
// exactly what the goroutines believe their owners hold, and what each
// Allocator's Lookup reports.
func TestConcurrentAllocators(t *testing.T) {
	const (
		goroutines = 8
		onFirst    = 6 // goroutines on the first Allocator
		totalOps   = 100_000
		pauses     = 10
		ownersPer  = 112 // 8*112 owners, 2 interfaces: 1,792 slots per pool of about 1,000
	)
	cat := concCatalog(t,
		`{"name":"v4","ranges":[{"subnet":"10.1.0.0/23"},{"subnet":"10.1.2.0/23","rangeStart":"10.1.2.10"}]}`,
		`{"name":"v6","ranges":[{"subnet":"fd10::/118"}],"excludeIPs":["fd10::100-fd10::13f"],"strategy":"lowest-free"}`,
	)
	stA := memstore.New()
	stB := stA.Open()
	// An Allocator that finds a pool full lists it, while the others write
	// to it, before it says so.
	allocs := []*ipam.Allocator{
		concAllocator(t, cat, stA),
		concAllocator(t, cat, stB),
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d (operations only; the interleaving is the scheduler's)", seed)

	workers := make([]*concWorker, goroutines)
	byUID := map[string]*concWorker{}
	for g := range workers {
		w := &concWorker{id: g, alloc: allocs[0], st: stA, rng: rand.New(rand.NewPCG(seed, uint64(g)))}
		if g >= onFirst {
			w.alloc, w.st = allocs[1], stB
		}
		for o := range ownersPer {
			owner := store.Owner{Namespace: "ns", Name: fmt.Sprintf("pod-%d-%d", g, o), UID: fmt.Sprintf("uid-%d-%d", g, o)}
			w.owners = append(w.owners, owner)
			w.held = append(w.held, map[concSlot]netip.Addr{})
			byUID[owner.UID] = w
		}
		workers[g] = w
	}

	ctx := context.Background()
	start := time.Now()
	per := totalOps / pauses / goroutines
	for phase := range pauses {
		var wg sync.WaitGroup
		for _, w := range workers {
			wg.Go(func() { w.run(ctx, per) })
		}
		wg.Wait()
		for _, w := range workers {
			if w.failed != "" {
				t.Errorf("seed %d, phase %d: %s", seed, phase, w.failed)
			}
		}
		if t.Failed() {
			return
		}
		checkConcurrentState(t, ctx, stA, workers, byUID, []string{"v4", "v6"})
		if t.Failed() {
			t.Fatalf("seed %d: state check after phase %d (%d operations) failed", seed, phase, (phase+1)*per*goroutines)
		}
	}
	var st concStats
	for _, w := range workers {
		st.add(w.stats)
	}
	t.Logf("%d operations in %v: %d addresses allocated, %d reused, %d allocations exhausted, %d released by owner, %d by address",
		st.ops, time.Since(start).Round(time.Millisecond), st.allocated, st.reused, st.exhausted, st.released, st.releasedIP)
	require.Equal(t, totalOps, st.ops)
	require.Positive(t, st.exhausted, "the pools never ran out: the test lost its pressure")
}

// checkConcurrentState checks the Store's claims against what the workers
// believe their owners hold and against each Allocator's Lookup.
func checkConcurrentState(t *testing.T, ctx context.Context, st store.Store, workers []*concWorker,
	byUID map[string]*concWorker, pools []string) {
	t.Helper()
	type ownerSlot struct {
		uid string
		s   concSlot
	}
	inStore := map[ownerSlot]netip.Addr{}
	byOwner := map[string][]string{}
	for _, pool := range pools {
		cs, err := st.List(ctx, pool)
		require.NoError(t, err)
		seen := map[netip.Addr]store.Claim{}
		for _, c := range cs {
			if prev, dup := seen[c.IP]; dup {
				t.Errorf("pool %s: %s claimed twice: by %s and by %s", pool, c.IP, prev.Owner, c.Owner)
			}
			seen[c.IP] = c
			if byUID[c.Owner.UID] == nil {
				t.Errorf("pool %s: %s claimed by unknown owner %s", pool, c.IP, c.Owner)
				continue
			}
			k := ownerSlot{c.Owner.UID, concSlot{c.Owner.Interface, pool}}
			if prev, dup := inStore[k]; dup {
				t.Errorf("owner %s holds two addresses in pool %s for %s: %s and %s", c.Owner.UID, pool, c.Owner.Interface, prev, c.IP)
			}
			inStore[k] = c.IP
			byOwner[c.Owner.UID] = append(byOwner[c.Owner.UID], fmt.Sprintf("%s %s %s", pool, c.IP, c.Owner.Interface))
		}
	}
	believed := 0
	for _, w := range workers {
		for o, held := range w.held {
			uid := w.owners[o].UID
			for s, ip := range held {
				believed++
				if got, ok := inStore[ownerSlot{uid, s}]; !ok || got != ip {
					t.Errorf("owner %s (worker %d) holds %s in %s for %s, but the store has %v", uid, w.id, ip, s.pool, s.iface, got)
				}
			}
			// The Allocator that serves the owner agrees with the Store.
			cs, err := w.alloc.Lookup(ctx, w.owners[o])
			require.NoError(t, err)
			var got []string
			for _, c := range cs {
				got = append(got, fmt.Sprintf("%s %s %s", c.Pool, c.IP, c.Owner.Interface))
			}
			want := byOwner[uid]
			slices.Sort(want)
			slices.Sort(got)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("Lookup(%s) on its Allocator (-store +lookup):\n%s", uid, diff)
			}
		}
	}
	if believed != len(inStore) {
		t.Errorf("the store has %d claims, the owners hold %d", len(inStore), believed)
	}
}

// TestConcurrentStaleIndex walks the stale-index paths one call at a time:
// Allocators whose index predates the others' claims start from the Store's
// cursor, skip the addresses the Store refuses with ErrExists, list the pool
// once probing keeps failing, report exhaustion only when the Store is full,
// and see releases made elsewhere.
func TestConcurrentStaleIndex(t *testing.T) {
	ctx := context.Background()
	cat := concCatalog(t, `{"name":"tight","ranges":[{"subnet":"10.2.0.0/27"}]}`) // .2 to .30: 29 addresses
	base := memstore.New()
	stA := &concCountingStore{Store: base}
	stB := &concCountingStore{Store: base.Open()}
	stC := &concCountingStore{Store: base.Open()}
	a, b, c := concAllocator(t, cat, stA), concAllocator(t, cat, stB), concAllocator(t, cat, stC)

	req := func(uid string) ipam.Request {
		return ipam.Request{UID: uid, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"tight"}}}}
	}
	alloc := func(al *ipam.Allocator, uid string) (netip.Addr, error) {
		res, err := al.Allocate(ctx, req(uid))
		if err != nil {
			return netip.Addr{}, err
		}
		require.Len(t, res.IPs, 1)
		return res.IPs[0].Address.Addr(), nil
	}
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, 0, byte(i)}) }
	want := func(al *ipam.Allocator, uid string, i int) {
		t.Helper()
		ip, err := alloc(al, uid)
		require.NoError(t, err, uid)
		require.Equal(t, addr(i), ip, uid)
	}

	// B takes .2; C, new, starts after the Store's cursor and takes .3; A,
	// new, takes .4 to .27. Nobody lists the pool for that.
	want(b, "b-0", 2)
	want(c, "c-0", 3)
	for i := 4; i <= 27; i++ {
		want(a, fmt.Sprintf("a-%d", i), i)
	}
	for _, st := range []*concCountingStore{stA, stB, stC} {
		require.Zero(t, st.exists.Load())
		require.Zero(t, st.lists.Load())
	}

	// B still believes .3 onwards free: its Creates fail, and after a few
	// it lists the pool once and takes the first free address.
	want(b, "b-1", 28)
	require.EqualValues(t, 8, stB.exists.Load(), "ErrExists from the Store before B lists the pool")
	require.EqualValues(t, 1, stB.lists.Load())

	// A does not know .28 is taken now: its Create fails and it moves on.
	want(a, "a-29", 29)
	require.EqualValues(t, 1, stA.exists.Load())
	want(b, "b-2", 30)

	// Full. Every Allocator says so, whatever its index believed, and only
	// after the Store agreed.
	for name, al := range map[string]*ipam.Allocator{"A": a, "B": b, "C": c} {
		_, err := alloc(al, "late-"+name)
		require.ErrorIs(t, err, ipam.ErrExhausted, "allocator %s", name)
	}
	for name, st := range map[string]*concCountingStore{"A": stA, "B": stB, "C": stC} {
		require.NotZero(t, st.lists.Load(), "allocator %s reported exhaustion without listing the pool", name)
	}
	cs, err := base.List(ctx, "tight")
	require.NoError(t, err)
	require.Len(t, cs, 29)
	for _, cl := range cs {
		require.NotContains(t, cl.Owner.UID, "late-", "a failed Allocate left a claim")
	}

	// A releases .5: B, whose index says full, asks the Store and finds it;
	// then C finds the pool full again.
	require.NoError(t, a.Release(ctx, store.Owner{UID: "a-5"}))
	want(b, "b-3", 5)
	_, err = alloc(c, "c-1")
	require.ErrorIs(t, err, ipam.ErrExhausted)

	// Every claim in the Store is the one its owner was given.
	cs, err = base.List(ctx, "tight")
	require.NoError(t, err)
	require.Len(t, cs, 29)
	owners := map[netip.Addr]string{}
	for _, cl := range cs {
		owners[cl.IP] = cl.Owner.UID
	}
	require.Equal(t, "c-0", owners[addr(3)])
	require.Equal(t, "b-1", owners[addr(28)])
	require.Equal(t, "a-29", owners[addr(29)])
	require.Equal(t, "b-2", owners[addr(30)])
	require.Equal(t, "b-3", owners[addr(5)])
}

// TestConcurrentNearlyFullPool races two Allocators on one memstore backend,
// each from two goroutines, for the last few addresses of a pool, round after
// round: exactly as many allocations succeed as there were free addresses, no
// address is handed out twice, the losers get ErrExhausted, and each winner's
// Allocator reports its claim.
func TestConcurrentNearlyFullPool(t *testing.T) {
	ctx := context.Background()
	cat := concCatalog(t, `{"name":"near","ranges":[{"subnet":"10.3.0.0/26"}]}`) // .2 to .62: 61 addresses
	const total = 61
	base := memstore.New()
	sts := []*concCountingStore{{Store: base}, {Store: base.Open()}}
	allocs := []*ipam.Allocator{
		concAllocator(t, cat, sts[0]),
		concAllocator(t, cat, sts[1]),
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	type fill struct {
		uid   string
		alloc int
	}
	var fills []fill
	nextFill := 0
	duplicates, races := 0, 0
	for round := range 60 {
		cs, err := base.List(ctx, "near")
		require.NoError(t, err)
		free := total - len(cs) // at least the last round's winners
		want := min(1+rng.IntN(6), free)
		for free > want {
			// Fill from both Allocators, so that each one's index is stale.
			f := fill{fmt.Sprintf("fill-%d", nextFill), rng.IntN(2)}
			nextFill++
			_, err := allocs[f.alloc].Allocate(ctx, ipam.Request{UID: f.uid, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"near"}}}})
			require.NoError(t, err, "round %d: filling with %d free", round, free)
			fills = append(fills, f)
			free--
		}
		cs, err = base.List(ctx, "near")
		require.NoError(t, err)
		require.Len(t, cs, total-want)
		taken := map[netip.Addr]bool{}
		for _, c := range cs {
			taken[c.IP] = true
		}

		type outcome struct {
			uid   string
			alloc int
			ip    netip.Addr
			err   error
		}
		results := make(chan outcome, 16)
		var wg sync.WaitGroup
		startRace := make(chan struct{})
		for g := range 4 {
			wg.Go(func() {
				<-startRace
				for j := range 4 {
					uid := fmt.Sprintf("race-%d-%d-%d", round, g, j)
					res, err := allocs[g%2].Allocate(ctx, ipam.Request{UID: uid, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"near"}}}})
					o := outcome{uid: uid, alloc: g % 2, err: err}
					if err == nil {
						o.ip = res.IPs[0].Address.Addr()
					}
					results <- o
				}
			})
		}
		close(startRace)
		wg.Wait()
		close(results)
		races++

		var won []outcome
		got := map[netip.Addr]string{}
		for o := range results {
			if o.err != nil {
				require.ErrorIs(t, o.err, ipam.ErrExhausted, "round %d: %s", round, o.uid)
				continue
			}
			if prev, dup := got[o.ip]; dup {
				duplicates++
				t.Errorf("round %d: %s handed to both %s and %s", round, o.ip, prev, o.uid)
			}
			got[o.ip] = o.uid
			require.False(t, taken[o.ip], "round %d: %s got %s, which was already claimed", round, o.uid, o.ip)
			won = append(won, o)
		}
		require.Len(t, won, want, "round %d: %d addresses were free, %d allocations succeeded", round, want, len(won))

		cs, err = base.List(ctx, "near")
		require.NoError(t, err)
		require.Len(t, cs, total, "round %d", round)
		for _, c := range cs {
			if uid, ok := got[c.IP]; ok {
				require.Equal(t, uid, c.Owner.UID, "round %d: the store's owner of %s", round, c.IP)
			}
		}
		for _, o := range won {
			cs, err := allocs[o.alloc].Lookup(ctx, store.Owner{UID: o.uid})
			require.NoError(t, err)
			require.Len(t, cs, 1, "round %d: Lookup(%s) on the Allocator that served it", round, o.uid)
			require.Equal(t, o.ip, cs[0].IP)
		}

		// Give back the winners and a few fills, each through its Allocator.
		for _, o := range won {
			require.NoError(t, allocs[o.alloc].Release(ctx, store.Owner{UID: o.uid}))
		}
		for range rng.IntN(8) {
			i := rng.IntN(len(fills))
			f := fills[i]
			fills = slices.Delete(fills, i, i+1)
			require.NoError(t, allocs[f.alloc].Release(ctx, store.Owner{UID: f.uid}))
		}
	}
	t.Logf("%d races, %d duplicates; Creates refused with ErrExists: %d of %d and %d of %d",
		races, duplicates, sts[0].exists.Load(), sts[0].creates.Load(), sts[1].exists.Load(), sts[1].creates.Load())
	require.Zero(t, duplicates)
	require.Positive(t, sts[0].exists.Load()+sts[1].exists.Load(), "no Create ever found its address taken: the stale-index path did not run")
}

// TestConcurrentRequestedIP races two Allocators on one memstore backend for
// the same requested address, many times: exactly one wins, the other gets
// ErrUnavailable, and the Store records the winner.
func TestConcurrentRequestedIP(t *testing.T) {
	ctx := context.Background()
	cat := concCatalog(t, `{"name":"req","ranges":[{"subnet":"10.4.0.0/24"}]}`)
	base := memstore.New()
	allocs := []*ipam.Allocator{
		concAllocator(t, cat, base),
		concAllocator(t, cat, base.Open()),
	}
	for i := range 200 {
		ip := netip.AddrFrom4([4]byte{10, 4, 0, byte(2 + i)}) // a new address each time: neither index knows it
		errs := make([]error, 2)
		var wg sync.WaitGroup
		startRace := make(chan struct{})
		for k := range allocs {
			wg.Go(func() {
				<-startRace
				_, errs[k] = allocs[k].Allocate(ctx, ipam.Request{UID: fmt.Sprintf("%d-%d", k, i),
					Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"req"}, IPs: []netip.Addr{ip}}}})
			})
		}
		close(startRace)
		wg.Wait()
		winners := 0
		for k, err := range errs {
			if err == nil {
				winners++
				c, gerr := base.Get(ctx, "req", ip)
				require.NoError(t, gerr)
				require.Equal(t, fmt.Sprintf("%d-%d", k, i), c.Owner.UID)
			} else {
				require.ErrorIs(t, err, ipam.ErrUnavailable, "race %d, allocator %d", i, k)
			}
		}
		require.Equal(t, 1, winners, "race %d for %s", i, ip)
	}
}

// concHookStore is a memstore that runs a hook, once, after a List has read its
// snapshot or a Delete has deleted, and before it returns: the moment another
// caller can act between an Allocator's call to the Store and its update of
// its own index.
type concHookStore struct {
	*memstore.Store
	onList, onDelete atomic.Pointer[func()]
}

func (s *concHookStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	cs, err := s.Store.List(ctx, pool)
	if f := s.onList.Swap(nil); f != nil {
		(*f)()
	}
	return cs, err
}

func (s *concHookStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	err := s.Store.Delete(ctx, pool, ip, rev)
	if f := s.onDelete.Swap(nil); f != nil {
		(*f)()
	}
	return err
}

// setHook sets the hook run after the next List.
func (s *concHookStore) setHook(f func()) { s.onList.Store(&f) }

// setDeleteHook sets the hook run after the next Delete.
func (s *concHookStore) setDeleteHook(f func()) { s.onDelete.Store(&f) }

// threeAddrAllocators returns a memstore, the same store behind a hook, an
// Allocator on the hooked store and a second Allocator on the plain one, both
// serving threeAddrPool and reloading whenever a pool looks full.
func threeAddrAllocators(t *testing.T) (*memstore.Store, *concHookStore, *ipam.Allocator, *ipam.Allocator) {
	t.Helper()
	cat := concCatalog(t, threeAddrPool)
	base := memstore.New()
	hs := &concHookStore{Store: base}
	return base, hs, concAllocator(t, cat, hs), concAllocator(t, cat, base.Open())
}

// threeAddrPool has .2, .3 and .4.
const threeAddrPool = `{"name":"three","ranges":[{"subnet":"10.5.0.0/29","rangeEnd":"10.5.0.4"}]}`

func threeAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 5, 0, byte(i)}) }

func concAllocOne(ctx context.Context, a *ipam.Allocator, uid string) (ipam.IPConfig, error) {
	res, err := a.Allocate(ctx, ipam.Request{UID: uid, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"three"}}}})
	if err != nil {
		return ipam.IPConfig{}, err
	}
	return res.IPs[0], nil
}

// concStartAndWait runs f in a new goroutine, from inside a Store hook, and
// waits for it a short while. An Allocator that serializes f behind the call in
// progress (a lock held across the Store call) blocks it, which is a correct
// outcome too: the hook then returns, and the caller waits for f to finish
// with the returned function.
func concStartAndWait(f func()) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
	}
	return func() { <-done }
}

// concCheckServed checks that uid, served c by a, holds exactly that in the
// Store and in a's Lookup.
func concCheckServed(t *testing.T, ctx context.Context, a *ipam.Allocator, st store.Store, uid string, c ipam.IPConfig) {
	t.Helper()
	sc, err := st.Get(ctx, "three", c.Address.Addr())
	if assert.NoError(t, err, "%s was given %s (reused %v), which is not claimed in the store", uid, c.Address, c.Reused) {
		assert.Equal(t, uid, sc.Owner.UID, "the store's owner of %s, given to %s", c.Address, uid)
	}
	cs, err := a.Lookup(ctx, store.Owner{UID: uid})
	require.NoError(t, err)
	if assert.Len(t, cs, 1, "Lookup(%s) on the Allocator that served it %s", uid, c.Address) {
		assert.Equal(t, c.Address.Addr(), cs[0].IP)
	}
}

// TestConcurrentReleaseDuringReload releases an address through an Allocator
// while that Allocator reloads the pool (it looked exhausted to another call),
// from inside the reload's List. Whatever the interleaving, the released owner
// must hold nothing afterwards, in the Store or in the Allocator's view: a
// reload that applies a snapshot taken before the release puts the claim back
// into the index, and the owner is then given it back as "reused" without a
// claim in the Store, where another Allocator can hand it to someone else.
func TestConcurrentReleaseDuringReload(t *testing.T) {
	ctx := context.Background()
	base, hs, a, b := threeAddrAllocators(t)
	for i, uid := range []string{"o1", "o2", "o3"} {
		c, err := concAllocOne(ctx, a, uid)
		require.NoError(t, err)
		require.Equal(t, threeAddr(2+i), c.Address.Addr())
	}

	// o4 finds the pool full and reloads it; during the reload's List, another
	// goroutine releases o1.
	var wait func()
	var relErr error
	hs.setHook(func() {
		wait = concStartAndWait(func() { relErr = a.Release(ctx, store.Owner{UID: "o1"}) })
	})
	c4, err4 := concAllocOne(ctx, a, "o4")
	require.NotNil(t, wait, "precondition: Allocate(o4) in a full pool reloaded it from the store")
	wait()
	require.NoError(t, relErr)
	if err4 != nil {
		require.ErrorIs(t, err4, ipam.ErrExhausted)
	} else {
		concCheckServed(t, ctx, a, base, "o4", c4)
	}
	all, err := base.List(ctx, "three")
	require.NoError(t, err)
	for _, c := range all {
		require.NotEqual(t, "o1", c.Owner.UID, "o1's claim is still in the store after Release")
	}

	// The checks below go on after a failure, to show every consequence.
	cs, err := a.Lookup(ctx, store.Owner{UID: "o1"})
	require.NoError(t, err)
	assert.Empty(t, cs, "Lookup(o1) after o1 was released: the reload put the released claim back into the Allocator's index")

	// o1 asks again: it holds nothing, so it gets a claimed address or, if o4
	// took the free one, ErrExhausted.
	c, err := concAllocOne(ctx, a, "o1")
	if err != nil {
		require.ErrorIs(t, err, ipam.ErrExhausted)
		return
	}
	concCheckServed(t, ctx, a, base, "o1", c)
	// Another Allocator must not be able to hand out what o1 was given.
	c5, err := concAllocOne(ctx, b, "o5")
	if err == nil {
		assert.NotEqual(t, c.Address.Addr().String(), c5.Address.Addr().String(), "o1 and o5 were both given the same address")
	}
}

// TestConcurrentAllocateDuringReload serves two owners through one Allocator
// at once, one of them from inside the other's reload (the pool looked
// exhausted: another Allocator released its only free address). Whatever the
// interleaving, exactly one of them gets the address, and the Allocator that
// served it knows it: Lookup reports it and Release releases it. A reload that
// applies a snapshot taken before the other's claim drops that claim from the
// index, and Release then leaks it in the Store.
func TestConcurrentAllocateDuringReload(t *testing.T) {
	ctx := context.Background()
	base, hs, a, b := threeAddrAllocators(t)
	for _, uid := range []string{"o1", "o2", "o3"} {
		_, err := concAllocOne(ctx, a, uid)
		require.NoError(t, err)
	}
	// b releases o1's .2; a's index still believes .2 used.
	require.NoError(t, b.Release(ctx, store.Owner{UID: "o1"}))
	_, err := base.Get(ctx, "three", threeAddr(2))
	require.ErrorIs(t, err, store.ErrNotFound)

	// o4 finds the pool full and reloads it; during the reload's List, another
	// goroutine asks the same Allocator for o5.
	var wait func()
	var c5 ipam.IPConfig
	var err5 error
	hs.setHook(func() {
		wait = concStartAndWait(func() { c5, err5 = concAllocOne(ctx, a, "o5") })
	})
	c4, err4 := concAllocOne(ctx, a, "o4")
	require.NotNil(t, wait, "precondition: Allocate(o4) in a full pool reloaded it from the store")
	wait()

	served := map[string]ipam.IPConfig{}
	for uid, r := range map[string]struct {
		c   ipam.IPConfig
		err error
	}{"o4": {c4, err4}, "o5": {c5, err5}} {
		if r.err != nil {
			require.ErrorIs(t, r.err, ipam.ErrExhausted, uid)
		} else {
			served[uid] = r.c
		}
	}
	require.Len(t, served, 1, "one address was free: exactly one of o4 and o5 gets it")
	for uid, c := range served {
		require.Equal(t, threeAddr(2), c.Address.Addr(), uid)
		// The checks below go on after a failure, to show every consequence.
		concCheckServed(t, ctx, a, base, uid, c)
		require.NoError(t, a.Release(ctx, store.Owner{UID: uid}))
		_, err = base.Get(ctx, "three", threeAddr(2))
		assert.ErrorIs(t, err, store.ErrNotFound, "Release(%s) returned nil but its claim on .2 is still in the store", uid)
	}
}

// TestConcurrentAllocateDuringRelease serves an owner, through an Allocator,
// from inside the Delete of the same Allocator's release of another owner, so
// that it may get the address being released. The release must not erase the
// new claim from the index; if it does, Lookup misses the new claim, a later
// reload records it twice, a ReleaseIP removes only one record, and the owner
// is given back an address no longer claimed in the Store.
func TestConcurrentAllocateDuringRelease(t *testing.T) {
	ctx := context.Background()
	base, hs, a, b := threeAddrAllocators(t)
	for _, uid := range []string{"o1", "o2", "o3"} {
		_, err := concAllocOne(ctx, a, uid)
		require.NoError(t, err)
	}

	// Releasing o1's .2: right after the Delete, another goroutine asks the
	// same Allocator for o5; it finds the pool full, reloads, and gets .2.
	var wait func()
	var c5 ipam.IPConfig
	var err5 error
	hs.setDeleteHook(func() {
		wait = concStartAndWait(func() { c5, err5 = concAllocOne(ctx, a, "o5") })
	})
	require.NoError(t, a.Release(ctx, store.Owner{UID: "o1"}))
	require.NotNil(t, wait, "precondition: Release(o1) deleted through the store")
	wait()
	require.NoError(t, err5, "o5 asked after .2 was deleted")
	require.Equal(t, threeAddr(2), c5.Address.Addr())

	// The checks below go on after a failure, to show every consequence.
	concCheckServed(t, ctx, a, base, "o5", c5)

	// The pool is full: o6 fails (and its reload re-reads o5's claim).
	_, err := concAllocOne(ctx, a, "o6")
	require.ErrorIs(t, err, ipam.ErrExhausted)
	// An operator frees .2.
	require.NoError(t, a.ReleaseIP(ctx, "three", threeAddr(2)))
	_, err = base.Get(ctx, "three", threeAddr(2))
	require.ErrorIs(t, err, store.ErrNotFound)

	// o5 asks again: it holds nothing now, so whatever it gets must be claimed.
	c, err := concAllocOne(ctx, a, "o5")
	require.NoError(t, err, "o5 asks again with .2 free")
	concCheckServed(t, ctx, a, base, "o5", c)
	c7, err := concAllocOne(ctx, b, "o7")
	if err == nil {
		assert.NotEqual(t, c.Address.Addr().String(), c7.Address.Addr().String(), "o5 and o7 were both given the same address")
	}
}
