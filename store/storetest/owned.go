package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ipamkit/ipam/store"
)

// The owners of the owner checks: a pod with two interfaces, a stable pod, a
// pod of the same name that is not stable, and a stranger.
func (x *suite) ownedOwners() (pod, stable, namesake, stranger store.Owner) {
	if x.cfg.ContainerOwners {
		return store.Owner{ContainerID: "ctr-pod"},
			store.Owner{ContainerID: "ctr-stable"},
			store.Owner{ContainerID: "ctr-namesake"},
			store.Owner{ContainerID: "ctr-stranger"}
	}
	return store.Owner{Namespace: "ns", Name: "web-0", UID: "uid-pod", ContainerID: "ctr-pod"},
		store.Owner{Namespace: "ns", Name: "db-0", UID: "uid-stable", ContainerID: "ctr-stable", Stable: true},
		store.Owner{Namespace: "ns", Name: "db-0", UID: "uid-namesake", ContainerID: "ctr-namesake"},
		store.Owner{Namespace: "ns", Name: "web-1", UID: "uid-stranger", ContainerID: "ctr-stranger"}
}

// on returns o on interface iface.
func on(o store.Owner, iface string) store.Owner {
	o.Interface = iface
	return o
}

// queries returns the queries that find o's claims in this suite: by
// container ID, and unless the Store keeps container owners only, by UID and,
// for a stable owner, by name.
func (x *suite) queries(o store.Owner) []store.OwnerQuery {
	if x.cfg.ContainerOwners {
		return []store.OwnerQuery{store.ByContainer(o.ContainerID)}
	}
	qs := []store.OwnerQuery{store.ByUID(o.UID), store.ByContainer(o.ContainerID)}
	if o.Stable {
		qs = append(qs, store.ByName(o.Namespace, o.Name))
	}
	return qs
}

// wantOwned checks that Owned(q) returns exactly want, in any order,
// revisions included.
func wantOwned(t *testing.T, s store.Store, q store.OwnerQuery, want ...store.Claim) {
	t.Helper()
	got, err := s.Owned(t.Context(), q)
	if err != nil {
		t.Fatalf("Owned(%s): %v", q, err)
	}
	if want == nil {
		want = []store.Claim{}
	}
	if got == nil {
		got = []store.Claim{}
	}
	if diff := cmp.Diff(want, got, cmpClaim, sortClaims); diff != "" {
		t.Fatalf("Owned(%s) (-want +got):\n%s", q, diff)
	}
}

func testOwned(t *testing.T, x *suite) {
	s := x.open()
	pod, stable, namesake, stranger := x.ownedOwners()
	at := func(pool, ip string, o store.Owner) store.Claim {
		return mustCreate(t, s, store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: o, Time: claimTime})
	}
	eth0 := at("blue", "10.0.0.1", on(pod, "eth0"))
	net1 := at("green", "10.1.0.1", on(pod, "net1"))
	net1v6 := at("green", "2001:db8::1", on(pod, "net1"))
	legacy := at("blue", "10.0.0.9", pod) // no interface: host-local's legacy form, or a Spiderpool import
	db := at("blue", "10.0.0.2", on(stable, "eth0"))
	same := at("blue-2", "10.0.0.4", on(namesake, "eth0"))
	other := at("blue", "10.0.0.3", on(stranger, "eth0"))

	for _, q := range x.queries(pod) {
		wantOwned(t, s, q, eth0, net1, net1v6, legacy)
		wantOwned(t, s, q.On("eth0"), eth0, legacy)
		wantOwned(t, s, q.On("net1"), net1, net1v6, legacy)
		wantOwned(t, s, q.On("net7"), legacy)
	}
	for _, q := range x.queries(stable) {
		wantOwned(t, s, q, db)
	}
	for _, q := range x.queries(namesake) {
		wantOwned(t, s, q, same)
	}
	for _, q := range x.queries(stranger) {
		wantOwned(t, s, q.On("eth0"), other)
	}
	if !x.cfg.ContainerOwners {
		// A pod that is not stable is not found by its name.
		wantOwned(t, s, store.ByName("ns", "web-1"))
	}
	wantOwned(t, s, store.ByContainer("nobody"))
	wantOwned(t, s, store.ByUID("nobody"))

	// The result is the caller's.
	got, err := s.Owned(t.Context(), x.queries(pod)[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		got[i].Owner = on(stranger, "eth9")
	}
	wantOwned(t, s, x.queries(pod)[0], eth0, net1, net1v6, legacy)

	// Invalid queries fail, without panicking.
	for _, q := range []store.OwnerQuery{{}, {Kind: store.KindUID}, {Kind: 9, ID: "x"}, {Kind: store.KindName, ID: "no-slash"}} {
		noPanic(t, fmt.Sprintf("Owned(%#v)", q), func() {
			if _, err := s.Owned(t.Context(), q); err == nil {
				t.Errorf("Owned(%#v) = nil error, want an error", q)
			}
		})
	}
}

func testOwnedInstances(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	ctx := t.Context()
	pod, stable, namesake, _ := x.ownedOwners()
	q := x.queries(pod)[0]

	// Written through one instance, seen through the other, which asked
	// before (a reader that keeps answers would miss it).
	wantOwned(t, s2, q)
	c := mustCreate(t, s1, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.1"), Owner: on(pod, "eth0"), Time: claimTime})
	wantOwned(t, s2, q, c)

	// Re-pointed to another owner through the second: the first instance
	// finds it under the new owner only.
	moved := c
	moved.Owner = on(namesake, "eth0")
	moved, err := s2.Update(ctx, moved, c.Revision)
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	wantOwned(t, s1, q)
	wantOwned(t, s1, x.queries(namesake)[0], moved)
	wantOwned(t, s2, q)

	// Deleted through the first: gone for the second.
	if err := s1.Delete(ctx, moved.Pool, moved.IP, moved.Revision); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantOwned(t, s2, x.queries(namesake)[0])

	// Created again at the same address by the first owner, through the
	// second instance; and an interface-less claim through the first.
	again := mustCreate(t, s2, store.Claim{Pool: "blue", IP: c.IP, Owner: on(pod, "eth0"), Time: claimTime})
	bare := mustCreate(t, s1, store.Claim{Pool: "green", IP: netip.MustParseAddr("2001:db8::7"), Owner: pod, Time: claimTime})
	wantOwned(t, s1, q, again, bare)
	wantOwned(t, s2, q.On("eth0"), again, bare)
	wantOwned(t, s2, q.On("net1"), bare)

	// A stable owner's claim re-pointed to the pod of the same name under a
	// new UID: found by name through either instance, by the new UID only.
	db := mustCreate(t, s1, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.5"), Owner: on(stable, "eth0"), Time: claimTime})
	if !x.cfg.ContainerOwners {
		next := db
		next.Owner.UID, next.Owner.ContainerID = "uid-stable-2", "ctr-stable-2"
		next, err = s2.Update(ctx, next, db.Revision)
		if err != nil {
			t.Fatalf("Update: %v", err)
		}
		wantOwned(t, s1, store.ByName("ns", "db-0"), next)
		wantOwned(t, s1, store.ByUID("uid-stable"))
		wantOwned(t, s1, store.ByUID("uid-stable-2"), next)
		wantOwned(t, s2, store.ByContainer("ctr-stable"))
		db = next
	}

	// A newly opened instance agrees.
	s3 := x.open()
	wantOwned(t, s3, q, again, bare)
	wantOwned(t, s3, x.queries(db.Owner)[0], db)
}

func testOwnedRace(t *testing.T, x *suite) {
	stores := []store.Store{x.open(), x.open()}
	pod, _, namesake, _ := x.ownedOwners()
	owners := []store.Owner{on(pod, "eth0"), on(namesake, "eth0")}
	ips := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("2001:db8::1")}
	const goroutines, rounds = 6, 60
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*rounds)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			ctx := t.Context()
			for r := range rounds {
				// Each goroutine creates, re-points and releases claims on a
				// few shared addresses, so that the same address is deleted
				// and created again by the same owner through another
				// instance while the first delete is still settling.
				ip := ips[(g+r)%len(ips)]
				o := owners[(g+r/2)%len(owners)]
				c, err := s.Create(ctx, store.Claim{Pool: "blue", IP: ip, Owner: o, Time: claimTime})
				if err != nil {
					if !errors.Is(err, store.ErrExists) {
						errs <- fmt.Errorf("Create: %w", err)
					}
					continue
				}
				for _, q := range x.queries(o) {
					got, err := s.Owned(ctx, q)
					if err != nil {
						errs <- fmt.Errorf("Owned(%s): %w", q, err)
					}
					for _, h := range got {
						if !q.Matches(h) {
							errs <- fmt.Errorf("Owned(%s) returned %s of %s, which it does not match", q, h.Key(), h.Owner)
						}
					}
				}
				if r%3 == 0 {
					moved := c
					moved.Owner = owners[(g+r/2+1)%len(owners)]
					if c, err = s.Update(ctx, moved, c.Revision); err != nil {
						errs <- fmt.Errorf("Update: %w", err)
						continue
					}
				}
				if r%2 == 0 {
					if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil && !errors.Is(err, store.ErrConflict) {
						errs <- fmt.Errorf("Delete: %w", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Whatever the interleaving, every instance's Owned now agrees with
	// what List holds.
	all, err := stores[0].List(t.Context(), "blue")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range owners {
		for _, q := range x.queries(o) {
			var want []store.Claim
			for _, c := range all {
				if q.Matches(c) {
					want = append(want, c)
				}
			}
			for _, s := range append(stores, x.open()) {
				wantOwned(t, s, q, want...)
			}
		}
	}
}

// exclusive returns the Store's ExclusiveCreator, or skips the check.
func exclusive(t *testing.T, s store.Store) store.ExclusiveCreator {
	t.Helper()
	ec := capability[store.ExclusiveCreator](t, s)
	return ec
}

// wantHeld checks that err is a *store.HeldError that lists exactly held.
func wantHeld(t *testing.T, what string, err error, held ...store.Claim) {
	t.Helper()
	var he *store.HeldError
	if !errors.As(err, &he) || !errors.Is(err, store.ErrHeld) {
		t.Fatalf("%s: %v, want a *store.HeldError wrapping store.ErrHeld", what, err)
	}
	if diff := cmp.Diff(held, he.Held, cmpClaim, sortClaims); diff != "" {
		t.Fatalf("%s: HeldError.Held (-want +got):\n%s", what, diff)
	}
}

func testCreateExclusive(t *testing.T, x *suite) {
	s := x.open()
	ec := exclusive(t, s)
	ctx := t.Context()
	pod, stable, namesake, stranger := x.ownedOwners()
	claimOf := func(pool, ip string, o store.Owner) store.Claim {
		return store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: o, Time: claimTime}
	}
	mustExclusive := func(c store.Claim) store.Claim {
		t.Helper()
		got, err := ec.CreateExclusive(ctx, c)
		if err != nil {
			t.Fatalf("CreateExclusive(%s for %s): %v", c.Key(), c.Owner, err)
		}
		if diff := cmp.Diff(c, got, cmpClaim, ignoreRevision); diff != "" {
			t.Fatalf("CreateExclusive(%s) returned a different claim (-want +got):\n%s", c.Key(), diff)
		}
		wantClaim(t, s, got)
		return got
	}

	first := mustExclusive(claimOf("blue", "10.0.0.1", on(pod, "eth0")))
	if cs, ok := s.(store.Cursors); ok {
		wantCursor(t, cs, "blue", first.IP)
	}
	// Another address of the same family on the same interface, in the same
	// pool or another: refused, nothing created.
	for _, c := range []store.Claim{claimOf("blue", "10.0.0.2", on(pod, "eth0")), claimOf("green", "10.1.0.1", on(pod, "eth0"))} {
		_, err := ec.CreateExclusive(ctx, c)
		wantHeld(t, "CreateExclusive("+c.Key()+")", err, first)
		wantNotFound(t, s, c.Pool, c.IP)
	}
	// Another family, or another interface: created.
	v6 := mustExclusive(claimOf("blue", "2001:db8::1", on(pod, "eth0")))
	net1 := mustExclusive(claimOf("green", "10.1.0.1", on(pod, "net1")))
	_, err := ec.CreateExclusive(ctx, claimOf("green", "2001:db8:1::1", on(pod, "eth0")))
	wantHeld(t, "CreateExclusive(green/2001:db8:1::1 on eth0)", err, v6)

	// A claim that records no interface stands in the way of every interface,
	// and a new claim without one meets every claim of its family.
	bare := mustCreate(t, s, claimOf("blue", "10.0.0.5", stranger))
	_, err = ec.CreateExclusive(ctx, claimOf("blue", "10.0.0.6", on(stranger, "eth0")))
	wantHeld(t, "CreateExclusive(blue/10.0.0.6 for an owner with an interface-less claim)", err, bare)
	_, err = ec.CreateExclusive(ctx, claimOf("blue", "10.0.0.7", pod))
	wantHeld(t, "CreateExclusive(blue/10.0.0.7 without interface)", err, first, net1)

	// A taken address for an owner that holds nothing: ErrExists. For one
	// that holds a conflicting claim: the HeldError first.
	_, err = ec.CreateExclusive(ctx, claimOf("blue", "10.0.0.1", on(namesake, "eth0")))
	wantErr(t, "CreateExclusive of a taken address", err, store.ErrExists)
	_, err = ec.CreateExclusive(ctx, claimOf("blue", "10.0.0.5", on(pod, "eth0")))
	wantHeld(t, "CreateExclusive of a taken address by an owner that holds one", err, first)
	wantClaim(t, s, bare)

	// A stable owner is one owner whatever pod UID it has now.
	if !x.cfg.ContainerOwners {
		db := mustExclusive(claimOf("blue", "10.0.0.20", on(stable, "eth0")))
		next := on(stable, "eth0")
		next.UID, next.ContainerID = "uid-stable-2", "ctr-stable-2"
		_, err = ec.CreateExclusive(ctx, claimOf("blue", "10.0.0.21", next))
		wantHeld(t, "CreateExclusive for a stable owner's new pod", err, db)
		// Its namesake that is not stable is another owner.
		mustExclusive(claimOf("blue", "10.0.0.22", on(namesake, "eth0")))
	}

	// Released, the slot is free again.
	if err := s.Delete(ctx, first.Pool, first.IP, first.Revision); err != nil {
		t.Fatal(err)
	}
	mustExclusive(claimOf("green", "10.1.0.9", on(pod, "eth0")))

	// Invalid claims and a canceled context fail and store nothing.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ec.CreateExclusive(canceled, claimOf("blue", "10.0.0.30", on(pod, "eth5"))); err == nil {
		t.Error("CreateExclusive with a canceled context succeeded")
	}
	wantNotFound(t, s, "blue", netip.MustParseAddr("10.0.0.30"))
	noPanic(t, "CreateExclusive of an invalid claim", func() {
		if _, err := ec.CreateExclusive(ctx, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.31")}); err == nil {
			t.Error("CreateExclusive of a claim without owner succeeded")
		}
	})
	wantNotFound(t, s, "blue", netip.MustParseAddr("10.0.0.31"))
	far := claimOf("blue", "10.0.0.32", on(pod, "eth6"))
	far.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	noPanic(t, "CreateExclusive of a claim with a time after year 9999", func() {
		if _, err := ec.CreateExclusive(ctx, far); err == nil {
			t.Error("CreateExclusive of a claim with a time after year 9999 succeeded")
		}
	})
	wantNotFound(t, s, "blue", far.IP)
}

func testCreateExclusiveRace(t *testing.T, x *suite) {
	stores := []store.Store{x.open(), x.open()}
	exclusive(t, stores[0])
	const owners, goroutines = 16, 8
	var wg sync.WaitGroup
	won := make([][]store.Claim, owners)
	var mu sync.Mutex
	var unexpected []error
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ec := stores[g%len(stores)].(store.ExclusiveCreator)
			for o := range owners {
				c := store.Claim{
					Pool:  "blue",
					IP:    netip.AddrFrom4([4]byte{10, 0, byte(o), byte(g + 1)}),
					Owner: on(x.owner(fmt.Sprint(o)), "eth0"),
					Time:  claimTime,
				}
				got, err := ec.CreateExclusive(t.Context(), c)
				mu.Lock()
				switch {
				case err == nil:
					won[o] = append(won[o], got)
				case !errors.Is(err, store.ErrHeld):
					unexpected = append(unexpected, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, err := range unexpected {
		t.Errorf("CreateExclusive: %v, want success or store.ErrHeld", err)
	}
	for o := range owners {
		if len(won[o]) != 1 {
			t.Errorf("owner %d: %d of %d racing CreateExclusive calls succeeded, want exactly 1: %v", o, len(won[o]), goroutines, won[o])
			continue
		}
		wantOwned(t, x.open(), x.queries(x.owner(fmt.Sprint(o)))[0], won[o]...)
	}
}

// watchView is a WatchHandler that keeps what it was told: the claims by key,
// and each key's revisions in the order they came.
type watchView struct {
	mu      sync.Mutex
	resets  int
	claims  map[string]store.Claim
	history map[string][]int64
	bad     []string
}

func (v *watchView) Reset(claims []store.Claim) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.resets++
	v.claims = make(map[string]store.Claim, len(claims))
	for _, c := range claims {
		v.claims[c.Key()] = c
	}
}

func (v *watchView) Apply(e store.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.claims == nil {
		v.bad = append(v.bad, "Apply before Reset")
		return
	}
	k := e.Claim.Key()
	if !e.Claim.IP.IsValid() || e.Claim.Pool == "" {
		v.bad = append(v.bad, fmt.Sprintf("an event without pool or address: %+v", e))
		return
	}
	if e.Deleted {
		delete(v.claims, k)
	} else {
		v.claims[k] = e.Claim
		v.history[k] = append(v.history[k], e.Claim.Revision)
	}
}

// settle waits until the view holds exactly the Store's claims of pools,
// and fails t if it does not within a few seconds.
func (v *watchView) settle(t *testing.T, s store.Store, pools ...string) {
	t.Helper()
	var want []store.Claim
	for _, p := range pools {
		cs, err := s.List(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, cs...)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v.mu.Lock()
		got := make([]store.Claim, 0, len(v.claims))
		for _, c := range v.claims {
			got = append(got, c)
		}
		bad := slices.Clone(v.bad)
		v.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("watch handler: %v", bad)
		}
		diff := cmp.Diff(want, got, cmpClaim, sortClaims, cmpopts.EquateEmpty())
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s the watch's view differs from List (-list +watch):\n%s", diff)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testWatch(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	w := capability[store.Watcher](t, s1)
	ctx := t.Context()
	before := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "a"))

	wctx, cancel := context.WithCancel(ctx)
	v := &watchView{history: map[string][]int64{}}
	done := make(chan error, 1)
	go func() { done <- w.Watch(wctx, v) }()
	v.settle(t, s2, "blue", "green")

	// Writes through the other instance reach the watch, in order.
	c1 := mustCreate(t, s2, x.claim("green", "2001:db8::1", "b"))
	moved := c1
	moved.Owner = x.owner("c")
	moved, err := s2.Update(ctx, moved, c1.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Delete(ctx, before.Pool, before.IP, before.Revision); err != nil {
		t.Fatal(err)
	}
	again := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "d"))
	v.settle(t, s2, "blue", "green")
	v.mu.Lock()
	hist := slices.Clone(v.history[c1.Key()])
	v.mu.Unlock()
	if !slices.Equal(hist, []int64{c1.Revision, moved.Revision}) {
		t.Errorf("events of %s came with revisions %v, want %v then %v", c1.Key(), hist, c1.Revision, moved.Revision)
	}
	v.mu.Lock()
	got := v.claims[again.Key()]
	v.mu.Unlock()
	if got.Revision != again.Revision {
		t.Errorf("the watch has %s at revision %d, want %d", again.Key(), got.Revision, again.Revision)
	}

	// A delete that nothing follows is seen.
	if err := s2.Delete(ctx, again.Pool, again.IP, again.Revision); err != nil {
		t.Fatal(err)
	}
	v.settle(t, s2, "blue", "green")

	// Many writers at once, on both instances: the view ends as List.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := []store.Store{s1, s2}[g%2]
			for i := range 30 {
				c, err := s.Create(ctx, x.claim("green", fmt.Sprintf("10.9.%d.%d", g, i%5), fmt.Sprint(g)))
				if err == nil && i%2 == 0 {
					_ = s.Delete(ctx, c.Pool, c.IP, c.Revision)
				}
			}
		}()
	}
	wg.Wait()
	v.settle(t, s2, "blue", "green")

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v after its context was canceled, want an error wrapping context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return within 10s of its context being canceled")
	}
}

func testPoolVersion(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	pv := capability[store.PoolVersioner](t, s1)
	ctx := t.Context()
	version := func() uint64 {
		t.Helper()
		v, err := pv.PoolVersion(ctx, "blue")
		if err != nil {
			t.Fatalf("PoolVersion: %v", err)
		}
		return v
	}
	changed := func(what string, before uint64) uint64 {
		t.Helper()
		v := version()
		if v == before {
			t.Fatalf("PoolVersion is %d before and after %s through another instance, want a change", v, what)
		}
		return v
	}
	v := version()
	if again := version(); again != v {
		t.Fatalf("PoolVersion changed from %d to %d without a write", v, again)
	}
	c := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "a"))
	v = changed("a Create", v)
	moved := c
	moved.Owner = x.owner("b")
	moved, err := s2.Update(ctx, moved, c.Revision)
	if err != nil {
		t.Fatal(err)
	}
	v = changed("an Update", v)
	if err := s2.Delete(ctx, moved.Pool, moved.IP, moved.Revision); err != nil {
		t.Fatal(err)
	}
	v = changed("a Delete", v)
	if again := version(); again != v {
		t.Fatalf("PoolVersion changed from %d to %d without a write", v, again)
	}
}

func testRevisionsOrdered(t *testing.T, x *suite) {
	stores := []store.Store{x.open(), x.open()}
	o, ok := stores[0].(store.OrderedRevisions)
	if !ok || !o.RevisionsOrdered() {
		t.Skip("the Store does not say its revisions are ordered (store.OrderedRevisions)")
	}
	// Goroutines create claims of one owner at once; each asks Owned right
	// after its create. A claim of a lower revision must be in every answer
	// read after a create of a higher one.
	owner := on(x.owner("racer"), "eth0")
	q := x.queries(owner)[0]
	type seen struct {
		rev  int64
		revs map[int64]bool
	}
	const goroutines, rounds = 8, 20
	var (
		mu      sync.Mutex
		created []int64
		reads   []seen
		wg      sync.WaitGroup
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for r := range rounds {
				c, err := s.Create(t.Context(), store.Claim{Pool: "blue", Owner: owner, Time: claimTime,
					IP: netip.AddrFrom4([4]byte{10, 1, byte(g), byte(r)})})
				if err != nil {
					t.Errorf("Create: %v", err)
					return
				}
				got, err := s.Owned(t.Context(), q)
				if err != nil {
					t.Errorf("Owned: %v", err)
					return
				}
				sn := seen{c.Revision, map[int64]bool{}}
				for _, h := range got {
					sn.revs[h.Revision] = true
				}
				mu.Lock()
				created = append(created, c.Revision)
				reads = append(reads, sn)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, r := range reads {
		for _, c := range created {
			if c < r.rev && !r.revs[c] {
				t.Fatalf("Owned right after the create of revision %d missed the claim of revision %d, made before it", r.rev, c)
			}
		}
	}
}

func testAddressClaims(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	ar := capability[store.AddressReader](t, s1)
	ctx := t.Context()
	want := func(ip string, claims ...store.Claim) {
		t.Helper()
		got, err := ar.AddressClaims(ctx, netip.MustParseAddr(ip))
		if err != nil {
			t.Fatalf("AddressClaims(%s): %v", ip, err)
		}
		if claims == nil {
			claims = []store.Claim{}
		}
		if got == nil {
			got = []store.Claim{}
		}
		if diff := cmp.Diff(claims, got, cmpClaim, sortClaims); diff != "" {
			t.Fatalf("AddressClaims(%s) (-want +got):\n%s", ip, diff)
		}
	}
	want("10.0.0.1")
	a := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "a"))
	other := mustCreate(t, s2, x.claim("blue", "10.0.0.2", "c"))
	v6 := mustCreate(t, s2, x.claim("green", "2001:db8::1", "d"))
	if x.cfg.AddressesUnique {
		// One pool at a time: the address's one claim, until it is
		// released and claimed in another pool.
		want("10.0.0.1", a)
		want("10.0.0.2", other)
		want("2001:db8::1", v6)
		if err := s2.Delete(ctx, a.Pool, a.IP, a.Revision); err != nil {
			t.Fatal(err)
		}
		want("10.0.0.1")
		b := mustCreate(t, s2, x.claim("blue-2", "10.0.0.1", "b"))
		moved := b
		moved.Owner = x.owner("e")
		moved, err := s2.Update(ctx, moved, b.Revision)
		if err != nil {
			t.Fatal(err)
		}
		want("10.0.0.1", moved)
		noPanic(t, "AddressClaims of the zero address", func() {
			if _, err := ar.AddressClaims(ctx, netip.Addr{}); err == nil {
				t.Error("AddressClaims of the zero address succeeded")
			}
		})
		return
	}
	b := mustCreate(t, s2, x.claim("blue-2", "10.0.0.1", "b"))
	want("10.0.0.1", a, b)
	want("10.0.0.2", other)
	want("2001:db8::1", v6)
	moved := b
	moved.Owner = x.owner("e")
	moved, err := s2.Update(ctx, moved, b.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Delete(ctx, a.Pool, a.IP, a.Revision); err != nil {
		t.Fatal(err)
	}
	want("10.0.0.1", moved)
	noPanic(t, "AddressClaims of the zero address", func() {
		if _, err := ar.AddressClaims(ctx, netip.Addr{}); err == nil {
			t.Error("AddressClaims of the zero address succeeded")
		}
	})
}

func testAddressClaimsAtLeast(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	at := capability[store.AddressClaimsAtLeast](t, s1)
	ctx := t.Context()
	ip := netip.MustParseAddr("10.0.0.1")
	want := func(what string, rev int64, claims ...store.Claim) {
		t.Helper()
		got, err := at.AddressClaimsAtLeast(ctx, ip, rev)
		if err != nil {
			t.Fatalf("AddressClaimsAtLeast(%s, %d) after %s: %v", ip, rev, what, err)
		}
		if claims == nil {
			claims = []store.Claim{}
		}
		if got == nil {
			got = []store.Claim{}
		}
		if diff := cmp.Diff(claims, got, cmpClaim, sortClaims); diff != "" {
			t.Fatalf("AddressClaimsAtLeast(%s, %d) after %s (-want +got):\n%s", ip, rev, what, diff)
		}
	}
	a := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "a"))
	want("a create", a.Revision, a)
	held := []store.Claim{a}
	b := a
	if x.cfg.AddressesUnique {
		// One pool at a time: released, then claimed in another pool.
		if err := s2.Delete(ctx, a.Pool, a.IP, a.Revision); err != nil {
			t.Fatal(err)
		}
		held = nil
		b = mustCreate(t, s2, x.claim("blue-2", "10.0.0.1", "b"))
		want("a create in another pool", b.Revision, b)
	} else {
		b = mustCreate(t, s2, x.claim("blue-2", "10.0.0.1", "b"))
		want("a create in another pool", b.Revision, a, b)
	}
	moved := b
	moved.Owner = x.owner("e")
	moved, err := s2.Update(ctx, moved, b.Revision)
	if err != nil {
		t.Fatal(err)
	}
	want("an update", moved.Revision, append(held, moved)...)
}

func testListAll(t *testing.T, x *suite) {
	s1, s2 := x.open(), x.open()
	l := capability[store.ClaimLister](t, s1)
	ctx := t.Context()
	a := mustCreate(t, s2, x.claim("blue", "10.0.0.1", "a"))
	b := mustCreate(t, s2, x.claim("blue-2", "10.0.0.3", "b"))
	c := mustCreate(t, s2, x.claim("green", "2001:db8::1", "c"))
	gone := mustCreate(t, s2, x.claim("blue", "10.0.0.2", "d"))
	if err := s2.Delete(ctx, gone.Pool, gone.IP, gone.Revision); err != nil {
		t.Fatal(err)
	}
	got, err := l.ListAll(ctx)
	if err != nil {
		t.Fatalf("ListAll: %v", err)
	}
	if diff := cmp.Diff([]store.Claim{a, b, c}, got, cmpClaim, sortClaims); diff != "" {
		t.Fatalf("ListAll (-want +got):\n%s", diff)
	}
}
