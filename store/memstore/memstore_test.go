package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
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
	_, err = s.CreateAndSetCursor(ctx, c)
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
	_, err = s.CreateAndSetCursor(ctx, c)
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
// that has held as many claims before (filled and drained, so that its emptied
// blocks are there to be reused), Get, Delete, and the allocator's Create/Delete
// cycle on one address, with Create and with CreateAndSetCursor. AllocsPerRun
// reports the average rounded down, so what is pinned is that nothing is
// allocated per call; the growth of the map of chunks, and the rehash Go maps do
// now and then after deletes, are amortised and not pinned.
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
	cursorAllocs := testing.AllocsPerRun(1000, func() {
		got, err := s.CreateAndSetCursor(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, got.Pool, got.IP, got.Revision); err != nil {
			t.Fatal(err)
		}
	})
	if cursorAllocs != 0 {
		t.Errorf("CreateAndSetCursor+Delete cycle: %v allocs, want 0", cursorAllocs)
	}
}

// TestMemory checks that claims cost memory for themselves, not for the span of
// addresses they are scattered over: a claim costs its record and its owner's
// entries in the owner index, about 320 bytes with an owner of its own (a pod),
// whether it is one of a run of consecutive addresses or alone in its /64 (which costs its block and chunk too). One
// owner holding many claims costs an index of them (about 100 bytes a claim), so
// that adding and removing one stays O(1).
func TestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const n = 1 << 14
	for _, tc := range []struct {
		name string
		ip   func(i int) netip.Addr
		max  uint64 // bytes per claim
		// ownEach gives each claim an owner of its own, as pods have;
		// otherwise one owner holds them all, as a reservation might.
		ownEach bool
	}{
		{"consecutive IPv4", func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }, 384, true},
		{"consecutive IPv4, one owner", func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }, 320, false},
		{"scattered IPv6", func(i int) netip.Addr {
			return netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 6: byte(i >> 8), 7: byte(i), 15: 1})
		}, 640, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ips := make([]netip.Addr, n)
			uids := make([]string, n)
			for i := range ips {
				ips[i] = tc.ip(i)
				uids[i] = fmt.Sprintf("uid-%08d", i)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			s := memstore.New()
			for i, ip := range ips {
				c := testClaim(ip)
				if tc.ownEach {
					c.Owner.UID = uids[i]
				}
				if _, err := s.Create(t.Context(), c); err != nil {
					t.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(s)
			runtime.KeepAlive(ips)
			runtime.KeepAlive(uids)
			per := (after.HeapAlloc - before.HeapAlloc) / n
			t.Logf("%d bytes per claim", per)
			if per > tc.max {
				t.Errorf("%d bytes per claim, want at most %d", per, tc.max)
			}
		})
	}
}
