package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam/store"
)

// This file is the allocate path: from a Request to the tasks it needs (one
// per interface and pool named, or per interface and family selected), what
// the owner holds already, and a claim for each task that holds nothing.

// errNilContext is returned by every method given a nil context.
var errNilContext = &FieldError{Object: "call", Field: "ctx", Reason: "nil context"}

// Allocate is AllocateAt at time.Now().
func (a *Allocator) Allocate(ctx context.Context, req Request) (Result, error) {
	start := a.start()
	res, err := a.allocate(ctx, &req, time.Now())
	return res, a.allocated(start, &res, err)
}

// AllocateAt serves every interface of req and records the claims at time now.
//
// An interface that names its pools gets one address from each, in order
// (host-local's range sets). An interface that names none gets its pools from
// Spiderpool's chain (Select): per IP family, the candidates are filtered
// (Subject.Check), sorted by priority (Sort) and tried in that order, an
// exhausted, fully excluded, fully reserved or overlapping pool falling
// through to the next. The Result's Trace says what happened to every pool
// considered; the same trace rides in the error when something cannot be
// served.
//
// It is idempotent, whichever Allocator or process served the owner before:
// what the owner holds is asked of the Store. An owner that already holds an
// address for an interface (in that pool, or, for selected pools, of that
// family) gets it back (Reused), and a requested address must then be that
// one (else ErrOwnerConflict). A claim that records no interface (imported
// from Spiderpool, or host-local's legacy form) serves an interface only if
// its pool is one that interface may use. A held address its pool no longer
// covers is replaced: a new one is claimed and the old released. It is
// all-or-nothing across pools, families and interfaces: if any part fails,
// the addresses this call claimed are released before the error returns, and
// the addresses the owner held before the call are kept. Requested addresses
// are placed before anything is claimed, and claimed before any dynamic
// address. ErrExhausted is reported only once the Store agrees: a List of the
// pool read during the call, or, from a Store with pool versions
// (store.PoolVersioner), a version unchanged since the List the Allocator
// knows the pool from.
func (a *Allocator) AllocateAt(ctx context.Context, req Request, now time.Time) (Result, error) {
	start := a.start()
	res, err := a.allocate(ctx, &req, now)
	return res, a.allocated(start, &res, err)
}

// allocate is AllocateAt with req by reference, which it does not keep or
// change: a Request is a few hundred bytes, copied once by the exported
// methods instead of at every call.
func (a *Allocator) allocate(ctx context.Context, req *Request, now time.Time) (Result, error) {
	if ctx == nil {
		return Result{}, errNilContext
	}
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	var (
		selected []Candidates
		sreq     *Request // a heap copy of req, made only when selecting
	)
	if req.selects() {
		sreq = new(Request)
		*sreq = *req
		var err error
		if selected, err = Select(sreq, a.source); err != nil {
			return Result{}, err
		}
	}

	// Resolve every pool and place every requested address first.
	n := len(selected)
	for _, ifc := range req.Interfaces {
		n += len(ifc.Pools)
	}
	var taskBuf [2]task
	tasks := taskBuf[:0]
	if n > len(taskBuf) {
		tasks = make([]task, 0, n)
	}
	// Selected interfaces keep the order Select gave them (the ippools
	// annotation's, for that rule), placed where the first of them is.
	var err error
	for i, ifc := range req.Interfaces {
		if len(ifc.Pools) == 0 {
			if slices.IndexFunc(req.Interfaces[:i], func(x NIC) bool { return len(x.Pools) == 0 }) < 0 {
				for k := range selected {
					if tasks, err = a.appendSelected(tasks, sreq, &selected[k]); err != nil {
						return Result{}, err
					}
				}
			}
			continue
		}
		start := len(tasks)
		for _, name := range ifc.Pools {
			idx, err := a.index(ctx, name)
			if err != nil {
				return Result{}, poolError(ifc.Name, 0, name, err)
			}
			def := idx.def.Load()
			// tasks has room for every task: set the new one in place
			// rather than copy in a whole task.
			tasks = tasks[:len(tasks)+1]
			t := &tasks[len(tasks)-1]
			t.iface, t.idx, t.pool, t.lay, t.source = ifc.Name, idx, def.pool, def.layout, SourceRequest
		}
		if err := placeRequested(ifc, tasks[start:]); err != nil {
			return Result{}, err
		}
	}

	// What the owner holds already: asked of the Store up front for a
	// stable owner, whose claims may sit in pools it no longer uses or under
	// the UID it had before it was marked stable, when addresses are
	// requested, which must be checked against what is held first, and
	// when the Store can neither check it as it creates nor settle a create
	// afterwards cheaply. Otherwise the create comes first, and the Store's
	// exclusive check, or settle, finds it (see createFirst).
	hs := &holdings{owner: req.Owner()}
	if !a.plan.createFirst || req.Stable || requests(tasks) {
		if err := a.readHoldings(ctx, hs); err != nil {
			return Result{}, &AllocationError{Err: err, Reason: "reading what the owner holds: " + err.Error()}
		}
		for i := range tasks {
			if err := a.reuse(ctx, &tasks[i], hs); err != nil {
				return Result{}, tasks[i].fail(tasks, err)
			}
		}
	}

	var claimedBuf [2]int
	claimed := claimedBuf[:0]
	for pass := 0; pass < 2; pass++ {
		for i := range tasks {
			t := &tasks[i]
			if t.reused || t.ip.IsValid() || t.want.IsValid() != (pass == 0) {
				continue
			}
			var err error
			if t.sel != nil {
				err = a.claimSelected(ctx, t, hs, now)
			} else {
				err = a.claim(ctx, t, t.idx, t.want, hs, now)
				if err != nil {
					t.outcome, t.note = StatusFailed, err.Error()
					if errors.Is(err, ErrExhausted) {
						t.outcome, t.reason = StatusExhausted, ReasonExhausted
					}
				}
			}
			if err != nil {
				a.rollback(ctx, tasks, claimed)
				return Result{}, t.fail(tasks, err)
			}
			if !t.reused {
				claimed = append(claimed, i)
			}
		}
	}

	a.nameLegacy(ctx, tasks)
	for i := range tasks {
		if c := tasks[i].stale; c != nil {
			if err := a.releaseStale(ctx, *c, now); err != nil {
				a.log.Warn("ipam: cannot release an address the owner no longer uses", "pool", c.Pool, "ip", c.IP, "err", err)
			}
		}
	}
	entries := 0
	for i := range tasks {
		entries += max(1, len(tasks[i].trace)+len(tasks[i].order))
	}
	res := newResult(len(tasks), entries)
	res.IPs = res.IPs[:len(tasks)]
	for i := range tasks {
		t := &tasks[i]
		t.config(&res.IPs[i])
		res.Trace = t.appendTrace(res.Trace)
	}
	return res, nil
}

// requests reports whether some task has a requested address.
func requests(tasks []task) bool {
	for i := range tasks {
		if tasks[i].want.IsValid() {
			return true
		}
	}
	return false
}

// poolError is the *AllocationError for a pool that cannot be used at all:
// unknown, or invalid.
func poolError(iface string, family int, name string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return &AllocationError{Interface: iface, Family: family, Pool: name, Err: err, Reason: "no such pool"}
	}
	// A validation error names the pool itself.
	return &AllocationError{Interface: iface, Family: family, Err: err, Reason: err.Error()}
}

// appendSelected adds the task for one interface and family whose pools the
// chain selected: the named pools, filtered for the pod, then sorted.
func (a *Allocator) appendSelected(tasks []task, req *Request, c *Candidates) ([]task, error) {
	ifc := NIC{Name: c.Interface}
	for _, x := range req.Interfaces {
		if x.Name == c.Interface {
			ifc = x
		}
	}
	subj, err := SubjectOf(req, ifc)
	if err != nil {
		return tasks, err
	}
	t := task{iface: c.Interface, family: c.Family, source: c.Source, sel: c}
	t.trace = make([]TraceEntry, 0, len(c.Pools))
	pools := make([]*Pool, 0, len(c.Pools))
	for _, name := range c.Pools {
		p, ok := a.source.Pool(name)
		if !ok {
			t.trace = append(t.trace, TraceEntry{Pool: name, Status: StatusFailed, Reason: ReasonNotFound, Message: "no such pool"})
			return tasks, t.fail(append(tasks, t), &AllocationError{Interface: c.Interface, Family: c.Family, Pool: name, Err: ErrNotFound,
				Reason: fmt.Sprintf("no such pool (named by %s)", c.Source)})
		}
		if r, bad := subj.Check(p, c.Family); bad {
			t.trace = append(t.trace, TraceEntry{Pool: name, Status: StatusFiltered, Reason: r.Reason, Message: r.Message})
			continue
		}
		pools = append(pools, p)
	}
	Sort(pools)
	t.order = pools
	return append(tasks, t), nil
}

// claimSelected tries t's pools in order until one gives an address, or
// turns out to hold one for the owner already.
func (a *Allocator) claimSelected(ctx context.Context, t *task, hs *holdings, now time.Time) error {
	for k, p := range t.order {
		rank := k + 1
		idx, err := a.index(ctx, p.Name)
		if err != nil {
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFailed, Message: err.Error(), Rank: rank})
			t.tried = rank
			return poolError(t.iface, t.family, p.Name, err)
		}
		def := idx.def.Load()
		switch {
		case def.refused != nil:
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFiltered, Reason: ReasonOverlap, Message: def.refused.Error(), Rank: rank})
			t.tried = rank
			continue
		case def.empty != "":
			msg := "every address is excluded"
			if def.empty == ReasonReserved {
				msg = "every address is reserved"
			}
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFiltered, Reason: def.empty, Message: msg, Rank: rank})
			t.tried = rank
			continue
		}
		err = a.claim(ctx, t, idx, netip.Addr{}, hs, now)
		if t.reused {
			return nil // the owner held an address already, found by the create
		}
		if errors.Is(err, ErrExhausted) {
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusExhausted, Reason: ReasonExhausted,
				Message: "exhausted (" + idx.usage() + ")", Rank: rank})
			t.tried = rank
			continue
		}
		if err != nil {
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFailed, Message: err.Error(), Rank: rank})
			t.tried = rank
			return err
		}
		t.served = rank
		return nil
	}
	if ok, err := a.heldInstead(ctx, t, hs); ok || err != nil {
		return err
	}
	// Nothing served: say why, pool by pool.
	var b strings.Builder
	fmt.Fprintf(&b, "no pool can serve %s", t.ownerName(hs.owner))
	sep := ": "
	why := ErrNoCandidates
	for _, e := range t.trace {
		b.WriteString(sep)
		b.WriteString(e.Pool)
		b.WriteString(": ")
		b.WriteString(e.Message)
		sep = "; "
		if e.Status == StatusExhausted {
			why = errCandidatesFull
		}
	}
	return &AllocationError{Interface: t.iface, Family: t.family, Err: why, Reason: b.String()}
}

// maxSettle bounds how often one task starts over because another Allocator
// served the same owner at the same moment.
const maxSettle = 4

// claim takes one address in idx for t: want if valid, else the next free one
// by the pool's strategy. On success t's pool and address are set; or, if the
// Store shows the owner holds an address for t already, t reuses it.
//
// One pass: pick an address the index says is free, create its claim, check
// that the claim stands (the pool still has the address, no other pool holds
// it, no racing call served the owner first); a claim that does not stand,
// or an address the Store says is taken, teaches the index and starts the
// next pass.
func (a *Allocator) claim(ctx context.Context, t *task, idx *poolIndex, want netip.Addr, hs *holdings, now time.Time) error {
	if hs.known && !t.checked {
		// What the owner holds was read for another task of this call.
		if err := a.reuse(ctx, t, hs); err != nil || t.reused {
			return err
		}
	}
	var ps pickState
	settles := 0
	for {
		ip, at, err := a.pick(ctx, t, idx, want, hs, now, &ps)
		if !ip.IsValid() {
			return err // nil: t reuses what the owner holds
		}
		c := store.Claim{Pool: idx.name, IP: ip, Owner: hs.owner, Time: now}
		c.Owner.Interface = t.iface
		exclusive := a.plan.createExclusive != nil && !t.plain
		if exclusive {
			c, err = a.plan.createExclusive(ctx, c)
		} else {
			c, err = a.plan.create(ctx, c)
		}
		switch {
		case err == nil:
			idx.created(ip, &at)
			if err := a.stands(ctx, t, idx, c, want, hs); err == errAgain {
				continue
			} else if err != nil || t.reused {
				return err
			}
			if exclusive {
				t.setServed(idx, c)
				if at.lay == t.lay {
					t.rng = at.rng
				}
				return nil
			}
			served, err := a.settle(ctx, t, idx, c, hs)
			if err != nil || served {
				return err
			}
			if settles++; settles >= maxSettle {
				return &AllocationError{Interface: t.iface, Pool: idx.name, Err: ErrConflict,
					Reason: "other allocations for " + c.Owner.String() + " kept racing this one: try again"}
			}
		case errors.Is(err, store.ErrHeld):
			// The owner holds an address of this family on this interface
			// (or on none) already: another Allocator served it, or this
			// is a repeat. Ask what it holds, and reuse what fits.
			idx.unreserve(ip, &at)
			if err := a.readHoldings(ctx, hs); err != nil {
				return &AllocationError{Interface: t.iface, Pool: idx.name, Err: err, Reason: "reading what the owner holds: " + err.Error()}
			}
			if err := a.reuse(ctx, t, hs); err != nil || t.reused {
				return err
			}
			// What it holds does not serve this task (another pool of the
			// family, or an address to replace): create without the check,
			// and settle any race afterwards.
			t.plain = true
		case errors.Is(err, store.ErrExists):
			// Our index was stale: the address stays marked used.
			if err := a.stale(ctx, t, idx, want, hs, ip, &at, &ps); err != nil {
				return err
			}
		default:
			idx.unreserve(ip, &at)
			return &AllocationError{Interface: t.iface, Pool: idx.name, IP: ip, Err: err, Reason: "store: " + err.Error()}
		}
	}
}

// pickState is what one claim has learnt from the Store, at most once per
// claim: a List of the pool (listed), a Get of the requested address
// (checked).
type pickState struct{ listed, checked bool }

// pick reserves in the index the next address to claim: want if the index
// has it free, else the next free address by the pool's strategy. If there
// is none it returns the invalid Addr and why: the pool is refused, want is
// taken, or the pool is exhausted as the Store confirms; or a nil error when
// the owner turns out to hold an address that serves the task, which it
// then reuses.
func (a *Allocator) pick(ctx context.Context, t *task, idx *poolIndex, want netip.Addr, hs *holdings, now time.Time, ps *pickState) (netip.Addr, slot, error) {
	for {
		if err := ctx.Err(); err != nil {
			return netip.Addr{}, slot{}, &AllocationError{Interface: t.iface, Pool: idx.name, Err: err, Reason: err.Error()}
		}
		if def := idx.def.Load(); def.refused != nil {
			if ok, err := a.heldInstead(ctx, t, hs); ok || err != nil {
				return netip.Addr{}, slot{}, err
			}
			return netip.Addr{}, slot{}, &AllocationError{Interface: t.iface, Pool: idx.name, Err: def.refused, Reason: def.refused.Error()}
		}
		if !ps.listed && !want.IsValid() && idx.def.Load().pool.Strategy == LowestFree && !idx.isComplete() {
			// The lowest free address is known only from the whole pool.
			if err := a.listOnce(ctx, t, idx, ps); err != nil {
				return netip.Addr{}, slot{}, err
			}
		}
		var at slot
		if ip, ok := idx.reserve(want, now, &at); ok {
			return ip, at, nil
		}
		if want.IsValid() {
			// The index says taken; the Store decides. If it was released
			// since, forget it and try once more.
			if !ps.checked {
				ps.checked = true
				if _, err := a.store.Get(ctx, idx.name, want); errors.Is(err, store.ErrNotFound) {
					idx.forget(want)
					continue
				}
			}
			return netip.Addr{}, slot{}, a.unavailable(ctx, t, hs, idx, want)
		}
		if !ps.listed {
			// Full as far as the index knows: ask the Store, which
			// confirms it at once if nothing changed since the index was
			// filled.
			ps.listed = true
			if !a.unchanged(ctx, idx) {
				if err := a.listOnce(ctx, t, idx, ps); err != nil {
					return netip.Addr{}, slot{}, err
				}
				continue
			}
		}
		if ok, err := a.heldInstead(ctx, t, hs); ok || err != nil {
			return netip.Addr{}, slot{}, err
		}
		return netip.Addr{}, slot{}, &AllocationError{Interface: t.iface, Pool: idx.name, Err: ErrExhausted,
			Reason: "no free address in range set " + idx.describe()}
	}
}

// listOnce fills the index from the Store's List of the pool, once per
// claim.
func (a *Allocator) listOnce(ctx context.Context, t *task, idx *poolIndex, ps *pickState) error {
	ps.listed = true
	if err := a.fill(ctx, idx); err != nil {
		return &AllocationError{Interface: t.iface, Pool: idx.name, Err: err, Reason: err.Error()}
	}
	return nil
}

// stale learns that the Store holds ip, which the index had free. Probing
// from the cursor that keeps finding used addresses lists the whole pool
// once. A requested address is then unavailable.
func (a *Allocator) stale(ctx context.Context, t *task, idx *poolIndex, want netip.Addr, hs *holdings, ip netip.Addr, at *slot, ps *pickState) error {
	if misses := idx.taken(ip, at); misses >= probeMisses && !ps.listed && !want.IsValid() {
		if err := a.listOnce(ctx, t, idx, ps); err != nil {
			return err
		}
	}
	if want.IsValid() {
		return a.unavailable(ctx, t, hs, idx, want)
	}
	return nil
}

// errAgain tells claim that the claim just made was given back, and that
// it should try again.
var errAgain = errors.New("try again")

// stands checks a claim just created: if the pool changed while the address
// was being claimed and no longer has it (a shrink gave it back), or another
// pool holds the address (one whose definition moved away from it while its
// owner kept it), the claim is given back. It returns nil if the claim
// stands, errAgain to try another address, or the error that ends the
// claim (nil with t.reused set when the owner holds an address that serves
// t instead).
func (a *Allocator) stands(ctx context.Context, t *task, idx *poolIndex, c store.Claim, want netip.Addr, hs *holdings) error {
	if gone, outside := a.redefinedWithout(ctx, idx, c); gone || outside {
		// Give the claim back and try again in the pool as it is now.
		if err := a.deleteAt(context.WithoutCancel(ctx), idx, c.IP, c.Revision, time.Time{}); err != nil {
			return &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err, Reason: "store: " + err.Error()}
		}
		switch {
		case gone:
			return &AllocationError{Interface: t.iface, Pool: idx.name, Err: ErrNotFound, Reason: "no such pool any more"}
		case want.IsValid():
			return a.unavailable(ctx, t, hs, idx, want)
		}
		return errAgain
	}
	other, err := a.elsewhere(ctx, c)
	if err == nil && other == "" {
		return nil
	}
	// Give ours back; the address stays taken.
	if derr := a.store.Delete(context.WithoutCancel(ctx), c.Pool, c.IP, c.Revision); derr != nil && !errors.Is(derr, store.ErrNotFound) {
		return &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: derr, Reason: "store: " + derr.Error()}
	}
	if err != nil {
		idx.forget(c.IP)
		return &AllocationError{Interface: t.iface, Pool: idx.name, IP: c.IP, Err: err, Reason: "store: " + err.Error()}
	}
	if want.IsValid() {
		if ok, err := a.heldInstead(ctx, t, hs); ok || err != nil {
			return err
		}
		return &AllocationError{Interface: t.iface, Pool: idx.name, IP: want, Err: ErrUnavailable,
			Reason: fmt.Sprintf("requested IP address %s is not available: pool %q holds it", want, other)}
	}
	return errAgain
}

// redefinedWithout reports whether the PoolSource no longer has idx's pool,
// or has redefined it since c's address was reserved so that it no longer
// hands that address out. The index then takes the new definition. A Catalog
// never changes.
func (a *Allocator) redefinedWithout(ctx context.Context, idx *poolIndex, c store.Claim) (gone, outside bool) {
	if a.static {
		return false, false
	}
	p, ok := a.source.Pool(idx.name)
	switch {
	case !ok:
		return true, false
	case p == idx.def.Load().pool:
		return false, false
	}
	if _, err := a.index(ctx, idx.name); err != nil {
		return true, false
	}
	_, allocatable := idx.def.Load().layout.ordinal(c.IP)
	return false, !allocatable
}

// heldInstead is asked before t fails: the owner may hold an address that
// serves t, which no create of this call met (a repeat request after the
// owner's pools changed), or which another call for the same owner made
// meanwhile. It reads what the owner holds again and reports whether t now
// reuses one.
func (a *Allocator) heldInstead(ctx context.Context, t *task, hs *holdings) (bool, error) {
	if err := a.readHoldings(ctx, hs); err != nil {
		return false, &AllocationError{Interface: t.iface, Family: t.family, Err: err, Reason: "reading what the owner holds: " + err.Error()}
	}
	if err := a.reuse(ctx, t, hs); err != nil || t.reused {
		return t.reused, err
	}
	return false, nil
}

// elsewhere returns the name of another pool that holds a claim of c's
// address, if the PoolSource may change (a Catalog's pools never overlap)
// and the Store can say (store.AddressReader): every claim written before
// c, which store.AddressClaimsAtLeast gives from a cache when it can.
func (a *Allocator) elsewhere(ctx context.Context, c store.Claim) (string, error) {
	if a.plan.addressClaims == nil {
		return "", nil
	}
	cs, err := a.plan.addressClaims(ctx, c.IP, c.Revision)
	if err != nil {
		return "", err
	}
	for _, x := range cs {
		if x.Pool != c.Pool {
			return x.Pool, nil
		}
	}
	return "", nil
}

// unavailable is the error for a requested address someone else holds,
// unless the owner itself now holds what t asks for.
func (a *Allocator) unavailable(ctx context.Context, t *task, hs *holdings, idx *poolIndex, want netip.Addr) error {
	if ok, err := a.heldInstead(ctx, t, hs); ok || err != nil {
		return err
	}
	return unavailable(t, idx, want)
}

// unavailable is the error for a requested address someone else holds.
func unavailable(t *task, idx *poolIndex, want netip.Addr) error {
	return &AllocationError{Interface: t.iface, Pool: idx.name, IP: want, Err: ErrUnavailable,
		Reason: fmt.Sprintf("requested IP address %s is not available in range set %s: already claimed", want, idx.def.Load().layout)}
}

// rollback releases what this call claimed, logging what it cannot.
func (a *Allocator) rollback(ctx context.Context, tasks []task, claimed []int) {
	// A rollback must finish even if the caller has given up.
	ctx = context.WithoutCancel(ctx)
	for _, i := range claimed {
		t := &tasks[i]
		if err := a.deleteAt(ctx, t.idx, t.ip, t.rev, time.Time{}); err != nil {
			a.log.Warn("ipam: rollback could not release", "pool", t.idx.name, "ip", t.ip, "err", err)
		}
		t.outcome, t.note = StatusReleased, "released "+t.ip.String()+": the request failed"
	}
}

// task is one address of a request: an (interface, pool) the request names,
// or an (interface, family) whose pools the chain selected.
type task struct {
	iface  string
	source Source
	// idx, pool and lay are the pool that serves; for a selected task, set once
	// one does.
	idx    *poolIndex
	pool   *Pool
	lay    *layout
	want   netip.Addr // requested address, if any
	ip     netip.Addr
	rev    int64 // revision of the claim this call created or adopted
	rng    int   // 1 + the index in lay.ranges of ip's range, when known; else 0
	reused bool
	// checked says what the owner holds was matched against this task.
	checked bool
	// plain says the owner holds a claim that an exclusive create would
	// meet but that does not serve this task: create without the check.
	plain bool
	stale *store.Claim // a claim the owner no longer uses, released once the task is served
	// legacy is the host-local legacy claim (no interface) the task reuses.
	legacy *store.Claim

	// Selected tasks only.
	sel    *Candidates
	family int

	// What happened to a task that names its pool, when it did not serve.
	outcome Status
	reason  Reason
	note    string

	order  []*Pool      // the candidates that passed the filters, sorted
	tried  int          // how many of order were tried and did not serve
	served int          // rank of the pool of order that served; 0 if none
	trace  []TraceEntry // filtered, exhausted and failed pools so far
}

// setServed makes claim c, just created in idx, t's address.
func (t *task) setServed(idx *poolIndex, c store.Claim) {
	def := idx.def.Load()
	t.idx, t.pool, t.lay, t.ip, t.rev, t.rng = idx, def.pool, def.layout, c.IP, c.Revision, 0
}

// appendTrace appends t's trace entries to out, completing them.
func (t *task) appendTrace(out []TraceEntry) []TraceEntry {
	fam := t.family
	if t.lay != nil {
		fam = t.lay.family()
	}
	if t.sel == nil {
		if t.idx == nil {
			return out
		}
		e := TraceEntry{Interface: t.iface, Family: fam, Pool: t.idx.name, Source: t.source, Status: StatusServed, Rank: 1}
		switch {
		case t.outcome != "":
			e.Status, e.Reason, e.Message = t.outcome, t.reason, t.note
		case !t.ip.IsValid():
			e.Status, e.Message = StatusCandidate, "not tried: the request failed first"
		}
		out = append(out, e)
		return t.appendStale(out, fam)
	}
	// Filtered and tried pools in the order they were found, then the pool
	// that served (if it was not already held), then the pools never tried.
	start := len(out)
	out = append(out, t.trace...)
	next := t.tried
	held := ""
	if t.served > 0 && !t.reused {
		e := TraceEntry{Pool: t.order[t.served-1].Name, Status: StatusServed, Rank: t.served}
		if t.outcome == StatusReleased {
			e.Status, e.Message = t.outcome, t.note
		}
		out = append(out, e)
		next = t.served
	} else if t.reused && t.idx != nil {
		held = t.idx.name
		rank := 0
		for k, p := range t.order {
			if p.Name == held {
				rank = k + 1
			}
		}
		out = append(out, TraceEntry{Pool: held, Status: StatusServed, Message: "already held", Rank: rank})
	}
	for k := next; k < len(t.order); k++ {
		if t.order[k].Name != held {
			out = append(out, TraceEntry{Pool: t.order[k].Name, Status: StatusCandidate, Rank: k + 1})
		}
	}
	out = t.appendStale(out, fam)
	for j := start; j < len(out); j++ {
		out[j].Interface, out[j].Family, out[j].Source = t.iface, fam, t.source
	}
	return out
}

// appendStale appends the entry of the claim t gave up, if any.
func (t *task) appendStale(out []TraceEntry, fam int) []TraceEntry {
	if t.stale == nil {
		return out
	}
	why := "the pod's pools no longer include this one"
	if t.sel == nil || t.stale.Pool == t.poolName() {
		why = "its pool no longer covers it"
	}
	return append(out, TraceEntry{Interface: t.iface, Family: fam, Source: t.source, Pool: t.stale.Pool, Status: StatusReleased,
		Message: "released " + t.stale.IP.String() + ": " + why})
}

func (t *task) poolName() string {
	if t.idx == nil {
		return ""
	}
	return t.idx.name
}

// fail returns err with the trace of every task so far, if it is an
// *AllocationError without one, and with the family of t's pool when the
// error does not say it (a pool the interface names; the message leaves it
// out, the pool's name saying it already).
func (t *task) fail(tasks []task, err error) error {
	var ae *AllocationError
	if errors.As(err, &ae) && ae.Family == 0 && t.lay != nil {
		ae.Family, ae.familyImplied = t.lay.family(), true
	}
	if errors.As(err, &ae) && ae.Trace == nil {
		var tr []TraceEntry
		for i := range tasks {
			tr = tasks[i].appendTrace(tr)
		}
		ae.Trace = tr
	}
	return err
}

func (t *task) ownerName(o store.Owner) string {
	if o.Name != "" {
		return "pod " + o.Namespace + "/" + o.Name
	}
	return o.String()
}

// config sets c, which is zero, to t's address as a Result carries it.
func (t *task) config(c *IPConfig) {
	r := &Range{}
	if t.rng > 0 {
		r = &t.lay.ranges[t.rng-1]
	} else if si, ok := t.lay.segAt(t.ip); ok {
		r = &t.lay.ranges[t.lay.segs[si].rng]
	} else if k := t.lay.rangeOf(t.ip); k >= 0 {
		r = &t.lay.ranges[k]
	}
	c.Interface, c.Pool = t.iface, t.idx.name
	c.Address, c.Gateway = netip.PrefixFrom(t.ip, r.Subnet.Bits()), r.Gateway
	c.Vlan, c.Routes, c.Reused = t.pool.Vlan, t.pool.Routes, t.reused
	if t.sel != nil && !t.sel.CleanGateway && r.Gateway.IsValid() {
		// Spiderpool's default route through the pool's gateway.
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if !r.Gateway.Is4() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		c.Routes = append(slices.Clip(c.Routes), Route{Dst: dst, GW: r.Gateway})
	}
}

// resultBuf backs a one-address Result with a single allocation.
type resultBuf struct {
	ips   [1]IPConfig
	trace [1]TraceEntry
}

func newResult(n, entries int) Result {
	if n == 1 && entries == 1 {
		b := new(resultBuf)
		return Result{IPs: b.ips[:0], Trace: b.trace[:0]}
	}
	return Result{IPs: make([]IPConfig, 0, n), Trace: make([]TraceEntry, 0, entries)}
}

// selects reports whether some interface of req leaves its pools to Select.
func (req *Request) selects() bool {
	for _, ifc := range req.Interfaces {
		if len(ifc.Pools) == 0 {
			return true
		}
	}
	return false
}

func (req *Request) validate() error {
	var fe fieldErrors
	fe.object = "request"
	if req.UID == "" && req.ContainerID == "" {
		fe.add("uid", "", "required (or containerID)")
	}
	if req.Stable && (req.Namespace == "" || req.Name == "") {
		fe.add("name", req.Namespace+"/"+req.Name, "a stable owner needs its namespace and name")
	}
	if len(req.Interfaces) == 0 {
		fe.add("interfaces", "", "at least one interface is required")
	}
	for i, ifc := range req.Interfaces {
		if ifc.Name == "" {
			fe.add(fmt.Sprintf("interfaces[%d].name", i), "", "required")
		}
		for j := 0; j < i; j++ {
			if req.Interfaces[j].Name == ifc.Name && ifc.Name != "" {
				fe.add(fmt.Sprintf("interfaces[%d].name", i), ifc.Name, "duplicate interface")
			}
		}
		if len(ifc.Pools) == 0 && len(ifc.IPs) > 0 {
			fe.add(fmt.Sprintf("interfaces[%d].ips", i), ifc.IPs[0].String(), "requested addresses need the pools named in interfaces[].pools")
		}
		for j, p := range ifc.Pools {
			if p == "" {
				fe.add(fmt.Sprintf("interfaces[%d].pools[%d]", i, j), "", "empty pool name")
			}
			if slices.Contains(ifc.Pools[:j], p) {
				fe.add(fmt.Sprintf("interfaces[%d].pools[%d]", i, j), p, "pool named twice for one interface")
			}
		}
		for j, ip := range ifc.IPs {
			switch {
			case !ip.IsValid():
				fe.add(fmt.Sprintf("interfaces[%d].ips[%d]", i, j), "", "invalid IP address")
			case ip.Zone() != "":
				fe.add(fmt.Sprintf("interfaces[%d].ips[%d]", i, j), ip.String(), "an address with a zone is never in a pool")
			}
		}
	}
	if len(fe.errs) == 0 {
		return nil
	}
	return fe.err()
}

// placeRequested gives each requested address of ifc to the first of its pools
// whose ranges contain it and that has none yet. Addresses that fit no pool, and
// addresses that a pool can never hand out (its gateway, excluded or reserved),
// are errors, reported before anything is claimed, each saying which rule it
// broke.
func placeRequested(ifc NIC, tasks []task) error {
	if len(ifc.IPs) == 0 {
		return nil
	}
	var errs []error
	seen := make(map[netip.Addr]bool, len(ifc.IPs))
	for _, ip := range ifc.IPs {
		ip = ip.Unmap()
		if seen[ip] {
			continue
		}
		seen[ip] = true
		placed := false
		var taken *task // a pool that contains ip but serves another requested address
		for k := range tasks {
			t := &tasks[k]
			rng := t.lay.rangeOf(ip)
			if rng < 0 {
				continue
			}
			if t.want.IsValid() {
				if taken == nil {
					taken = t
				}
				continue
			}
			placed = true
			t.want = ip
			if _, ok := t.lay.ordinal(ip); !ok {
				reason := "excluded or reserved"
				if t.lay.ranges[rng].Gateway == ip {
					reason = "the gateway of range " + t.lay.ranges[rng].String()
				}
				errs = append(errs, &AllocationError{Interface: ifc.Name, Pool: t.idx.name, IP: ip, Err: ErrUnavailable,
					Reason: fmt.Sprintf("requested IP address %s is not available: %s", ip, reason)})
			}
			break
		}
		if placed {
			continue
		}
		reason := notInRange(ip, tasks)
		if taken != nil {
			reason = fmt.Sprintf("pool %q, the one whose ranges contain it, already serves requested address %s: a pool serves at most one requested address per interface",
				taken.idx.name, taken.want)
		}
		errs = append(errs, &AllocationError{Interface: ifc.Name, IP: ip, Err: ErrNotInRange,
			Reason: fmt.Sprintf("requested IP address %s: %s", ip, reason)})
	}
	return errors.Join(errs...)
}

// notInRange says why ip lies in no range of the tasks' pools: the network
// or broadcast address of a range's subnet, outside a range of a subnet that
// holds it, or in no pool's subnet at all.
func notInRange(ip netip.Addr, tasks []task) string {
	for _, t := range tasks {
		for _, r := range t.lay.ranges {
			if !r.Subnet.Contains(ip) {
				continue
			}
			switch {
			case ip == r.Subnet.Masked().Addr():
				return fmt.Sprintf("it is the network address of subnet %s (pool %q)", r.Subnet.Masked(), t.idx.name)
			case ip.Is4() && ip == lastAddr(r.Subnet):
				return fmt.Sprintf("it is the broadcast address of subnet %s (pool %q)", r.Subnet.Masked(), t.idx.name)
			}
			return fmt.Sprintf("it is in subnet %s but outside range %s of pool %q", r.Subnet.Masked(), r, t.idx.name)
		}
	}
	names := make([]string, len(tasks))
	for k, t := range tasks {
		names[k] = fmt.Sprintf("%q (%s)", t.idx.name, t.lay)
	}
	return "not in any range of pools " + strings.Join(names, ", ")
}
