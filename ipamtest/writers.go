package ipamtest

import (
	"fmt"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// This file holds what only the many-writers mode does (SimOptions.Writers):
// pools redefined onto each other's addresses, Store writes interleaved with
// other agents' operations, imported claims, lookups, and the final release.

// writers is the state of the many-writers mode.
type writers struct {
	thief *workload
	orig  map[string]*ipam.Pool // the pools as first defined
	// homes keeps every pool in its own subnet: no pods, only containers,
	// whose Store may be in host-local's format, where one network's range
	// sets cannot share an address (one file per address).
	homes bool
	// seq counts redefinitions; defSeq is when each pool's current
	// definition was made; overlapped reports that a pool's current
	// definition has overlapped another pool's at some moment.
	seq        int
	defSeq     map[string]int
	overlapped map[string]bool

	lost []*simPod // containers whose CNI DEL was lost, for the runtime to retry
	gone []*simPod // pods and containers removed lately, for lookups

	outer *outerOp // the operation whose Store writes may be interleaved
	depth int      // how deep in interleaved operations the Sim is
	quiet bool     // no interleaving (the end of Drain)
}

func (w *writers) init(s *Sim) {
	w.orig = make(map[string]*ipam.Pool, len(s.opts.Pools))
	w.defSeq = make(map[string]int, len(s.opts.Pools))
	w.overlapped = make(map[string]bool, len(s.opts.Pools))
	for _, p := range s.opts.Pools {
		w.orig[p.Name] = p
	}
	w.homes = s.opts.Deployments == 0 && s.opts.StatefulSets == 0
}

// poolList is a PoolSource that is not an ipam.Catalog: a list of pools,
// which may overlap. It is immutable.
type poolList struct {
	pools  []*ipam.Pool
	byName map[string]*ipam.Pool
}

func newPoolList(pools []*ipam.Pool) *poolList {
	l := &poolList{pools: slices.Clone(pools), byName: make(map[string]*ipam.Pool, len(pools))}
	for _, p := range pools {
		l.byName[p.Name] = p
	}
	return l
}

func (l *poolList) Pool(name string) (*ipam.Pool, bool) {
	p, ok := l.byName[name]
	return p, ok
}

func (l *poolList) Pools() iter.Seq[*ipam.Pool] { return slices.Values(l.pools) }

func (l *poolList) DefaultPools() iter.Seq[*ipam.Pool] {
	return func(yield func(*ipam.Pool) bool) {
		for _, p := range l.pools {
			if p.Default && !yield(p) {
				return
			}
		}
	}
}

// moveRanges changes p's ranges, kind drawn by the caller: 0 moves them
// onto another pool's of the same family (an overlap every Allocator must
// refuse), 1 puts back the pool's first ranges, 2 shifts its first range
// within its subnet (so that some addresses held in it may no longer be
// covered). It returns what it did, or "" if it did nothing.
func (w *writers) moveRanges(s *Sim, p *ipam.Pool, kind int) string {
	orig := w.orig[p.Name]
	if kind == 0 && w.homes {
		kind = 2
	}
	switch kind {
	case 0:
		var others []*ipam.Pool
		for _, q := range s.opts.Pools {
			if q.Name != p.Name && q.Family() == p.Family() {
				others = append(others, q)
			}
		}
		if len(others) == 0 {
			return ""
		}
		q := others[s.rng.IntN(len(others))]
		p.Ranges = slices.Clone(q.Ranges)
		return "moved onto the ranges of " + q.Name
	case 1:
		if slices.Equal(p.Ranges, orig.Ranges) {
			return ""
		}
		p.Ranges = slices.Clone(orig.Ranges)
		return "back on its own ranges"
	}
	r := orig.Ranges[0]
	if !r.Start.IsValid() || !r.End.IsValid() {
		return ""
	}
	start, end := shift(r.Start, s.rng.IntN(5)-2), shift(r.End, s.rng.IntN(5)-2)
	moved := *p
	moved.Ranges = []ipam.Range{{Subnet: r.Subnet, Start: start, End: end}}
	if end.Less(start) || moved.Validate() != nil {
		return ""
	}
	p.Ranges = moved.Ranges
	return fmt.Sprintf("shifted to %s-%s", start, end)
}

// shift returns a moved by n addresses.
func shift(a netip.Addr, n int) netip.Addr {
	for ; n > 0; n-- {
		a = a.Next()
	}
	for ; n < 0; n++ {
		a = a.Prev()
	}
	return a
}

// redefined updates what the model knows of overlaps after pool name got a
// new definition.
func (w *writers) redefined(s *Sim, name string) {
	w.seq++
	w.defSeq[name] = w.seq
	w.overlapped[name] = false
	for _, p := range s.opts.Pools {
		if s.overlapped(p, func(*ipam.Pool) bool { return true }) != "" {
			w.overlapped[p.Name] = true
		}
	}
}

// overlapped returns the name of a pool of p's family, for which which
// reports true, that shares an address with p; "" if there is none.
func (s *Sim) overlapped(p *ipam.Pool, which func(q *ipam.Pool) bool) string {
	set := s.allocSet(p)
	for _, q := range s.opts.Pools {
		if q.Name != p.Name && q.Family() == p.Family() && which(q) && set.Overlaps(s.allocSet(q)) {
			return q.Name
		}
	}
	return ""
}

// mayRefuse reports whether an Allocator may refuse pool name for
// overlapping another: its definition has overlapped one at some moment.
// An Allocator checks a definition when it first uses it, and keeps the
// verdict while the definition lasts.
func (w *writers) mayRefuse(name string) bool { return w.overlapped[name] }

// overlapping says why pool k.pool must not hand out a new address, or "":
// it overlaps a pool whose definition is no newer than its own, so that
// every Allocator that uses its definition checked it against that pool's
// and must refuse it. (A pool whose definition is older than the one it
// overlaps may still serve from an Allocator that checked it before; the
// newer one is refused everywhere, so no address goes to two owners.)
func (w *writers) overlapping(s *Sim, k claimKey) string {
	if w.defSeq == nil {
		return ""
	}
	p, ok := s.cur.Pool(k.pool)
	if !ok {
		return ""
	}
	other := s.overlapped(p, func(q *ipam.Pool) bool { return w.defSeq[q.Name] <= w.defSeq[k.pool] })
	if other == "" {
		return ""
	}
	return fmt.Sprintf("pool %q overlaps pool %q, whose definition is no newer: it must be refused (ipam.ErrOverlap)", k.pool, other)
}

// The kinds of operation whose Store writes may be interleaved.
type opKind uint8

const (
	opADD opKind = iota + 1
	opDEL
	opGC
)

var opNames = [...]string{opADD: "ADD", opDEL: "DEL", opGC: "garbage collection"}

// outerOp is an operation in flight through one agent.
type outerOp struct {
	kind  opKind
	p     *simPod // nil for garbage collection
	agent int
	fired bool // an operation was interleaved with it
	// calls counts its Store calls by kind (see interpose).
	calls [numCalls]int
}

// startOp marks the start of an operation whose Store writes may be
// interleaved; endOp its end, reporting whether one was. Both do nothing
// outside the many-writers mode and inside an interleaved operation.
func (s *Sim) startOp(kind opKind, p *simPod, ag int) *outerOp {
	if !s.opts.Writers || s.w.depth > 0 || s.w.quiet || s.opts.Interleave <= 0 {
		return nil
	}
	o := &outerOp{kind: kind, p: p, agent: ag}
	s.w.outer = o
	return o
}

func (s *Sim) endOp(o *outerOp) bool {
	if o == nil {
		return false
	}
	s.w.outer = nil
	return o.fired
}

// The Store calls an agent's Store tells the Sim of.
type storeCall uint8

const (
	callCreate storeCall = iota + 1
	callUpdate
	callDelete
	callOwned // after it returned
	callList  // after it returned
	numCalls
)

// interpose is called by agent ag's Store around its calls: before a write
// of the claim on k, after a read that returned claims. At a share of the
// places (SimOptions.Interleave) where another agent's operation can change
// the claims the operation in flight is about to write, at most once per
// operation and only at its first call of a kind, it first runs that
// operation through other agents, as happens when agents run at the same
// moment:
//
//   - after a DEL read what the owner holds (Owned): the same DEL, retried
//     through another agent, finishes first, and a new pod requests one of
//     the addresses at once;
//   - after garbage collection listed a pool's claims: another replica's
//     collection finishes first, and a new pod requests one of the
//     addresses it released;
//   - before an ADD adopts a pod's imported claim (an Update): the DEL of
//     the pod's old sandbox releases it, and a new pod requests it;
//   - before an ADD creates its first claim: the same ADD, retried through
//     another agent, finishes first.
//
// The operation in flight then acts on claims that changed since it read
// them: a Store and an Allocator that check revisions and owners leave the
// new holder's claim alone. (Only the first call of a kind, so that the
// model knows what each agent did: what the operation created or deleted
// before is then nothing.)
func (s *Sim) interpose(ag int, call storeCall, k claimKey, read []store.Claim) {
	o := s.w.outer
	if o == nil || o.fired || ag != o.agent || s.w.depth > 0 || s.err != nil || len(s.agents) < 2 {
		return
	}
	o.calls[call]++
	if o.calls[call] > 1 {
		return
	}
	var run func()
	switch {
	case o.kind == opDEL && call == callOwned:
		i := slices.IndexFunc(read, func(c store.Claim) bool { return s.index[claimKey{c.Pool, c.IP}] == o.p.h })
		if i < 0 {
			return
		}
		k := claimKey{read[i].Pool, read[i].IP}
		run = func() {
			b := s.otherAgent(o.agent)
			if o.p.w.container {
				for _, ifc := range o.p.w.ifaces {
					s.release(o.p, ifc.Name, b)
				}
			} else {
				s.release(o.p, "", b)
			}
			s.record(entry{ev: EventDelete, pod: o.p, agent: s.agentNote(b), note: "the same DEL, retried, done first"})
			s.steal(k, o.agent, b)
		}
	case o.kind == opGC && call == callList && len(read) > 0:
		run = func() {
			b := s.otherAgent(o.agent)
			s.collectVia(b)
			for _, c := range read {
				if k := (claimKey{c.Pool, c.IP}); s.index[k] == nil {
					s.steal(k, o.agent, b)
					break
				}
			}
		}
	case o.kind == opADD && call == callUpdate && s.index[k] == o.p.h && !o.p.w.stable && !o.p.w.container:
		run = func() {
			b := s.otherAgent(o.agent)
			n := s.release(o.p, "", b)
			o.p.phase, o.p.hasIPs = gc.PodPending, false
			s.record(entry{ev: EventDelete, pod: o.p, agent: s.agentNote(b), note: fmt.Sprintf("the DEL of its old sandbox released %d", n)})
			s.steal(k, o.agent, b)
		}
	case o.kind == opADD && call == callCreate:
		run = func() { s.addVia(o.p, EventRestart, s.otherAgent(o.agent)) }
	default:
		return
	}
	if s.rng.IntN(100) >= s.opts.Interleave {
		return
	}
	o.fired = true
	s.stats.Interleaved++
	s.w.depth++
	run()
	s.w.depth--
}

// steal has a new pod (a container, if the cluster has no pods) request the
// address of k through an agent other than those given, if nobody holds it.
func (s *Sim) steal(k claimKey, not ...int) {
	if s.err != nil || s.index[k] != nil || s.readyNode() == nil {
		return
	}
	c := s.otherAgent(not...)
	if c < 0 {
		c = not[len(not)-1] // never the agent whose call is in flight
	}
	p := s.newPod(s.w.thief, -1, s.readyNode())
	p.want = k.ip
	p.req.Interfaces = []ipam.NIC{{Name: "eth0", Pools: []string{k.pool}, IPs: []netip.Addr{k.ip}}}
	s.addVia(p, EventCreate, c)
	if p.phase != gc.PodRunning {
		s.remove(p)
	} else {
		s.stats.Stolen++
	}
}

// thiefWorkload returns the workload of the pods that steal.
func (s *Sim) thiefWorkload(ns *Namespace) *workload {
	w := &workload{name: "new", ns: ns, thief: true, mode: modeExplicit, families: 1,
		container: s.opts.Deployments == 0 && s.opts.StatefulSets == 0,
		ifaces:    []ipam.NIC{{Name: "eth0"}}, // its pool and address are each pod's
		labels:    map[string]string{"app": "new"},
		perIface:  map[string]int{"eth0": 1},
		allowed:   map[string]map[string]bool{"eth0": {}},
	}
	for _, p := range s.opts.Pools {
		w.allowed["eth0"][p.Name] = true
	}
	return w
}

// importOne starts a pod or container whose claims a migration wrote into
// the Store (EventImport).
func (s *Sim) importOne() bool {
	n := s.readyNode()
	if n == nil {
		return false
	}
	var slots []slot
	for _, w := range s.works {
		switch {
		case w.container && len(w.ifaces) == 1 && w.live < w.maxPods && !w.want.IsValid():
			// host-local's legacy claims: one interface, one claim per range set.
			slots = append(slots, slot{w, -1})
		case w.container || w.mode == modeExplicit || len(w.order) == 0:
		case !w.sts && w.live < w.maxPods:
			slots = append(slots, slot{w, -1})
		case w.sts:
			for ord := range w.replicas {
				if h := w.members[ord]; h == nil || h.pod == nil && len(h.addrs) == 0 {
					slots = append(slots, slot{w, ord})
				}
			}
		}
	}
	if len(slots) == 0 {
		return false
	}
	sl := slots[s.rng.IntN(len(slots))]
	w := sl.w
	// The addresses first: a pod is started only if it gets some, a
	// container only if it gets one for every range set.
	var keys []claimKey
	taken := func(ip netip.Addr) bool {
		_, held := s.byIP[ip]
		return held || slices.ContainsFunc(keys, func(k claimKey) bool { return k.ip == ip })
	}
	if w.container {
		for _, pool := range w.ifaces[0].Pools {
			ip := s.freeAddress(pool, taken)
			if !ip.IsValid() {
				return false
			}
			keys = append(keys, claimKey{pool, ip})
		}
	} else {
		for i, c := range w.order {
			// A pool of this interface's candidates that no interface
			// served before it may take: the claim is this slot's.
			var pools []string
			for _, name := range c.Pools {
				if !slices.ContainsFunc(w.order[:i], func(e ipam.Candidates) bool {
					return e.Interface != c.Interface && e.Family == c.Family && slices.Contains(e.Pools, name)
				}) {
					pools = append(pools, name)
				}
			}
			if len(pools) == 0 {
				continue
			}
			pool := pools[s.rng.IntN(len(pools))]
			if ip := s.freeAddress(pool, taken); ip.IsValid() {
				keys = append(keys, claimKey{pool, ip})
			}
		}
	}
	if len(keys) == 0 {
		return false
	}
	p := s.newPod(w, sl.ord, n)
	h := p.h
	h.iface, h.uids = make(map[claimKey]string, len(keys)), make(map[claimKey]string, len(keys))
	for _, k := range keys {
		c := store.Claim{Pool: k.pool, IP: k.ip, Owner: p.owner(), Time: s.now}
		if _, err := s.inner.Create(s.ctx, c); err != nil {
			s.record(entry{ev: EventImport, pod: p, keys: keys, note: "import failed"})
			s.fail(InvariantError, "importing %s for %s: %v", k, p, err)
			return true
		}
		h.addrs = append(h.addrs, k)
		h.iface[k], h.uids[k] = "", p.uid
		s.hold(k, h)
	}
	p.phase, p.hasIPs = gc.PodRunning, true
	note := "claims recording no interface (Spiderpool's)"
	if w.container {
		note = "host-local legacy claims (container ID only)"
	}
	s.stats.Imports++
	s.record(entry{ev: EventImport, pod: p, keys: keys, note: note})
	s.marked = append(s.marked, keys...)
	return true
}

// freeAddress returns an address pool hands out now that nobody holds and
// taken does not rule out, drawn at random, or the zero Addr. A pool that
// overlaps another gives none.
func (s *Sim) freeAddress(pool string, taken func(netip.Addr) bool) netip.Addr {
	p, ok := s.cur.Pool(pool)
	if !ok || s.overlapped(p, func(*ipam.Pool) bool { return true }) != "" {
		return netip.Addr{}
	}
	var free []netip.Addr
	for _, r := range s.allocSet(p).Ranges() {
		for a := r.From(); len(free) < 64; a = a.Next() {
			if !taken(a) {
				free = append(free, a)
			}
			if a == r.To() {
				break
			}
		}
	}
	if len(free) == 0 {
		return netip.Addr{}
	}
	return free[s.rng.IntN(len(free))]
}

// lookupOne asks an agent what a pod or container holds (EventLookup), and
// compares the answer with the Store's and with the model.
func (s *Sim) lookupOne() bool {
	n := len(s.pods) + len(s.w.gone)
	if n == 0 {
		return false
	}
	var p *simPod
	if i := s.rng.IntN(n); i < len(s.pods) {
		p = s.pods[i]
	} else {
		p = s.w.gone[i-len(s.pods)]
	}
	owner := p.owner()
	if ifaces := slices.Sorted(maps.Keys(p.w.perIface)); len(ifaces) > 0 && s.rng.IntN(3) == 0 {
		owner.Interface = ifaces[s.rng.IntN(len(ifaces))]
	}
	ag := s.rng.IntN(len(s.agents))
	got, err := s.agents[ag].lookup(s.ctx, owner)
	keys := make([]claimKey, len(got))
	for i, c := range got {
		keys[i] = claimKey{c.Pool, c.IP}
	}
	s.record(entry{ev: EventLookup, pod: p, agent: s.agentNote(ag), keys: keys, note: "of " + owner.String()})
	if err != nil {
		s.fail(InvariantError, "lookup of %s through %s: %v", owner, s.agents[ag], err)
		return true
	}
	want, err := s.storeLookup(owner)
	if err != nil {
		s.fail(InvariantError, "store: owned %s: %v", owner.Query(), err)
		return true
	}
	if !sameClaims(got, want) {
		s.fail(InvariantLookup, "lookup of %s through %s returned %s; the Store's Owned answers %s", owner, s.agents[ag], claimsString(got), claimsString(want))
		return true
	}
	s.stats.Lookups++
	if model := s.modelLookup(p, owner); !sameKeys(keys, model) {
		s.fail(InvariantLookup, "lookup of %s through %s returned %s; the model has %s", owner, s.agents[ag], keysString(keys), keysString(model))
	}
	return true
}

// storeLookup returns what Allocator.Lookup must return for owner, from the
// Store's Owned: the claims of its identity; for a stable owner with a UID,
// those that name that UID; then, for an interface, those that record it,
// or if there are none, those that record no interface.
func (s *Sim) storeLookup(owner store.Owner) ([]store.Claim, error) {
	q := owner.Query()
	cs, err := s.inner.Owned(s.ctx, q)
	if err != nil {
		return nil, err
	}
	if owner.Stable && owner.UID != "" {
		cs = slices.DeleteFunc(cs, func(c store.Claim) bool { return c.Owner.UID != owner.UID })
	}
	if q.Interface != "" && slices.ContainsFunc(cs, func(c store.Claim) bool { return c.Owner.Interface == q.Interface }) {
		cs = slices.DeleteFunc(cs, func(c store.Claim) bool { return c.Owner.Interface == "" })
	}
	slices.SortFunc(cs, func(a, b store.Claim) int { return compareKeys(claimKey{a.Pool, a.IP}, claimKey{b.Pool, b.IP}) })
	return cs, nil
}

// modelLookup returns the keys the model says a lookup of owner, p's
// identity, finds.
func (s *Sim) modelLookup(p *simPod, owner store.Owner) []claimKey {
	h := p.h
	var out []claimKey
	for _, k := range h.addrs {
		if owner.Stable && h.uids[k] != owner.UID {
			continue
		}
		if !p.w.stable && !p.w.container && h.uids[k] != owner.UID {
			continue
		}
		out = append(out, k)
	}
	if owner.Interface == "" {
		return out
	}
	mine := slices.DeleteFunc(slices.Clone(out), func(k claimKey) bool { return h.iface[k] != owner.Interface })
	if len(mine) > 0 {
		return mine
	}
	return slices.DeleteFunc(out, func(k claimKey) bool { return h.iface[k] != "" })
}

// retryDELs retries the lost CNI DELs of containers, as the runtime does:
// each with one chance in two, or all of them.
func (s *Sim) retryDELs(all bool) {
	kept := s.w.lost[:0]
	for _, p := range s.w.lost {
		if s.err != nil || !all && s.rng.IntN(2) == 0 {
			kept = append(kept, p)
			continue
		}
		n := 0
		for _, ifc := range p.w.ifaces {
			n += s.release(p, ifc.Name, s.rng.IntN(len(s.agents)))
		}
		p.h.lostDEL = false
		s.record(entry{ev: EventDelete, pod: p, note: "DEL retried, released " + fmt.Sprint(n)})
	}
	clear(s.w.lost[len(kept):])
	s.w.lost = kept
}

// forget remembers a removed pod for lookups, a few at a time.
func (w *writers) forget(p *simPod) {
	const keep = 8
	if len(w.gone) == keep {
		copy(w.gone, w.gone[1:])
		w.gone = w.gone[:keep-1]
	}
	w.gone = append(w.gone, p)
}

// Drain ends a many-writers run as a cluster that is torn down ends: every
// StatefulSet scales to zero, every node comes back, every pod and container
// is deleted with its CNI DEL (lost DELs retried), time passes beyond every
// grace period and quarantine, and garbage collection runs twice. No owner
// is left, so no claim may be: any the Store still holds is a leak
// (InvariantNoLeak). Drain counts as one step; Run calls it after Settle in
// the many-writers mode.
func (s *Sim) Drain() error {
	if s.err != nil {
		return s.err
	}
	s.step++
	s.settling, s.draining = true, true
	defer func() { s.settling, s.draining = false, false }()
	s.touched, s.marked = s.touched[:0], s.marked[:0]
	s.record(entry{ev: eventDrain})
	for _, w := range s.sets {
		w.replicas = 0
	}
	for _, n := range s.nodes {
		n.ready = true
	}
	s.ready = len(s.nodes)
	// (A DEL may start a pod, taking an address from under it.)
	for len(s.pods) > 0 {
		p := s.pods[0]
		note := s.cniDel(p)
		s.remove(p)
		s.record(entry{ev: EventDelete, pod: p, note: note})
		if s.err != nil {
			return s.err
		}
	}
	// Nothing may start a pod from here on.
	s.w.quiet = true
	s.retryDELs(true)
	d := graces[len(graces)-1] + s.opts.GC.AdditionalGraceDelay + s.opts.GC.ClockSkew + s.opts.Quarantine + time.Minute
	s.now = s.now.Add(d)
	s.collect()
	s.collect()
	if s.err == nil {
		s.checkTouched()
	}
	for _, p := range s.opts.Pools {
		if s.err != nil {
			break
		}
		cs, err := s.inner.List(s.ctx, p.Name)
		if err != nil {
			s.fail(InvariantError, "store: list %s: %v", p.Name, err)
			break
		}
		slices.SortFunc(cs, func(a, b store.Claim) int { return a.IP.Compare(b.IP) })
		for _, c := range cs {
			s.fail(InvariantNoLeak, "after the final release, the Store still holds %s of %s, and no owner is left", c.Key(), c.Owner)
			break
		}
	}
	if s.err == nil {
		for _, k := range s.sortedKeys() {
			s.fail(InvariantStore, "after the final release, the model says %s holds %s", s.index[k], k)
			break
		}
	}
	return s.err
}

// eventDrain marks the history entry of Drain.
const eventDrain = numEvents + 1

// sameClaims reports whether a and b hold the same claims, in order.
func sameClaims(a, b []store.Claim) bool {
	return slices.EqualFunc(a, b, func(x, y store.Claim) bool {
		return x.Pool == y.Pool && x.IP == y.IP && x.Owner == y.Owner && x.Revision == y.Revision && x.Time.Equal(y.Time)
	})
}

func claimsString(cs []store.Claim) string {
	if len(cs) == 0 {
		return "nothing"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s (%s, rev %d)", c.Key(), c.Owner, c.Revision)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
