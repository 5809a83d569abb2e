package ipamtest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// Invariant names a property a Sim checks.
//
// The zero Invariant names none. An Invariant is a plain value.
type Invariant string

// The invariants. A Sim checks the first five after every step, on the
// claims the step touched, and on the whole Store every
// SimOptions.CheckEvery steps; InvariantNoLeak after Settle and Drain.
const (
	// InvariantUnique: no address is held twice. A new address goes to an
	// interface only if nobody holds it, in any pool: the Store keys claims
	// by pool and address, so the same address in two pools is two claims
	// it accepts, and two owners. One CNI ADD never returns one address for
	// two interfaces, and the Store never lists one address in two pools.
	InvariantUnique Invariant = "unique"
	// InvariantKept: every live pod's addresses are claimed by it in the
	// Store; garbage collection never releases the address of a pod that
	// is live, Pending, within its grace period, or a valid StatefulSet
	// member.
	InvariantKept Invariant = "kept"
	// InvariantIdempotent: a repeated CNI ADD of a running pod returns the
	// addresses it holds, marked reused.
	InvariantIdempotent Invariant = "idempotent"
	// InvariantSticky: a StatefulSet pod re-created with a new UID gets
	// back the addresses its member holds.
	InvariantSticky Invariant = "sticky"
	// InvariantStore: the Store holds exactly the claims the model says,
	// each with the right owner: nothing released behind the model's back,
	// nothing claimed that no pod got.
	InvariantStore Invariant = "store-model"
	// InvariantQuarantine: an address released by DEL or garbage collection
	// is not handed out again within the quarantine.
	InvariantQuarantine Invariant = "quarantine"
	// InvariantSelection: a pod gets one address per pool it names or per
	// family selected, on each interface as many as it asks for, each from
	// a pool among that interface's candidates; a new address from a pool
	// that admits it now, in its ranges, and that no Allocator may refuse
	// for overlapping another; and a pool is refused as overlapping only if
	// it did overlap one.
	InvariantSelection Invariant = "selection"
	// InvariantNoLeak: after Settle, every claim is held by a pod that
	// exists and that garbage collection must keep, or by a valid member of
	// a StatefulSet (or by a container whose lost DEL the runtime will
	// retry); after Drain, the Store holds no claim at all.
	InvariantNoLeak Invariant = "no-leak"
	// InvariantLookup: Allocator.Lookup, through any agent, returns what
	// the Store's Owned says the owner holds (narrowed as ReleaseAt
	// narrows it), and what the model says.
	InvariantLookup Invariant = "lookup"
	// InvariantError: the library returned an error that the simulation
	// does not allow (anything but exhaustion from an ADD).
	InvariantError Invariant = "error"
)

// ErrViolation is what every *Violation unwraps to.
var ErrViolation = errors.New("ipamtest: invariant violated")

// Violation is an invariant that broke at one step of a Sim, with the events
// that led there. It unwraps to ErrViolation.
//
// The zero Violation names nothing. A Violation is a plain value, not
// modified once returned.
type Violation struct {
	Seed      uint64
	Step      int
	Invariant Invariant
	// Detail says what broke, naming the pods, pools and addresses.
	Detail string
	// History is the last events up to and including the failing one (see
	// SimOptions.HistoryLen), oldest first.
	History []string
	// AtSettle reports that the violation was found by Settle or Drain,
	// after Step was called Step-1 times, or Step-2 times if AtDrain.
	AtSettle bool
	// AtDrain reports that the violation was found by Drain.
	AtDrain bool
	// Writers reports that the run was in the many-writers mode.
	Writers bool
}

// Error returns the seed, the step, the invariant, the detail and the
// history, one event a line.
func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ipamtest: seed %d, step %d: invariant %q violated: %s", v.Seed, v.Step, v.Invariant, v.Detail)
	fmt.Fprintf(&b, "\nlast %d events:", len(v.History))
	for _, h := range v.History {
		b.WriteString("\n\t")
		b.WriteString(h)
	}
	steps := v.Step
	if v.AtSettle {
		steps--
	}
	if v.AtDrain {
		steps--
	}
	test, flag := "TestSim", "sim.seed"
	if v.Writers {
		test, flag = "TestManyWriters", "writers.seed"
	}
	fmt.Fprintf(&b, "\nreplay: ipamtest.Replay(%d, opts, %d), or go test -run %s -%s=%d -sim.steps=%d", v.Seed, steps, test, flag, v.Seed, steps)
	return b.String()
}

// Unwrap returns ErrViolation.
func (v *Violation) Unwrap() error { return ErrViolation }

// fail stops the Sim with a violation; the first one wins.
func (s *Sim) fail(inv Invariant, format string, args ...any) {
	if s.err != nil {
		return
	}
	s.err = &Violation{Seed: s.seed, Step: s.step, Invariant: inv, Detail: fmt.Sprintf(format, args...), History: s.History(),
		AtSettle: s.settling, AtDrain: s.draining, Writers: s.opts.Writers}
}

// eventSettle marks the history entry of Settle.
const eventSettle = numEvents

// entry is one line of history, formatted only when asked for. The pod's
// identity (namespace, name, UID, node) never changes, so it can be
// formatted late.
type entry struct {
	step  int
	at    time.Duration // since the start
	ev    Event
	pod   *simPod
	agent string // the agent, in the many-writers mode
	keys  []claimKey
	note  string
}

func (s *Sim) record(e entry) {
	e.step, e.at = s.step, s.now.Sub(s.start)
	if o := s.w.outer; o != nil && s.w.depth > 0 {
		e.note = fmt.Sprintf("(during %s's %s) %s", s.agents[o.agent], opNames[o.kind], e.note)
	}
	switch {
	case s.opts.HistoryLen < 0 || len(s.hist) < s.opts.HistoryLen:
		s.hist = append(s.hist, e)
	default:
		s.hist[s.hnext] = e
		s.hnext = (s.hnext + 1) % len(s.hist)
	}
}

// History returns the events kept (see SimOptions.HistoryLen), oldest
// first, one line each, such as
//
//	step 12 +4m1.5s create team/db0-1 (uid u000007) on n2: v4-0 10.0.0.11, v6-0 fd00::10
func (s *Sim) History() []string {
	out := make([]string, 0, len(s.hist))
	for i := range s.hist {
		out = append(out, s.hist[(s.hnext+i)%len(s.hist)].String())
	}
	return out
}

func (e entry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d +%v ", e.step, e.at)
	switch e.ev {
	case eventSettle:
		b.WriteString("settle")
	case eventDrain:
		b.WriteString("drain")
	default:
		b.WriteString(e.ev.String())
	}
	switch p := e.pod; {
	case p == nil:
	case p.w.container:
		fmt.Fprintf(&b, " container %s (id %s) on %s", p.name, p.cid, p.node.Name)
	default:
		fmt.Fprintf(&b, " %s/%s (uid %s) on %s", p.w.ns.Name, p.name, p.uid, p.node.Name)
	}
	if e.agent != "" {
		b.WriteString(" via ")
		b.WriteString(e.agent)
	}
	if len(e.keys) > 0 {
		b.WriteString(": ")
		for i, k := range e.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k.String())
		}
	}
	if e.note != "" {
		if len(e.keys) == 0 {
			b.WriteString(":")
		}
		b.WriteString(" ")
		b.WriteString(strings.TrimSpace(e.note))
	}
	return b.String()
}

// checkTouched compares the Store with the model on every key the step
// wrote or the model changed.
func (s *Sim) checkTouched() {
	keys := append(s.marked, s.touched...)
	slices.SortFunc(keys, compareKeys)
	s.marked = slices.Compact(keys)
	for _, k := range s.marked {
		if c, ok := s.stored(k); ok {
			s.checkClaim(k, c)
		}
		if s.err != nil {
			return
		}
	}
}

// stored returns the Store's claim on k, nil if it has none. It reports
// false, and the violation, if the Store fails.
func (s *Sim) stored(k claimKey) (*store.Claim, bool) {
	c, err := s.inner.Get(s.ctx, k.pool, k.ip)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, true
	case err != nil:
		s.fail(InvariantError, "store: get %s: %v", k, err)
		return nil, false
	}
	return &c, true
}

// checkClaim compares what the Store has for k (nil: no claim) with the
// model.
func (s *Sim) checkClaim(k claimKey, c *store.Claim) {
	h := s.index[k]
	switch {
	case c == nil && h == nil:
	case c == nil && h.live():
		s.fail(InvariantKept, "%s lost %s: the store has no claim on it", h, k)
	case c == nil:
		s.fail(InvariantStore, "the store has no claim on %s, which %s holds", k, h)
	case h == nil:
		s.fail(InvariantStore, "the store has a claim on %s by %s, which no pod or StatefulSet member holds", k, c.Owner)
	default:
		if why := h.ownerMismatch(k, c.Owner); why != "" {
			inv := InvariantStore
			if h.live() {
				inv = InvariantUnique
			}
			s.fail(inv, "the store's claim on %s is owned by %s, but %s holds it: %s", k, c.Owner, h, why)
		}
	}
}

// ownerMismatch says why o cannot be the owner of h's claim on k, or "".
func (h *holder) ownerMismatch(k claimKey, o store.Owner) string {
	switch {
	case h.w.container && (o.ContainerID != h.cid || o.UID != "" || o.Name != "" || o.Stable):
		return "another container ID, or a pod's"
	case h.w.container:
	case o.Namespace != h.w.ns.Name || o.Name != h.name:
		return "another pod name"
	case o.Stable != h.w.stable:
		return fmt.Sprintf("stable %t, want %t", o.Stable, h.w.stable)
	case o.UID != h.uids[k]:
		return fmt.Sprintf("uid %s, not %s", o.UID, h.uids[k])
	}
	if o.Interface != h.iface[k] {
		return fmt.Sprintf("interface %q, not %q", o.Interface, h.iface[k])
	}
	return ""
}

// fullCheck compares every claim of every pool with the model, and finds
// any address held in two pools.
func (s *Sim) fullCheck() {
	s.stats.FullChecks++
	seen := make(map[claimKey]bool, len(s.index))
	pools := make(map[netip.Addr]string, len(s.index))
	for _, p := range s.opts.Pools {
		cs, err := s.inner.List(s.ctx, p.Name)
		if err != nil {
			s.fail(InvariantError, "store: list %s: %v", p.Name, err)
			return
		}
		slices.SortFunc(cs, func(a, b store.Claim) int { return a.IP.Compare(b.IP) })
		for i := range cs {
			k := claimKey{p.Name, cs[i].IP}
			if other, ok := pools[k.ip]; ok {
				s.fail(InvariantUnique, "the store holds %s in pools %s and %s: one address held twice", k.ip, other, p.Name)
				return
			}
			pools[k.ip] = p.Name
			seen[k] = true
			s.checkClaim(k, &cs[i])
			if s.err != nil {
				return
			}
		}
	}
	if len(seen) == len(s.index) {
		return
	}
	for _, k := range s.sortedKeys() {
		if !seen[k] {
			s.checkClaim(k, nil)
			return
		}
	}
}

func (s *Sim) sortedKeys() []claimKey {
	keys := make([]claimKey, 0, len(s.index))
	for k := range s.index {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// leakCheck checks, after Settle, that every claim is held by a pod garbage
// collection must keep, or by a valid StatefulSet member. The claims it
// suspects are read back from the Store, so that a leak is reported only for
// a claim that is really there.
func (s *Sim) leakCheck() {
	opts := s.opts.GC
	for _, k := range s.sortedKeys() {
		h := s.index[k]
		valid := h.w.stable && h.w.validMember(h.ord)
		p := h.pod
		var why string
		switch {
		case valid, h.w.container:
			// (Garbage collection knows nothing of containers: their
			// claims go with their DEL, retried until it runs; Drain
			// checks that they do.)
		case p == nil:
			why = "which no pod or valid StatefulSet member holds"
		case !p.finished.IsZero():
			if s.nodeProtects(p) == "" {
				why = string(p.phase) + " since " + s.offset(p.finished) + ", past its grace period"
			}
		case p.deletion.IsZero(), p.phase == gc.PodPending:
		case !p.node.ready && opts.DisableTerminatingOnNotReadyNode, p.node.ready && opts.DisableTerminatingOnReadyNode:
		default:
			why = "terminating since " + s.offset(p.deletion) + ", past its deadline"
		}
		if why == "" {
			continue
		}
		switch c, ok := s.stored(k); {
		case ok && c == nil:
			s.checkClaim(k, nil)
		case ok:
			s.fail(InvariantNoLeak, "after settling, %s is still claimed (by %s) for %s, %s", k, c.Owner, h, why)
		}
		return
	}
}

// trackStore passes every call to a Store and records the keys written, so
// that a step's writes can be checked against the model. In the
// many-writers mode it also lets the Sim interleave other agents'
// operations before a write (Sim.interpose).
type trackStore struct {
	inner   store.Store
	cursors store.Cursors // nil if inner has none
	touched *[]claimKey   // where the keys written go
	// around, if not nil, is called before each write and after each
	// Owned and List (see Sim.interpose).
	around func(storeCall, claimKey, []store.Claim)
}

// trackExclusive is a trackStore over a Store that is an
// store.ExclusiveCreator, which it passes on.
type trackExclusive struct {
	*trackStore
	excl store.ExclusiveCreator
}

// newTrackStore returns a trackStore over inner, with inner's capabilities
// (without store.ExclusiveCreator if plain is set).
func newTrackStore(inner store.Store, touched *[]claimKey, around func(storeCall, claimKey, []store.Claim), plain bool) store.Store {
	t := &trackStore{inner: inner, touched: touched, around: around}
	t.cursors, _ = inner.(store.Cursors)
	if x, ok := inner.(store.ExclusiveCreator); ok && !plain {
		return trackExclusive{t, x}
	}
	return t
}

// wrote records a write of the claim on k, after the hook.
func (t *trackStore) wrote(c storeCall, k claimKey) {
	if t.around != nil {
		t.around(c, k, nil)
	}
	*t.touched = append(*t.touched, k)
}

// read calls the hook after a read returned claims.
func (t *trackStore) read(c storeCall, cs []store.Claim, err error) ([]store.Claim, error) {
	if t.around != nil && err == nil {
		t.around(c, claimKey{}, cs)
	}
	return cs, err
}

func (t *trackStore) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	return t.inner.Get(ctx, pool, ip)
}

func (t *trackStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	cs, err := t.inner.List(ctx, pool)
	return t.read(callList, cs, err)
}

func (t *trackStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	t.wrote(callCreate, claimKey{c.Pool, c.IP})
	return t.inner.Create(ctx, c)
}

func (t *trackStore) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	t.wrote(callUpdate, claimKey{c.Pool, c.IP})
	return t.inner.Update(ctx, c, rev)
}

func (t *trackStore) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	t.wrote(callDelete, claimKey{pool, ip})
	return t.inner.Delete(ctx, pool, ip, rev)
}

func (t *trackStore) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	cs, err := t.inner.Owned(ctx, q)
	return t.read(callOwned, cs, err)
}

// AddressClaims passes through when the Store can find an address's claims
// in every pool (store.AddressReader), and finds none otherwise, which is
// what a Store that holds one address in at most one pool (filestore) would
// answer.
func (t *trackStore) AddressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	if ar, ok := t.inner.(store.AddressReader); ok {
		return ar.AddressClaims(ctx, ip)
	}
	return nil, nil
}

// RevisionsOrdered passes through (false for a Store that does not say).
func (t *trackStore) RevisionsOrdered() bool {
	o, ok := t.inner.(store.OrderedRevisions)
	return ok && o.RevisionsOrdered()
}

// Cursor and SetCursor pass through when the Store keeps cursors, and
// behave as a Store without them otherwise.
func (t *trackStore) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if t.cursors == nil {
		return netip.Addr{}, nil
	}
	return t.cursors.Cursor(ctx, pool)
}

func (t *trackStore) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if t.cursors == nil {
		return nil
	}
	return t.cursors.SetCursor(ctx, pool, ip)
}

// CreateAndSetCursor passes through when the Store can do both in one call,
// and does them one after the other otherwise.
func (t *trackStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	t.wrote(callCreate, claimKey{c.Pool, c.IP})
	return store.CreateAndSetCursor(ctx, t.inner, c, nil)
}

func (t trackExclusive) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	t.wrote(callCreate, claimKey{c.Pool, c.IP})
	return t.excl.CreateExclusive(ctx, c)
}
