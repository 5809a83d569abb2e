package ipam

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/store"
)

// This file holds the Allocator's per-pool index: a hint, never the truth.
// The Store has the claims; the index remembers which addresses this
// Allocator knows to be used, where round-robin resumes, and which released
// addresses are in quarantine, so that the common allocation tries an address
// that is almost always free. Every address it offers is claimed with a
// conditional Create, so a stale index costs a retry, never a duplicate.

// probeMisses is how many addresses in a row an index that was never filled
// from a List may find taken before the pool is listed: a cold Allocator
// probes from the cursor, which round-robin keeps just before the free
// addresses, and lists only a pool that turns out to be full near it.
const probeMisses = 8

// poolIndex is the Allocator's view of one pool: its layout and which ordinals
// it knows to be used.
type poolIndex struct {
	name string
	// def is the definition and layout in force; written under mu, read
	// without it.
	def atomic.Pointer[poolDef]

	mu   sync.Mutex
	tree *usedTree
	// complete reports that tree was filled from a List of the pool and kept
	// since by this Allocator's writes (and its Follow, if any). Without it,
	// tree knows only the addresses this Allocator claimed or found taken.
	complete bool
	// listed is the Store's version of the pool (PoolVersioner) read just
	// before the List that filled the tree; valid while listedOK.
	listed   uint64
	listedOK bool
	// gen counts the trees the index had: a reservation made in the tree of
	// now needs no second look once its claim is created.
	gen    atomic.Uint64
	misses atomic.Int32 // Creates in a row that found the address taken

	quarantine []quarantined            // releases still kept, in the order they came
	quarUntil  map[netip.Addr]time.Time // each quarantined address and its latest end
	// lent is each address a request took out of quarantine, and when its
	// quarantine was to end: if the address is given back (the request
	// failed, or its claim is released), the quarantine resumes.
	lent    map[netip.Addr]time.Time
	spread  uint64 // the Allocator's Options.Spread hash; 0: none
	cursor  netip.Addr
	next    u128    // where round-robin resumes: the ordinal after cursor
	nextLay *layout // the layout next is an ordinal of; nil: work it out
}

func newPoolIndex(name string) *poolIndex { return &poolIndex{name: name} }

// poolDef is a pool definition and the layout built from it. Immutable.
type poolDef struct {
	pool     *Pool
	reserved *netipx.IPSet // the cluster's reserved addresses it was built with
	layout   *layout
	// empty is ReasonExcluded or ReasonReserved when the layout has no
	// address to hand out, and why.
	empty Reason
	// refused says why the pool may not hand out new addresses (it overlaps
	// another pool of the PoolSource); nil if it may.
	refused error
}

// indexFor returns the index of the named pool if it was ever loaded.
func (a *Allocator) indexFor(name string) *poolIndex {
	idx, _ := a.pools.Get(name)
	return idx
}

// index returns the index of the named pool, with the PoolSource's current
// definition in force. A pool used for the first time, or whose definition
// changed, starts with an index that knows nothing but the Store's cursor: no
// claim is read until one is needed.
func (a *Allocator) index(ctx context.Context, name string) (*poolIndex, error) {
	if a.static {
		// A Catalog never changes: a loaded pool's definition is current.
		if idx := a.indexFor(name); idx != nil && idx.def.Load() != nil {
			return idx, nil
		}
	}
	p, ok := a.source.Pool(name)
	if !ok {
		return nil, fmt.Errorf("pool %q: %w", name, ErrNotFound)
	}
	idx := a.indexFor(name)
	if idx == nil {
		idx = a.pools.GetOrAdd(name, newPoolIndex)
	}
	var reserved *netipx.IPSet
	if rs, ok := a.source.(ReservedSource); ok {
		reserved = rs.Reserved(p.Family())
	}
	if d := idx.def.Load(); d != nil && d.pool == p && d.reserved == reserved {
		return idx, nil
	}
	def, err := a.newDef(p, reserved)
	if err != nil {
		return nil, err
	}
	first := idx.def.Load() == nil
	var cursor netip.Addr
	if a.plan.cursor != nil && first && a.spread == 0 {
		if cursor, err = a.plan.cursor(ctx, name); err != nil {
			if ctx.Err() != nil {
				// Not a hint's failure: the Store did not answer in time.
				return nil, fmt.Errorf("reading the last reserved address of pool %q: %w", name, err)
			}
			a.log.Warn("ipam: cannot read last reserved address", "pool", name, "err", err)
		}
	}
	if first {
		idx.setSpread(a.spread)
	}
	if f := a.follow.Load(); f != nil && first {
		// Start from what the watch reported of the pool.
		f.mu.Lock()
		idx.install(def, cursor)
		idx.replace(f.take(name))
		f.mu.Unlock()
		return idx, nil
	}
	idx.install(def, cursor)
	return idx, nil
}

// newDef builds the definition of p: its layout without excluded and reserved
// addresses, and, for a PoolSource that may hold overlapping pools, whether p
// overlaps another.
func (a *Allocator) newDef(p *Pool, reserved *netipx.IPSet) (*poolDef, error) {
	rs, err := p.RangeSet()
	if err != nil {
		return nil, err
	}
	var excl netipx.IPSetBuilder
	for _, r := range p.ExcludeIPs {
		excl.AddRange(r)
	}
	if reserved != nil {
		excl.AddSet(reserved)
	}
	exclude, _ := excl.IPSet()
	def := &poolDef{pool: p, reserved: reserved, layout: newLayout(rs, exclude)}
	if def.layout.total.IsZero() {
		def.empty = ReasonExcluded
		if reserved != nil && !fullyExcluded(p) {
			def.empty = ReasonReserved
		}
	}
	if !a.static {
		def.refused = a.overlapping(p, def.layout)
	}
	return def, nil
}

// overlapping returns an *OverlapError if some address of lay, p's layout,
// can also be handed out by another pool of the PoolSource; nil otherwise.
// Claims are keyed by pool and address, so two pools that share an address
// could give it to two owners: such a pool is refused, whatever the PoolSource
// says. A Catalog has checked its pools against each other already.
//
// It looks at every pool of the source, through the span each pool covers,
// worked out once per pool value (see spans): only a pool whose span meets
// p's is compared address by address.
func (a *Allocator) overlapping(p *Pool, lay *layout) error {
	if len(lay.segs) == 0 {
		return nil
	}
	lo, hi := lay.segs[lay.byAddr[0]].from, lay.segs[lay.byAddr[len(lay.byAddr)-1]].to
	return a.spans.each(a.source, func(q *Pool, sp span) error {
		if q.Name == p.Name || !sp.meets(lo, hi) {
			return nil
		}
		if shared := intersection(lay.allocatable, q.usable(nil)); shared.IsValid() {
			return &OverlapError{Pool: p.Name, Other: q.Name, Addresses: shared}
		}
		return nil
	})
}

// span is the first and last address of a pool's range set; the zero span
// (an invalid pool) meets nothing.
type span struct{ lo, hi netip.Addr }

func (sp span) meets(lo, hi netip.Addr) bool {
	return sp.lo.IsValid() && sp.lo.Is4() == lo.Is4() && !sp.hi.Less(lo) && !hi.Less(sp.lo)
}

func spanOf(q *Pool) span {
	rs, err := q.RangeSet()
	if err != nil || len(rs) == 0 {
		return span{}
	}
	sp := span{rs[0].Start, rs[0].End}
	for _, r := range rs[1:] {
		if r.Start.Less(sp.lo) {
			sp.lo = r.Start
		}
		if sp.hi.Less(r.End) {
			sp.hi = r.End
		}
	}
	return sp
}

// spans remembers the span of each pool value a PoolSource returned, so that
// checking one pool against all the others costs a map lookup per pool, not
// the parsing of every range set. Values no longer in the source are
// forgotten once they are as many as those in it.
type spans struct {
	mu sync.Mutex
	m  map[*Pool]span
}

// each calls f with every pool of src and its span, until f returns an
// error, which it returns.
func (s *spans) each(src PoolSource, f func(*Pool, span) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[*Pool]span)
	}
	seen := 0
	for q := range src.Pools() {
		if q == nil {
			continue
		}
		seen++
		sp, ok := s.m[q]
		if !ok {
			sp = spanOf(q)
			s.m[q] = sp
		}
		if err := f(q, sp); err != nil {
			return err
		}
	}
	if len(s.m) > 2*seen+16 {
		live := make(map[*Pool]span, seen)
		for q := range src.Pools() {
			if sp, ok := s.m[q]; ok {
				live[q] = sp
			}
		}
		s.m = live
	}
	return nil
}

// intersection returns the first range the two sets share, or the zero
// IPRange.
func intersection(a, b *netipx.IPSet) netipx.IPRange {
	var sb netipx.IPSetBuilder
	sb.AddSet(a)
	sb.Intersect(b)
	s, _ := sb.IPSet()
	if rs := s.Ranges(); len(rs) > 0 {
		return rs[0]
	}
	return netipx.IPRange{}
}

// install puts def in force, with an index that knows no claims yet (only the
// quarantined addresses, which it keeps) and, for a pool used for the first
// time, round-robin resuming after cursor.
func (idx *poolIndex) install(def *poolDef, cursor netip.Addr) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	old := idx.def.Load()
	if old != nil && old.pool == def.pool && old.reserved == def.reserved {
		return // another call installed it meanwhile
	}
	idx.def.Store(def)
	idx.reset(def.layout)
	if old == nil && cursor.IsValid() {
		idx.cursor, idx.nextLay = cursor, nil
	}
}

// reset empties the tree for lay, keeping the quarantined addresses marked.
// Called with mu held.
func (idx *poolIndex) reset(lay *layout) {
	idx.tree = newUsedTree(lay.levels)
	idx.gen.Add(1)
	idx.complete, idx.listedOK = false, false
	idx.misses.Store(0)
	for ip := range idx.quarUntil {
		if o, ok := lay.ordinal(ip); ok {
			idx.tree.set(o)
		}
	}
}

// fill replaces what idx knows with the Store's claims of the pool, read now:
// afterwards the index is complete.
func (a *Allocator) fill(ctx context.Context, idx *poolIndex) error {
	// The List happens under the pool's lock, so that a claim or release of
	// this Allocator either is in it or is applied after it.
	idx.mu.Lock()
	defer idx.mu.Unlock()
	var version uint64
	versioned := false
	if a.plan.poolVersion != nil {
		v, err := a.plan.poolVersion(ctx, idx.name)
		versioned = err == nil
		version = v
	}
	claims, err := a.list(ctx, idx.name)
	if err != nil {
		return fmt.Errorf("listing claims of pool %q: %w", idx.name, err)
	}
	lay := idx.def.Load().layout
	idx.reset(lay)
	for _, c := range claims {
		if o, ok := lay.ordinal(c.IP); ok {
			idx.tree.set(o)
		}
	}
	idx.complete = true
	idx.listed, idx.listedOK = version, versioned
	return nil
}

// unchanged reports whether the Store says idx's pool has not changed since
// the List that filled the index: then what the index knows is what the
// Store holds, and need not be listed again.
func (a *Allocator) unchanged(ctx context.Context, idx *poolIndex) bool {
	if a.plan.poolVersion == nil {
		return false
	}
	idx.mu.Lock()
	v, ok := idx.listed, idx.listedOK && idx.complete
	idx.mu.Unlock()
	if !ok {
		return false
	}
	cur, err := a.plan.poolVersion(ctx, idx.name)
	return err == nil && cur == v
}

// list is the Store's List, except that unreadable records (ErrCorrupt) are
// logged and skipped: their addresses look free to the index, and the Store
// refuses to create a claim over them, so they stay taken.
func (a *Allocator) list(ctx context.Context, pool string) ([]store.Claim, error) {
	claims, err := a.store.List(ctx, pool)
	return a.readable(claims, err, func() []any { return []any{"pool", pool} })
}

// readable returns what a Store read returned, without its error if that
// reports only unreadable records (store.ErrCorrupt): those are logged, with
// the attributes that read returns to name the read (nil: none), and
// skipped. read runs only then, so that naming the read costs nothing when
// every record is readable.
func (a *Allocator) readable(claims []store.Claim, err error, read func() []any) ([]store.Claim, error) {
	if err != nil && errors.Is(err, store.ErrCorrupt) {
		var attrs []any
		if read != nil {
			attrs = read()
		}
		a.log.Warn("ipam: unreadable claims skipped", append(attrs, "err", err)...)
		return claims, nil
	}
	return claims, err
}

// isComplete reports whether idx was filled from a List.
func (idx *poolIndex) isComplete() bool {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	return idx.complete
}

// usage returns "used/total used", and how many of them are in quarantine.
func (idx *poolIndex) usage() string {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if len(idx.quarUntil) > 0 {
		return fmt.Sprintf("%s/%s used, %d of them in quarantine", idx.tree.used, idx.def.Load().layout.total, len(idx.quarUntil))
	}
	return fmt.Sprintf("%s/%s used", idx.tree.used, idx.def.Load().layout.total)
}

func (idx *poolIndex) describe() string {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	d := idx.def.Load().layout.describe(idx.tree)
	if len(idx.quarUntil) > 0 {
		d += fmt.Sprintf(", %d of them in quarantine", len(idx.quarUntil))
	}
	return d
}

// slot is where reserve marked an address: its ordinal in a layout, and
// where round-robin was to resume before.
type slot struct {
	lay *layout
	ord u128
	gen uint64
	rng int // 1 + the index in lay.ranges of the address's range; 0: not known

	cursor  netip.Addr
	next    u128
	nextLay *layout
}

// reserve marks an address used before it is created in the Store: want if
// valid and free, else the next free one by the pool's strategy, and sets at
// to where it marked it. It reports false when the index knows no free
// address (or want is not free).
func (idx *poolIndex) reserve(want netip.Addr, now time.Time, at *slot) (netip.Addr, bool) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	d := idx.def.Load()
	lay := d.layout
	idx.drain(now)
	*at = slot{lay: lay, gen: idx.gen.Load(), cursor: idx.cursor, next: idx.next, nextLay: idx.nextLay}
	if want.IsValid() {
		o, ok := lay.ordinal(want)
		if !ok || (!idx.tree.set(o) && !idx.unquarantine(want)) {
			return netip.Addr{}, false
		}
		idx.cursor, idx.next, idx.nextLay = want, o.AddOne(), lay
		at.ord = o
		return want, true
	}
	var start u128
	if d.pool.Strategy == RoundRobin {
		start = idx.nextOrd(lay)
	}
	o, ok := idx.tree.pick(lay.total, start, d.pool.Strategy)
	if !ok {
		return netip.Addr{}, false
	}
	idx.tree.set(o)
	ip, rng := lay.addr(o)
	idx.cursor, idx.next, idx.nextLay = ip, o.AddOne(), lay
	at.ord, at.rng = o, rng+1
	return ip, true
}

// unreserve undoes reserve of ip at at, for a Create that did not happen:
// the address is free again, and round-robin resumes where it would have if
// nothing moved it since.
func (idx *poolIndex) unreserve(ip netip.Addr, at *slot) {
	idx.forget(ip)
	idx.mu.Lock()
	defer idx.mu.Unlock()
	idx.restore(ip, at)
}

// nextOrd returns the ordinal a round-robin search starts from: just after
// the cursor. It is kept as an ordinal after each reservation, and worked out
// from the cursor address only when the cursor was set otherwise (read from
// the Store, a requested address) or the layout changed. Called with mu held.
func (idx *poolIndex) nextOrd(lay *layout) u128 {
	if idx.nextLay == lay {
		return idx.next
	}
	var start u128
	switch {
	case idx.cursor.IsValid():
		start, _ = lay.after(idx.cursor)
	case idx.spread != 0:
		start = spreadOrd(idx.spread, lay.total)
	}
	idx.next, idx.nextLay = start, lay
	return start
}

// setSpread gives idx the Allocator's Options.Spread hash.
func (idx *poolIndex) setSpread(h uint64) {
	idx.mu.Lock()
	idx.spread = h
	idx.mu.Unlock()
}

// spreadOrd maps hash h onto an ordinal below total, evenly.
func spreadOrd(h uint64, total u128) u128 {
	if total.Hi == 0 {
		hi, _ := bits.Mul64(h, total.Lo)
		return u128{Lo: hi}
	}
	return u128{Lo: h} // below total, which is at least 2^64
}

// created records that the Store created the claim of ip, which reserve
// marked at at. The mark is there already unless the tree was replaced since
// (a fill, a new definition): then it is set again.
func (idx *poolIndex) created(ip netip.Addr, at *slot) {
	if idx.misses.Load() != 0 {
		idx.misses.Store(0)
	}
	if at.gen == idx.gen.Load() {
		return
	}
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
	}
}

// taken records that the Store already had a claim on ip, which reserve
// marked at at: it stays marked, and round-robin resumes where it would have
// (the cursor follows successful claims only). It returns how many addresses
// in a row were found taken.
func (idx *poolIndex) taken(ip netip.Addr, at *slot) int {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
	}
	idx.restore(ip, at)
	return int(idx.misses.Add(1))
}

// restore puts round-robin back where it was before reserve of ip at at, if
// nothing moved it since. Called with mu held.
func (idx *poolIndex) restore(ip netip.Addr, at *slot) {
	if idx.cursor == ip && idx.nextLay == at.lay {
		idx.cursor, idx.next, idx.nextLay = at.cursor, at.next, at.nextLay
	}
}

// learn records that ip is claimed, without counting a miss.
func (idx *poolIndex) learn(ip netip.Addr) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
	}
}

// quarantined is a released address kept out of reuse until a time.
type quarantined struct {
	ip    netip.Addr
	until time.Time
}

// retire records that ip is no longer claimed: at once if until is zero,
// else it stays marked used until then. An address released again while in
// quarantine (another Allocator handed it out meanwhile) stays until the later
// end, and so does one that a request took out of quarantine. Releases usually
// arrive in order of their end times; one that does not waits for those queued
// before it, which only ever lengthens a quarantine.
func (idx *poolIndex) retire(ip netip.Addr, until time.Time) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if end, ok := idx.lent[ip]; ok {
		delete(idx.lent, ip)
		if end.After(until) {
			until = end
		}
	}
	if until.IsZero() {
		idx.forgetLocked(ip)
		return
	}
	// Kept even for an address the definition in force does not cover: it
	// may cover it again before the quarantine ends.
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
	}
	idx.quarantine = append(idx.quarantine, quarantined{ip, until})
	if idx.quarUntil == nil {
		idx.quarUntil = make(map[netip.Addr]time.Time)
	}
	if cur, ok := idx.quarUntil[ip]; !ok || until.After(cur) {
		idx.quarUntil[ip] = until
	}
}

// drain frees the quarantined addresses whose time is up. A queue entry whose
// address was released again later, or taken out of quarantine by a request,
// frees nothing. Called with mu held.
func (idx *poolIndex) drain(now time.Time) {
	n := 0
	for n < len(idx.quarantine) && !idx.quarantine[n].until.After(now) {
		ip := idx.quarantine[n].ip
		if end, ok := idx.quarUntil[ip]; ok && !end.After(now) {
			delete(idx.quarUntil, ip)
			if o, ok := idx.def.Load().layout.ordinal(ip); ok {
				idx.tree.clear(o)
			}
		}
		n++
	}
	if n > 0 {
		idx.quarantine = slices.Delete(idx.quarantine, 0, n)
	}
}

// unquarantine takes ip out of quarantine, reporting whether it was there; its
// mark stays, for the caller now holds it, and the end of its quarantine is
// kept in case the caller gives it back (see retire). Called with mu held.
func (idx *poolIndex) unquarantine(ip netip.Addr) bool {
	end, ok := idx.quarUntil[ip]
	if !ok {
		return false
	}
	delete(idx.quarUntil, ip)
	if idx.lent == nil {
		idx.lent = make(map[netip.Addr]time.Time)
	}
	idx.lent[ip] = end
	return true
}

// forget records that ip is no longer claimed. An address in quarantine
// stays marked until its quarantine ends, and one a request took out of
// quarantine goes back into it.
func (idx *poolIndex) forget(ip netip.Addr) {
	idx.retire(ip, time.Time{})
}

// forgetLocked is forget with mu held, for an address not lent.
func (idx *poolIndex) forgetLocked(ip netip.Addr) {
	if _, ok := idx.quarUntil[ip]; ok {
		return
	}
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.clear(o)
	}
}

func (l *layout) family() int {
	if l.is4 {
		return 4
	}
	return 6
}
