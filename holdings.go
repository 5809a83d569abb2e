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

// This file decides what an owner already holds, from the Store's answer: the
// Allocator keeps no memory of owners, so an owner served by another
// Allocator, another process or an earlier run is found the same way.

// holdings is what the Store says one owner holds, read during one Allocate.
type holdings struct {
	owner  store.Owner // Interface unset
	known  bool        // claims were read
	claims []store.Claim
	// used are the keys of claims that a task of this request reuses or
	// gives up: no other task may take them.
	used []string
}

// readHoldings asks the Store what hs.owner holds on every interface: by its
// primary identity, and for a stable owner also by its pod UID (claims made
// before it was marked stable, or imported).
func (a *Allocator) readHoldings(ctx context.Context, hs *holdings) error {
	q := hs.owner.Query()
	q.Interface = ""
	cs, err := a.owned(ctx, q)
	if err != nil {
		return err
	}
	if hs.owner.Stable && hs.owner.UID != "" {
		more, err := a.owned(ctx, store.ByUID(hs.owner.UID))
		if err != nil {
			return err
		}
		for _, c := range more {
			if !slices.ContainsFunc(cs, func(x store.Claim) bool { return x.Pool == c.Pool && x.IP == c.IP }) {
				cs = append(cs, c)
			}
		}
	}
	hs.claims, hs.known = cs, true
	return nil
}

// owned is the Store's Owned, except that unreadable records (ErrCorrupt)
// are logged and skipped, as in list.
func (a *Allocator) owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	cs, err := a.store.Owned(ctx, q)
	if err != nil && errors.Is(err, store.ErrCorrupt) {
		a.log.Warn("ipam: unreadable claims skipped", "owner", q.String(), "err", err)
		return cs, nil
	}
	return cs, err
}

func (hs *holdings) isUsed(c store.Claim) bool { return slices.Contains(hs.used, c.Key()) }

func (hs *holdings) use(c store.Claim) { hs.used = append(hs.used, c.Key()) }

// serves reports whether claim c, which the owner holds, is one that task t
// may reuse: on t's interface, or on none; in t's pool for a task that names
// its pool; of t's family for a selected task, where a claim that records no
// interface serves only if its pool is one of t's candidates (so that the
// interface of another network never takes it).
func (t *task) serves(c store.Claim) bool {
	if c.Owner.Interface != "" && c.Owner.Interface != t.iface {
		return false
	}
	if t.sel == nil {
		return c.Pool == t.idx.name
	}
	if familyOf(c.IP) != t.family {
		return false
	}
	return c.Owner.Interface != "" || slices.Contains(t.sel.Pools, c.Pool)
}

// held returns the index in hs.claims of the claim t should reuse, or -1: one
// of t's interface before one that records none, then the lowest pool and
// address.
func (hs *holdings) held(t *task) int {
	best := -1
	for i, c := range hs.claims {
		if !t.serves(c) || hs.isUsed(c) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := hs.claims[best]
		if (c.Owner.Interface != "") != (b.Owner.Interface != "") {
			if c.Owner.Interface != "" {
				best = i
			}
			continue
		}
		if r := cmp.Or(strings.Compare(c.Pool, b.Pool), c.IP.Compare(b.IP)); r < 0 {
			best = i
		}
	}
	return best
}

// reuse makes what the owner holds for t, if anything, t's address. A claim
// whose pool is gone or no longer covers its address, or, for a stable owner,
// in a pool no longer among t's candidates, is not reused: it is given up once
// t is served anew. A claim that must follow the owner (a stable owner's under
// a new pod UID; a pod's claim that records no interface) is re-pointed with a
// revision-checked Update.
func (a *Allocator) reuse(ctx context.Context, t *task, hs *holdings) error {
	t.checked = true
	k := hs.held(t)
	if k < 0 {
		return nil
	}
	c := hs.claims[k]
	hs.use(c)
	idx := t.idx
	if t.sel != nil {
		var err error
		if idx, err = a.index(ctx, c.Pool); errors.Is(err, ErrNotFound) {
			t.stale, t.plain = &c, true
			return nil
		} else if err != nil {
			return poolError(t.iface, t.family, c.Pool, err)
		}
	}
	def := idx.def.Load()
	if def.layout.rangeOf(c.IP) < 0 || t.sel != nil && hs.owner.Stable && !slices.Contains(t.sel.Pools, c.Pool) {
		t.stale, t.plain = &c, true
		return nil
	}
	c, err := a.adopt(ctx, t, idx, c, hs.owner)
	if err != nil {
		return err
	}
	if t.want.IsValid() && t.want != c.IP {
		owner := hs.owner
		owner.Interface = t.iface
		return &AllocationError{Interface: t.iface, Pool: idx.name, IP: t.want, Err: ErrOwnerConflict,
			Reason: fmt.Sprintf("%s already holds %s in this pool, not the requested %s", owner, c.IP, t.want)}
	}
	t.idx, t.pool, t.lay, t.ip, t.rev, t.reused = idx, def.pool, def.layout, c.IP, c.Revision, true
	idx.learn(c.IP)
	return nil
}

// adopt makes claim c, which the owner holds, the owner's as this request
// describes it: a stable owner's claim follows the pod of the same name to its
// new UID, and a pod's claim that records no interface (imported from
// Spiderpool, whose records have none) is taken by the interface t serves, so
// that another interface on the same pool gets an address of its own.
// host-local's legacy claims, of an owner known by container ID, stay as they
// are. The update is revision-checked.
func (a *Allocator) adopt(ctx context.Context, t *task, idx *poolIndex, c store.Claim, owner store.Owner) (store.Claim, error) {
	repoint := owner.Stable && (c.Owner.UID != owner.UID || !c.Owner.Stable)
	name := c.Owner.Interface == "" && owner.Query().Kind != store.KindContainer
	if !repoint && !name {
		return c, nil
	}
	moved := c
	moved.Owner = owner
	moved.Owner.Interface = cmp.Or(c.Owner.Interface, t.iface)
	got, err := a.store.Update(ctx, moved, c.Revision)
	if err != nil {
		return c, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err,
			Reason: fmt.Sprintf("re-pointing the claim of %s (uid %s) on %s: %v", owner, c.Owner.UID, c.IP, err)}
	}
	return got, nil
}

// settle checks, after a create made without the Store's exclusive check,
// that no other claim serves t for the owner: another Allocator may have
// served the same owner at the same moment. It reports whether t is served:
// by c, the claim just made, or by a rival claim; if neither, the caller
// starts over.
//
// Racing calls agree with nothing but conditional writes. A call that sees a
// rival gives its own claim up with a Delete at the revision it created, and
// takes the rival with an Update at the revision it read (a touch). A Delete
// that fails because the revision changed means a rival call took this claim
// meanwhile: it is kept, and served by both. A touch that fails means the
// rival's maker gave it up: the call starts over. So whatever the
// interleaving, a claim a call returns is one no racing call deletes: of two
// calls that each see the other, either one's claim is taken by the other, or
// both start over.
func (a *Allocator) settle(ctx context.Context, t *task, idx *poolIndex, c store.Claim, hs *holdings) (served bool, err error) {
	q := hs.owner.Query()
	q.Interface = t.iface
	cs, err := a.owned(ctx, q)
	if err != nil {
		if derr := a.deleteAt(context.WithoutCancel(ctx), idx, c.IP, c.Revision, time.Time{}); derr != nil {
			a.log.Warn("ipam: cannot release a claim after a failed check", "pool", c.Pool, "ip", c.IP, "err", derr)
		}
		return false, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err, Reason: "reading what the owner holds: " + err.Error()}
	}
	rival := -1
	for i, x := range cs {
		if x.Key() == c.Key() || !t.serves(x) || hs.isUsed(x) {
			continue
		}
		if rival < 0 || compareClaims(x, cs[rival]) < 0 {
			rival = i
		}
	}
	if rival < 0 {
		t.setServed(idx, c)
		return true, nil
	}
	// Give ours up.
	switch err := a.store.Delete(context.WithoutCancel(ctx), c.Pool, c.IP, c.Revision); {
	case err == nil:
		idx.forget(c.IP)
	case errors.Is(err, store.ErrConflict):
		// A racing call took ours: keep it.
		cur, gerr := a.store.Get(ctx, c.Pool, c.IP)
		if gerr == nil && q.Matches(cur) && t.serves(cur) {
			t.setServed(idx, cur)
			return true, nil
		}
	case errors.Is(err, store.ErrNotFound):
		idx.forget(c.IP)
	default:
		return false, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err,
			Reason: "giving back a second address of " + hs.owner.String() + ": " + err.Error()}
	}
	// Take the rival, if its maker has not given it up.
	r := cs[rival]
	ridx, err := a.index(ctx, r.Pool)
	if err != nil {
		return false, nil // a pool gone meanwhile: start over
	}
	touched, err := a.store.Update(ctx, r, r.Revision)
	switch {
	case err == nil:
		hs.use(touched)
		def := ridx.def.Load()
		t.idx, t.pool, t.lay, t.ip, t.rev, t.reused = ridx, def.pool, def.layout, touched.IP, touched.Revision, true
		ridx.learn(touched.IP)
		return true, nil
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return false, nil
	}
	return false, &AllocationError{Interface: t.iface, Pool: r.Pool, IP: r.IP, Err: err, Reason: "store: " + err.Error()}
}

// releaseStale releases c, a claim its owner no longer uses, at the revision
// read (or, if it changed, at the current one while the same pod still holds
// it).
func (a *Allocator) releaseStale(ctx context.Context, c store.Claim, now time.Time) error {
	q := c.Owner.Query()
	q.Interface = ""
	_, err := a.releaseClaim(ctx, c, ownerFilter{q: q, uid: c.Owner.UID}, a.quarantineUntil(now))
	return err
}

// deleteAt deletes the claim of ip in idx's pool at revision rev, and tells
// the index. A claim already gone is not an error.
func (a *Allocator) deleteAt(ctx context.Context, idx *poolIndex, ip netip.Addr, rev int64, until time.Time) error {
	err := a.store.Delete(ctx, idx.name, ip, rev)
	switch {
	case err == nil:
		idx.retire(ip, until)
		return nil
	case errors.Is(err, store.ErrNotFound):
		idx.forget(ip)
		return nil
	}
	return err
}
