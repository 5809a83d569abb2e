package memstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// benchSizes are the numbers of claims a pool holds while the sized benchmarks
// time an operation on it: one that fits any cache, one that fits a large L2,
// and one that fits no cache.
var benchSizes = []int{256, 1 << 16, 1 << 20}

// benchBatch is how many operations a sized benchmark times before it stops the
// timer to put the pool back at its size.
const benchBatch = 64

// window is a pool holding claims of consecutive addresses, as an allocator going
// round-robin through a range leaves it: the oldest claims are released and the
// addresses after the newest claimed.
type window struct {
	s            *memstore.Store
	c            store.Claim
	revs         []int64 // the revision of claim seq is at revs[seq%len(revs)]
	oldest, next uint64  // the claims held are those of seq in [oldest, next)
}

// windowAddr returns the address of the claim numbered seq: 10.0.0.0 plus seq,
// wrapping within 10.0.0.0/9.
func windowAddr(seq uint64) netip.Addr {
	n := seq % (1 << 23)
	return netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
}

// newWindow returns a pool holding n claims, with room for n+benchBatch.
func newWindow(b *testing.B, n int) *window {
	w := &window{s: memstore.New(), c: testClaim(netip.Addr{}), revs: make([]int64, n+benchBatch)}
	for range n {
		w.create(b)
	}
	return w
}

// create claims the address after the newest claim.
func (w *window) create(b testing.TB) {
	w.c.IP = windowAddr(w.next)
	got, err := w.s.Create(context.Background(), w.c)
	if err != nil {
		b.Fatal(err)
	}
	w.revs[w.next%uint64(len(w.revs))] = got.Revision
	w.next++
}

// release deletes the oldest claim.
func (w *window) release(b testing.TB) {
	err := w.s.Delete(context.Background(), w.c.Pool, windowAddr(w.oldest), w.revs[w.oldest%uint64(len(w.revs))])
	if err != nil {
		b.Fatal(err)
	}
	w.oldest++
}

// get reads the i-th claim held, counting from the oldest and wrapping.
func (w *window) get(b *testing.B, i uint64) {
	seq := w.oldest + i%(w.next-w.oldest)
	c, err := w.s.Get(context.Background(), w.c.Pool, windowAddr(seq))
	if err != nil || c.Revision != w.revs[seq%uint64(len(w.revs))] {
		b.Fatalf("Get: %+v, %v", c, err)
	}
}

// sized runs f as a sub-benchmark for each of benchSizes.
func sized(b *testing.B, f func(b *testing.B, n int)) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprint("claims=", n), func(b *testing.B) { f(b, n) })
	}
}

// BenchmarkCreateSequential measures Create of the address after the newest
// claim in a pool of n claims of consecutive addresses: an allocator's
// round-robin. Every benchBatch Creates, the oldest claims are released with the
// timer stopped, so the pool holds between n and n+benchBatch claims.
func BenchmarkCreateSequential(b *testing.B) {
	sized(b, func(b *testing.B, n int) {
		w := newWindow(b, n)
		batched(b, w.create, w.release)
	})
}

// batched times op, running undo as often with the timer stopped after every
// benchBatch ops.
func batched(b *testing.B, op, undo func(testing.TB)) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == benchBatch {
			b.StopTimer()
			for range benchBatch {
				undo(b)
			}
			i = 0
			b.StartTimer()
		}
		op(b)
		i++
	}
}

// BenchmarkDeleteSequential measures Delete of the oldest claim in a pool of n
// claims of consecutive addresses. Every benchBatch Deletes, as many addresses
// after the newest claim are claimed with the timer stopped, so the pool holds
// between n and n+benchBatch claims.
func BenchmarkDeleteSequential(b *testing.B) {
	sized(b, func(b *testing.B, n int) {
		w := newWindow(b, n+benchBatch)
		batched(b, w.release, w.create)
	})
}

// BenchmarkGetSequential measures Get of each of n claims of consecutive
// addresses in turn.
func BenchmarkGetSequential(b *testing.B) {
	sized(b, func(b *testing.B, n int) {
		w := newWindow(b, n)
		b.ReportAllocs()
		var i uint64
		for b.Loop() {
			w.get(b, i)
			i++
		}
	})
}

// BenchmarkGetScattered measures Get of each of n claims of consecutive
// addresses in an order that jumps about the pool, for comparison with
// BenchmarkGetSequential: no order helps then.
func BenchmarkGetScattered(b *testing.B) {
	sized(b, func(b *testing.B, n int) {
		w := newWindow(b, n)
		b.ReportAllocs()
		var i uint64
		for b.Loop() {
			w.get(b, i*0x9e3779b97f4a7c15) // odd: a permutation of the claims, as n is a power of 2
			i++
		}
	})
}

// BenchmarkChurnSequential measures an allocator's steady state in a pool of n
// claims of consecutive addresses: claim the address after the newest, release
// the oldest. Both are timed, and the pool always holds n or n+1 claims.
func BenchmarkChurnSequential(b *testing.B) {
	sized(b, func(b *testing.B, n int) {
		w := newWindow(b, n)
		b.ReportAllocs()
		for b.Loop() {
			w.create(b)
			w.release(b)
		}
	})
}

// BenchmarkCreate measures Create of a free address into a pool of up to 1<<16
// claims that has held as many before: the pool is filled and emptied before the
// timer starts, and emptied again, with the timer stopped, whenever it is full.
// That is the steady state of an allocator churning its addresses. Any B/op
// left are the rehashes Go maps do now and then as deletes leave tombstones,
// amortised; allocs/op is 0.
func BenchmarkCreate(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	claims := make([]store.Claim, 1<<16)
	for i, ip := range addrs(len(claims)) {
		claims[i] = testClaim(ip)
	}
	held := make([]store.Claim, len(claims))
	fill := func() {
		for i, c := range claims {
			var err error
			if held[i], err = s.Create(ctx, c); err != nil {
				b.Fatal(err)
			}
		}
	}
	drain := func() {
		for _, c := range held {
			if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
				b.Fatal(err)
			}
		}
	}
	// A map refilled after deletes may grow once more, to make room past its
	// tombstones.
	for range 2 {
		fill()
		drain()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i == len(claims) {
			b.StopTimer()
			drain()
			i = 0
			b.StartTimer()
		}
		var err error
		if held[i], err = s.Create(ctx, claims[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkCreateDelete measures the allocator's cycle on one address: claim it,
// release it.
func BenchmarkCreateDelete(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	c := testClaim(netip.MustParseAddr("10.0.0.1"))
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.Create(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateParallel measures Create under contention: goroutines claim
// addresses from one pool, each releasing its own again.
func BenchmarkCreateParallel(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	claims := make([]store.Claim, 1<<12)
	for i, ip := range addrs(len(claims)) {
		claims[i] = testClaim(ip)
	}
	var next atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		c := claims[int(next.Add(1)-1)%len(claims)]
		for pb.Next() {
			got, err := s.Create(ctx, c)
			if err != nil {
				b.Error(err)
				return
			}
			if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCreateExclusiveFull measures CreateExclusive, as an Allocator
// makes it, into a pool of a million addresses (an IPv4 /12) of which 99 %
// are claimed at random, each by an owner of its own: every new claim goes
// to the next free address after the last, in a block no recent claim has
// touched, for an owner not in the index. That is the memory-bound case of
// the root package's BenchmarkAllocate (v4-12 at 99 %), without the
// Allocator. Every benchBatch creates, their claims are deleted with the
// timer stopped.
func BenchmarkCreateExclusiveFull(b *testing.B) {
	ctx := context.Background()
	s := memstore.New()
	const size = 1 << 20
	rng := rand.New(rand.NewPCG(1, 2))
	free := make([]netip.Addr, 0, size/100+1)
	base := netip.MustParseAddr("10.0.0.0").As4()
	start := time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC)
	for i := range size {
		a := base
		a[1], a[2], a[3] = byte(i>>16), byte(i>>8), byte(i)
		ip := netip.AddrFrom4(a)
		if rng.IntN(100) == 0 {
			free = append(free, ip)
			continue
		}
		c := store.Claim{Pool: "big", IP: ip, Time: start,
			Owner: store.Owner{ContainerID: "fill-" + ip.String(), Interface: "eth0"}}
		if _, err := s.CreateExclusive(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	owners := make([]store.Owner, benchBatch)
	for i := range owners {
		owners[i] = store.Owner{ContainerID: fmt.Sprint("bench-", i), Interface: "eth0"}
	}
	held := make([]store.Claim, 0, benchBatch)
	runtime.GC()
	b.ReportAllocs()
	next := 0
	for b.Loop() {
		if len(held) == benchBatch {
			b.StopTimer()
			for _, c := range held {
				if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
					b.Fatal(err)
				}
			}
			held = held[:0]
			b.StartTimer()
		}
		c := store.Claim{Pool: "big", IP: free[next], Owner: owners[len(held)], Time: start}
		got, err := s.CreateExclusive(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, got)
		if next++; next == len(free) {
			next = 0
		}
	}
}
