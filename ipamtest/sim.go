package ipamtest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// Sim is a deterministic cluster simulator around ipam.Allocators (one per
// agent) sharing a Store. Each Step draws one event (see Event) from a
// random source seeded by the seed, applies it through an Allocator at the
// simulated time, and checks the invariants (see Invariant) against the
// Store. Settle lets every grace period pass, collects garbage twice and
// checks that nothing leaked; in the many-writers mode, Drain then deletes
// everything and checks that the Store is empty.
//
// The same seed and options give the same steps, the same results and the
// same history, byte for byte. The zero Sim is not usable: call NewSim. A
// Sim is not safe for concurrent use; run one Sim per goroutine.
type Sim struct {
	seed uint64
	opts SimOptions // with defaults filled in
	rng  *rand.Rand
	// cur is the pools as they are defined now: an ipam.Catalog, or in the
	// many-writers mode a list that may hold overlapping pools.
	cur ipam.DefaultPoolSource
	src *swapSource // serves cur to the Allocators when pools may be redefined
	// inner is the Store the checks read (SimOptions.Store); shared is the
	// instance every agent writes through when the many-writers mode is off.
	inner  store.Store
	shared store.Store
	agents []*simAgent // node i is served by agents[i%len] unless Writers
	ctx    context.Context

	start, now time.Time
	step       int
	err        error
	settling   bool // in Settle or Drain
	draining   bool // in Drain

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
	// Store at the end of the step along with touched, the keys the agents
	// wrote.
	marked  []claimKey
	touched []claimKey
	// byIP maps every address of index to its key: an address held in two
	// pools is held twice.
	byIP map[netip.Addr]claimKey

	w writers // the many-writers mode's state
	// allocSets caches the addresses each pool definition hands out.
	allocSets map[*ipam.Pool]*netipx.IPSet

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
	// The many-writers mode: Lookups counts lookups checked; Imports
	// pods and containers started with imported claims, Adopted the
	// imported claims a CNI ADD then returned; Interleaved operations run
	// in the middle of another agent's (see SimOptions.Interleave), Stolen
	// the addresses another pod then took from under the write in flight;
	// Refused the pools an ADD refused for overlapping another.
	Lookups, Imports, Adopted, Interleaved, Stolen, Refused int
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

// workload is a Deployment, a StatefulSet or a group of host-local style
// containers.
type workload struct {
	name   string
	ns     *Namespace
	sts    bool
	stable bool // a StatefulSet whose pods ask as stable owners
	// container marks host-local style containers: owners known by
	// container ID only, that name their pools and release per interface.
	container bool
	// thief marks the workload whose pods take addresses released under
	// another agent's operation (see interleave); it is not in Sim.works.
	thief  bool
	mode   selMode
	ifaces []ipam.NIC
	annot  map[string]string
	labels map[string]string
	// families is how many addresses a pod gets (one per pool named, or
	// per interface and family selected); perIface is how many of them
	// each interface gets, and allowed lists the pools each interface may
	// get them from (its candidates).
	families int
	perIface map[string]int
	allowed  map[string]map[string]bool
	// order lists, per interface in the order the Allocator serves them,
	// the candidates of each family: what an import may use.
	order []ipam.Candidates
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
	cid   string // a container's ID
	pod   *simPod
	addrs []claimKey
	// iface is the interface the Store's claim on each of addrs records:
	// the one it serves, or "" for a claim that records none (an import;
	// a host-local legacy claim stays so even once served).
	iface map[claimKey]string
	// uids is the pod UID the Store's claim on each of addrs names.
	uids map[claimKey]string
	// lostDEL marks a container whose CNI DEL was lost: the runtime
	// retries it (see retryDELs).
	lostDEL bool
}

func (h *holder) String() string {
	switch {
	case h.pod != nil:
		return h.pod.String()
	case h.w.container:
		return fmt.Sprintf("removed container %s (id %s)", h.name, h.cid)
	case h.w.stable:
		return fmt.Sprintf("StatefulSet member %s/%s (no pod)", h.w.ns.Name, h.name)
	}
	return fmt.Sprintf("deleted pod %s/%s (uid %s)", h.w.ns.Name, h.name, h.uid)
}

// live reports whether h's pod runs and is not terminating.
func (h *holder) live() bool {
	return h.pod != nil && h.pod.phase == gc.PodRunning && h.pod.deletion.IsZero()
}

type simPod struct {
	w        *workload
	h        *holder
	name     string
	uid      string
	cid      string // a container's ID; its UID is empty
	node     *simNode
	req      ipam.Request
	want     netip.Addr // the address it requests, if any
	phase    gc.PodPhase
	deletion time.Time // deletion timestamp; zero if not terminating
	finished time.Time // when it turned Succeeded or Failed; zero if it has not
	grace    time.Duration
	hasIPs   bool
}

func (p *simPod) String() string {
	if p.w.container {
		return fmt.Sprintf("container %s (id %s) on %s", p.name, p.cid, p.node.Name)
	}
	return fmt.Sprintf("pod %s/%s (uid %s) on %s", p.w.ns.Name, p.name, p.uid, p.node.Name)
}

// owner returns the owner that p's claims record, without an interface.
func (p *simPod) owner() store.Owner {
	if p.w.container {
		return store.Owner{ContainerID: p.cid}
	}
	return store.Owner{Namespace: p.w.ns.Name, Name: p.name, UID: p.uid, Stable: p.w.stable}
}

var graces = [...]time.Duration{time.Second, 10 * time.Second, 30 * time.Second, 90 * time.Second}

// NewSim returns a simulator of the cluster opts describes, its random
// choices drawn from seed. In the many-writers mode it opens a Store
// instance per agent: call Close when done with the Sim.
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
	if opts.Writers {
		defInt(&opts.Agents, 4)
		defInt(&opts.Containers, 1)
		defInt(&opts.Interleave, 15)
	} else {
		defInt(&opts.Agents, 1)
		opts.Containers = max(opts.Containers, 0)
	}
	opts.Agents = max(opts.Agents, 1)
	if opts.HistoryLen == 0 {
		opts.HistoryLen = 20
	}
	if opts.Mix == (Mix{}) {
		opts.Mix = DefaultMix()
		if opts.Writers {
			opts.Mix = WritersMix()
		}
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
		cur:      cat,
		inner:    opts.Store,
		ctx:      context.Background(),
		start:    opts.Start,
		now:      opts.Start,
		index:    make(map[claimKey]*holder),
		byIP:     make(map[netip.Addr]claimKey),
		released: make(map[claimKey]release),
		weights:  opts.Mix.weights(),
		stats:    SimStats{Events: make(map[Event]int)},
	}
	for _, w := range s.weights {
		s.total += w
	}
	if s.total == 0 {
		return nil, errors.New("ipamtest: sim options: every event weight is zero")
	}
	if opts.Writers {
		// A PoolSource that is not a Catalog: it may come to hold
		// overlapping pools.
		s.cur = newPoolList(opts.Pools)
		s.w.init(s)
	}
	if opts.Mix.Redefine > 0 || opts.Writers {
		s.src = &swapSource{}
		s.src.set(s.cur)
	}
	if opts.HistoryLen > 0 {
		s.hist = make([]entry, 0, opts.HistoryLen)
	}
	if !opts.Writers {
		s.shared = newTrackStore(opts.Store, &s.touched, nil, false)
	}
	s.agents = make([]*simAgent, opts.Agents+len(opts.Remote))
	for i := range s.agents {
		if err := s.startAgent(i); err != nil {
			s.Close()
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

// Close closes the Store instances the Sim opened for its agents (see
// SimOptions.OpenStore). It does not close SimOptions.Store, nor the remote
// agents.
func (s *Sim) Close() error {
	var errs []error
	for _, a := range s.agents {
		if a != nil {
			errs = append(errs, a.close())
		}
	}
	return errors.Join(errs...)
}

// swapSource is an ipam.PoolSource whose pools EventRedefine replaces, as a
// controller's informer cache is. It is never an ipam.Catalog.
type swapSource struct{ cur atomic.Pointer[sourceBox] }

type sourceBox struct{ ipam.DefaultPoolSource }

func (s *swapSource) set(src ipam.DefaultPoolSource) { s.cur.Store(&sourceBox{src}) }

func (s *swapSource) Pool(name string) (*ipam.Pool, bool) { return s.cur.Load().Pool(name) }
func (s *swapSource) Pools() iter.Seq[*ipam.Pool]         { return s.cur.Load().Pools() }
func (s *swapSource) DefaultPools() iter.Seq[*ipam.Pool] {
	return s.cur.Load().DefaultPools()
}

// finish ends a running Deployment pod: Failed or Succeeded, replaced by its
// Deployment, its DEL run or lost.
func (s *Sim) finish() bool {
	p := s.pick(func(p *simPod) bool {
		return !p.w.sts && p.active() && p.phase == gc.PodRunning && p.finished.IsZero()
	})
	if p == nil {
		return false
	}
	p.phase = []gc.PodPhase{gc.PodFailed, gc.PodSucceeded}[s.rng.IntN(2)]
	p.finished = s.now
	p.hasIPs = false
	p.w.live--
	note := "DEL lost"
	if s.rng.IntN(4) > 0 {
		note = s.cniDel(p)
	} else {
		s.lostDEL(p)
	}
	s.record(entry{ev: EventFinish, pod: p, note: string(p.phase) + ", " + note})
	return true
}

// redefine replaces one pool's definition: it is disabled or enabled, starts
// or stops terminating, or gets or loses a nodeName of one node; in the
// many-writers mode it may also be moved onto another pool's addresses, put
// back, or shifted within its subnet (see writers.redefine).
func (s *Sim) redefine() bool {
	if s.src == nil {
		return false
	}
	i := s.rng.IntN(len(s.opts.Pools))
	p := *s.opts.Pools[i]
	var what string
	kinds := 3
	if s.opts.Writers {
		kinds = 6
	}
	switch s.rng.IntN(kinds) {
	case 0:
		p.Disable = !p.Disable
		what = map[bool]string{true: "disabled", false: "enabled"}[p.Disable]
	case 1:
		p.Terminating = !p.Terminating
		what = map[bool]string{true: "terminating", false: "no longer terminating"}[p.Terminating]
	case 2:
		if len(p.NodeName) > 0 {
			p.NodeName = nil
			what = "no nodeName"
		} else {
			p.NodeName = []string{s.nodes[s.rng.IntN(len(s.nodes))].Name}
			what = "nodeName " + p.NodeName[0]
		}
	default:
		if what = s.w.moveRanges(s, &p, s.rng.IntN(3)); what == "" {
			return false
		}
	}
	pools := slices.Clone(s.opts.Pools)
	pools[i] = &p
	if s.opts.Writers {
		s.opts.Pools = pools
		s.cur = newPoolList(pools)
		s.w.redefined(s, p.Name)
	} else {
		cat, err := ipam.NewCatalog(pools...)
		if err != nil {
			s.fail(InvariantError, "redefining pool %s (%s): %v", p.Name, what, err)
			return true
		}
		s.opts.Pools, s.cur = pools, cat
	}
	s.src.set(s.cur)
	s.record(entry{ev: EventRedefine, note: p.Name + " " + what})
	for _, a := range s.agents {
		if err := a.setPools(s.ctx, pools); err != nil {
			s.fail(InvariantError, "telling %s of pool %s (%s): %v", a, p.Name, what, err)
			break
		}
	}
	return true
}

// startAgent starts (or restarts) agent i: a new Allocator, on a Store
// instance of its own in the many-writers mode, or a remote agent opened
// afresh.
func (s *Sim) startAgent(i int) error {
	var pools ipam.PoolSource = s.cur
	if s.src != nil {
		pools = s.src
	}
	old := s.agents[i]
	if old != nil {
		if err := old.close(); err != nil {
			return err
		}
	}
	a := &simAgent{id: i}
	switch {
	case i >= s.opts.Agents:
		a.remote = s.opts.Remote[i-s.opts.Agents]
		if err := a.remote.open(s.ctx, s.opts.Backend, s.opts.Pools, s.opts.Quarantine); err != nil {
			return fmt.Errorf("opening %s: %w", a, err)
		}
		a.remote.touched = &s.touched
	default:
		st := s.shared
		if s.opts.Writers {
			inner, err := s.openStore()
			if err != nil {
				return fmt.Errorf("opening a store for agent %d: %w", i, err)
			}
			a.own = inner
			// Odd agents create without the Store's exclusive check (if it
			// has one), so that both ways of settling a race for one owner
			// meet.
			st = newTrackStore(inner, &s.touched, func(c storeCall, k claimKey, read []store.Claim) { s.interpose(i, c, k, read) }, i%2 == 1)
		}
		alloc, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st, Quarantine: s.opts.Quarantine})
		if err != nil {
			return err
		}
		a.alloc = alloc
	}
	s.agents[i] = a
	for k, r := range s.released {
		if r.agent == i {
			delete(s.released, k) // the quarantine lived in the old Allocator
		}
	}
	return nil
}

// openStore opens a new instance of the shared Store (SimOptions.OpenStore).
func (s *Sim) openStore() (store.Store, error) {
	if s.opts.OpenStore != nil {
		return s.opts.OpenStore()
	}
	if o, ok := s.opts.Store.(interface{ Open() *memstore.Store }); ok {
		return o.Open(), nil
	}
	return s.opts.Store, nil
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
	// named gives w's interfaces, in the request, one pool of each family
	// drawn per interface, and some of w's pods (not a StatefulSet's) an
	// address of the first to request.
	named := func(w *workload, nics []string) {
		for _, nic := range nics {
			chosen := pick(1)
			var pools []string
			for _, f := range fams {
				pools = append(pools, chosen[f]...)
			}
			w.ifaces = append(w.ifaces, ipam.NIC{Name: nic, Pools: pools})
		}
		if !w.sts && r.IntN(100) < s.opts.Requested {
			if w.want = s.someAddress(w.ifaces[0].Pools[0]); w.want.IsValid() {
				w.ifaces[0].IPs = []netip.Addr{w.want}
			}
		}
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
			named(w, nics)
		case modeAnnotation:
			if len(nics) == 1 {
				w.annot = map[string]string{ipam.AnnotationIPPool: "{" + families(pick(2)) + "}"}
				w.ifaces = []ipam.NIC{{Name: "eth0"}}
				break
			}
			var entries []string
			for _, nic := range nics {
				entries = append(entries, fmt.Sprintf(`{"interface":%q,%s}`, nic, families(pick(2))))
				w.ifaces = append(w.ifaces, ipam.NIC{Name: nic})
			}
			w.annot = map[string]string{ipam.AnnotationIPPools: "[" + strings.Join(entries, ",") + "]"}
		default:
			w.ifaces = []ipam.NIC{{Name: "eth0"}}
		}
		s.resolve(w)
		s.works = append(s.works, w)
		if w.sts {
			s.sets = append(s.sets, w)
		}
	}
	// Host-local style containers: pools named in the request, one of each
	// family drawn per interface.
	for i := range s.opts.Containers {
		w := &workload{name: fmt.Sprintf("ctr%d", i), ns: def, container: true, mode: modeExplicit, maxPods: 1 + r.IntN(s.opts.MaxPods)}
		nics := []string{"eth0"}
		if r.IntN(100) < s.opts.SecondNIC {
			nics = append(nics, "net1")
		}
		named(w, nics)
		s.resolve(w)
		s.works = append(s.works, w)
	}
	if s.opts.Writers {
		s.w.thief = s.thiefWorkload(def)
	}
}

// someAddress returns an address of the first range of the named pool, drawn
// from the seed among its first 64, or the zero Addr if there is none.
func (s *Sim) someAddress(pool string) netip.Addr {
	p, ok := s.cur.Pool(pool)
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

// resolve works out how many addresses w's pods get, on which interface and
// from which pools.
func (s *Sim) resolve(w *workload) {
	w.allowed = map[string]map[string]bool{}
	w.perIface = map[string]int{}
	allow := func(iface string, pools []string) {
		if w.allowed[iface] == nil {
			w.allowed[iface] = map[string]bool{}
		}
		for _, p := range pools {
			w.allowed[iface][p] = true
		}
	}
	if w.mode == modeExplicit {
		for _, ifc := range w.ifaces {
			w.families += len(ifc.Pools)
			w.perIface[ifc.Name] += len(ifc.Pools)
			allow(ifc.Name, ifc.Pools)
		}
		return
	}
	req := s.request(w, "probe", "probe", s.nodes[0])
	cands, err := ipam.Select(&req, s.cur)
	if err != nil {
		// No rule names a pool: every ADD fails, which the checks allow.
		return
	}
	w.families = len(cands)
	w.order = cands
	for _, c := range cands {
		w.perIface[c.Interface]++
		allow(c.Interface, c.Pools)
	}
}

// request returns the CNI ADD request of a pod of w. A container's names
// only its container ID and interfaces, as host-local's does.
func (s *Sim) request(w *workload, name, uid string, n *simNode) ipam.Request {
	if w.container {
		return ipam.Request{ContainerID: uid, Node: n.Name, Interfaces: w.ifaces}
	}
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
func (s *Sim) Allocator() *ipam.Allocator { return s.agents[0].alloc }

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
	s.touched = s.touched[:0]
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

// Run takes steps steps, then settles, and in the many-writers mode drains
// (Drain). It stops at the first violation and returns it.
func (s *Sim) Run(steps int) error {
	for range steps {
		if err := s.Step(); err != nil {
			return err
		}
	}
	if err := s.Settle(); err != nil || !s.opts.Writers {
		return err
	}
	return s.Drain()
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
	s.touched = s.touched[:0]
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
// settles (and drains, in the many-writers mode), as TestSim and
// TestManyWriters do, keeping every event. It returns the whole
// history and the first violation, if any. Two calls with the same
// arguments return the same history, byte for byte.
func Replay(seed uint64, opts SimOptions, steps int) ([]string, error) {
	opts.HistoryLen = -1
	s, err := NewSim(seed, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
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
		if err := s.startAgent(i); err != nil {
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
		if s.opts.Writers {
			s.retryDELs(false)
		}
	case EventFinish:
		ok = s.finish()
	case EventRedefine:
		ok = s.redefine()
	case EventLookup:
		ok = s.opts.Writers && s.lookupOne()
	case EventImport:
		ok = s.opts.Writers && s.importOne()
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
	p := &simPod{w: w, uid: fmt.Sprintf("u%06d", s.uids), node: n, phase: gc.PodPending, grace: graces[s.rng.IntN(len(graces))]}
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
	p.want = w.want
	p.h.pod = p
	if w.container {
		p.cid, p.uid = "c"+p.uid[1:], ""
		p.h.cid = p.cid
		p.req = s.request(w, p.name, p.cid, n)
	} else {
		p.h.uid = p.uid
		p.req = s.request(w, p.name, p.uid, n)
	}
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

// add runs the CNI ADD of pod p through an agent and checks the result: per
// interface (each served from its own candidates, one address never
// returned for two interfaces), per address across pools (a new address is
// held by nobody, in any pool), and against what the pod held.
func (s *Sim) add(p *simPod, ev Event) {
	s.addVia(p, ev, s.agentFor(p))
}

func (s *Sim) addVia(p *simPod, ev Event, ag int) {
	h := p.h
	before := slices.Clone(h.addrs)
	outer := s.startOp(opADD, p, ag)
	res, err := s.agents[ag].allocate(s.ctx, p.req, s.now)
	meddled := s.endOp(outer)
	// What the pod holds now, after any operation interleaved with this
	// one: the call must agree with that, or fail with a conflict.
	held := slices.Clone(h.addrs)
	repeat := p.phase == gc.PodRunning
	s.marked = append(s.marked, before...)
	s.marked = append(s.marked, held...)
	if err != nil {
		s.addFailed(p, ev, ag, err, held, repeat, meddled)
		return
	}
	s.stats.Allocations++
	got := make([]claimKey, len(res.IPs))
	for i, c := range res.IPs {
		got[i] = claimKey{c.Pool, c.Address.Addr()}
	}
	s.record(entry{ev: ev, pod: p, agent: s.agentNote(ag), keys: got, note: reusedNote(res)})
	s.marked = append(s.marked, got...)
	if !s.checkServed(p, res, got) {
		return
	}
	s.checkRefusals(p, res.Trace)
	strict := repeat && s.keepsAll(h, held)
	if repeat {
		s.stats.Repeats++
	} else if len(held) > 0 {
		s.stats.Sticky++
	}
	for i, k := range got {
		c := res.IPs[i]
		if slices.Contains(held, k) {
			switch st := h.iface[k]; {
			case !c.Reused:
				s.fail(InvariantIdempotent, "CNI ADD of %s returned %s, which it held, as a new address%s", p, k, reusedNote(res))
			case st != "" && st != c.Interface:
				s.fail(InvariantIdempotent, "CNI ADD of %s returned %s for interface %s, which it held for %s", p, k, c.Interface, st)
			case st == "":
				s.stats.Adopted++
			}
			if s.err != nil {
				return
			}
			continue
		}
		if strict {
			s.fail(InvariantIdempotent, "repeated CNI ADD of running %s returned %s%s, want the %s it holds", p, keysString(got), reusedNote(res), keysString(held))
			return
		}
		if c.Reused {
			s.fail(InvariantStore, "%s got %s marked reused, but held no claim on it", p, k)
			return
		}
		if other := s.index[k]; other != nil {
			s.fail(InvariantUnique, "%s got %s, which %s holds", p, k, other)
			return
		}
		if o, ok := s.byIP[k.ip]; ok {
			s.fail(InvariantUnique, "%s got %s, whose address %s holds in pool %s: one address held twice", p, k, s.index[o], o.pool)
			return
		}
		if r, ok := s.released[k]; ok && r.agent == ag && s.now.Before(r.at.Add(s.opts.Quarantine)) && k.ip != p.want {
			// (A requested address is handed out even in quarantine.)
			s.fail(InvariantQuarantine, "%s got %s at %s from agent %d, which released it at %s, within the quarantine of %v",
				p, k, s.offset(s.now), r.agent, s.offset(r.at), s.opts.Quarantine)
			return
		}
		if why := s.admits(p, c.Interface, k); why != "" {
			s.fail(InvariantSelection, "%s (%s) got %s for %s: %s", p, modeNames[h.w.mode], k, c.Interface, why)
			return
		}
	}
	if !repeat && h.w.stable {
		for _, k := range held {
			if s.valid(k) && !slices.Contains(got, k) {
				s.fail(InvariantSticky, "StatefulSet %s got %s, without %s, which its member held", p, keysString(got), k)
				return
			}
		}
	}
	// The claims it held and did not get back: given up (the trace says
	// so, and their pool no longer covers them), or still held as they
	// were (an import no interface took).
	var kept []claimKey
	for _, k := range held {
		if slices.Contains(got, k) {
			continue
		}
		c, ok := s.stored(k)
		switch {
		case !ok:
			return
		case c == nil && s.valid(k):
			s.fail(InvariantKept, "CNI ADD of %s released %s, which it held and whose pool still covers it", p, k)
		case c == nil && !traceReleased(res.Trace, k):
			s.fail(InvariantStore, "CNI ADD of %s released %s without a trace entry saying so", p, k)
		case c == nil:
			s.unhold(k)
			s.released[k] = release{s.now, ag}
		case h.iface[k] != "" && s.valid(k):
			s.fail(InvariantIdempotent, "CNI ADD of %s left out %s, which it holds for %s", p, k, h.iface[k])
		default:
			kept = append(kept, k)
		}
		if s.err != nil {
			return
		}
	}
	ifaces := make(map[claimKey]string, len(got)+len(kept))
	uids := make(map[claimKey]string, len(got)+len(kept))
	for i, k := range got {
		ifaces[k] = res.IPs[i].Interface
		if h.w.container && slices.Contains(held, k) && h.iface[k] == "" {
			// A host-local legacy claim may stay as it is, or be taken by
			// the interface it serves: either way DEL must release it (see
			// Drain).
			if c, ok := s.stored(k); !ok {
				return
			} else if c == nil || c.Owner.Interface != ifaces[k] {
				ifaces[k] = ""
			}
		}
		uids[k] = p.uid
	}
	for _, k := range kept {
		ifaces[k], uids[k] = h.iface[k], h.uids[k]
	}
	for _, k := range held {
		s.unhold(k)
	}
	h.addrs = append(append(h.addrs[:0], got...), kept...)
	h.iface, h.uids = ifaces, uids
	for _, k := range h.addrs {
		s.hold(k, h)
	}
	p.phase = gc.PodRunning
	p.hasIPs = true
}

// addFailed checks a CNI ADD that failed: only for a reason the simulation
// allows, and never for a running pod that holds a valid address for every
// slot.
func (s *Sim) addFailed(p *simPod, ev Event, ag int, err error, held []claimKey, repeat, meddled bool) {
	h := p.h
	legit := errors.Is(err, ipam.ErrExhausted) || errors.Is(err, ipam.ErrNoCandidates) ||
		p.want.IsValid() && errors.Is(err, ipam.ErrUnavailable) ||
		p.want.IsValid() && errors.Is(err, ipam.ErrNotInRange) && !s.coveredBy(p.req.Interfaces[0].Pools, p.want) ||
		meddled && (errors.Is(err, ipam.ErrConflict) || errors.Is(err, store.ErrNotFound))
	if pool, ok := overlapPool(err); ok {
		legit = s.w.mayRefuse(pool)
		s.stats.Refused++
	}
	s.record(entry{ev: ev, pod: p, agent: s.agentNote(ag), note: "ADD failed: " + errClass(err)})
	var ae *ipam.AllocationError
	if errors.As(err, &ae) {
		s.checkRefusals(p, ae.Trace)
		if s.err != nil {
			return
		}
	}
	s.resync(p, held)
	switch {
	case s.err != nil:
	case !legit:
		s.fail(InvariantError, "CNI ADD of %s: %v", p, err)
	case repeat && s.keepsAll(h, held):
		s.fail(InvariantIdempotent, "repeated CNI ADD of running %s, which holds %s, failed: %v", p, keysString(held), err)
	case h.w.stable && !meddled && len(held) == h.w.families && h.w.families > 0 && s.allValid(held):
		s.fail(InvariantSticky, "CNI ADD of %s, whose member still holds %s, failed: %v", p, keysString(held), err)
	default:
		s.stats.Exhausted++
	}
}

// resync learns, after a CNI ADD of p failed, which of the claims p holds
// the call changed before it failed: a stable owner's claim re-pointed to
// p's UID, an imported (or host-local legacy) claim taken by one of the
// interfaces that may use its pool. Those changes are kept, as the claims are (all or nothing
// applies to the addresses a call claims); any other change is left for the
// checks to find.
func (s *Sim) resync(p *simPod, held []claimKey) {
	h := p.h
	for _, k := range held {
		c, ok := s.stored(k)
		if !ok || c == nil {
			return
		}
		if h.w.stable && c.Owner.UID == p.uid {
			h.uids[k] = p.uid
		}
		if h.iface[k] == "" && c.Owner.Interface != "" {
			if !h.w.allowed[c.Owner.Interface][k.pool] {
				s.fail(InvariantSelection, "CNI ADD of %s failed, leaving %s taken by interface %s, which may not use pool %s", p, k, c.Owner.Interface, k.pool)
				return
			}
			h.iface[k] = c.Owner.Interface
		}
	}
}

// checkServed checks the addresses one CNI ADD returned, per interface: as
// many as the interface asks for, each from one of that interface's
// candidate pools, and no address twice, whatever its pool.
func (s *Sim) checkServed(p *simPod, res ipam.Result, got []claimKey) bool {
	w := p.w
	if len(got) != w.families {
		s.fail(InvariantSelection, "CNI ADD of %s (%s) got %d addresses %s, want %d", p, modeNames[w.mode], len(got), keysString(got), w.families)
		return false
	}
	count := make(map[string]int, len(w.perIface))
	for i, c := range res.IPs {
		count[c.Interface]++
		for j := range i {
			if got[j].ip == got[i].ip {
				s.fail(InvariantUnique, "CNI ADD of %s returned %s for %s and %s for %s: one address for two interfaces",
					p, got[j], res.IPs[j].Interface, got[i], c.Interface)
				return false
			}
		}
		if !w.allowed[c.Interface][c.Pool] {
			s.fail(InvariantSelection, "CNI ADD of %s (%s) served %s from pool %s, which is not among that interface's candidates %v",
				p, modeNames[w.mode], c.Interface, c.Pool, slices.Sorted(maps.Keys(w.allowed[c.Interface])))
			return false
		}
	}
	for iface, n := range w.perIface {
		if count[iface] != n {
			s.fail(InvariantSelection, "CNI ADD of %s (%s) gave interface %s %d addresses %s, want %d", p, modeNames[w.mode], iface, count[iface], keysString(got), n)
			return false
		}
	}
	return true
}

// admits says why pool k.pool must not serve the new address k.ip to
// interface iface of p, or "".
func (s *Sim) admits(p *simPod, iface string, k claimKey) string {
	w := p.w
	pl, ok := s.cur.Pool(k.pool)
	switch {
	case !ok:
		return fmt.Sprintf("pool %q does not exist", k.pool)
	case !s.allocatable(pl, k.ip):
		return fmt.Sprintf("%s is not an address pool %q hands out now (%v)", k.ip, k.pool, pl.Ranges)
	}
	if why := s.w.overlapping(s, k); why != "" {
		return why
	}
	if w.mode == modeExplicit {
		return ""
	}
	switch {
	case pl.Disable || pl.Terminating:
		return fmt.Sprintf("pool %q is disabled or terminating", k.pool)
	case len(pl.NodeName) > 0 && !slices.Contains(pl.NodeName, p.node.Name):
		return fmt.Sprintf("pool %q serves nodes %v only", k.pool, pl.NodeName)
	case len(pl.NodeName) == 0 && pl.NodeAffinity != nil && !pl.NodeAffinity.Matches(p.node.Labels):
		return fmt.Sprintf("pool %q's node affinity does not match node %s", k.pool, p.node.Name)
	case len(pl.NamespaceName) > 0 && !slices.Contains(pl.NamespaceName, w.ns.Name):
		return fmt.Sprintf("pool %q serves namespaces %v only", k.pool, pl.NamespaceName)
	case len(pl.NamespaceName) == 0 && pl.NamespaceAffinity != nil && !pl.NamespaceAffinity.Matches(w.ns.Labels):
		return fmt.Sprintf("pool %q's namespace affinity does not match namespace %s", k.pool, w.ns.Name)
	case pl.PodAffinity != nil && !pl.PodAffinity.Matches(w.labels):
		return fmt.Sprintf("pool %q's pod affinity does not match", k.pool)
	}
	return ""
}

// hold records that h holds k; unhold that nobody does.
func (s *Sim) hold(k claimKey, h *holder) {
	s.index[k] = h
	s.byIP[k.ip] = k
}

func (s *Sim) unhold(k claimKey) {
	delete(s.index, k)
	if s.byIP[k.ip] == k {
		delete(s.byIP, k.ip)
	}
}

// valid reports whether the pool of k, as defined now, still covers its
// address (host-local's Contains: in a range), so that its holder keeps it.
func (s *Sim) valid(k claimKey) bool {
	pl, ok := s.cur.Pool(k.pool)
	return ok && covers(pl, k.ip)
}

func (s *Sim) allValid(ks []claimKey) bool {
	for _, k := range ks {
		if !s.valid(k) {
			return false
		}
	}
	return true
}

// keepsAll reports whether h, holding held, holds a valid address for every
// slot of its pods, each known to serve one interface: a repeated ADD must
// then return them all, and nothing else.
func (s *Sim) keepsAll(h *holder, held []claimKey) bool {
	if len(held) != h.w.families || !s.allValid(held) {
		return false
	}
	for _, k := range held {
		if h.iface[k] == "" && !h.w.container {
			return false // an import, not yet taken by an interface
		}
	}
	return true
}

// coveredBy reports whether one of the named pools covers ip now.
func (s *Sim) coveredBy(pools []string, ip netip.Addr) bool {
	for _, name := range pools {
		if s.valid(claimKey{name, ip}) {
			return true
		}
	}
	return false
}

// covers reports whether one of p's ranges contains ip.
func covers(p *ipam.Pool, ip netip.Addr) bool {
	rs, err := p.RangeSet()
	if err != nil {
		return false
	}
	for _, r := range rs {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// allocatable reports whether p hands out ip: in one of its ranges, neither
// a gateway nor excluded.
func (s *Sim) allocatable(p *ipam.Pool, ip netip.Addr) bool {
	return s.allocSet(p).Contains(ip)
}

// allocSet returns the addresses p hands out, computed once per definition.
func (s *Sim) allocSet(p *ipam.Pool) *netipx.IPSet {
	set, ok := s.allocSets[p]
	if !ok {
		set = allocatableSet(p)
		if s.allocSets == nil {
			s.allocSets = make(map[*ipam.Pool]*netipx.IPSet)
		}
		s.allocSets[p] = set
	}
	return set
}

// allocatableSet returns the addresses p hands out.
func allocatableSet(p *ipam.Pool) *netipx.IPSet {
	var b netipx.IPSetBuilder
	rs, err := p.RangeSet()
	if err != nil {
		return &netipx.IPSet{}
	}
	for _, r := range rs {
		b.AddRange(r.IPRange())
		if r.Gateway.IsValid() {
			b.Remove(r.Gateway)
		}
	}
	for _, x := range p.ExcludeIPs {
		b.RemoveRange(x)
	}
	set, _ := b.IPSet()
	return set
}

// checkRefusals checks that every pool a trace says was refused for
// overlapping another did overlap one (see writers.mayRefuse).
func (s *Sim) checkRefusals(p *simPod, trace []ipam.TraceEntry) {
	for _, e := range trace {
		if e.Reason == ipam.ReasonOverlap {
			s.stats.Refused++
		}
		if e.Reason == ipam.ReasonOverlap && !s.w.mayRefuse(e.Pool) {
			s.fail(InvariantSelection, "CNI ADD of %s refused pool %s as overlapping, which never overlapped another while so defined: %s", p, e.Pool, e)
			return
		}
	}
}

// traceReleased reports whether the trace says k was given up.
func traceReleased(trace []ipam.TraceEntry, k claimKey) bool {
	for _, e := range trace {
		if e.Status == ipam.StatusReleased && e.Pool == k.pool && strings.Contains(e.Message, "released "+k.ip.String()+":") {
			return true
		}
	}
	return false
}

// validMember reports whether ordinal ord of w is a valid StatefulSet
// member now.
func (w *workload) validMember(ord int) bool { return w.sts && ord >= 0 && ord < w.replicas }

// cniDel runs the CNI DEL of p as the plugin does: a stable StatefulSet pod
// that is a valid member keeps its addresses for its next incarnation; a
// container is released interface by interface, each DEL through an agent
// of its own in the many-writers mode.
func (s *Sim) cniDel(p *simPod) string {
	h := p.h
	if p.w.stable && p.w.validMember(h.ord) {
		return "DEL keeps the addresses of a valid StatefulSet member"
	}
	n := 0
	if p.w.container {
		for _, ifc := range p.w.ifaces {
			n += s.release(p, ifc.Name, s.agentFor(p))
			if s.err != nil {
				return ""
			}
		}
	} else {
		n = s.release(p, "", s.agentFor(p))
	}
	return "DEL released " + strconv.Itoa(n)
}

// release runs one CNI DEL of p through agent ag, for interface iface (a
// container's) or for every interface, and takes what it released out of
// the model: a pod's claims (only those naming its UID for a stable owner);
// a container's claims that record iface, or if there are none, those that
// record no interface (host-local's legacy fallback). It returns how many.
func (s *Sim) release(p *simPod, iface string, ag int) int {
	h := p.h
	owner := p.owner()
	owner.Interface = iface
	outer := s.startOp(opDEL, p, ag)
	err := s.agents[ag].release(s.ctx, owner, s.now)
	s.endOp(outer)
	if err != nil {
		s.fail(InvariantError, "CNI DEL of %s through %s: %v", p, s.agents[ag], err)
		return 0
	}
	match := iface
	if p.w.container && !slices.ContainsFunc(h.addrs, func(k claimKey) bool { return h.iface[k] == iface }) {
		match = "" // host-local's fallback: the claims that record no interface
	}
	gone := func(k claimKey) bool {
		switch {
		case p.w.container:
			return h.iface[k] == match
		case p.w.stable:
			return h.uids[k] == p.uid
		}
		return true
	}
	kept := h.addrs[:0]
	n := 0
	for _, k := range h.addrs {
		if !gone(k) {
			kept = append(kept, k)
			continue
		}
		s.unhold(k)
		s.released[k] = release{s.now, ag}
		s.marked = append(s.marked, k)
		n++
	}
	clear(h.addrs[len(kept):])
	h.addrs = kept
	s.stats.Released += n
	return n
}

// lostDEL records that p's CNI DEL was lost: a pod's claims are left for
// garbage collection; a container's for the runtime, which retries the DEL
// (retryDELs).
func (s *Sim) lostDEL(p *simPod) {
	s.stats.LostDELs++
	if p.w.container && len(p.h.addrs) > 0 && !p.h.lostDEL {
		p.h.lostDEL = true
		s.w.lost = append(s.w.lost, p)
	}
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
	if s.opts.Writers {
		s.w.forget(p)
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
		s.lostDEL(p)
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
		s.lostDEL(p)
	}
	s.remove(p)
	s.record(entry{ev: ev, pod: p, note: verb + ", " + note})
}

func (s *Sim) recreate() bool {
	p := s.pick(func(p *simPod) bool {
		return p.w.sts && p.active() && p.phase == gc.PodRunning && p.w.validMember(p.h.ord)
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
			s.lostDEL(p)
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
	s.collectVia(s.gcAgent())
}

func (s *Sim) collectVia(ag int) {
	pods := make([]gc.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		if p.w.container {
			continue // no pod object: garbage collection knows nothing of it
		}
		gp := gc.Pod{
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
			gp.ControllerKind = gc.KindStatefulSet
		}
		pods = append(pods, gp)
	}
	sets := make([]gc.StatefulSet, 0, len(s.sets))
	for _, w := range s.sets {
		sets = append(sets, gc.StatefulSet{Namespace: w.ns.Name, Name: w.name, Replicas: w.replicas})
	}
	outer := s.startOp(opGC, nil, ag)
	ds, err := s.agents[ag].collect(s.ctx, gcCall{Now: s.now, Pods: pods, Sets: sets, Opts: s.opts.GC})
	s.endOp(outer)
	var note strings.Builder
	fmt.Fprintf(&note, "%d claims", len(ds))
	sep := ", released "
	for _, d := range ds {
		if d.Applied {
			fmt.Fprintf(&note, "%s%s %s (%s)", sep, d.Claim.Pool, d.Claim.IP, d.Reason)
			sep = ", "
		}
	}
	s.record(entry{ev: EventGC, agent: s.agentNote(ag), note: note.String()})
	if err != nil {
		s.fail(InvariantError, "garbage collection: %v", err)
		return
	}
	for _, d := range ds {
		// With many writers, a claim may change or go between the list and
		// the release: the release is then refused, and the Store is
		// compared with the model as ever.
		changed := s.opts.Writers && (errors.Is(d.Err, ipam.ErrConflict) || errors.Is(d.Err, ipam.ErrNotFound))
		if d.Release && !d.Applied && !changed {
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
		if why := s.protected(h, k); why != "" {
			s.fail(InvariantKept, "garbage collection released %s of %s, which %s (decision %s: %s)", k, h, why, d.Reason, d.Message)
			return
		}
		h.addrs = slices.DeleteFunc(h.addrs, func(x claimKey) bool { return x == k })
		s.unhold(k)
		s.released[k] = release{s.now, ag}
		s.marked = append(s.marked, k)
		s.stats.Collected++
	}
}

// protected says why garbage collection must not release h's claim on k
// now, or "".
func (s *Sim) protected(h *holder, k claimKey) string {
	w := h.w
	valid := w.stable && w.validMember(h.ord)
	p := h.pod
	if p == nil {
		if valid {
			return "is a valid StatefulSet member whose pod is being recreated"
		}
		return ""
	}
	if w.stable && h.uids[k] != p.uid {
		// The claim names an earlier pod of the member: its pod is gone.
		if valid && !p.hasIPs {
			return "is a valid StatefulSet member whose new pod has no addresses yet"
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
	if p.phase == gc.PodPending {
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
