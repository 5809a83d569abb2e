package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ipamkit/ipam/store"
)

// Opener opens a new, separate Store instance on one shared backend; calling it
// again reopens the backend, as another process or client would. Every instance
// it returns sees the writes made through the others.
type Opener func() store.Store

// Config says what a Store can hold, for the checks to fit it. The zero Config
// is a Store that keeps every Owner field.
type Config struct {
	// ContainerOwners says the Store keeps only an owner's container ID and
	// interface, as host-local's format does: the suite's owners then have
	// only those, and the owner checks ask by container ID only.
	ContainerOwners bool
	// AddressesUnique says the Store claims an address in one pool at a
	// time, across every pool, as a Kubernetes store that names its objects
	// by address does: a Create of an address that another pool holds
	// fails with store.ErrExists. PoolsIndependent then checks that instead
	// of two independent claims, and AddressClaims expects at most one
	// claim per address.
	AddressesUnique bool
}

// Run runs every check of the suite against the Store implementation that
// newBackend provides, each as a subtest of t (see the package documentation for
// the list). newBackend is called once per subtest, with the subtest's t, and must
// return an Opener for a fresh, empty backend.
func Run(t *testing.T, newBackend func(t *testing.T) Opener) {
	RunConfig(t, Config{}, newBackend)
}

// RunConfig is Run for a Store that cfg describes.
func RunConfig(t *testing.T, cfg Config, newBackend func(t *testing.T) Opener) {
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			open := newBackend(t)
			if open == nil {
				t.Fatal("newBackend returned a nil Opener")
			}
			c.run(t, &suite{open: open, cfg: cfg})
		})
	}
}

// suite is what a check runs against: a backend and what it can hold.
type suite struct {
	open Opener
	cfg  Config
}

// checks is the suite, in the order Run runs it.
var checks = []struct {
	name string
	run  func(t *testing.T, x *suite)
}{
	{"CreateGet", testCreateGet},
	{"CreateExists", testCreateExists},
	{"PoolsIndependent", testPoolsIndependent},
	{"Update", testUpdate},
	{"Delete", testDelete},
	{"List", testList},
	{"Reopen", testReopen},
	{"CreateRace", testCreateRace},
	{"CreateRaceInstances", testCreateRaceInstances},
	{"UpdateRace", testUpdateRace},
	{"UpdateDeleteRace", testUpdateDeleteRace},
	{"CanceledContext", testCanceledContext},
	{"InvalidClaim", testInvalidClaim},
	{"Cursors", testCursors},
	{"CreateAndSetCursor", testCreateAndSetCursor},
	{"Owned", testOwned},
	{"OwnedInstances", testOwnedInstances},
	{"OwnedRace", testOwnedRace},
	{"CreateExclusive", testCreateExclusive},
	{"CreateExclusiveRace", testCreateExclusiveRace},
	{"Watch", testWatch},
	{"PoolVersion", testPoolVersion},
	{"RevisionsOrdered", testRevisionsOrdered},
	{"AddressClaims", testAddressClaims},
	{"AddressClaimsAtLeast", testAddressClaimsAtLeast},
	{"ListAll", testListAll},
}

// claimTime is the time of the suite's claims: fixed, far from now (so a store
// that stamps its own clock fails), with a fractional second, in a zone other
// than UTC (so the comparison is by instant, not by representation).
var claimTime = time.Date(2024, time.May, 1, 12, 34, 56, 789_000_000, time.FixedZone("test", 2*60*60))

// timeTolerance is how far a stored claim's Time may be from the one written: a
// store may keep times only to the second.
const timeTolerance = time.Second

// cmpClaim compares claims field by field: addresses by value, times as instants
// within timeTolerance.
var cmpClaim = cmp.Options{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b time.Time) bool {
		d := a.Sub(b)
		return -timeTolerance < d && d < timeTolerance
	}),
}

// ignoreRevision compares claims without their revisions.
var ignoreRevision = cmpopts.IgnoreFields(store.Claim{}, "Revision")

// sortClaims orders claim slices so that List results, which come in no
// particular order, can be compared.
var sortClaims = cmpopts.SortSlices(func(a, b store.Claim) bool {
	if a.Pool != b.Pool {
		return a.Pool < b.Pool
	}
	return a.IP.Less(b.IP)
})

// owner returns a fully populated owner whose every field carries id, so a store
// that drops any field fails the comparison.
func (x *suite) owner(id string) store.Owner {
	if x.cfg.ContainerOwners {
		return store.Owner{ContainerID: "ctr-" + id, Interface: "eth-" + id}
	}
	return store.Owner{
		Namespace:   "ns-" + id,
		Name:        "pod-" + id,
		UID:         "uid-" + id,
		ContainerID: "ctr-" + id,
		Interface:   "eth-" + id,
	}
}

// claim returns a valid claim of ip in pool, held by x.owner(id).
func (x *suite) claim(pool, ip, id string) store.Claim {
	return store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: x.owner(id), Time: claimTime}
}

// capability returns s as a T, a capability of the contract, or skips the
// test if s does not implement it.
func capability[T any](t *testing.T, s store.Store) T {
	t.Helper()
	c, ok := s.(T)
	if !ok {
		t.Skipf("%T does not implement %s", s, reflect.TypeFor[T]())
	}
	return c
}

// mustCreate creates c and checks that the returned claim is c with a positive
// revision.
func mustCreate(t *testing.T, s store.Store, c store.Claim) store.Claim {
	t.Helper()
	got, err := s.Create(t.Context(), c)
	if err != nil {
		t.Fatalf("Create(%s): %v", c.Key(), err)
	}
	if diff := cmp.Diff(c, got, cmpClaim, ignoreRevision); diff != "" {
		t.Fatalf("Create(%s) returned a different claim (-want +got):\n%s", c.Key(), diff)
	}
	if got.Revision <= 0 {
		t.Fatalf("Create(%s) returned revision %d, want > 0", c.Key(), got.Revision)
	}
	return got
}

// wantClaim checks that Get returns exactly want, revision included.
func wantClaim(t *testing.T, s store.Store, want store.Claim) {
	t.Helper()
	got, err := s.Get(t.Context(), want.Pool, want.IP)
	if err != nil {
		t.Fatalf("Get(%s): %v, want the claim of %s at revision %d", want.Key(), err, want.Owner, want.Revision)
	}
	if diff := cmp.Diff(want, got, cmpClaim); diff != "" {
		t.Fatalf("Get(%s) (-want +got):\n%s", want.Key(), diff)
	}
}

// wantNotFound checks that Get of ip in pool fails with store.ErrNotFound.
func wantNotFound(t *testing.T, s store.Store, pool string, ip netip.Addr) {
	t.Helper()
	got, err := s.Get(t.Context(), pool, ip)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get(%s/%s) = %+v, %v; want an error wrapping store.ErrNotFound", pool, ip, got, err)
	}
}

// wantList checks that List of pool returns exactly want, in any order.
func wantList(t *testing.T, s store.Store, pool string, want []store.Claim) {
	t.Helper()
	got, err := s.List(t.Context(), pool)
	if err != nil {
		t.Fatalf("List(%s): %v", pool, err)
	}
	if diff := cmp.Diff(want, got, cmpClaim, sortClaims, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("List(%s) (-want +got):\n%s", pool, diff)
	}
}

// wantErr checks that err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %q", what, err, target)
	}
}

func testCreateGet(t *testing.T, x *suite) {
	s := x.open()
	v4 := mustCreate(t, s, x.claim("blue", "10.0.0.1", "a"))
	v6 := mustCreate(t, s, x.claim("blue", "2001:db8::1", "b"))
	wantClaim(t, s, v4)
	wantClaim(t, s, v6)

	// Claims held only by a pod, or only by a container, round-trip with their
	// empty fields.
	if !x.cfg.ContainerOwners {
		podOnly := mustCreate(t, s, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.2"),
			Owner: store.Owner{Namespace: "default", Name: "web-0", UID: "1234"}, Time: claimTime})
		wantClaim(t, s, podOnly)
	}
	ctrOnly := mustCreate(t, s, store.Claim{Pool: "blue", IP: netip.MustParseAddr("10.0.0.3"),
		Owner: store.Owner{ContainerID: "abc", Interface: "eth0"}, Time: claimTime})
	wantClaim(t, s, ctrOnly)

	wantNotFound(t, s, "blue", netip.MustParseAddr("10.0.0.9"))
	wantNotFound(t, s, "blue", netip.MustParseAddr("2001:db8::9"))
	wantNotFound(t, s, "green", netip.MustParseAddr("10.0.0.1"))
	wantList(t, s, "green", nil)
}

func testCreateExists(t *testing.T, x *suite) {
	s := x.open()
	first := mustCreate(t, s, x.claim("blue", "10.0.0.1", "a"))
	for _, id := range []string{"b", "a"} { // another owner, and the holder itself
		c := x.claim("blue", "10.0.0.1", id)
		c.Time = claimTime.Add(time.Hour)
		got, err := s.Create(t.Context(), c)
		wantErr(t, fmt.Sprintf("second Create(%s) by %s returned %+v", c.Key(), c.Owner, got), err, store.ErrExists)
		wantClaim(t, s, first)
	}
	wantList(t, s, "blue", []store.Claim{first})
}

func testPoolsIndependent(t *testing.T, x *suite) {
	s := x.open()
	// "blue" is a prefix of "blue-2": a store that lists or deletes by key prefix
	// without a separator mixes them up.
	a := mustCreate(t, s, x.claim("blue", "10.0.0.1", "a"))
	if x.cfg.AddressesUnique {
		// One address, one pool at a time: the second pool's Create fails,
		// and the second pool sees no claim it could update or delete.
		got, err := x.open().Create(t.Context(), x.claim("blue-2", "10.0.0.1", "b"))
		wantErr(t, fmt.Sprintf("Create(blue-2/10.0.0.1) while blue holds it returned %+v", got), err, store.ErrExists)
		wantNotFound(t, s, "blue-2", a.IP)
		wantList(t, s, "blue-2", nil)
		u := a
		u.Pool, u.Owner = "blue-2", x.owner("c")
		if _, err := s.Update(t.Context(), u, a.Revision); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Update(blue-2/10.0.0.1) at blue's revision: %v, want store.ErrNotFound", err)
		}
		if err := s.Delete(t.Context(), "blue-2", a.IP, a.Revision); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Delete(blue-2/10.0.0.1) at blue's revision: %v, want store.ErrNotFound", err)
		}
		wantClaim(t, s, a)
		wantList(t, s, "blue", []store.Claim{a})
		// Released in the first pool, the address can be claimed in the second.
		if err := s.Delete(t.Context(), a.Pool, a.IP, a.Revision); err != nil {
			t.Fatalf("Delete(%s): %v", a.Key(), err)
		}
		b := mustCreate(t, s, x.claim("blue-2", "10.0.0.1", "b"))
		wantNotFound(t, s, "blue", a.IP)
		wantClaim(t, s, b)
		wantList(t, s, "blue", nil)
		wantList(t, s, "blue-2", []store.Claim{b})
		return
	}
	b := mustCreate(t, s, x.claim("blue-2", "10.0.0.1", "b"))
	wantClaim(t, s, a)
	wantClaim(t, s, b)
	wantList(t, s, "blue", []store.Claim{a})
	wantList(t, s, "blue-2", []store.Claim{b})

	u := b
	u.Owner = x.owner("c")
	u, err := s.Update(t.Context(), u, b.Revision)
	if err != nil {
		t.Fatalf("Update(%s): %v", b.Key(), err)
	}
	wantClaim(t, s, a)
	if err := s.Delete(t.Context(), a.Pool, a.IP, a.Revision); err != nil {
		t.Fatalf("Delete(%s): %v", a.Key(), err)
	}
	wantNotFound(t, s, a.Pool, a.IP)
	wantClaim(t, s, u)
	wantList(t, s, "blue", nil)
	wantList(t, s, "blue-2", []store.Claim{u})
}

func testUpdate(t *testing.T, x *suite) {
	s := x.open()
	orig := mustCreate(t, s, x.claim("blue", "2001:db8::1", "a"))

	// Re-point the claim, as the allocator does, starting from what it read.
	next := orig
	next.Owner = x.owner("b")
	next.Time = claimTime.Add(time.Hour)
	got, err := s.Update(t.Context(), next, orig.Revision)
	if err != nil {
		t.Fatalf("Update(%s) at current revision %d: %v", orig.Key(), orig.Revision, err)
	}
	if diff := cmp.Diff(next, got, cmpClaim, ignoreRevision); diff != "" {
		t.Fatalf("Update(%s) returned (-want +got):\n%s", orig.Key(), diff)
	}
	if got.Revision <= 0 || got.Revision == orig.Revision {
		t.Fatalf("Update(%s) returned revision %d; want a positive revision other than the old %d",
			orig.Key(), got.Revision, orig.Revision)
	}
	wantClaim(t, s, got)

	stale := orig
	stale.Owner = x.owner("c")
	_, err = s.Update(t.Context(), stale, orig.Revision)
	wantErr(t, fmt.Sprintf("Update(%s) at stale revision %d (current %d)", orig.Key(), orig.Revision, got.Revision),
		err, store.ErrConflict)
	wantClaim(t, s, got)

	// The current revision still works after a failed attempt.
	again := got
	again.Owner = x.owner("d")
	again, err = s.Update(t.Context(), again, got.Revision)
	if err != nil {
		t.Fatalf("Update(%s) at current revision %d after a conflict: %v", got.Key(), got.Revision, err)
	}
	wantClaim(t, s, again)

	absent := x.claim("blue", "2001:db8::2", "a")
	_, err = s.Update(t.Context(), absent, again.Revision)
	wantErr(t, "Update of an absent claim", err, store.ErrNotFound)
	wantNotFound(t, s, absent.Pool, absent.IP)
	_, err = s.Update(t.Context(), x.claim("green", "2001:db8::1", "a"), again.Revision)
	wantErr(t, "Update in an unknown pool", err, store.ErrNotFound)
	wantNotFound(t, s, "green", orig.IP)
	wantList(t, s, "blue", []store.Claim{again})
}

func testDelete(t *testing.T, x *suite) {
	s := x.open()
	c := mustCreate(t, s, x.claim("blue", "10.0.0.1", "a"))
	other := mustCreate(t, s, x.claim("blue", "10.0.0.2", "b"))

	for _, rev := range []int64{c.Revision + 1, c.Revision - 1, 0, other.Revision} {
		if rev == c.Revision {
			continue
		}
		err := s.Delete(t.Context(), c.Pool, c.IP, rev)
		wantErr(t, fmt.Sprintf("Delete(%s) at wrong revision %d (current %d)", c.Key(), rev, c.Revision),
			err, store.ErrConflict)
		wantClaim(t, s, c)
	}

	if err := s.Delete(t.Context(), c.Pool, c.IP, c.Revision); err != nil {
		t.Fatalf("Delete(%s) at current revision %d: %v", c.Key(), c.Revision, err)
	}
	wantNotFound(t, s, c.Pool, c.IP)
	wantList(t, s, "blue", []store.Claim{other})
	wantClaim(t, s, other)

	err := s.Delete(t.Context(), c.Pool, c.IP, c.Revision)
	wantErr(t, fmt.Sprintf("second Delete(%s)", c.Key()), err, store.ErrNotFound)
	err = s.Delete(t.Context(), "green", c.IP, c.Revision)
	wantErr(t, "Delete in an unknown pool", err, store.ErrNotFound)

	// The address is free again. Its new claim must not answer to the old
	// revision, or the old holder's late release would free the new holder's
	// address.
	re := mustCreate(t, s, x.claim("blue", "10.0.0.1", "c"))
	wantClaim(t, s, re)
	if re.Revision == c.Revision {
		t.Fatalf("Create(%s) after Delete reused the deleted claim's revision %d", re.Key(), re.Revision)
	}
	err = s.Delete(t.Context(), c.Pool, c.IP, c.Revision)
	wantErr(t, fmt.Sprintf("Delete(%s) of a re-created claim at the deleted claim's revision", c.Key()),
		err, store.ErrConflict)
	_, err = s.Update(t.Context(), c, c.Revision)
	wantErr(t, fmt.Sprintf("Update(%s) of a re-created claim at the deleted claim's revision", c.Key()),
		err, store.ErrConflict)
	wantClaim(t, s, re)
}

func testList(t *testing.T, x *suite) {
	s := x.open()
	var want []store.Claim
	for i, ip := range []string{"10.0.0.1", "2001:db8::1", "10.0.0.2", "2001:db8::ff", "10.0.1.255", "fe80::1"} {
		want = append(want, mustCreate(t, s, x.claim("blue", ip, fmt.Sprint(i))))
	}
	// Claims of other pools, one of them named with "blue" as a prefix.
	mustCreate(t, s, x.claim("blue-2", "10.0.0.3", "x"))
	mustCreate(t, s, x.claim("green", "10.0.2.1", "y"))
	wantList(t, s, "blue", want)

	got, err := s.List(t.Context(), "blue")
	if err != nil {
		t.Fatalf("List(blue): %v", err)
	}
	if len(got) == 0 {
		t.Fatal("List(blue) is empty")
	}
	for i := range got {
		got[i].Owner.UID = "changed"
		got[i].Time = time.Time{}
		got[i].IP = netip.MustParseAddr("192.0.2.1")
	}
	got[0] = x.claim("blue", "192.0.2.2", "z")
	wantList(t, s, "blue", want)
	for _, c := range want {
		wantClaim(t, s, c)
	}

	// Deleting one removes exactly that one.
	if err := s.Delete(t.Context(), want[1].Pool, want[1].IP, want[1].Revision); err != nil {
		t.Fatalf("Delete(%s): %v", want[1].Key(), err)
	}
	wantList(t, s, "blue", append(want[:1:1], want[2:]...))
}

func testReopen(t *testing.T, x *suite) {
	s1 := x.open()
	var want []store.Claim
	for i, ip := range []string{"10.0.0.1", "10.0.0.2", "2001:db8::1"} {
		want = append(want, mustCreate(t, s1, x.claim("blue", ip, fmt.Sprint(i))))
	}
	s2 := x.open()
	wantList(t, s2, "blue", want)
	for _, c := range want {
		wantClaim(t, s2, c)
	}

	// Writes through the new instance are seen by the old one.
	if err := s2.Delete(t.Context(), want[0].Pool, want[0].IP, want[0].Revision); err != nil {
		t.Fatalf("Delete(%s) through a reopened instance: %v", want[0].Key(), err)
	}
	wantNotFound(t, s1, want[0].Pool, want[0].IP)
	c := mustCreate(t, s2, x.claim("blue", "10.0.0.3", "x"))
	wantClaim(t, s1, c)
	wantList(t, s1, "blue", append(want[1:], c))
	wantList(t, x.open(), "blue", append(want[1:], c))
}

const (
	raceGoroutines = 8
	raceAddrs      = 64
)

func testCreateRace(t *testing.T, x *suite) {
	s := x.open()
	raceCreate(t, x, []store.Store{s}, s, "blue", false)
}

func testCreateRaceInstances(t *testing.T, x *suite) {
	raceCreate(t, x, []store.Store{x.open(), x.open()}, x.open(), "blue", false)
}

// raceCreate has raceGoroutines goroutines, spread over stores, Create the same
// raceAddrs addresses in pool, each as a different owner, and checks that every
// address has exactly one winner, that every loser got store.ErrExists, and that
// List through check agrees with the winners. With cursors, every other
// goroutine calls CreateAndSetCursor instead, and the pool's cursor is then
// checked to be an address that one of those created, or unset if they created
// none.
func raceCreate(t *testing.T, x *suite, stores []store.Store, check store.Store, pool string, cursors bool) {
	ips := make([]netip.Addr, raceAddrs)
	var net byte // apart from the addresses the cursor checks claim before
	if cursors {
		net = 200
	}
	for i := range ips {
		if i%2 == 0 {
			ips[i] = netip.AddrFrom4([4]byte{10, 0, net, byte(i)})
		} else {
			ips[i] = netip.AddrFrom16([16]byte{0: 0x20, 1: 0x01, 2: 0x0d, 3: 0xb8, 14: net, 15: byte(i)})
		}
	}
	type result struct {
		claim store.Claim
		err   error
	}
	results := make([][]result, raceGoroutines) // [goroutine][address]
	byCursor := func(g int) bool {
		_, ok := stores[g%len(stores)].(store.CursorCreator)
		return ok && cursors && g%2 == 1
	}
	ctx := t.Context()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range raceGoroutines {
		results[g] = make([]result, len(ips))
		s := stores[g%len(stores)]
		wg.Go(func() {
			<-start
			// Each goroutine starts at a different address, so that they
			// collide both head-on and in passing.
			for k := range ips {
				i := (k + g*len(ips)/raceGoroutines) % len(ips)
				c := store.Claim{Pool: pool, IP: ips[i], Owner: x.owner(fmt.Sprint(g)), Time: claimTime}
				var got store.Claim
				var err error
				if byCursor(g) {
					got, err = s.(store.CursorCreator).CreateAndSetCursor(ctx, c)
				} else {
					got, err = s.Create(ctx, c)
				}
				results[g][i] = result{got, err}
			}
		})
	}
	close(start)
	wg.Wait()

	var winners []store.Claim
	var cursorWon []netip.Addr // addresses created by CreateAndSetCursor
	for i, ip := range ips {
		var won []int
		for g := range raceGoroutines {
			r := results[g][i]
			switch {
			case r.err == nil:
				won = append(won, g)
			case !errors.Is(r.err, store.ErrExists):
				t.Errorf("goroutine %d: Create(%s/%s): %v, want success or store.ErrExists", g, pool, ip, r.err)
			}
		}
		if len(won) != 1 {
			t.Errorf("Create(%s/%s) succeeded for goroutines %v, want exactly one", pool, ip, won)
			continue
		}
		w := results[won[0]][i].claim
		want := store.Claim{Pool: pool, IP: ip, Owner: x.owner(fmt.Sprint(won[0])), Time: claimTime}
		if diff := cmp.Diff(want, w, cmpClaim, ignoreRevision); diff != "" {
			t.Errorf("winning Create(%s/%s) returned (-want +got):\n%s", pool, ip, diff)
		}
		if w.Revision <= 0 {
			t.Errorf("winning Create(%s/%s) returned revision %d, want > 0", pool, ip, w.Revision)
		}
		winners = append(winners, w)
		if byCursor(won[0]) {
			cursorWon = append(cursorWon, ip)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	wantList(t, check, pool, winners)
	if cs, ok := check.(store.Cursors); ok && cursors {
		got, err := cs.Cursor(ctx, pool)
		switch {
		case err != nil:
			t.Fatalf("Cursor(%s) after the race: %v", pool, err)
		case len(cursorWon) == 0 && got.IsValid():
			t.Fatalf("Cursor(%s) after the race = %v; want none, as no CreateAndSetCursor succeeded", pool, got)
		case len(cursorWon) > 0 && !slices.Contains(cursorWon, got):
			t.Fatalf("Cursor(%s) after the race = %v; want one of the addresses CreateAndSetCursor created, %v",
				pool, got, cursorWon)
		}
	}
}

// raceWriters is the number of goroutines in the Update and Delete races; rounds
// is how many times each race is run.
const (
	raceWriters = 16
	raceRounds  = 20
)

func testUpdateRace(t *testing.T, x *suite) {
	raceWrite(t, x, false)
}

func testUpdateDeleteRace(t *testing.T, x *suite) {
	raceWrite(t, x, true)
}

// raceWrite creates a claim and has raceWriters goroutines, spread over two
// instances, read it and write it at the revision they read: each an Update to
// itself, or, with deletes, every other one a Delete. Exactly one write must
// succeed.
func raceWrite(t *testing.T, x *suite, deletes bool) {
	ctx := t.Context()
	stores := []store.Store{x.open(), x.open()}
	for round := range raceRounds {
		ip := netip.AddrFrom4([4]byte{10, 0, 1, byte(round)})
		created := mustCreate(t, stores[0], store.Claim{Pool: "blue", IP: ip, Owner: x.owner("creator"), Time: claimTime})

		var (
			ready, wg sync.WaitGroup
			start     = make(chan struct{})
			results   = make([]store.Claim, raceWriters)
			errs      = make([]error, raceWriters)
		)
		isDelete := func(g int) bool { return deletes && g%2 == 1 }
		ready.Add(raceWriters)
		for g := range raceWriters {
			s := stores[g%len(stores)]
			wg.Go(func() {
				read, err := s.Get(ctx, "blue", ip)
				ready.Done()
				if err != nil {
					errs[g] = fmt.Errorf("get before writing: %w", err)
					return
				}
				<-start // everyone has read the same revision
				if isDelete(g) {
					errs[g] = s.Delete(ctx, "blue", ip, read.Revision)
					return
				}
				c := read
				c.Owner = x.owner(fmt.Sprint(g))
				results[g], errs[g] = s.Update(ctx, c, read.Revision)
			})
		}
		ready.Wait()
		close(start)
		wg.Wait()

		winner := -1
		for g, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("round %d: writes of goroutines %d and %d at revision %d both succeeded",
						round, winner, g, created.Revision)
				}
				winner = g
			case errors.Is(err, store.ErrConflict):
			case deletes && errors.Is(err, store.ErrNotFound):
			case deletes:
				t.Fatalf("round %d: goroutine %d (delete %t): %v; want success, store.ErrConflict or store.ErrNotFound",
					round, g, isDelete(g), err)
			default:
				t.Fatalf("round %d: goroutine %d: %v; want success or store.ErrConflict", round, g, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no write at revision %d succeeded; want exactly one", round, created.Revision)
		}
		for g, err := range errs {
			if errors.Is(err, store.ErrNotFound) && !isDelete(winner) {
				t.Fatalf("round %d: goroutine %d got %v, but the claim was updated, never deleted", round, g, err)
			}
		}
		if isDelete(winner) {
			wantNotFound(t, stores[1], "blue", ip)
			continue
		}
		w := results[winner]
		if w.Revision == created.Revision || w.Revision <= 0 {
			t.Fatalf("round %d: winning Update returned revision %d, created at %d", round, w.Revision, created.Revision)
		}
		if w.Owner != x.owner(fmt.Sprint(winner)) {
			t.Fatalf("round %d: winning Update by goroutine %d returned owner %s", round, winner, w.Owner)
		}
		wantClaim(t, stores[0], w)
		wantClaim(t, stores[1], w)
	}
}

func testCanceledContext(t *testing.T, x *suite) {
	s := x.open()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	c := x.claim("blue", "10.0.0.1", "a")
	if got, err := s.Create(ctx, c); err == nil {
		t.Errorf("Create(%s) with a canceled context succeeded (%+v), want an error", c.Key(), got)
	}
	wantNotFound(t, s, c.Pool, c.IP)
	wantList(t, s, c.Pool, nil)

	held := mustCreate(t, s, x.claim("blue", "10.0.0.2", "b"))
	next := held
	next.Owner = x.owner("c")
	if got, err := s.Update(ctx, next, held.Revision); err == nil {
		t.Errorf("Update(%s) with a canceled context succeeded (%+v), want an error", held.Key(), got)
	}
	wantClaim(t, s, held)
	if err := s.Delete(ctx, held.Pool, held.IP, held.Revision); err == nil {
		t.Errorf("Delete(%s) with a canceled context succeeded, want an error", held.Key())
	}
	wantClaim(t, s, held)
	wantList(t, s, "blue", []store.Claim{held})
}

// noPanic runs f and turns a panic into a test failure naming what.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked: %v", what, r)
		}
	}()
	f()
}

func testInvalidClaim(t *testing.T, x *suite) {
	s := x.open()
	valid := x.claim("blue", "10.0.0.1", "a")
	noPool, noIP, noOwner := valid, valid, valid
	noPool.Pool = ""
	noIP.IP = netip.Addr{}
	noOwner.Owner = store.Owner{Namespace: "default", Name: "web-0", Interface: "eth0"} // neither UID nor container ID
	// A time that RFC 3339 and JSON cannot write: a Store would panic, or
	// keep a record it cannot read back.
	farTime, earlyTime := valid, valid
	farTime.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	earlyTime.Time = time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	invalid := []struct {
		name string
		c    store.Claim
	}{
		{"without a pool", noPool},
		{"with an invalid IP", noIP},
		{"without an owner", noOwner},
		{"with a time after year 9999", farTime},
		{"with a time before year 0", earlyTime},
		{"zero", store.Claim{}},
	}
	for _, tc := range invalid {
		noPanic(t, "Create of a claim "+tc.name, func() {
			if got, err := s.Create(t.Context(), tc.c); err == nil {
				t.Errorf("Create of a claim %s succeeded (%+v), want an error", tc.name, got)
			}
		})
	}
	wantNotFound(t, s, noOwner.Pool, noOwner.IP)
	wantList(t, s, "blue", nil)

	held := mustCreate(t, s, valid)
	for _, tc := range invalid[:len(invalid)-1] {
		c := tc.c
		c.Revision = held.Revision
		noPanic(t, "Update to a claim "+tc.name, func() {
			if got, err := s.Update(t.Context(), c, held.Revision); err == nil {
				t.Errorf("Update to a claim %s succeeded (%+v), want an error", tc.name, got)
			}
		})
		wantClaim(t, s, held)
	}

	noPanic(t, "Get of the zero address", func() {
		if got, err := s.Get(t.Context(), "blue", netip.Addr{}); err == nil {
			t.Errorf("Get(blue/zero address) = %+v, want an error", got)
		}
	})
	noPanic(t, "Delete of the zero address", func() {
		if err := s.Delete(t.Context(), "blue", netip.Addr{}, held.Revision); err == nil {
			t.Error("Delete(blue/zero address) succeeded, want an error")
		}
	})
	wantList(t, s, "blue", []store.Claim{held})
}

// wantCursor checks that the cursor of pool is want.
func wantCursor(t *testing.T, cs store.Cursors, pool string, want netip.Addr) {
	t.Helper()
	got, err := cs.Cursor(t.Context(), pool)
	if err != nil {
		t.Fatalf("Cursor(%s): %v", pool, err)
	}
	if got != want {
		t.Fatalf("Cursor(%s) = %v, want %v", pool, got, want)
	}
}

func testCursors(t *testing.T, x *suite) {
	s := x.open()
	cs := capability[store.Cursors](t, s)
	set := func(t *testing.T, pool string, ip netip.Addr) {
		t.Helper()
		if err := cs.SetCursor(t.Context(), pool, ip); err != nil {
			t.Fatalf("SetCursor(%s, %s): %v", pool, ip, err)
		}
	}

	blue1, blue2 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6")
	green := netip.MustParseAddr("2001:db8::7")
	wantCursor(t, cs, "blue", netip.Addr{})
	set(t, "blue", blue1)
	wantCursor(t, cs, "blue", blue1)
	wantCursor(t, cs, "green", netip.Addr{})
	wantCursor(t, cs, "blue-2", netip.Addr{})
	set(t, "green", green)
	wantCursor(t, cs, "green", green)
	wantCursor(t, cs, "blue", blue1)
	set(t, "blue", blue2)
	wantCursor(t, cs, "blue", blue2)
	wantCursor(t, cs, "green", green)

	// A cursor is not a claim.
	wantNotFound(t, s, "blue", blue2)
	wantList(t, s, "blue", nil)

	s2 := x.open()
	cs2, ok := s2.(store.Cursors)
	if !ok {
		t.Fatalf("%T implements store.Cursors but the reopened %T does not", s, s2)
	}
	wantCursor(t, cs2, "blue", blue2)
	wantCursor(t, cs2, "green", green)
	if err := cs2.SetCursor(t.Context(), "blue", blue1); err != nil {
		t.Fatalf("SetCursor(blue, %s) through a reopened instance: %v", blue1, err)
	}
	wantCursor(t, cs, "blue", blue1)
}

// mustCreateAndSetCursor creates c with CreateAndSetCursor and checks that the
// returned claim is c with a positive revision.
func mustCreateAndSetCursor(t *testing.T, cc store.CursorCreator, c store.Claim) store.Claim {
	t.Helper()
	got, err := cc.CreateAndSetCursor(t.Context(), c)
	if err != nil {
		t.Fatalf("CreateAndSetCursor(%s): %v", c.Key(), err)
	}
	if diff := cmp.Diff(c, got, cmpClaim, ignoreRevision); diff != "" {
		t.Fatalf("CreateAndSetCursor(%s) returned a different claim (-want +got):\n%s", c.Key(), diff)
	}
	if got.Revision <= 0 {
		t.Fatalf("CreateAndSetCursor(%s) returned revision %d, want > 0", c.Key(), got.Revision)
	}
	return got
}

func testCreateAndSetCursor(t *testing.T, x *suite) {
	s := x.open()
	cc := capability[store.CursorCreator](t, s)
	ctx := t.Context()

	// A success creates the claim, as Create does, and moves the cursor of its
	// pool only.
	a := mustCreateAndSetCursor(t, cc, x.claim("blue", "10.0.0.5", "a"))
	wantClaim(t, s, a)
	wantCursor(t, cc, "blue", a.IP)
	wantCursor(t, cc, "blue-2", netip.Addr{})
	b := mustCreateAndSetCursor(t, cc, x.claim("blue", "2001:db8::5", "b"))
	wantClaim(t, s, b)
	wantCursor(t, cc, "blue", b.IP)

	// The claim is a claim like any other, and the cursor a cursor, seen through
	// another instance.
	s2 := x.open()
	cs2, ok := s2.(store.Cursors)
	if !ok {
		t.Fatalf("%T implements store.CursorCreator but the reopened %T does not implement store.Cursors", s, s2)
	}
	wantClaim(t, s2, a)
	wantList(t, s2, "blue", []store.Claim{a, b})
	wantCursor(t, cs2, "blue", b.IP)
	got, err := s2.Create(ctx, x.claim("blue", "10.0.0.5", "x"))
	wantErr(t, fmt.Sprintf("Create(%s) of a claim made by CreateAndSetCursor returned %+v", a.Key(), got), err, store.ErrExists)

	// A failure, whatever its cause, leaves the claims and the cursor as they
	// were: here every attempt names an address other than the cursor's.
	exists := x.claim("blue", "10.0.0.5", "c") // claimed by a, through CreateAndSetCursor
	got, err = cc.CreateAndSetCursor(ctx, exists)
	wantErr(t, fmt.Sprintf("CreateAndSetCursor(%s) of a claimed address returned %+v", exists.Key(), got), err, store.ErrExists)
	byCreate := mustCreate(t, s2, x.claim("blue", "10.0.0.6", "d"))
	if cc2, ok := s2.(store.CursorCreator); ok {
		got, err = cc2.CreateAndSetCursor(ctx, byCreate)
	} else {
		got, err = cc.CreateAndSetCursor(ctx, byCreate)
	}
	wantErr(t, fmt.Sprintf("CreateAndSetCursor(%s) of an address claimed by Create returned %+v", byCreate.Key(), got), err, store.ErrExists)
	wantClaim(t, s, a)
	wantClaim(t, s, byCreate)
	wantCursor(t, cc, "blue", b.IP)
	wantCursor(t, cs2, "blue", b.IP)

	noOwner, noIP, noPool := x.claim("blue", "10.0.0.7", "e"), x.claim("blue", "10.0.0.7", "e"), x.claim("", "10.0.0.7", "e")
	noOwner.Owner = store.Owner{Namespace: "default", Name: "web-0"}
	noIP.IP = netip.Addr{}
	farTime := x.claim("blue", "10.0.0.7", "e")
	farTime.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		c    store.Claim
	}{{"without an owner", noOwner}, {"with an invalid IP", noIP}, {"without a pool", noPool}, {"with a time after year 9999", farTime}} {
		noPanic(t, "CreateAndSetCursor of a claim "+tc.name, func() {
			if got, err := cc.CreateAndSetCursor(ctx, tc.c); err == nil {
				t.Errorf("CreateAndSetCursor of a claim %s succeeded (%+v), want an error", tc.name, got)
			}
		})
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := cc.CreateAndSetCursor(canceled, x.claim("blue", "10.0.0.7", "f")); err == nil {
		t.Errorf("CreateAndSetCursor with a canceled context succeeded (%+v), want an error", got)
	}
	wantNotFound(t, s, "blue", noOwner.IP)
	wantCursor(t, cc, "blue", b.IP)
	wantList(t, s, "blue", []store.Claim{a, b, byCreate})

	// SetCursor and CreateAndSetCursor move one cursor.
	set := netip.MustParseAddr("10.0.0.9")
	if err := cs2.SetCursor(ctx, "blue", set); err != nil {
		t.Fatalf("SetCursor(blue, %s): %v", set, err)
	}
	wantCursor(t, cc, "blue", set)
	c := mustCreateAndSetCursor(t, cc, x.claim("blue", "10.0.0.8", "g"))
	wantCursor(t, cs2, "blue", c.IP)

	// CreateAndSetCursor races Create on another instance as Create does: one
	// winner per address.
	raceCreate(t, x, []store.Store{x.open(), x.open()}, x.open(), "green", true)
}
