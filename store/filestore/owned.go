//go:build linux

package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"slices"

	"github.com/ipamkit/ipam/store"
)

// Owned returns the claims of q's container in the Store's pools (on q's
// interface and on none, if q names one), each read from its claim file. The
// format keeps container IDs only, so a query by UID or name has no claims.
//
// It reads the container's entry in the owner index and the claim file of
// each address the entry lists, without the lock when the index is known to
// be complete, and under the lock otherwise: then it first rebuilds the index
// if host-local or another program changed the directory since it was last
// brought up to date, and removes from the entry the addresses whose claim
// files are gone or another container's. See the package documentation,
// Owners and Cost.
func (s *Store) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	fail := func(err error) ([]store.Claim, error) {
		return nil, fmt.Errorf("filestore: owned %s: %w", q, err)
	}
	if err := s.ready(ctx); err != nil {
		return fail(err)
	}
	if q.Kind != store.KindContainer {
		return []store.Claim{}, nil
	}
	if cs, ok := s.ownedUnlocked(q); ok {
		return cs, nil
	}
	h, err := s.begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer s.end(h)
	held, err := s.owned(ctx, h, q.ID)
	if err != nil {
		return fail(err)
	}
	out := held[:0]
	for _, c := range held {
		if q.Matches(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// ownedUnlocked is Owned without the lock. It reports ok false, to be asked
// again under the lock, unless the index is known to be complete and every
// address of the container's entry is its claim, settled.
func (s *Store) ownedUnlocked(q store.OwnerQuery) (claims []store.Claim, ok bool) {
	if _, why := s.indexValid(); why != "" {
		return nil, false
	}
	e, err := s.readEntry(entryName(q.ID))
	if err != nil || e.bad != "" || e.all {
		return nil, false
	}
	claims = []store.Claim{}
	for _, ip := range e.ips {
		c, v, err := s.verify(q.ID, ip, false)
		if err != nil || v != verHeld {
			return nil, false
		}
		if p := s.poolOf(ip); p != nil {
			c.Pool = p.Name
			if q.Matches(c) {
				claims = append(claims, c)
			}
		}
	}
	return claims, true
}

// owned returns, under h, the claims of container id in the Store's pools:
// it rebuilds the index first if it is not complete, and removes from id's
// entry the addresses that id no longer holds.
func (s *Store) owned(ctx context.Context, h *hold, id string) ([]store.Claim, error) {
	if err := s.ensure(ctx, h); err != nil {
		return nil, err
	}
	e, err := s.readEntry(entryName(id))
	if err != nil {
		return nil, err
	}
	if e.bad != "" {
		s.log.Warn("filestore: owner index entry is corrupt; rebuilding the index", "file", s.entryPath(e.name), "problem", e.bad)
		h.stale = true
		if err := s.ensure(ctx, h); err != nil {
			return nil, err
		}
		if e, err = s.readEntry(entryName(id)); err != nil {
			return nil, err
		}
		if e.bad != "" {
			return nil, fmt.Errorf("owner index entry %s still corrupt after a rebuild: %s", s.entryPath(e.name), e.bad)
		}
	}
	if e.all {
		return s.scanOwned(ctx, h, id, e)
	}
	var held []store.Claim
	keep := make([]netip.Addr, 0, len(e.ips))
	for _, ip := range e.ips {
		c, v, err := s.verify(id, ip, true)
		if err != nil {
			return nil, err
		}
		if v != verHeld {
			continue
		}
		keep = append(keep, ip)
		if p := s.poolOf(ip); p != nil {
			c.Pool = p.Name
			held = append(held, c)
		}
	}
	if len(keep) != len(e.ips) {
		h.idxChanged = true
		if err := s.writeEntry(e, keep); err != nil {
			s.log.Warn("filestore: cannot remove addresses no longer held from an owner index entry", "file", s.entryPath(e.name), "error", err)
			return held, nil
		}
		e.ips, e.exists = keep, len(keep) > 0
	}
	h.read = &e
	return held, nil
}

// scanOwned returns, under h, the claims of container id, whose entry e is an
// overflow, by reading every claim file; it writes the entry as a list again
// if the addresses now fit.
func (s *Store) scanOwned(ctx context.Context, h *hold, id string, e entry) ([]store.Claim, error) {
	var held []store.Claim
	var ips []netip.Addr
	n := 0
	err := s.walk(s.dir, func(name string) error {
		if n++; n%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ip, badName, ok := claimName(name)
		if !ok || badName != "" {
			return nil
		}
		c, v, err := s.verify(id, ip, true)
		if err != nil || v != verHeld {
			return err
		}
		ips = append(ips, ip)
		if p := s.poolOf(ip); p != nil {
			c.Pool = p.Name
			held = append(held, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	if entryTarget(ips) != overflow {
		h.idxChanged = true
		if err := s.writeEntry(e, ips); err != nil {
			s.log.Warn("filestore: cannot update an owner index entry", "file", s.entryPath(e.name), "error", err)
		}
	}
	return held, nil
}

// What verify finds at an address of an index entry.
const (
	verHeld   = iota // the container's claim
	verStale         // no claim, another container's, or (under the lock) corrupt
	verUnsure        // without the lock: a file being written; ask again under it
)

// verify reads the claim file of ip and reports whether container id holds
// it, with the claim (its Pool left empty) if so.
func (s *Store) verify(id string, ip netip.Addr, locked bool) (store.Claim, int, error) {
	path := s.claimPath(ip)
	data, st, bad, err := s.readFile(path, true)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return store.Claim{}, verStale, nil
	case err != nil:
		return store.Claim{}, verStale, err
	}
	var owner store.Owner
	if bad == "" {
		owner, bad = parseContent(data)
	}
	switch {
	case bad != "" && !locked, st.nlink != 1 && !locked:
		// Being written by host-local (created, not yet written), or being
		// published by this package (linked to a temporary name as well).
		return store.Claim{}, verUnsure, nil
	case bad != "", owner.ContainerID != id:
		return store.Claim{}, verStale, nil
	}
	return store.Claim{IP: ip, Owner: owner, Time: st.mtime, Revision: st.rev}, verHeld, nil
}

// poolOf returns the configured pool that holds ip, or nil.
func (s *Store) poolOf(ip netip.Addr) *pool {
	for _, p := range s.order {
		if p.contains(ip) {
			return p
		}
	}
	return nil
}

// CreateExclusive is CreateAndSetCursor, unless c's container already holds
// a claim in the Store's pools that store.Conflicts with c: one of c.IP's
// family on c's interface or on none (or, for a c without interface, on
// any). It then creates nothing and returns an error wrapping a
// *store.HeldError that lists those claims, whether or not c.IP is free. The
// check and the create are one step under the lock, so that of two Stores
// (in two processes) serving one container at once, one creates and the
// other is refused.
//
// It costs what Owned costs under the lock and a CreateAndSetCursor: the
// container's index entry, and the claim files it lists.
func (s *Store) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, createExclusive)
}

// heldError returns the *store.HeldError that stops c, or nil: the claims of
// held that conflict with it.
func heldError(c store.Claim, held []store.Claim) error {
	var conflicts []store.Claim
	for _, x := range held {
		if store.Conflicts(c, x) {
			conflicts = append(conflicts, x)
		}
	}
	if len(conflicts) == 0 {
		return nil
	}
	return &store.HeldError{Claim: c, Held: conflicts}
}
