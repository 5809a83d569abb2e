package kubestore

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/ipamkit/ipam/store"
)

// viewWait is how long OwnedAtLeast waits for a Watch to bring the view up
// to the revision asked for before it asks the API server instead: the
// watch brings a write within milliseconds unless it is reconnecting.
const viewWait = 500 * time.Millisecond

// view is what a running Watch of the Store has reported: every valid
// claim, indexed by owner identity and by address, complete up to revision rev (the
// watch's events come in revision order). OwnedAtLeast answers from it
// (and AddressClaimsAtLeast) without a request while a Watch runs, as Allocator.Follow keeps one.
// Only the first of the Store's running Watches feeds it.
type view struct {
	mu      sync.Mutex
	fed     bool  // a Watch feeds the view
	synced  bool  // it has listed every claim once
	rev     int64 // every write up to rev is in the view
	claims  map[string]store.Claim
	byID    map[store.OwnerQuery]map[string]struct{} // identity (no interface) → claim keys
	byIP    map[netip.Addr]map[string]struct{}       // address → claim keys
	changed chan struct{}                            // closed when rev advances
}

// feed makes the calling Watch the view's feeder, if no other is, and
// reports whether it did.
func (v *view) feed() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.fed {
		return false
	}
	v.fed = true
	return true
}

// stop empties the view when its feeder returns.
func (v *view) stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.fed, v.synced, v.rev, v.claims, v.byID, v.byIP = false, false, 0, nil, nil, nil
	v.advanced()
}

// advanced wakes the calls waiting for the revision to advance. Called with
// mu held.
func (v *view) advanced() {
	if v.changed != nil {
		close(v.changed)
		v.changed = nil
	}
}

// reset replaces the view with claims, complete up to rev.
func (v *view) reset(claims []store.Claim, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.claims = make(map[string]store.Claim, len(claims))
	v.byID = make(map[store.OwnerQuery]map[string]struct{}, len(claims))
	v.byIP = make(map[netip.Addr]map[string]struct{}, len(claims))
	for _, c := range claims {
		v.put(c)
	}
	v.synced = true
	v.setRev(rev)
}

// apply records one change, complete up to rev.
func (v *view) apply(e store.Event, rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.claims == nil {
		return // not synced yet
	}
	v.remove(e.Claim.Key())
	if !e.Deleted {
		v.put(e.Claim)
	}
	v.setRev(rev)
}

// advance records that the view is complete up to rev (a bookmark).
func (v *view) advance(rev int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.synced {
		v.setRev(rev)
	}
}

func (v *view) setRev(rev int64) {
	if rev > v.rev {
		v.rev = rev
		v.advanced()
	}
}

func (v *view) put(c store.Claim) {
	k := c.Key()
	v.claims[k] = c
	for q := range c.Owner.Identities {
		addKey(v.byID, q, k)
	}
	addKey(v.byIP, c.IP, k)
}

// addKey adds claim key k to the set of index under x.
func addKey[X comparable](index map[X]map[string]struct{}, x X, k string) {
	set := index[x]
	if set == nil {
		set = map[string]struct{}{}
		index[x] = set
	}
	set[k] = struct{}{}
}

// dropKey removes claim key k from the set of index under x.
func dropKey[X comparable](index map[X]map[string]struct{}, x X, k string) {
	delete(index[x], k)
	if len(index[x]) == 0 {
		delete(index, x)
	}
}

func (v *view) remove(k string) {
	c, ok := v.claims[k]
	if !ok {
		return
	}
	delete(v.claims, k)
	for q := range c.Owner.Identities {
		dropKey(v.byID, q, k)
	}
	dropKey(v.byIP, c.IP, k)
}

// owned returns the claims q matches once the view is complete up to rev,
// and true; or false if no Watch feeds the view, or it does not get that
// far within viewWait or ctx.
func (v *view) owned(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, bool) {
	id := q
	id.Interface = ""
	return v.at(ctx, rev, func() []store.Claim {
		out := []store.Claim{}
		for k := range v.byID[id] {
			if c := v.claims[k]; q.Matches(c) {
				out = append(out, c)
			}
		}
		return out
	})
}

// addressClaims returns the claims of ip once the view is complete up to
// rev, and true; or false, as owned.
func (v *view) addressClaims(ctx context.Context, ip netip.Addr, rev int64) ([]store.Claim, bool) {
	return v.at(ctx, rev, func() []store.Claim {
		out := []store.Claim{}
		for k := range v.byIP[ip] {
			out = append(out, v.claims[k])
		}
		return out
	})
}

// at returns what read finds, called with mu held once the view is complete
// up to rev, and true; or false if no Watch feeds the view, or it does not
// get that far within viewWait or ctx.
func (v *view) at(ctx context.Context, rev int64, read func() []store.Claim) ([]store.Claim, bool) {
	var timeout <-chan time.Time
	for {
		v.mu.Lock()
		if !v.synced {
			v.mu.Unlock()
			return nil, false
		}
		if v.rev >= rev {
			out := read()
			v.mu.Unlock()
			return out, true
		}
		if v.changed == nil {
			v.changed = make(chan struct{})
		}
		changed := v.changed
		v.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(viewWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}
