package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"github.com/ipamkit/ipam/store"
)

// Follow keeps the Allocator's pool indexes current with the Store's changes
// (store.Watcher) until ctx is done, and then returns ctx's error. It returns
// at once an error wrapping ErrNotSupported if the Store cannot watch. It
// blocks: run it in a goroutine of its own, one per Allocator.
//
// While it runs, an index knows the claims other Allocators make and release
// as the Store reports them, so its Creates seldom meet a taken address, and a
// pool used for the first time starts from what the watch reported instead of
// probing from the cursor or listing. It changes nothing else: every address
// is still claimed with a conditional Create, and ErrExhausted is still
// confirmed with a List. The addresses of pools this Allocator has not used
// yet are kept in memory, as an informer's cache keeps objects: in all, an
// entry per claim of the Store.
func (a *Allocator) Follow(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	if a.plan.watch == nil {
		return fmt.Errorf("ipam: follow: the Store cannot watch: %w", ErrNotSupported)
	}
	f := &follower{a: a, pending: map[string]map[netip.Addr]struct{}{}}
	if !a.follow.CompareAndSwap(nil, f) {
		return fmt.Errorf("ipam: follow: already following: %w", ErrConflict)
	}
	defer a.follow.CompareAndSwap(f, nil)
	return a.plan.watch(ctx, f)
}

// follower applies a watch to an Allocator's indexes.
type follower struct {
	a *Allocator
	// mu orders the follower's changes with the first loads of pools: an
	// index that loads takes the pending addresses of its pool under mu, and
	// later changes of the pool go to the index.
	mu      sync.Mutex
	pending map[string]map[netip.Addr]struct{} // pools not loaded yet
}

// loaded returns the index of pool if it is in use.
func (f *follower) loaded(pool string) *poolIndex {
	if idx := f.a.indexFor(pool); idx != nil && idx.def.Load() != nil {
		return idx
	}
	return nil
}

// Reset replaces what the indexes know with claims.
func (f *follower) Reset(claims []store.Claim) {
	byPool := map[string][]netip.Addr{}
	for _, c := range claims {
		byPool[c.Pool] = append(byPool[c.Pool], c.IP)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.pending)
	for pool, ips := range byPool {
		if f.loaded(pool) == nil {
			set := make(map[netip.Addr]struct{}, len(ips))
			for _, ip := range ips {
				set[ip] = struct{}{}
			}
			f.pending[pool] = set
		}
	}
	for name, idx := range f.a.pools.Range {
		if idx.def.Load() != nil {
			idx.replace(byPool[name])
		}
	}
}

// Apply records one change.
func (f *follower) Apply(e store.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := e.Claim
	if idx := f.loaded(c.Pool); idx != nil {
		if e.Deleted {
			idx.forget(c.IP)
		} else {
			idx.claimed(c.IP)
		}
		return
	}
	set := f.pending[c.Pool]
	switch {
	case e.Deleted:
		delete(set, c.IP)
	case set == nil:
		f.pending[c.Pool] = map[netip.Addr]struct{}{c.IP: {}}
	default:
		set[c.IP] = struct{}{}
	}
}

// take returns and forgets the addresses reported for pool, and whether the
// follower has any view at all. Called with mu held.
func (f *follower) take(pool string) []netip.Addr {
	set := f.pending[pool]
	delete(f.pending, pool)
	ips := make([]netip.Addr, 0, len(set))
	for ip := range set {
		ips = append(ips, ip)
	}
	return ips
}

// claimed records that someone claimed ip. If the index did not know it
// used, it is a new claim: round-robin resumes after it, as after the Store's
// last reserved address, unless the Allocator keeps a place of its own
// (Options.Spread).
func (idx *poolIndex) claimed(ip netip.Addr) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	lay := idx.def.Load().layout
	if o, ok := lay.ordinal(ip); ok && idx.tree.set(o) && idx.spread == 0 {
		idx.cursor, idx.next, idx.nextLay = ip, o.AddOne(), lay
	}
}

// replace makes ips the addresses idx knows used (with those in quarantine):
// a complete view of the pool.
func (idx *poolIndex) replace(ips []netip.Addr) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	lay := idx.def.Load().layout
	idx.reset(lay)
	for _, ip := range ips {
		if o, ok := lay.ordinal(ip); ok {
			idx.tree.set(o)
		}
	}
	idx.complete = true
}
