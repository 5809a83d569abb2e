package memstore_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// joinView is a WatchHandler that reports any event its view cannot follow:
// a create or update of a claim it holds at that revision or a later one
// (the claim was in the copy and handed over again), and a delete of a
// claim it does not hold (its create was in neither).
type joinView struct {
	mu     sync.Mutex
	claims map[string]store.Claim
	bad    []string
}

func (v *joinView) Reset(cs []store.Claim) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.claims = map[string]store.Claim{}
	for _, c := range cs {
		v.claims[c.Key()] = c
	}
}

func (v *joinView) Apply(e store.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := e.Claim.Key()
	old, held := v.claims[k]
	switch {
	case e.Deleted && !held:
		v.bad = append(v.bad, "delete of "+k+", which the view never had")
	case e.Deleted:
		delete(v.claims, k)
	case held && old.Revision >= e.Claim.Revision:
		v.bad = append(v.bad, fmt.Sprintf("%s at revision %d again (the view has %d)", k, e.Claim.Revision, old.Revision))
	default:
		v.claims[k] = e.Claim
	}
}

// TestWatchJoinsDuringWrites starts watches while writers create and
// delete claims, in pools that exist and in pools they make as they go:
// every write reaches each watch exactly once, in its first copy or as an
// event after it, and each watch ends with what ListAll says.
func TestWatchJoinsDuringWrites(t *testing.T) {
	for round := range 20 {
		s := memstore.New()
		ctx, cancel := context.WithCancel(t.Context())
		var stop atomic.Bool
		var writers sync.WaitGroup
		for g := range 3 {
			writers.Go(func() {
				for i := 0; !stop.Load(); i++ {
					pool := fmt.Sprintf("g%d-p%d", g, i/8) // a new pool every 8 claims
					ip := netip.AddrFrom4([4]byte{10, byte(g), byte(i >> 8), byte(i)})
					c, err := s.Create(ctx, store.Claim{Pool: pool, IP: ip, Owner: store.Owner{ContainerID: fmt.Sprint(g, "-", i)}})
					if err != nil {
						t.Error(err)
						return
					}
					if i%3 == 0 {
						if err := s.Delete(ctx, pool, ip, c.Revision); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		views := make([]*joinView, 3)
		var watches sync.WaitGroup
		for k := range views {
			time.Sleep(time.Millisecond)
			views[k] = &joinView{}
			watches.Go(func() { _ = s.Open().Watch(ctx, views[k]) })
		}
		time.Sleep(5 * time.Millisecond)
		stop.Store(true)
		writers.Wait()

		want, err := s.ListAll(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range views {
			deadline := time.Now().Add(10 * time.Second)
			for {
				v.mu.Lock()
				n, bad := len(v.claims), v.bad
				same := n == len(want)
				for _, c := range want {
					if got, ok := v.claims[c.Key()]; !ok || got.Revision != c.Revision {
						same = false
					}
				}
				v.mu.Unlock()
				if len(bad) > 0 {
					t.Fatalf("round %d, watch %d: %v", round, k, bad)
				}
				if same {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d, watch %d: after 10s the view has %d claims, ListAll %d", round, k, n, len(want))
				}
				time.Sleep(time.Millisecond)
			}
		}
		cancel()
		watches.Wait()
	}
}
