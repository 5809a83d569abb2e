package ipamtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// Sim is a deterministic cluster simulator around one ipam.Allocator. Each
// Step draws one event (see Event) from a random source seeded by the seed,
// applies it through the Allocator at the simulated time, and checks the
// invariants (see Invariant) against the Store. Settle lets every grace
// period pass, collects garbage twice and checks that nothing leaked.
//
// The same seed and options give the same steps, the same results and the
// same history, byte for byte. The zero Sim is not usable: call NewSim. A
// Sim is not safe for concurrent use; run one Sim per goroutine.
type Sim struct {
	seed   uint64
	opts   SimOptions // with defaults filled in
	rng    *rand.Rand
	cat    *ipam.Catalog // the pools as they are defined now
	src    *swapSource   // serves cat to the Allocators when pools may be redefined
	st     *trackStore
	agents []*ipam.Allocator // one per agent; node i is served by agents[i%len]
	ctx    context.Context

	start, now time.Time
	step       int
	err        error
	settling   bool

	nodes []*simNode
	ready int // how many nodes are Ready
	works []*workload
	sets  []*workload // the StatefulSets among works
	pods  []*simPod   // pod objects that exist, in creation order
	uids  int

	// index maps every claim the model knows of to its holder; the Store
	// must hold exactly these claims.
	index map[claimKey]*holder
	// released records when and by which agent an address was released
	// (CNI DEL or GC), for the quarantine check, which each Allocator keeps
	// in memory for what it released itself.
	released map[claimKey]release
	// marked are the keys this step changed in the model, compared with the
	// Store at the end of the step along with those the Store saw written.
	marked []claimKey

	weights [numEvents]int
	total   int

	hist  []entry // a ring of the last HistoryLen entries, or all of them
	hnext int

	stats SimStats

	scratchPods  []*simPod
	scratchSlots []slot
}

// SimStats counts what a Sim did, so that a test can check that a run
// exercised what it meant to.
//
// The zero SimStats counts nothing (with a nil Events map). A SimStats is a
// plain value; Sim.Stats returns a copy of its own.
type SimStats struct {
	// Events counts the events applied, by kind (after the fallback of an
	// inapplicable event to EventAdvance).
	Events map[Event]int
	// Allocations counts successful CNI ADDs; Exhausted those that failed
	// with ipam.ErrExhausted or ipam.ErrNoCandidates.
	Allocations, Exhausted int
	// Repeats counts repeated CNI ADDs of running pods, checked to return
	// the same addresses; Sticky counts StatefulSet pods that came back with
	// a new UID and were checked to get their addresses back.
	Repeats, Sticky int
	// Released counts claims released by CNI DEL; Collected those released
	// by garbage collection; LostDELs the DELs lost.
	Released, Collected, LostDELs int
	// FullChecks counts full comparisons of the Store with the model.
	FullChecks int
}

// claimKey is one claim's key: a pool and an address.
type claimKey struct {
	pool string
	ip   netip.Addr
}

func (k claimKey) String() string { return k.pool + " " + k.ip.String() }

func compareKeys(a, b claimKey) int {
	if c := strings.Compare(a.pool, b.pool); c != 0 {
		return c
	}
	return a.ip.Compare(b.ip)
}

type simNode struct {
	Node
	ready bool
	agent int // the index of the Allocator that serves its pods
}

type release struct {
	at    time.Time
	agent int
}

// selMode is how a workload's pods name their pools.
type selMode uint8

const (
	modeExplicit   selMode = iota // Interface.Pools, host-local style
	modeAnnotation                // the ipam.spidernet.io/ippool annotation
	modeNamespace                 // the namespace's default pools
	modeDefault                   // the cluster default pools
)

var modeNames = [...]string{"explicit pools", "ippool annotation", "namespace default pools", "cluster default pools"}

// workload is a Deployment or a StatefulSet.
type workload struct {
	name   string
	ns     *Namespace
	sts    bool
	stable bool // a StatefulSet whose pods ask as stable owners
	mode   selMode
	ifaces []ipam.Interface
	annot  map[string]string
	labels map[string]string
	// families is how many addresses a pod gets (one per pool named, or
	// per interface and family selected); allowed lists the pools it may
	// get them from, whatever the interface.
	families int
	allowed  map[string]bool
	// want is the address a Deployment's pods request for their first
	// interface, from its first pool, if any: pods of the same Deployment
	// then compete for it, and all but one fail with ErrUnavailable.
	want netip.Addr

	// Deployments.
	maxPods, live, seq int
	// StatefulSets.
	replicas int
	members  []*holder // by ordinal: the holder of the member's addresses
}

// holder holds claims in the model: a Deployment pod, or a StatefulSet
// member, which outlives its pods when they ask as stable owners.
type holder struct {
	w     *workload
	ord   int    // StatefulSet members
	name  string // the pod name
	uid   string // the UID of the pod that claimed; for stable members, the latest
	pod   *simPod
	addrs []claimKey
	iface map[claimKey]string // the interface each of addrs serves
}

func (h *holder) String() string {
	switch {
	case h.pod != nil:
		return h.pod.String()
	case h.w.stable:
		return fmt.Sprintf("StatefulSet member %s/%s (no pod)", h.w.ns.Name, h.name)
	}
	return fmt.Sprintf("deleted pod %s/%s (uid %s)", h.w.ns.Name, h.name, h.uid)
}

// live reports whether h's pod runs and is not terminating.
func (h *holder) live() bool {
	return h.pod != nil && h.pod.phase == ipam.PodRunning && h.pod.deletion.IsZero()
}

type simPod struct {
	w        *workload
	h        *holder
	name     string
	uid      string
	node     *simNode
	req      ipam.Request
	phase    ipam.PodPhase
	deletion time.Time // deletion timestamp; zero if not terminating
	finished time.Time // when it turned Succeeded or Failed; zero if it has not
	grace    time.Duration
	hasIPs   bool
}

func (p *simPod) String() string {
	return fmt.Sprintf("pod %s/%s (uid %s) on %s", p.w.ns.Name, p.name, p.uid, p.node.Name)
}

var graces = [...]time.Duration{time.Second, 10 * time.Second, 30 * time.Second, 90 * time.Second}

// NewSim returns a simulator of the cluster opts describes, its random
// choices drawn from seed.
func NewSim(seed uint64, opts SimOptions) (*Sim, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Pools == nil {
		opts.Pools = DefaultPools()
	}
	opts.Pools = slices.Clone(opts.Pools) // EventRedefine replaces its entries
	if opts.Nodes == nil {
		opts.Nodes = DefaultNodes()
	}
	if len(opts.Nodes) == 0 {
		return nil, errors.New("ipamtest: sim options: no nodes")
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
		*v = max(*v, 0)
	}
	defInt(&opts.Deployments, 2)
	defInt(&opts.StatefulSets, 1)
	defInt(&opts.MaxPods, 4)
	defInt(&opts.MaxReplicas, 4)
	defInt(&opts.SecondNIC, 30)
	defInt(&opts.Requested, 25)
	defInt(&opts.CheckEvery, 32)
	defInt(&opts.Agents, 1)
	opts.Agents = max(opts.Agents, 1)
	if opts.HistoryLen == 0 {
		opts.HistoryLen = 20
	}
	if opts.Mix == (Mix{}) {
		opts.Mix = DefaultMix()
	}
	if opts.Start.IsZero() {
		opts.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if opts.Store == nil {
		opts.Store = memstore.New()
	}
	cat, err := ipam.NewCatalog(opts.Pools...)
	if err != nil {
		return nil, err
	}
	s := &Sim{
		seed:     seed,
		opts:     opts,
		rng:      rand.New(rand.NewPCG(seed, 0x73696d)),
		cat:      cat,
		st:       newTrackStore(opts.Store),
		ctx:      context.Background(),
		start:    opts.Start,
		now:      opts.Start,
		index:    make(map[claimKey]*holder),
		released: make(map[claimKey]release),
		weights:  opts.Mix.weights(),
		stats:    SimStats{Events: make(map[Event]int)},
	}
	for _, w := range s.weights {
		s.total += w
	}
	if opts.Mix.Redefine > 0 {
		s.src = &swapSource{}
		s.src.cur.Store(cat)
	}
	if s.total == 0 {
		return nil, errors.New("ipamtest: sim options: every event weight is zero")
	}
	if opts.HistoryLen > 0 {
		s.hist = make([]entry, 0, opts.HistoryLen)
	}
	s.agents = make([]*ipam.Allocator, opts.Agents)
	for i := range s.agents {
		if err := s.newAllocator(i); err != nil {
			return nil, err
		}
	}
	for i, n := range opts.Nodes {
		s.nodes = append(s.nodes, &simNode{Node: n, ready: true, agent: i % opts.Agents})
	}
	s.ready = len(s.nodes)
	s.buildWorkloads()
	return s, nil
}

// swapSource is an ipam.PoolSource whose catalog EventRedefine replaces, as
// a controller's informer cache is.
type swapSource struct{ cur atomic.Pointer[ipam.Catalog] }

func (s *swapSource) Pool(name string) (*ipam.Pool, bool) { return s.cur.Load().Pool(name) }
func (s *swapSource) Pools() iter.Seq[*ipam.Pool]         { return s.cur.Load().Pools() }
func (s *swapSource) DefaultPools() iter.Seq[*ipam.Pool] {
	return s.cur.Load().DefaultPools()
}

// finish ends a running Deployment pod: Failed or Succeeded, replaced by its
// Deployment, its DEL run or lost.
func (s *Sim) finish() bool {
	p := s.pick(func(p *simPod) bool {
		return !p.w.sts && p.active() && p.phase == ipam.PodRunning && p.finished.IsZero()
	})
	if p == nil {
		return false
	}
	p.phase = []ipam.PodPhase{ipam.PodFailed, ipam.PodSucceeded}[s.rng.IntN(2)]
	p.finished = s.now
	p.hasIPs = false
	p.w.live--
	note := "DEL lost"
	if s.rng.IntN(4) > 0 {
		note = s.cniDel(p)
	} else {
		s.stats.LostDELs++
	}
	s.record(entry{ev: EventFinish, pod: p, note: string(p.phase) + ", " + note})
	return true
}

// redefine replaces one pool's definition: it is disabled or enabled, starts
// or stops terminating, or gets or loses a nodeName of one node.
func (s *Sim) redefine() bool {
	if s.src == nil {
		return false
	}
	i := s.rng.IntN(len(s.opts.Pools))
	p := *s.opts.Pools[i]
	var what string
	switch s.rng.IntN(3) {
	case 0:
		p.Disable = !p.Disable
		what = map[bool]string{true: "disabled", false: "enabled"}[p.Disable]
	case 1:
		p.Terminating = !p.Terminating
		what = map[bool]string{true: "terminating", false: "no longer terminating"}[p.Terminating]
	default:
		if len(p.NodeName) > 0 {
			p.NodeName = nil
			what = "no nodeName"
		} else {
			p.NodeName = []string{s.nodes[s.rng.IntN(len(s.nodes))].Name}
			what = "nodeName " + p.NodeName[0]
		}
	}
	pools := slices.Clone(s.opts.Pools)
	pools[i] = &p
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		s.fail(InvariantError, "redefining pool %s (%s): %v", p.Name, what, err)
		return true
	}
	s.opts.Pools, s.cat = pools, cat
	s.src.cur.Store(cat)
	s.record(entry{ev: EventRedefine, note: p.Name + " " + what})
	return true
}

// newAllocator starts (or restarts) agent i.
func (s *Sim) newAllocator(i int) error {
	var pools ipam.PoolSource = s.cat
	if s.src != nil {
		pools = s.src
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: s.st, Quarantine: s.opts.Quarantine})
	if err != nil {
		return err
	}
	s.agents[i] = a
	for k, r := range s.released {
		if r.agent == i {
			delete(s.released, k) // the quarantine lived in the old Allocator
		}
	}
	return nil
}

// buildWorkloads draws the workloads, how each selects its pools, and the
// default pools of namespace "team".
func (s *Sim) buildWorkloads() {
	r := s.rng
	byFam := map[int][]string{}
	var defaults bool
	for _, p := range s.opts.Pools {
		byFam[p.Family()] = append(byFam[p.Family()], p.Name)
		defaults = defaults || p.Default
	}
	fams := []int{}
	for _, f := range []int{4, 6} {
		if len(byFam[f]) > 0 {
			fams = append(fams, f)
		}
	}
	// pick draws one or two pools of each family, at least one family.
	pick := func(maxPer int) map[int][]string {
		out := map[int][]string{}
		for i, f := range fams {
			if i > 0 && r.IntN(2) == 0 {
				continue
			}
			names := byFam[f]
			n := 1 + r.IntN(min(maxPer, len(names)))
			perm := r.Perm(len(names))
			for _, k := range perm[:n] {
				out[f] = append(out[f], names[k])
			}
		}
		return out
	}
	poolList := func(names []string) string {
		q := make([]string, len(names))
		for i, n := range names {
			q[i] = strconv.Quote(n)
		}
		return "[" + strings.Join(q, ",") + "]"
	}
	def := &Namespace{Name: "default"}
	teamPools := pick(2)
	team := &Namespace{Name: "team", Labels: map[string]string{"team": "a"}, Annotations: map[string]string{}}
	if l := teamPools[4]; len(l) > 0 {
		team.Annotations[ipam.AnnotationNSDefaultIPv4] = poolList(l)
	}
	if l := teamPools[6]; len(l) > 0 {
		team.Annotations[ipam.AnnotationNSDefaultIPv6] = poolList(l)
	}

	n := s.opts.Deployments + s.opts.StatefulSets
	for i := range n {
		w := &workload{sts: i >= s.opts.Deployments}
		if w.sts {
			w.name = fmt.Sprintf("db%d", i-s.opts.Deployments)
			w.stable = !s.opts.GC.DisableStatefulSet
			w.replicas = r.IntN(s.opts.MaxReplicas + 1)
			w.members = make([]*holder, s.opts.MaxReplicas)
		} else {
			w.name = fmt.Sprintf("web%d", i)
			w.maxPods = 1 + r.IntN(s.opts.MaxPods)
		}
		w.labels = map[string]string{"app": w.name}
		w.mode = selMode(r.IntN(4))
		if w.mode == modeDefault && !defaults {
			w.mode = modeExplicit
		}
		w.ns = def
		if w.mode == modeNamespace || (w.mode != modeDefault && r.IntN(2) == 0) {
			w.ns = team
		}
		nics := []string{"eth0"}
		if r.IntN(100) < s.opts.SecondNIC {
			nics = append(nics, "net1")
		}
		// families lists the pools of one interface as JSON members:
		// "ipv4":[...],"ipv6":[...].
		families := func(chosen map[int][]string) string {
			var parts []string
			for _, f := range fams {
				if l := chosen[f]; len(l) > 0 {
					parts = append(parts, fmt.Sprintf("%q:%s", fmt.Sprintf("ipv%d", f), poolList(l)))
				}
			}
			return strings.Join(parts, ",")
		}
		switch w.mode {
		case modeExplicit:
			for _, nic := range nics {
				chosen := pick(1)
				var pools []string
				for _, f := range fams {
					pools = append(pools, chosen[f]...)
				}
				w.ifaces = append(w.ifaces, ipam.Interface{Name: nic, Pools: pools})
			}
			if !w.sts && r.IntN(100) < s.opts.Requested {
				if w.want = s.someAddress(w.ifaces[0].Pools[0]); w.want.IsValid() {
					w.ifaces[0].IPs = []netip.Addr{w.want}
				}
			}
		case modeAnnotation:
			if len(nics) == 1 {
				w.annot = map[string]string{ipam.AnnotationIPPool: "{" + families(pick(2)) + "}"}
				w.ifaces = []ipam.Interface{{Name: "eth0"}}
				break
			}
			var entries []string
			for _, nic := range nics {
				entries = append(entries, fmt.Sprintf(`{"interface":%q,%s}`, nic, families(pick(2))))
				w.ifaces = append(w.ifaces, ipam.Interface{Name: nic})
			}
			w.annot = map[string]string{ipam.AnnotationIPPools: "[" + strings.Join(entries, ",") + "]"}
		default:
			w.ifaces = []ipam.Interface{{Name: "eth0"}}
		}
		s.resolve(w)
		s.works = append(s.works, w)
		if w.sts {
			s.sets = append(s.sets, w)
		}
	}
}

// someAddress returns an address of the first range of the named pool, drawn
// from the seed among its first 64, or the zero Addr if there is none.
func (s *Sim) someAddress(pool string) netip.Addr {
	p, ok := s.cat.Pool(pool)
	if !ok {
		return netip.Addr{}
	}
	rs, err := p.RangeSet()
	if err != nil || len(rs) == 0 {
		return netip.Addr{}
	}
	n := 1
	for a := rs[0].Start; a != rs[0].End && n < 64; a = a.Next() {
		n++
	}
	a := rs[0].Start
	for range s.rng.IntN(n) {
		a = a.Next()
	}
	return a
}

// resolve works out how many addresses w's pods get and from which pools.
func (s *Sim) resolve(w *workload) {
	w.allowed = map[string]bool{}
	if w.mode == modeExplicit {
		for _, ifc := range w.ifaces {
			w.families += len(ifc.Pools)
			for _, p := range ifc.Pools {
				w.allowed[p] = true
			}
		}
		return
	}
	req := s.request(w, "probe", "probe", s.nodes[0])
	cands, err := ipam.Select(&req, s.cat)
	if err != nil {
		// No rule names a pool: every ADD fails, which the checks allow.
		return
	}
	w.families = len(cands)
	for _, c := range cands {
		for _, p := range c.Pools {
			w.allowed[p] = true
		}
	}
}

// request returns the CNI ADD request of a pod of w.
func (s *Sim) request(w *workload, name, uid string, n *simNode) ipam.Request {
	return ipam.Request{
		Namespace:            w.ns.Name,
		Name:                 name,
		UID:                  uid,
		Stable:               w.stable,
		Labels:               w.labels,
		Annotations:          w.annot,
		Node:                 n.Name,
		NodeLabels:           n.Labels,
		NamespaceLabels:      w.ns.Labels,
		NamespaceAnnotations: w.ns.Annotations,
		Interfaces:           w.ifaces,
	}
}

// Seed returns the seed the Sim was made with.
func (s *Sim) Seed() uint64 { return s.seed }

// Steps returns how many steps have been taken.
func (s *Sim) Steps() int { return s.step }

// Now returns the simulated time.
func (s *Sim) Now() time.Time { return s.now }

// Stats returns what the Sim has done so far.
func (s *Sim) Stats() SimStats {
	st := s.stats
	st.Events = make(map[Event]int, len(s.stats.Events))
	for k, v := range s.stats.Events {
		st.Events[k] = v
	}
	return st
}

// Allocator returns the Allocator of agent 0, which also collects garbage
// (a new one after each EventAgentRestart of that agent).
func (s *Sim) Allocator() *ipam.Allocator { return s.agents[0] }

// Err returns the violation that stopped the Sim, or nil.
func (s *Sim) Err() error { return s.err }

// Step applies one event and checks the invariants. It returns a
// *Violation (wrapping ErrViolation) if one broke; the Sim then stops, and
// every later call returns the same error.
func (s *Sim) Step() error {
	if s.err != nil {
		return s.err
	}
	s.step++
	s.now = s.now.Add(time.Duration(s.rng.IntN(1000)) * time.Millisecond)
	s.st.touched = s.st.touched[:0]
	s.marked = s.marked[:0]
	// An event that cannot happen now is drawn again, a few times, before
	// the step falls back to moving the clock.
	applied := false
	for range 4 {
		if applied = s.apply(s.draw()); applied {
			break
		}
	}
	if !applied {
		s.apply(EventAdvance)
	}
	if s.err == nil {
		s.checkTouched()
	}
	if s.err == nil && s.opts.CheckEvery > 0 && s.step%s.opts.CheckEvery == 0 {
		s.fullCheck()
	}
	return s.err
}

// Run takes steps steps, then settles. It stops at the first violation and
// returns it.
func (s *Sim) Run(steps int) error {
	for range steps {
		if err := s.Step(); err != nil {
			return err
		}
	}
	return s.Settle()
}

// Settle lets every deadline pass, moving the clock past the longest grace
// period plus the garbage collection's delay and clock skew and the
// quarantine, runs garbage collection twice, compares the whole Store with
// the model, and checks that no claim leaked: every claim is held by a pod
// that exists and that garbage collection must not judge releasable, or by a
// valid member of a StatefulSet. Settle counts as one step.
func (s *Sim) Settle() error {
	if s.err != nil {
		return s.err
	}
	s.step++
	s.settling = true
	defer func() { s.settling = false }()
	s.st.touched = s.st.touched[:0]
	s.marked = s.marked[:0]
	d := graces[len(graces)-1] + s.opts.GC.AdditionalGraceDelay + s.opts.GC.ClockSkew + s.opts.Quarantine + time.Minute
	s.now = s.now.Add(d)
	s.record(entry{ev: eventSettle, note: "clock +" + d.String()})
	s.collect()
	s.collect()
	if s.err == nil {
		s.checkTouched()
	}
	if s.err == nil {
		s.leakCheck()
	}
	if s.err == nil {
		s.fullCheck()
	}
	return s.err
}

// Replay runs a new Sim of seed and opts for up to steps steps and then
// settles, as TestSim does, keeping every event. It returns the whole
// history and the first violation, if any. Two calls with the same
// arguments return the same history, byte for byte.
func Replay(seed uint64, opts SimOptions, steps int) ([]string, error) {
	opts.HistoryLen = -1
	s, err := NewSim(seed, opts)
	if err != nil {
		return nil, err
	}
	err = s.Run(steps)
	return s.History(), err
}

func (s *Sim) draw() Event {
	n := s.rng.IntN(s.total)
	for e, w := range s.weights {
		if n < w {
			return Event(e)
		}
		n -= w
	}
	return EventAdvance
}

// apply applies ev, reporting false if it cannot happen now.
func (s *Sim) apply(ev Event) bool {
	var ok bool
	switch ev {
	case EventCreate:
		ok = s.create()
	case EventDelete:
		ok = s.delete(true)
	case EventDeleteLost:
		ok = s.delete(false)
	case EventRestart:
		ok = s.restart()
	case EventRecreate:
		ok = s.recreate()
	case EventScaleUp:
		ok = s.scale(+1)
	case EventScaleDown:
		ok = s.scale(-1)
	case EventNodeFail:
		ok = s.nodeFail()
	case EventNodeRecover:
		ok = s.nodeRecover()
	case EventAgentRestart:
		ok = true
		i := s.rng.IntN(len(s.agents))
		if err := s.newAllocator(i); err != nil {
			s.fail(InvariantError, "restarting the allocator: %v", err)
		}
		s.record(entry{ev: ev, note: "agent " + strconv.Itoa(i)})
	case EventAdvance:
		ok = true
		d := time.Second + time.Duration(s.rng.IntN(60))*time.Second
		s.now = s.now.Add(d)
		s.record(entry{ev: ev, note: "+" + d.String()})
	case EventGC:
		ok = true
		s.collect()
	case EventFinish:
		ok = s.finish()
	case EventRedefine:
		ok = s.redefine()
	}
	if ok {
		s.stats.Events[ev]++
	}
	return ok
}

// readyNode draws a Ready node, or nil if none is.
func (s *Sim) readyNode() *simNode {
	if s.ready == 0 {
		return nil
	}
	k := s.rng.IntN(s.ready)
	for _, n := range s.nodes {
		if n.ready {
			if k == 0 {
				return n
			}
			k--
		}
	}
	return nil
}

// slot is a pod a controller wants: a Deployment's next pod, or a
// StatefulSet member.
type slot struct {
	w   *workload
	ord int
}

func (s *Sim) create() bool {
	slots := s.scratchSlots[:0]
	for _, w := range s.works {
		if !w.sts {
			if w.live < w.maxPods {
				slots = append(slots, slot{w, -1})
			}
			continue
		}
		for ord := range w.replicas {
			if h := w.members[ord]; h == nil || h.pod == nil {
				slots = append(slots, slot{w, ord})
			}
		}
	}
	s.scratchSlots = slots
	if len(slots) == 0 || s.ready == 0 {
		return false
	}
	sl := slots[s.rng.IntN(len(slots))]
	p := s.newPod(sl.w, sl.ord, s.readyNode())
	s.add(p, EventCreate)
	return true
}

// newPod creates a pod object of w (member ord of a StatefulSet) on node n.
func (s *Sim) newPod(w *workload, ord int, n *simNode) *simPod {
	s.uids++
	p := &simPod{w: w, uid: fmt.Sprintf("u%06d", s.uids), node: n, phase: ipam.PodPending, grace: graces[s.rng.IntN(len(graces))]}
	if w.sts {
		p.name = w.name + "-" + strconv.Itoa(ord)
		h := w.members[ord]
		if h == nil || !w.stable {
			h = &holder{w: w, ord: ord, name: p.name}
			w.members[ord] = h
		}
		p.h = h
	} else {
		p.name = w.name + "-" + letters(w.seq)
		w.seq++
		p.h = &holder{w: w, ord: -1, name: p.name}
	}
	p.h.pod = p
	p.h.uid = p.uid
	p.req = s.request(w, p.name, p.uid, n)
	s.pods = append(s.pods, p)
	w.live++
	return p
}

// letters spells n in five base-26 digits written a to z ("aaaaa",
// "aaaab", ...), so that a Deployment pod's name, unlike a StatefulSet
// member's, never ends in a number.
func letters(n int) string {
	var b [5]byte
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = 'a' + byte(n%26)
		n /= 26
	}
	return string(b[:])
}

// add runs the CNI ADD of pod p and checks the result.
func (s *Sim) add(p *simPod, ev Event) {
	h := p.h
	held := slices.Clone(h.addrs)
	repeat := p.phase == ipam.PodRunning
	res, err := s.agents[p.node.agent].AllocateAt(s.ctx, p.req, s.now)
	s.marked = append(s.marked, held...)
	if err != nil {
		legit := errors.Is(err, ipam.ErrExhausted) || errors.Is(err, ipam.ErrNoCandidates) ||
			h.w.want.IsValid() && errors.Is(err, ipam.ErrUnavailable) && !repeat
		s.record(entry{ev: ev, pod: p, note: "ADD failed: " + errClass(err)})
		switch {
		case !legit:
			s.fail(InvariantError, "CNI ADD of %s: %v", p, err)
		case repeat:
			s.fail(InvariantIdempotent, "repeated CNI ADD of running %s, which holds %s, failed: %v", p, keysString(held), err)
		case h.w.stable && len(held) == h.w.families && h.w.families > 0:
			s.fail(InvariantSticky, "CNI ADD of %s, whose member still holds %s, failed: %v", p, keysString(held), err)
		default:
			s.stats.Exhausted++
		}
		return
	}
	s.stats.Allocations++
	got := make([]claimKey, len(res.IPs))
	ifaces := make(map[claimKey]string, len(res.IPs))
	for i, c := range res.IPs {
		got[i] = claimKey{c.Pool, c.Address.Addr()}
		ifaces[got[i]] = c.Interface
	}
	s.record(entry{ev: ev, pod: p, keys: got, note: reusedNote(res)})
	s.marked = append(s.marked, got...)
	if len(got) != h.w.families {
		s.fail(InvariantSelection, "CNI ADD of %s (%s) got %d addresses %s, want %d", p, modeNames[h.w.mode], len(got), keysString(got), h.w.families)
		return
	}
	if repeat {
		s.stats.Repeats++
		if !sameKeys(got, held) || !allReused(res) {
			s.fail(InvariantIdempotent, "repeated CNI ADD of running %s returned %s%s, want the %s it holds", p, keysString(got), reusedNote(res), keysString(held))
			return
		}
	} else if len(held) > 0 {
		s.stats.Sticky++
		for _, k := range held {
			if !slices.Contains(got, k) {
				s.fail(InvariantSticky, "StatefulSet %s got %s, without %s, which its member held", p, keysString(got), k)
				return
			}
		}
	}
	for i, k := range got {
		if slices.Contains(held, k) {
			continue
		}
		if other := s.index[k]; other != nil {
			s.fail(InvariantUnique, "%s got %s, which %s holds", p, k, other)
			return
		}
		if res.IPs[i].Reused {
			s.fail(InvariantStore, "%s got %s marked reused, but held no claim on it", p, k)
			return
		}
		if r, ok := s.released[k]; ok && r.agent == p.node.agent && s.now.Before(r.at.Add(s.opts.Quarantine)) && k.ip != h.w.want {
			// (A requested address is handed out even in quarantine.)
			s.fail(InvariantQuarantine, "%s got %s at %s from agent %d, which released it at %s, within the quarantine of %v",
				p, k, s.offset(s.now), r.agent, s.offset(r.at), s.opts.Quarantine)
			return
		}
		if why := s.admits(p, k.pool); why != "" {
			s.fail(InvariantSelection, "%s (%s) got %s: %s", p, modeNames[h.w.mode], k, why)
			return
		}
	}
	for _, k := range held {
		delete(s.index, k)
	}
	for _, k := range held {
		if ifaces[k] != h.iface[k] {
			s.fail(InvariantIdempotent, "CNI ADD of %s returned %s for interface %s, which it held for %s", p, k, ifaces[k], h.iface[k])
			return
		}
	}
	h.addrs = append(h.addrs[:0], got...)
	h.iface = ifaces
	for _, k := range got {
		s.index[k] = h
	}
	p.phase = ipam.PodRunning
	p.hasIPs = true
}

// admits says why pool must not serve a new address to p, or "".
func (s *Sim) admits(p *simPod, pool string) string {
	w := p.w
	if !w.allowed[pool] {
		return fmt.Sprintf("pool %q is not among its candidates", pool)
	}
	if w.mode == modeExplicit {
		return ""
	}
	pl, _ := s.cat.Pool(pool)
	switch {
	case pl.Disable || pl.Terminating:
		return fmt.Sprintf("pool %q is disabled or terminating", pool)
	case len(pl.NodeName) > 0 && !slices.Contains(pl.NodeName, p.node.Name):
		return fmt.Sprintf("pool %q serves nodes %v only", pool, pl.NodeName)
	case len(pl.NodeName) == 0 && pl.NodeAffinity != nil && !pl.NodeAffinity.Matches(p.node.Labels):
		return fmt.Sprintf("pool %q's node affinity does not match node %s", pool, p.node.Name)
	case len(pl.NamespaceName) > 0 && !slices.Contains(pl.NamespaceName, w.ns.Name):
		return fmt.Sprintf("pool %q serves namespaces %v only", pool, pl.NamespaceName)
	case len(pl.NamespaceName) == 0 && pl.NamespaceAffinity != nil && !pl.NamespaceAffinity.Matches(w.ns.Labels):
		return fmt.Sprintf("pool %q's namespace affinity does not match namespace %s", pool, w.ns.Name)
	case pl.PodAffinity != nil && !pl.PodAffinity.Matches(w.labels):
		return fmt.Sprintf("pool %q's pod affinity does not match", pool)
	}
	return ""
}

// validMember reports whether ordinal ord of w is a valid StatefulSet
// member now.
func (w *workload) validMember(ord int) bool { return w.sts && ord >= 0 && ord < w.replicas }

// cniDel runs the CNI DEL of p as the plugin does: a stable StatefulSet pod
// that is a valid member keeps its addresses for its next incarnation.
func (s *Sim) cniDel(p *simPod) string {
	h := p.h
	if p.w.stable && p.w.validMember(h.ord) {
		return "DEL keeps the addresses of a valid StatefulSet member"
	}
	owner := store.Owner{Namespace: p.w.ns.Name, Name: p.name, UID: p.uid, Stable: p.w.stable}
	if err := s.agents[p.node.agent].ReleaseAt(s.ctx, owner, s.now); err != nil {
		s.fail(InvariantError, "CNI DEL of %s: %v", p, err)
		return ""
	}
	n := len(h.addrs)
	for _, k := range h.addrs {
		delete(s.index, k)
		s.released[k] = release{s.now, p.node.agent}
	}
	s.marked = append(s.marked, h.addrs...)
	s.stats.Released += n
	h.addrs = nil
	return "DEL released " + strconv.Itoa(n)
}

// terminate sets p's deletion timestamp: now plus its grace period.
func (s *Sim) terminate(p *simPod) {
	if p.deletion.IsZero() {
		if p.finished.IsZero() {
			p.w.live-- // a finished pod was replaced already
		}
		p.deletion = s.now.Add(p.grace)
	}
}

// remove deletes p's object.
func (s *Sim) remove(p *simPod) {
	if p.deletion.IsZero() && p.finished.IsZero() {
		p.w.live--
	}
	i := slices.Index(s.pods, p)
	s.pods = slices.Delete(s.pods, i, i+1)
	if p.h.pod == p {
		p.h.pod = nil
	}
}

// pick draws one of the pods for which ok holds, or nil.
func (s *Sim) pick(ok func(*simPod) bool) *simPod {
	c := s.scratchPods[:0]
	for _, p := range s.pods {
		if ok(p) {
			c = append(c, p)
		}
	}
	s.scratchPods = c
	if len(c) == 0 {
		return nil
	}
	return c[s.rng.IntN(len(c))]
}

func (p *simPod) active() bool { return p.deletion.IsZero() && p.node.ready }

func (s *Sim) delete(runDEL bool) bool {
	p := s.pick((*simPod).active)
	if p == nil {
		return false
	}
	ev := EventDelete
	note := "DEL lost"
	if runDEL {
		note = s.cniDel(p)
	} else {
		ev = EventDeleteLost
		s.stats.LostDELs++
	}
	s.remove(p)
	s.record(entry{ev: ev, pod: p, note: note})
	return true
}

func (s *Sim) restart() bool {
	p := s.pick(func(p *simPod) bool { return p.active() && p.finished.IsZero() })
	if p == nil {
		return false
	}
	s.add(p, EventRestart)
	return true
}

// end removes pod p, which was deleted or terminated (verb), after its CNI
// DEL, which is lost one time in four.
func (s *Sim) end(p *simPod, ev Event, verb string) {
	note := "DEL lost"
	if s.rng.IntN(4) > 0 {
		note = s.cniDel(p)
	} else {
		s.stats.LostDELs++
	}
	s.remove(p)
	s.record(entry{ev: ev, pod: p, note: verb + ", " + note})
}

func (s *Sim) recreate() bool {
	p := s.pick(func(p *simPod) bool {
		return p.w.sts && p.active() && p.phase == ipam.PodRunning && p.w.validMember(p.h.ord)
	})
	if p == nil {
		return false
	}
	s.end(p, EventRecreate, "deleted")
	if s.err != nil {
		return true
	}
	q := s.newPod(p.w, p.h.ord, s.readyNode())
	s.add(q, EventRecreate)
	return true
}

func (s *Sim) scale(by int) bool {
	c := s.scratchSlots[:0]
	for _, w := range s.sets {
		if by > 0 && w.replicas < len(w.members) || by < 0 && w.replicas > 0 {
			c = append(c, slot{w, 0})
		}
	}
	s.scratchSlots = c
	if len(c) == 0 {
		return false
	}
	w := c[s.rng.IntN(len(c))].w
	w.replicas += by
	ev := EventScaleUp
	if by < 0 {
		ev = EventScaleDown
	}
	s.record(entry{ev: ev, note: fmt.Sprintf("%s/%s to %d replicas", w.ns.Name, w.name, w.replicas)})
	if by > 0 {
		return true
	}
	// The controller deletes the pod of the ordinal no longer wanted. One
	// on a NotReady node is terminating already.
	if h := w.members[w.replicas]; h != nil && h.pod != nil && h.pod.active() {
		p := h.pod
		s.end(p, EventScaleDown, "deleted")
	}
	return true
}

func (s *Sim) nodeFail() bool {
	if s.ready < 2 {
		return false
	}
	n := s.readyNode()
	n.ready = false
	s.ready--
	s.record(entry{ev: EventNodeFail, note: n.Name + " NotReady"})
	for _, p := range slices.Clone(s.pods) {
		if p.node != n {
			continue
		}
		s.terminate(p)
		if s.rng.IntN(3) == 0 {
			s.remove(p)
			s.stats.LostDELs++
			s.record(entry{ev: EventNodeFail, pod: p, note: "force-deleted, DEL lost"})
		} else {
			s.record(entry{ev: EventNodeFail, pod: p, note: "terminating until " + s.offset(p.deletion)})
		}
	}
	return true
}

func (s *Sim) nodeRecover() bool {
	var down []*simNode
	for _, n := range s.nodes {
		if !n.ready {
			down = append(down, n)
		}
	}
	if len(down) == 0 {
		return false
	}
	n := down[s.rng.IntN(len(down))]
	n.ready = true
	s.ready++
	s.record(entry{ev: EventNodeRecover, note: n.Name + " Ready"})
	for _, p := range slices.Clone(s.pods) {
		if p.node != n {
			continue
		}
		s.end(p, EventNodeRecover, "terminated")
		if s.err != nil {
			return true
		}
	}
	return true
}

// collect runs garbage collection with a snapshot of the pod model and
// checks every release against the model.
func (s *Sim) collect() {
	pods := make([]ipam.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		gp := ipam.Pod{
			Namespace: p.w.ns.Name, Name: p.name, UID: p.uid,
			Phase:                  p.phase,
			DeletionTimestamp:      p.deletion,
			TerminationGracePeriod: p.grace,
			FinishedAt:             p.finished,
			NodeReady:              p.node.ready,
			HasIPs:                 p.hasIPs,
			ControllerKind:         "ReplicaSet",
		}
		if !p.deletion.IsZero() {
			gp.DeletionGracePeriod = p.grace
		}
		if p.w.sts {
			gp.ControllerKind = ipam.KindStatefulSet
		}
		pods = append(pods, gp)
	}
	sets := make([]ipam.StatefulSet, 0, len(s.sets))
	for _, w := range s.sets {
		sets = append(sets, ipam.StatefulSet{Namespace: w.ns.Name, Name: w.name, Replicas: w.replicas})
	}
	snap, err := ipam.NewGCSnapshot(s.now, pods, sets)
	if err != nil {
		s.record(entry{ev: EventGC, note: "bad snapshot"})
		s.fail(InvariantError, "the simulator's snapshot: %v", err)
		return
	}
	ds, err := s.agents[0].CollectGarbage(s.ctx, snap, s.now, s.opts.GC)
	var note strings.Builder
	fmt.Fprintf(&note, "%d claims", len(ds))
	sep := ", released "
	for _, d := range ds {
		if d.Applied {
			fmt.Fprintf(&note, "%s%s %s (%s)", sep, d.Claim.Pool, d.Claim.IP, d.Reason)
			sep = ", "
		}
	}
	s.record(entry{ev: EventGC, note: note.String()})
	if err != nil {
		s.fail(InvariantError, "garbage collection: %v", err)
		return
	}
	for _, d := range ds {
		if d.Release && !d.Applied {
			s.fail(InvariantError, "garbage collection could not release %s/%s (%s): %v", d.Claim.Pool, d.Claim.IP, d.Reason, d.Err)
			return
		}
		if !d.Applied {
			continue
		}
		k := claimKey{d.Claim.Pool, d.Claim.IP}
		h := s.index[k]
		if h == nil {
			s.fail(InvariantStore, "garbage collection released %s of %s, a claim no pod holds in the model", k, d.Claim.Owner)
			return
		}
		if why := s.protected(h); why != "" {
			s.fail(InvariantKept, "garbage collection released %s of %s, which %s (decision %s: %s)", k, h, why, d.Reason, d.Message)
			return
		}
		h.addrs = slices.DeleteFunc(h.addrs, func(x claimKey) bool { return x == k })
		delete(s.index, k)
		s.released[k] = release{s.now, 0}
		s.marked = append(s.marked, k)
		s.stats.Collected++
	}
}

// protected says why garbage collection must not release a claim of h now,
// or "".
func (s *Sim) protected(h *holder) string {
	w := h.w
	valid := w.stable && w.validMember(h.ord)
	p := h.pod
	if p == nil {
		if valid {
			return "is a valid StatefulSet member whose pod is being recreated"
		}
		return ""
	}
	if !p.finished.IsZero() {
		if deadline := p.finished.Add(p.grace + s.opts.GC.AdditionalGraceDelay); s.now.Before(deadline) {
			return fmt.Sprintf("is %s since %s, within its grace period of %v (plus %v of delay), and it is %s",
				p.phase, s.offset(p.finished), p.grace, s.opts.GC.AdditionalGraceDelay, s.offset(s.now))
		}
		return s.nodeProtects(p)
	}
	if p.deletion.IsZero() {
		return "is not terminating"
	}
	if p.phase == ipam.PodPending {
		return "is Pending"
	}
	if deadline := p.deletion.Add(s.opts.GC.AdditionalGraceDelay); s.now.Before(deadline) {
		return fmt.Sprintf("is terminating until %s (plus %v of delay), and it is %s", s.offset(p.deletion), s.opts.GC.AdditionalGraceDelay, s.offset(s.now))
	}
	if valid {
		return "is a terminating valid StatefulSet member"
	}
	return s.nodeProtects(p)
}

// nodeProtects says why the node flags keep a claim of p that is otherwise
// due for release, or "".
func (s *Sim) nodeProtects(p *simPod) string {
	if !p.node.ready && s.opts.GC.DisableTerminatingOnNotReadyNode {
		return "is on a NotReady node, and DisableTerminatingOnNotReadyNode is set"
	}
	if p.node.ready && s.opts.GC.DisableTerminatingOnReadyNode {
		return "is on a Ready node, and DisableTerminatingOnReadyNode is set"
	}
	return ""
}

// offset formats a simulated time as its distance from the start.
func (s *Sim) offset(t time.Time) string { return "+" + t.Sub(s.start).String() }

func errClass(err error) string {
	switch {
	case errors.Is(err, ipam.ErrExhausted):
		return "exhausted"
	case errors.Is(err, ipam.ErrNoCandidates):
		return "no pool can serve"
	case errors.Is(err, ipam.ErrUnavailable):
		return "requested address unavailable"
	}
	return err.Error()
}

func reusedNote(res ipam.Result) string {
	n := 0
	for _, c := range res.IPs {
		if c.Reused {
			n++
		}
	}
	switch n {
	case 0:
		return ""
	case len(res.IPs):
		return " (reused)"
	}
	return fmt.Sprintf(" (%d reused)", n)
}

func allReused(res ipam.Result) bool {
	for _, c := range res.IPs {
		if !c.Reused {
			return false
		}
	}
	return true
}

func sameKeys(a, b []claimKey) bool {
	if len(a) != len(b) {
		return false
	}
	for _, k := range a {
		if !slices.Contains(b, k) {
			return false
		}
	}
	return true
}

func keysString(ks []claimKey) string {
	if len(ks) == 0 {
		return "nothing"
	}
	parts := make([]string, len(ks))
	for i, k := range ks {
		parts[i] = k.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
