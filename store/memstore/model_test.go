package memstore_test

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

var modelSeed = flag.Uint64("model.seed", 0, "seed for TestModel; 0 picks one from the clock")

// modelAddrs are the addresses TestModel claims: runs across block boundaries,
// the first and last blocks of each family, IPv4 addresses and their
// IPv4-mapped IPv6 forms, and one link-local address with and without zones.
var modelAddrs = func() []netip.Addr {
	var out []netip.Addr
	for _, r := range []struct {
		first string
		n     int
	}{
		{"10.0.0.60", 72}, {"0.0.0.0", 3}, {"255.255.255.253", 3},
		{"::ffff:10.0.0.62", 4}, {"2001:db8::3e", 70}, {"2001:db8:0:1::3f", 2},
		{"::", 3}, {"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 2}, {"fe80::1", 1},
	} {
		ip := netip.MustParseAddr(r.first)
		for range r.n {
			out = append(out, ip)
			ip = ip.Next()
		}
	}
	for _, s := range []string{"fe80::1%eth0", "fe80::1%eth1", "fe80::2%eth0", "::ffff:10.0.0.1%eth0"} {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}()

// modelSparse are addresses each alone in its block, so that blocks are
// emptied, dropped and reused all the time.
var modelSparse = []netip.Addr{
	netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("::ffff:10.0.0.1"),
	netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:1::1"), netip.MustParseAddr("fe80::1%eth0"),
}

// TestModel runs random operations against a Store and against a map of claims,
// and requires that they agree on every result and, now and then, on List. A
// divergence names the seed; replay it with -run TestModel -model.seed=N.
func TestModel(t *testing.T) {
	seed := *modelSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -run TestModel -model.seed=%d)", seed, seed)
	t.Run("runs", func(t *testing.T) { runModel(t, seed, modelAddrs) })
	t.Run("sparse", func(t *testing.T) { runModel(t, seed, modelSparse) })
}

// runModel runs TestModel on claims of modelAddrs.
func runModel(t *testing.T, seed uint64, modelAddrs []netip.Addr) {
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := t.Context()
	s := memstore.New()
	pools := []string{"blue", "green"}
	type key struct {
		pool string
		ip   netip.Addr
	}
	want := map[key]store.Claim{}
	cursors := map[string]netip.Addr{}
	steps := 20000
	if testing.Short() {
		steps = 2000
	}
	i := 0 // index in modelAddrs of the last address
	for step := range steps {
		// Half the operations are on an address near the last one, as an
		// allocator's are.
		if rng.IntN(2) == 0 {
			i = rng.IntN(len(modelAddrs))
		} else {
			i = min(max(i+rng.IntN(5)-2, 0), len(modelAddrs)-1)
		}
		k := key{pools[rng.IntN(len(pools))], modelAddrs[i]}
		held, ok := want[k]
		c := store.Claim{Pool: k.pool, IP: k.ip, Owner: store.Owner{ContainerID: fmt.Sprint(step)}, Time: time.Unix(int64(step), 0)}
		rev := held.Revision
		if rng.IntN(4) == 0 {
			rev += int64(rng.IntN(3)) - 1 // sometimes a stale or future revision
		}
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, step %d, %s: %s", seed, step, c.Key(), fmt.Sprintf(format, args...))
		}
		check := func(op string, got store.Claim, err error) {
			t.Helper()
			switch {
			case err != nil:
				fail("%s: %v", op, err)
			case got.Revision <= held.Revision:
				fail("%s returned revision %d, not past %d", op, got.Revision, held.Revision)
			}
			want[k] = got
		}
		switch op := rng.IntN(10); {
		case op < 3:
			got, err := s.Create(ctx, c)
			if ok {
				if !errors.Is(err, store.ErrExists) {
					fail("Create of a claimed address: %+v, %v", got, err)
				}
				break
			}
			check("Create", got, err)
		case op < 5:
			got, err := s.CreateAndSetCursor(ctx, c)
			if ok {
				if !errors.Is(err, store.ErrExists) {
					fail("CreateAndSetCursor of a claimed address: %+v, %v", got, err)
				}
				break
			}
			check("CreateAndSetCursor", got, err)
			cursors[k.pool] = k.ip
		case op < 6:
			got, err := s.Update(ctx, c, rev)
			switch {
			case !ok:
				if !errors.Is(err, store.ErrNotFound) {
					fail("Update of an absent claim: %+v, %v", got, err)
				}
			case rev != held.Revision:
				if !errors.Is(err, store.ErrConflict) {
					fail("Update at revision %d, current %d: %+v, %v", rev, held.Revision, got, err)
				}
			default:
				check("Update", got, err)
			}
		case op < 8:
			err := s.Delete(ctx, k.pool, k.ip, rev)
			switch {
			case !ok:
				if !errors.Is(err, store.ErrNotFound) {
					fail("Delete of an absent claim: %v", err)
				}
			case rev != held.Revision:
				if !errors.Is(err, store.ErrConflict) {
					fail("Delete at revision %d, current %d: %v", rev, held.Revision, err)
				}
			case err != nil:
				fail("Delete: %v", err)
			default:
				delete(want, k)
			}
		case op < 9:
			got, err := s.Get(ctx, k.pool, k.ip)
			switch {
			case !ok:
				if !errors.Is(err, store.ErrNotFound) {
					fail("Get of an absent claim: %+v, %v", got, err)
				}
			case err != nil:
				fail("Get: %v", err)
			case got != held:
				fail("Get = %+v, want %+v", got, held)
			}
		default:
			got, err := s.List(ctx, k.pool)
			if err != nil {
				fail("List: %v", err)
			}
			var wantList []store.Claim
			for c := range maps.Values(want) {
				if c.Pool == k.pool {
					wantList = append(wantList, c)
				}
			}
			byIP := func(a, b store.Claim) int { return a.IP.Compare(b.IP) } // zones too
			slices.SortFunc(wantList, byIP)
			slices.SortFunc(got, byIP)
			if !slices.Equal(got, wantList) {
				fail("List (-want +got):\n%s", cmp.Diff(wantList, got, cmpopts.EquateComparable(netip.Addr{})))
			}
			cur, err := s.Cursor(ctx, k.pool)
			if err != nil || cur != cursors[k.pool] {
				fail("Cursor = %v, %v; want %v", cur, err, cursors[k.pool])
			}
		}
	}
}
