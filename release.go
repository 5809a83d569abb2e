package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam/store"
)

// This file gives addresses back and reports who holds what, from the Store's
// answers: a release or a lookup through any Allocator sees every claim,
// whichever Allocator or process made it.

// Release is ReleaseAt at time.Now().
func (a *Allocator) Release(ctx context.Context, owner store.Owner) error {
	return a.ReleaseAt(ctx, owner, time.Now())
}

// ReleaseAt releases what owner holds, as the Store has it: with
// owner.Interface set, the claims of that interface, or, if there are none,
// the claims that record no interface (host-local's legacy fallback);
// otherwise those of every interface. Releasing what is not held is not an
// error. A claim that someone else changed in the Store meanwhile is left
// alone.
//
// An owner is found by its primary identity (Owner.Query): its namespace and
// name if Stable, else its UID, else its container ID. A Stable owner
// releases only the claims that name its UID (if it has one): a late release
// from an earlier pod of the same name leaves the current pod's addresses
// alone, and with owner.Interface set, the fallback to claims that record
// no interface looks at that pod's claims only. An owner not marked Stable
// but with a UID also releases the stable claims that name that UID, so a
// caller that forgot the flag still frees them.
func (a *Allocator) ReleaseAt(ctx context.Context, owner store.Owner, now time.Time) error {
	return a.released(a.start(), "", a.releaseAt(ctx, owner, now))
}

// releaseAt is ReleaseAt without the Observer.
func (a *Allocator) releaseAt(ctx context.Context, owner store.Owner, now time.Time) error {
	if ctx == nil {
		return errNilContext
	}
	held, f, err := a.selectOwned(ctx, owner)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range held {
		if _, err := a.releaseClaim(ctx, c, f, a.quarantineUntil(now)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Lookup returns the claims owner holds, as ReleaseAt would select them, sorted
// by pool and address, as the Store has them.
func (a *Allocator) Lookup(ctx context.Context, owner store.Owner) ([]store.Claim, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	held, _, err := a.selectOwned(ctx, owner)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(held, compareClaims)
	return held, nil
}

// selectOwned returns the claims ReleaseAt and Lookup act on, and the filter
// a claim must still pass to be released.
func (a *Allocator) selectOwned(ctx context.Context, owner store.Owner) ([]store.Claim, ownerFilter, error) {
	if owner.IsZero() {
		return nil, ownerFilter{}, &FieldError{Object: "owner", Field: "uid", Reason: "required (or containerID)"}
	}
	q := owner.Query()
	if err := q.Validate(); err != nil {
		return nil, ownerFilter{}, &FieldError{Object: "owner", Field: "name", Value: owner.Namespace + "/" + owner.Name, Reason: err.Error()}
	}
	held, err := a.owned(ctx, q)
	if err != nil {
		return nil, ownerFilter{}, err
	}
	f := ownerFilter{q: q}
	if owner.Stable && owner.UID != "" {
		// The pod asked for, not the name's other incarnations; first, so
		// that their claims do not decide which of its own it has.
		f.uid = owner.UID
		held = slices.DeleteFunc(held, func(c store.Claim) bool { return c.Owner.UID != owner.UID })
	}
	if q.Interface != "" && slices.ContainsFunc(held, func(c store.Claim) bool { return c.Owner.Interface == q.Interface }) {
		// Claims of the interface itself: those that record none are
		// another interface's fallback, not this one's.
		held = slices.DeleteFunc(held, func(c store.Claim) bool { return c.Owner.Interface == "" })
	}
	return held, f, nil
}

// compareClaims orders claims by pool, then address.
func compareClaims(x, y store.Claim) int {
	return cmp.Or(strings.Compare(x.Pool, y.Pool), x.IP.Compare(y.IP))
}

// ownerFilter limits a release to claims that q matches and, if uid is set,
// that name that pod UID. The zero ownerFilter lets every claim through.
type ownerFilter struct {
	q   store.OwnerQuery
	uid string
}

func (f ownerFilter) lets(c store.Claim) bool {
	if f.q.IsZero() {
		return true
	}
	return f.q.Matches(c) && (f.uid == "" || c.Owner.UID == f.uid)
}

// releaseClaim deletes c at its revision. If the Store's claim changed since
// c was read, it is read again and released only while f still lets it
// through: someone else's claim now is left alone. found reports whether the
// Store had a claim on the address at all. A released address stays out of
// reuse until the given time (zero: none).
func (a *Allocator) releaseClaim(ctx context.Context, c store.Claim, f ownerFilter, until time.Time) (found bool, err error) {
	for attempt := 0; ; attempt++ {
		err := a.store.Delete(ctx, c.Pool, c.IP, c.Revision)
		switch {
		case err == nil:
			a.retired(ctx, c.Pool, c.IP, until)
			return true, nil
		case errors.Is(err, store.ErrNotFound):
			a.retired(ctx, c.Pool, c.IP, time.Time{})
			return false, nil
		case errors.Is(err, store.ErrConflict) && attempt < 3:
			cur, gerr := a.store.Get(ctx, c.Pool, c.IP)
			switch {
			case errors.Is(gerr, store.ErrNotFound):
				a.retired(ctx, c.Pool, c.IP, time.Time{})
				return false, nil
			case gerr != nil:
				return true, fmt.Errorf("pool %q: releasing %s: %w", c.Pool, c.IP, gerr)
			case !f.lets(cur):
				// Someone else holds it now: learn that, release nothing.
				a.learnt(c.Pool, c.IP)
				return true, nil
			}
			c = cur
		default:
			return true, fmt.Errorf("pool %q: releasing %s: %w", c.Pool, c.IP, err)
		}
	}
}

// retired tells the index of pool that ip is no longer claimed. An address
// to keep in quarantine (until is set) is recorded in the pool's index even if
// this Allocator has not used the pool yet; otherwise only a loaded index
// hears of it.
func (a *Allocator) retired(ctx context.Context, pool string, ip netip.Addr, until time.Time) {
	idx := a.indexFor(pool)
	if !until.IsZero() && (idx == nil || idx.def.Load() == nil) {
		idx, _ = a.index(ctx, pool) // a pool gone from the PoolSource has nothing to keep
	}
	if idx != nil && idx.def.Load() != nil {
		idx.retire(ip, until)
	}
}

// learnt tells the index of pool, if loaded, that ip is claimed.
func (a *Allocator) learnt(pool string, ip netip.Addr) {
	if idx := a.indexFor(pool); idx != nil && idx.def.Load() != nil {
		idx.learn(ip)
	}
}

// Claims lists every claim of every pool of the PoolSource, as the Store has
// them now, sorted by pool and address; from a Store that can list them all
// (store.ClaimLister), those of pools the PoolSource no longer has too. It is
// what a garbage collector inspects before deciding (see ReleaseClaim).
func (a *Allocator) Claims(ctx context.Context) ([]store.Claim, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	if a.plan.listAll != nil {
		cs, err := a.plan.listAll(ctx)
		out, err := a.readable(cs, err, nil)
		if err != nil {
			return nil, fmt.Errorf("listing every claim: %w", err)
		}
		slices.SortFunc(out, compareClaims)
		return out, nil
	}
	var out []store.Claim
	for p := range a.source.Pools() {
		cs, err := a.list(ctx, p.Name)
		if err != nil {
			return nil, fmt.Errorf("listing claims of pool %q: %w", p.Name, err)
		}
		out = append(out, cs...)
	}
	slices.SortFunc(out, compareClaims)
	return out, nil
}

// ReleaseClaim releases claim c only if the Store still has it at c.Revision:
// a claim that changed since it was inspected (re-pointed to a new pod,
// released and claimed again) is left alone, and ReleaseClaim returns an error
// wrapping ErrConflict. A claim already gone returns an error wrapping
// ErrNotFound. The pool need not be in the PoolSource any more.
func (a *Allocator) ReleaseClaim(ctx context.Context, c store.Claim) error {
	return a.ReleaseClaimAt(ctx, c, time.Now())
}

// ReleaseClaimAt is ReleaseClaim at time now (which starts the address's
// quarantine, if the Allocator has one).
func (a *Allocator) ReleaseClaimAt(ctx context.Context, c store.Claim, now time.Time) error {
	return a.released(a.start(), c.Pool, a.releaseClaimAt(ctx, c, now))
}

// releaseClaimAt is ReleaseClaimAt without the Observer.
func (a *Allocator) releaseClaimAt(ctx context.Context, c store.Claim, now time.Time) error {
	if ctx == nil {
		return errNilContext
	}
	err := a.store.Delete(ctx, c.Pool, c.IP, c.Revision)
	switch {
	case err == nil:
		a.retired(ctx, c.Pool, c.IP, a.quarantineUntil(now))
		return nil
	case errors.Is(err, store.ErrNotFound):
		a.retired(ctx, c.Pool, c.IP, time.Time{})
		return fmt.Errorf("pool %q: %s: %w", c.Pool, c.IP, ErrNotFound)
	case errors.Is(err, store.ErrConflict):
		a.learnt(c.Pool, c.IP)
		return fmt.Errorf("pool %q: %s changed since revision %d: %w", c.Pool, c.IP, c.Revision, ErrConflict)
	default:
		return fmt.Errorf("pool %q: releasing %s: %w", c.Pool, c.IP, err)
	}
}

// ReleaseIP releases the claim on ip in pool, whoever holds it. It returns
// ErrNotFound if the address is not claimed. The pool need not be in the
// PoolSource any more.
func (a *Allocator) ReleaseIP(ctx context.Context, pool string, ip netip.Addr) error {
	return a.ReleaseIPAt(ctx, pool, ip, time.Now())
}

// ReleaseIPAt is ReleaseIP at time now (which starts the address's
// quarantine, if the Allocator has one).
func (a *Allocator) ReleaseIPAt(ctx context.Context, pool string, ip netip.Addr, now time.Time) error {
	return a.released(a.start(), pool, a.releaseIPAt(ctx, pool, ip, now))
}

// releaseIPAt is ReleaseIPAt without the Observer.
func (a *Allocator) releaseIPAt(ctx context.Context, pool string, ip netip.Addr, now time.Time) error {
	if ctx == nil {
		return errNilContext
	}
	c, err := a.store.Get(ctx, pool, ip)
	if errors.Is(err, store.ErrNotFound) {
		a.retired(ctx, pool, ip, time.Time{})
		return fmt.Errorf("pool %q: %s: %w", pool, ip, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("pool %q: releasing %s: %w", pool, ip, err)
	}
	found, err := a.releaseClaim(ctx, c, ownerFilter{}, a.quarantineUntil(now))
	if err == nil && !found {
		return fmt.Errorf("pool %q: %s: %w", pool, ip, ErrNotFound)
	}
	return err
}
