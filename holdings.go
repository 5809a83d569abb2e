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
	return a.readable(cs, err, func() []any { return []any{"owner", q.String()} })
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
// of t's interface before one that records none, then, with ordered
// revisions, the lowest revision (the claim that racing creates settle on:
// see settle), else the lowest pool and address.
func (hs *holdings) held(t *task, ordered bool) int {
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
		if ordered && c.Revision != b.Revision {
			if c.Revision < b.Revision {
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
//
// On a Store that neither checks the owner as it creates nor orders its
// revisions, the claim reused is touched (written at the revision read):
// another call that made it for the same owner at the same moment then keeps
// it instead of giving it up (see settle).
func (a *Allocator) reuse(ctx context.Context, t *task, hs *holdings) error {
	err := a.reuseHeld(ctx, t, hs, a.plan.createExclusive == nil && !a.plan.ordered)
	if errors.Is(err, errTaken) {
		// Given up meanwhile by the call that made it: serve anew.
		t.checked = true
		return nil
	}
	return err
}

// reuseHeld is reuse; with touch, the claim reused is written even if it
// needs no change (see settle), and a failed write is reported as
// errTaken.
func (a *Allocator) reuseHeld(ctx context.Context, t *task, hs *holdings, touch bool) error {
	t.checked = true
	k := hs.held(t, a.plan.ordered)
	if k < 0 {
		return nil
	}
	return a.serveWith(ctx, t, hs, hs.claims[k], touch)
}

// usable returns the index of c's pool if c, a claim the owner holds, may
// still serve t: its pool exists and covers its address, and a stable
// owner's pool is among t's candidates. Otherwise it returns nil.
func (a *Allocator) usable(ctx context.Context, t *task, hs *holdings, c store.Claim) (*poolIndex, error) {
	idx := t.idx
	if t.sel != nil {
		var err error
		if idx, err = a.index(ctx, c.Pool); errors.Is(err, ErrNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, poolError(t.iface, t.family, c.Pool, err)
		}
	}
	if idx.def.Load().layout.rangeOf(c.IP) < 0 || t.sel != nil && hs.owner.Stable && !slices.Contains(t.sel.Pools, c.Pool) {
		return nil, nil
	}
	return idx, nil
}

// serveWith makes c, a claim the owner holds that serves t, t's address, or,
// if it may no longer serve (see usable), the claim to give up once t is
// served anew.
func (a *Allocator) serveWith(ctx context.Context, t *task, hs *holdings, c store.Claim, touch bool) error {
	t.checked = true
	idx, err := a.usable(ctx, t, hs, c)
	if err != nil {
		return err
	}
	if idx == nil {
		hs.use(c)
		t.stale, t.plain = &c, true
		return nil
	}
	c, err = a.adopt(ctx, t, idx, c, hs.owner, touch)
	if err != nil {
		return err // not taken: the claim may serve another try
	}
	hs.use(c)
	if t.want.IsValid() && t.want != c.IP {
		owner := hs.owner
		owner.Interface = t.iface
		return &AllocationError{Interface: t.iface, Pool: idx.name, IP: t.want, Err: ErrOwnerConflict,
			Reason: fmt.Sprintf("%s already holds %s in this pool, not the requested %s", owner, c.IP, t.want)}
	}
	def := idx.def.Load()
	t.idx, t.pool, t.lay, t.ip, t.rev, t.reused = idx, def.pool, def.layout, c.IP, c.Revision, true
	if c.Owner.Interface == "" {
		t.legacy = &c
	}
	idx.learn(c.IP)
	return nil
}

// nameLegacy writes the name of its interface into every legacy claim (a
// container ID alone) that serves a task of an interface that another task
// serves with a claim that names it. host-local's DEL of an interface
// releases the legacy claims only when the interface has no other: without
// the name, such a mix would leave the legacy claim behind. An interface
// served by legacy claims alone keeps them as host-local wrote them. A
// failed write is logged: the claim stays, as host-local would leave it.
func (a *Allocator) nameLegacy(ctx context.Context, tasks []task) {
	for i := range tasks {
		t := &tasks[i]
		if t.legacy == nil {
			continue
		}
		if !slices.ContainsFunc(tasks, func(o task) bool { return o.iface == t.iface && o.legacy == nil && o.ip.IsValid() }) {
			continue
		}
		named := *t.legacy
		named.Owner.Interface = t.iface
		got, err := a.store.Update(ctx, named, t.legacy.Revision)
		if err != nil {
			a.log.Warn("ipam: cannot name the interface of a legacy claim", "pool", named.Pool, "ip", named.IP, "err", err)
			continue
		}
		t.rev, t.legacy = got.Revision, nil
	}
}

// adopt makes claim c, which the owner holds, the owner's as this request
// describes it: a stable owner's claim follows the pod of the same name to its
// new UID, and a pod's claim that records no interface (imported from
// Spiderpool, whose records have none) is taken by the interface t serves, so
// that another interface on the same pool gets an address of its own.
// host-local's legacy claims (a container ID alone) stay as they are, serving
// any interface of the container as host-local's do, unless a request mixes
// them with claims that name the interface (see nameLegacy). The update is
// revision-checked. With touch, c is written even if it
// needs no change, and a write that finds c changed or gone (another call
// gave it up, see settle) returns errTaken.
func (a *Allocator) adopt(ctx context.Context, t *task, idx *poolIndex, c store.Claim, owner store.Owner, touch bool) (store.Claim, error) {
	repoint := owner.Stable && (c.Owner.UID != owner.UID || !c.Owner.Stable)
	name := c.Owner.Interface == "" && owner.Query().Kind != store.KindContainer
	if !repoint && !name && !touch {
		return c, nil
	}
	moved := c
	if repoint || name {
		moved.Owner = owner
		moved.Owner.Interface = cmp.Or(c.Owner.Interface, t.iface)
	}
	got, err := a.store.Update(ctx, moved, c.Revision)
	switch {
	case err == nil:
		return got, nil
	case touch && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)):
		return c, errTaken
	}
	return c, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err,
		Reason: fmt.Sprintf("re-pointing the claim of %s (uid %s) on %s: %v", owner, c.Owner.UID, c.IP, err)}
}

// errTaken says that a claim to be taken over changed or went meanwhile.
var errTaken = errors.New("the claim changed meanwhile")

// settle checks, after a create made without the Store's exclusive check,
// that no other claim serves t for the owner: one another Allocator made for
// the same owner at the same moment, or one the check made before the create
// missed. It reports whether t is served: by c, the claim just made, or by
// the other claim; if neither, the caller starts over.
//
// Racing calls agree with nothing but the Store's answers and conditional
// writes. With ordered revisions (store.OrderedRevisions) the claim of the
// lowest revision serves: the first claim made is seen by every call whose
// create came later, and its maker, seeing no lower one, keeps it; the others
// give theirs up. Without them, a call that sees another claim gives its own
// up with a Delete at the revision it created and takes the other with an
// Update at the revision it read (a touch); a Delete that fails because the
// revision changed means a racing call took this claim, which is then kept,
// and a take that fails means the other's maker gave it up: start over. That
// never returns a claim a racing call deletes, but may leave the owner a
// second claim for the interface (its own, released with it) when three or
// more calls race.
func (a *Allocator) settle(ctx context.Context, t *task, idx *poolIndex, c store.Claim, hs *holdings) (served bool, err error) {
	q := hs.owner.Query()
	q.Interface = ""
	cs, err := a.plan.ownedSince(ctx, q, c.Revision)
	if err != nil {
		if derr := a.deleteAt(context.WithoutCancel(ctx), idx, c.IP, c.Revision, time.Time{}); derr != nil {
			a.log.Warn("ipam: cannot release a claim after a failed check", "pool", c.Pool, "ip", c.IP, "err", derr)
		}
		return false, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err, Reason: "reading what the owner holds: " + err.Error()}
	}
	first, other := c, false
	for _, x := range cs {
		if x.Key() == c.Key() || !t.serves(x) || hs.isUsed(x) {
			continue
		}
		if xi, err := a.usable(ctx, t, hs, x); err != nil || xi == nil {
			continue // a claim to give up, not one that serves
		}
		other = true
		if x.Revision < first.Revision {
			first = x
		}
	}
	if !other || a.plan.ordered && first.Key() == c.Key() {
		t.setServed(idx, c)
		return true, nil
	}
	// Give ours up.
	switch err := a.store.Delete(context.WithoutCancel(ctx), c.Pool, c.IP, c.Revision); {
	case err == nil, errors.Is(err, store.ErrNotFound):
		idx.forget(c.IP)
	case errors.Is(err, store.ErrConflict) && !a.plan.ordered:
		// A racing call took ours: keep it.
		cur, gerr := a.store.Get(ctx, c.Pool, c.IP)
		if gerr == nil && hs.owner.Query().Matches(cur) && t.serves(cur) {
			t.setServed(idx, cur)
			return true, nil
		}
	default:
		return false, &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err,
			Reason: "giving back a second address of " + hs.owner.String() + ": " + err.Error()}
	}
	hs.claims = slices.DeleteFunc(cs, func(x store.Claim) bool { return x.Key() == c.Key() })
	hs.known = true
	if a.plan.ordered {
		// The first claim serves; its maker keeps it.
		if err := a.serveWith(ctx, t, hs, first, false); err != nil {
			return false, err
		}
		return t.reused, nil
	}
	// Take what the owner holds, as a reuse would, with a write.
	switch err := a.reuseHeld(ctx, t, hs, true); {
	case errors.Is(err, errTaken):
		return false, nil
	case err != nil:
		return false, err
	}
	return t.reused, nil
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
