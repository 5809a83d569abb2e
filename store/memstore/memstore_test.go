package memstore_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/store/storetest"
)

// TestConformance runs the storetest suite, racing Stores opened on one backend.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		s := memstore.New()
		return func() store.Store { return s.Open() }
	})
}

// TestSeparateBackends checks that two New stores share nothing, while Open does.
func TestSeparateBackends(t *testing.T) {
	ctx := t.Context()
	a, b := memstore.New(), memstore.New()
	c := testClaim(netip.MustParseAddr("10.0.0.1"))
	if _, err := a.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, c.Pool, c.IP); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get through a second New store: %v, want store.ErrNotFound", err)
	}
	if _, err := b.Create(ctx, c); err != nil {
		t.Fatalf("Create through a second New store: %v", err)
	}
	if _, err := a.Open().Get(ctx, c.Pool, c.IP); err != nil {
		t.Fatalf("Get through an Open of the first store: %v", err)
	}
}

// TestErrors checks what storetest leaves open: that memstore's errors wrap the
// context's error and name the pool and address.
func TestErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := memstore.New()
	ip := netip.MustParseAddr("10.0.0.1")
	c := testClaim(ip)

	_, err := s.Create(ctx, c)
	wantErr(t, err, context.Canceled, "memstore: create blue/10.0.0.1: context canceled")
	_, err = s.Get(ctx, "blue", ip)
	wantErr(t, err, context.Canceled, "memstore: get blue/10.0.0.1: context canceled")
	_, err = s.List(ctx, "blue")
	wantErr(t, err, context.Canceled, "memstore: list blue: context canceled")
	_, err = s.Update(ctx, c, 1)
	wantErr(t, err, context.Canceled, "memstore: update blue/10.0.0.1: context canceled")
	err = s.Delete(ctx, "blue", ip, 1)
	wantErr(t, err, context.Canceled, "memstore: delete blue/10.0.0.1: context canceled")
	_, err = s.Cursor(ctx, "blue")
	wantErr(t, err, context.Canceled, "memstore: cursor blue: context canceled")
	err = s.SetCursor(ctx, "blue", ip)
	wantErr(t, err, context.Canceled, "memstore: set cursor blue to 10.0.0.1: context canceled")

	ctx = t.Context()
	held, err := s.Create(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Create(ctx, c)
	wantErr(t, err, store.ErrExists, "memstore: create blue/10.0.0.1: address already claimed")
	_, err = s.Update(ctx, c, held.Revision+1)
	wantErr(t, err, store.ErrConflict, "memstore: update blue/10.0.0.1 at revision 2 (current 1): revision conflict")
	err = s.Delete(ctx, "blue", ip, held.Revision+1)
	wantErr(t, err, store.ErrConflict, "memstore: delete blue/10.0.0.1 at revision 2 (current 1): revision conflict")
	err = s.Delete(ctx, "blue", netip.MustParseAddr("10.0.0.2"), 1)
	wantErr(t, err, store.ErrNotFound, "memstore: delete blue/10.0.0.2: claim not found")
	_, err = s.Get(ctx, "blue", netip.Addr{})
	wantErr(t, err, nil, "memstore: get blue/invalid IP: ip is not a valid address")

	bad := c
	bad.Owner = store.Owner{}
	_, err = s.Create(ctx, bad)
	wantErr(t, err, nil, "memstore: create blue/10.0.0.1: claim 10.0.0.1: owner has neither uid nor container id")
}

func wantErr(t *testing.T, err, target error, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %q", msg)
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("error %q does not wrap %q", err, target)
	}
	if err.Error() != msg {
		t.Errorf("error %q, want %q", err, msg)
	}
}

// TestRevisions checks that the revision counter is per backend and counts every
// Create, Update and Delete, and nothing else.
func TestRevisions(t *testing.T) {
	ctx := t.Context()
	s := memstore.New()
	o := s.Open()
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	ca, err := s.Create(ctx, testClaim(a)) // 1
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Create(ctx, testClaim(a)); err == nil { // fails: no revision
		t.Fatal("second Create succeeded")
	}
	if err := o.SetCursor(ctx, "blue", a); err != nil { // not a claim write
		t.Fatal(err)
	}
	if err := o.Delete(ctx, "blue", a, ca.Revision); err != nil { // 2
		t.Fatal(err)
	}
	cb, err := o.Create(ctx, testClaim(b)) // 3
	if err != nil {
		t.Fatal(err)
	}
	ub, err := s.Update(ctx, cb, cb.Revision) // 4
	if err != nil {
		t.Fatal(err)
	}
	if got, want := []int64{ca.Revision, cb.Revision, ub.Revision}, []int64{1, 3, 4}; !slices.Equal(got, want) {
		t.Fatalf("revisions %v, want %v", got, want)
	}
}

func testClaim(ip netip.Addr) store.Claim {
	return store.Claim{
		Pool:  "blue",
		IP:    ip,
		Owner: store.Owner{Namespace: "default", Name: "web-0", UID: "1234", Interface: "eth0"},
		Time:  time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC),
	}
}

// addrs returns n distinct IPv4 addresses from 10.0.0.0.
func addrs(n int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	}
	return out
}

// TestAllocs pins the hot path at zero allocations per call: Create into a pool
// whose map has grown before (filled and drained), Get, Delete, and the
// allocator's Create/Delete cycle on one address. AllocsPerRun reports the
// average rounded down, so what is pinned is that nothing is allocated per call;
// the map's own growth, and the rehash Go maps do now and then after deletes,
// are amortised and not pinned.
func TestAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("AllocsPerRun is slow in -short mode")
	}
	ctx := context.Background()
	s := memstore.New()
	claims := make([]store.Claim, 1024)
	for i, ip := range addrs(len(claims)) {
		claims[i] = testClaim(ip)
	}
	// Grow the pool's map to hold every claim, then empty it.
	held := make([]store.Claim, len(claims))
	for i, c := range claims {
		var err error
		if held[i], err = s.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range held {
		if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
			t.Fatal(err)
		}
	}

	var i int
	createAllocs := testing.AllocsPerRun(len(claims)-1, func() {
		var err error
		if held[i], err = s.Create(ctx, claims[i]); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if i != len(claims) {
		t.Fatalf("created %d claims, want %d", i, len(claims))
	}
	if createAllocs != 0 {
		t.Errorf("Create into a grown map: %v allocs, want 0", createAllocs)
	}

	i = 0
	getAllocs := testing.AllocsPerRun(100, func() {
		c, err := s.Get(ctx, "blue", claims[i%len(claims)].IP)
		if err != nil || c.Revision != held[i%len(claims)].Revision {
			t.Fatalf("Get: %+v, %v", c, err)
		}
		i++
	})
	if getAllocs != 0 {
		t.Errorf("Get: %v allocs, want 0", getAllocs)
	}

	i = 0
	deleteAllocs := testing.AllocsPerRun(len(claims)-1, func() {
		if err := s.Delete(ctx, "blue", held[i].IP, held[i].Revision); err != nil {
			t.Fatal(err)
		}
		i++
	})
	if deleteAllocs != 0 {
		t.Errorf("Delete: %v allocs, want 0", deleteAllocs)
	}

	// The allocator's cycle: one address claimed and released again and again.
	c := claims[0]
	cycleAllocs := testing.AllocsPerRun(1000, func() {
		got, err := s.Create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
			t.Fatal(err)
		}
	})
	if cycleAllocs != 0 {
		t.Errorf("Create+Delete cycle: %v allocs, want 0", cycleAllocs)
	}
}

// BenchmarkCreate measures Create of a free address into a pool of up to 1<<16
// claims whose map has already grown: the pool is filled and emptied before the
// timer starts, and emptied again, with the timer stopped, whenever it is full.
// That is the steady state of an allocator churning its addresses. The few B/op
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
	// A map refilled after deletes grows once more, to make room past its
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
