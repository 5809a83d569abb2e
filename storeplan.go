package ipam

import (
	"context"
	"log/slog"
	"net/netip"

	"github.com/ipamkit/ipam/store"
)

// storePlan is how an Allocator uses its Store: the optional capabilities
// the Store offers (see package store's doc), settled once by NewAllocator
// into functions and flags, so that the allocate path calls them and never
// asks the Store what it can do. A nil function is a capability the Store
// lacks, where the path has nothing to do in its place.
type storePlan struct {
	// create claims c and moves its pool's cursor to it (host-local's
	// last_reserved_ip): in one call if the Store can (store.CursorCreator),
	// else in two, the second a hint whose failure is only logged; Create
	// alone for a Store that keeps no cursors.
	create func(ctx context.Context, c store.Claim) (store.Claim, error)
	// createExclusive is create with the Store's check of what the owner
	// holds in the same atomic step (store.ExclusiveCreator); nil without.
	createExclusive func(ctx context.Context, c store.Claim) (store.Claim, error)
	// cursor reads a pool's round-robin cursor; nil without store.Cursors.
	cursor func(ctx context.Context, pool string) (netip.Addr, error)
	// poolVersion reads a pool's version (store.PoolVersioner); nil without.
	poolVersion func(ctx context.Context, pool string) (uint64, error)
	// ownedSince returns what an owner holds, at least as new as the write
	// of revision rev (store.OwnedAtLeast); NewAllocator sets it to its
	// Owned, less unreadable records, for a Store without.
	ownedSince func(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, error)
	// addressClaims returns the claims of an address in every pool, at
	// least as new as the write of revision rev (store.AddressReader, with
	// store.AddressClaimsAtLeast if there is one); nil when the PoolSource's
	// pools cannot overlap (a Catalog) or the Store cannot say.
	addressClaims func(ctx context.Context, ip netip.Addr, rev int64) ([]store.Claim, error)
	// listAll lists every claim of every pool (store.ClaimLister); nil
	// without.
	listAll func(ctx context.Context) ([]store.Claim, error)
	// watch follows every change (store.Watcher); nil without.
	watch func(ctx context.Context, h store.WatchHandler) error
	// ordered: the Store's revisions follow its writes
	// (store.OrderedRevisions).
	ordered bool
	// createFirst says an Allocate for a new owner may create before it
	// reads what the owner holds: the Store checks it as it creates
	// (ExclusiveCreator), or orders its revisions and answers an Owned at
	// least as new as a create cheaply (OwnedAtLeast), so that settle finds
	// a claim the owner held before as the first one.
	createFirst bool
}

// planFor settles how an Allocator uses s. static says the PoolSource's pools
// never change (a Catalog's), so that no address can be claimed in two pools;
// log gets the failures of hints.
func planFor(s store.Store, static bool, log *slog.Logger) storePlan {
	p := storePlan{create: s.Create}
	switch cs := s.(type) {
	case store.CursorCreator:
		p.create, p.cursor = cs.CreateAndSetCursor, cs.Cursor
	case store.Cursors:
		p.cursor = cs.Cursor
		p.create = func(ctx context.Context, c store.Claim) (store.Claim, error) {
			return store.CreateAndSetCursor(ctx, s, c, func(err error) {
				log.Warn("ipam: cannot record last reserved address", "pool", c.Pool, "ip", c.IP, "err", err)
			})
		}
	}
	if x, ok := s.(store.ExclusiveCreator); ok {
		p.createExclusive = x.CreateExclusive
	}
	if v, ok := s.(store.PoolVersioner); ok {
		p.poolVersion = v.PoolVersion
	}
	if o, ok := s.(store.OrderedRevisions); ok {
		p.ordered = o.RevisionsOrdered()
	}
	at, atLeast := s.(store.OwnedAtLeast)
	if atLeast {
		p.ownedSince = at.OwnedAtLeast
	}
	p.createFirst = p.createExclusive != nil || p.ordered && atLeast
	if ar, ok := s.(store.AddressReader); ok && !static {
		p.addressClaims = func(ctx context.Context, ip netip.Addr, _ int64) ([]store.Claim, error) {
			return ar.AddressClaims(ctx, ip)
		}
		if at, ok := s.(store.AddressClaimsAtLeast); ok {
			p.addressClaims = at.AddressClaimsAtLeast
		}
	}
	if l, ok := s.(store.ClaimLister); ok {
		p.listAll = l.ListAll
	}
	if w, ok := s.(store.Watcher); ok {
		p.watch = w.Watch
	}
	return p
}
