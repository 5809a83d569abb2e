package ipam

// This file is not part of package ipam: TestMutants (ipamtest) adds it to
// the package, with two edits, to make the Allocator trust what it learnt of
// an owner in an earlier call. Each Allocator caches the Store's answer to
// every owner query, and forgets all of it whenever it writes to the Store
// itself: what another Allocator or process wrote since is not seen. That
// was the Allocator's design before the Store answered who holds what.

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"github.com/ipamkit/ipam/store"
)

type ownerCache struct {
	mu sync.Mutex
	m  map[store.OwnerQuery][]store.Claim
}

var ownerCaches sync.Map // *Allocator → *ownerCache

func (a *Allocator) ownerCache() *ownerCache {
	c, _ := ownerCaches.LoadOrStore(a, &ownerCache{m: make(map[store.OwnerQuery][]store.Claim)})
	return c.(*ownerCache)
}

func (a *Allocator) cachedOwned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	c := a.ownerCache()
	c.mu.Lock()
	cs, ok := c.m[q]
	c.mu.Unlock()
	if ok {
		return slices.Clone(cs), nil
	}
	cs, err := a.store.Owned(ctx, q)
	if err == nil {
		c.mu.Lock()
		c.m[q] = slices.Clone(cs)
		c.mu.Unlock()
	}
	return cs, err
}

func (a *Allocator) forgetOwners() {
	c := a.ownerCache()
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// forgetOnWrite wraps s so that every write through it empties a's cache.
func forgetOnWrite(a *Allocator, s store.Store) store.Store {
	f := &forgetter{Store: s, a: a}
	f.cur, _ = s.(store.Cursors)
	if x, ok := s.(store.ExclusiveCreator); ok {
		return forgetterExcl{f, x}
	}
	return f
}

type forgetter struct {
	store.Store
	cur store.Cursors
	a   *Allocator
}

func (f *forgetter) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	f.a.forgetOwners()
	return f.Store.Create(ctx, c)
}

func (f *forgetter) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	f.a.forgetOwners()
	return store.CreateAndSetCursor(ctx, f.Store, c, nil)
}

func (f *forgetter) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	f.a.forgetOwners()
	return f.Store.Update(ctx, c, rev)
}

func (f *forgetter) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	f.a.forgetOwners()
	return f.Store.Delete(ctx, pool, ip, rev)
}

func (f *forgetter) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if f.cur == nil {
		return netip.Addr{}, nil
	}
	return f.cur.Cursor(ctx, pool)
}

func (f *forgetter) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if f.cur == nil {
		return nil
	}
	return f.cur.SetCursor(ctx, pool, ip)
}

type forgetterExcl struct {
	*forgetter
	x store.ExclusiveCreator
}

func (f forgetterExcl) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	f.a.forgetOwners()
	return f.x.CreateExclusive(ctx, c)
}
