package ipam

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/internal/readmap"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// ReservedSource is an optional capability of a PoolSource: the cluster's
// reserved addresses (SpiderReservedIP objects), which no pool hands out.
// Catalog implements it.
type ReservedSource interface {
	// Reserved returns the reserved addresses of family 4 or 6, or nil for
	// none. The Allocator rebuilds a pool's index when the returned pointer
	// changes, so return the same *IPSet while the reservations stay the same.
	Reserved(family int) *netipx.IPSet
}

// Options configure an Allocator. The zero Options, with a PoolSource, is a
// working in-memory allocator.
type Options struct {
	// Pools says which pools exist. Required.
	Pools PoolSource
	// Store holds the claims. Nil means a new, private in-memory store.
	Store store.Store
	// Logger receives debug and warning records. Nil discards them.
	Logger *slog.Logger
	// Quarantine keeps a released address out of reuse for this long after
	// its release, under either strategy, so that a pod whose teardown is
	// still in flight never sees its address handed to another. A request
	// that names the address gets it all the same. The quarantine is kept by
	// each Allocator in memory. Zero means none.
	Quarantine time.Duration
	// ResyncInterval is the least time between two reloads of a pool's index
	// from the Store, done when the pool looks exhausted (another allocator on
	// the same Store may have released addresses). Zero means one second; a
	// negative value never reloads.
	ResyncInterval time.Duration
}

// Validate reports whether the options can make an Allocator.
func (o Options) Validate() error {
	if o.Pools == nil {
		return &FieldError{Object: "options", Field: "Pools", Reason: "required"}
	}
	if o.Quarantine < 0 {
		return &FieldError{Object: "options", Field: "Quarantine", Value: o.Quarantine.String(), Reason: "must not be negative"}
	}
	return nil
}

// Request asks for addresses for one pod or container.
//
// The owner is identified by UID when set, otherwise by ContainerID: asking again
// with the same identity and interface returns what it already holds. The pod's
// labels, node, namespace and annotations feed Spiderpool's pool selection (see
// Select and Filter); a request whose interfaces name their pools directly needs
// none of them. The zero Request is invalid. A Request is read, never written,
// by the Allocator.
type Request struct {
	// Namespace, Name and UID identify the pod; UID is the owner identity.
	Namespace string
	Name      string
	UID       string
	// ContainerID identifies the owner when UID is empty (host-local's identity).
	ContainerID string
	// Stable marks a pod whose addresses belong to its namespace and name, not
	// its UID: a StatefulSet pod (or a KubeVirt VM's). A new pod of the same
	// name gets them back, and the claims are re-pointed to its UID. If the
	// pools chosen for an interface no longer include the pool of the held
	// address, that address is released once the new one is claimed.
	Stable bool

	// Labels and Annotations are the pod's. Annotations carry the
	// ipam.spidernet.io/ippool(s) and subnet(s) pool choices.
	Labels      map[string]string
	Annotations map[string]string
	// Node is the name of the pod's node, NodeLabels its labels.
	Node       string
	NodeLabels map[string]string
	// NamespaceLabels and NamespaceAnnotations are those of the pod's namespace;
	// the annotations carry ipam.spidernet.io/default-ipv4-ippool and -ipv6-.
	NamespaceLabels      map[string]string
	NamespaceAnnotations map[string]string
	// NetConf is the CNI network config's pool defaults.
	NetConf NetConf

	// Interfaces lists the interfaces to serve.
	Interfaces []Interface
}

// NetConf holds the pool-selection fields of a Spiderpool-style CNI network
// config ("ipam" section). The zero NetConf names no pools.
type NetConf struct {
	DefaultIPv4Pools []string `json:"default_ipv4_ippool,omitempty"`
	DefaultIPv6Pools []string `json:"default_ipv6_ippool,omitempty"`
	// CleanGateway drops the default route through the pool gateway, unless an
	// ipam.spidernet.io/ippools entry says otherwise for its interface.
	CleanGateway bool `json:"clean_gateway,omitempty"`
	// DisableIPv4 and DisableIPv6 drop the candidates of that family, as the
	// Spiderpool agent's enableIPv4/enableIPv6 do.
	DisableIPv4 bool `json:"-"`
	DisableIPv6 bool `json:"-"`
	// ClusterNetwork is the Multus cluster network ("ns/name") that serves the
	// first interface when the pod's v1.multus-cni.io/default-network
	// annotation is absent (the agent's MULTUS_CLUSTER_NETWORK).
	ClusterNetwork string `json:"-"`
}

// Interface asks for the addresses of one network interface.
type Interface struct {
	// Name is the interface name in the pod, such as "eth0". Required.
	Name string
	// Pools names the pools to allocate from: one address from each, in order,
	// all or nothing (host-local's range sets). Empty means: select them from
	// the pod's annotations, its namespace, NetConf and the cluster defaults.
	Pools []string
	// IPs are requested addresses. Each must lie in one of Pools (host-local's
	// Contains rule: in a range, between start and end); each pool serves at
	// most one of them, and the others get a dynamic address.
	IPs []netip.Addr
	// Network is the Multus network ("namespace/name" of the
	// NetworkAttachmentDefinition) behind this interface, matched against a
	// pool's multusName. Empty means: work it out from the pod's Multus
	// annotations and NetConf.ClusterNetwork.
	Network string
}

// Result lists the addresses a request got, with the trace of how they were
// chosen. Interfaces that name their pools come in request order, each in pool
// order; interfaces whose pools were selected come where the first of them is
// in the request, in Select's order (the ippools annotation's order for that
// rule), IPv4 before IPv6. The zero Result holds nothing.
type Result struct {
	IPs   []IPConfig
	Trace []TraceEntry
}

// IPConfig is one address handed to one interface.
type IPConfig struct {
	Interface string
	Pool      string
	// Address carries the range's subnet mask, such as 10.0.0.5/24.
	Address netip.Prefix
	// Gateway is the range's gateway; invalid when the pool has none.
	Gateway netip.Addr
	Vlan    int
	Routes  []Route
	// Reused reports that the owner already held this address before the call.
	Reused bool
}

// Status says what happened to a pool that was considered for an interface.
type Status string

// Statuses of a TraceEntry.
const (
	StatusServed    Status = "served"
	StatusCandidate Status = "candidate"
	StatusFiltered  Status = "filtered"
	StatusExhausted Status = "exhausted"
	StatusFailed    Status = "failed"
	// StatusReleased marks the pool of an address a stable owner held before
	// and gave up, its pools having changed.
	StatusReleased Status = "released"
)

// TraceEntry records one pool considered for one interface and IP family.
// The zero TraceEntry records nothing. It is a plain value.
type TraceEntry struct {
	Interface string
	Family    int
	Pool      string
	// Source is the rule that made the pool a candidate.
	Source Source
	Status Status
	// Reason is the machine-readable cause of a filtered, exhausted or failed
	// pool; empty for served and candidate pools.
	Reason Reason
	// Message says the same for people, such as `node "n2" not in nodeName
	// [n1]` or "exhausted (254/254 used)".
	Message string
	// Rank is the pool's position in the priority order of the pools that
	// passed the filters, from 1; 0 for a filtered pool.
	Rank int
}

// String returns, for example, `eth0 IPv4 blue: filtered: node "n2" not in
// nodeName [n1]` or `eth0 IPv4 green: exhausted (rank 1) (254/254 used)`.
func (e TraceEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s IPv%d %s: %s", e.Interface, e.Family, e.Pool, e.Status)
	if e.Rank > 0 {
		fmt.Fprintf(&b, " (rank %d)", e.Rank)
	}
	if e.Message != "" && !strings.HasPrefix(e.Message, string(e.Status)) {
		b.WriteString(": ")
		b.WriteString(e.Message)
	} else if e.Message != "" {
		b.WriteString(strings.TrimPrefix(e.Message, string(e.Status)))
	}
	return b.String()
}

// Allocator hands out addresses from pools and records them in a Store.
//
// It keeps its own index per pool (which addresses are used, who owns what),
// built from the Store on first use and kept current by its own writes. The
// Store decides every race: a Create that finds the address taken only makes the
// Allocator refresh and move on, so two Allocators on one Store never hand one
// address to two owners.
//
// An Allocator is safe for concurrent use by multiple goroutines. Its zero value
// is not usable: call NewAllocator.
type Allocator struct {
	source  PoolSource
	static  bool // source is a *Catalog, whose pools never change
	store   store.Store
	cursors store.Cursors
	log     *slog.Logger
	resync  time.Duration
	quarant time.Duration

	pools readmap.Map[*poolIndex]

	omu       sync.Mutex
	owners    ownerIndex
	allLoaded bool
}

// ownerID is an owner's identity: its pod UID, its container ID, or, for a
// stable owner, its namespace/name.
type ownerID struct {
	kind idKind
	id   string
}

type idKind uint8

const (
	byContainer idKind = iota + 1
	byUID
	byName
)

func identity(o store.Owner) ownerID {
	switch {
	case o.Stable:
		return ownerID{byName, o.Namespace + "/" + o.Name}
	case o.UID != "":
		return ownerID{byUID, o.UID}
	}
	return ownerID{byContainer, o.ContainerID}
}

// ownerIndex maps owner identities to what they hold. It keeps one map per
// kind of identity, keyed by the identity's string, so that lookups take the
// runtime's fast path for string keys.
type ownerIndex struct {
	byKind [byName + 1]map[string]holdings
}

func (x *ownerIndex) get(id ownerID) (holdings, bool) {
	hs, ok := x.byKind[id.kind][id.id]
	return hs, ok
}

func (x *ownerIndex) put(id ownerID, hs holdings) {
	m := x.byKind[id.kind]
	if m == nil {
		m = make(map[string]holdings)
		x.byKind[id.kind] = m
	}
	m[id.id] = hs
}

func (x *ownerIndex) del(id ownerID) { delete(x.byKind[id.kind], id.id) }

// all yields every owner and its holdings; the index may be changed meanwhile.
func (x *ownerIndex) all() iter.Seq2[ownerID, holdings] {
	return func(yield func(ownerID, holdings) bool) {
		for k, m := range x.byKind {
			for id, hs := range m {
				if !yield(ownerID{idKind(k), id}, hs) {
					return
				}
			}
		}
	}
}

// holding is one address an owner holds.
type holding struct {
	pool  *poolIndex
	ip    netip.Addr
	iface string
}

// holdings is the addresses one owner holds. The first is stored inline, so an
// owner with one address costs no allocation of its own; order is not kept.
type holdings struct {
	first holding
	n     int
	rest  []holding
}

func (hs *holdings) at(i int) holding {
	if i == 0 {
		return hs.first
	}
	return hs.rest[i-1]
}

func (hs *holdings) set(i int, h holding) {
	if i == 0 {
		hs.first = h
	} else {
		hs.rest[i-1] = h
	}
}

func (hs *holdings) add(h holding) {
	if hs.n == 0 {
		hs.first = h
	} else {
		hs.rest = append(hs.rest, h)
	}
	hs.n++
}

// remove drops the i-th holding, moving the last one into its place.
func (hs *holdings) remove(i int) {
	hs.set(i, hs.at(hs.n-1))
	if hs.n > 1 {
		hs.rest[hs.n-2] = holding{}
		hs.rest = hs.rest[:hs.n-2]
	} else {
		hs.first = holding{}
	}
	hs.n--
}

// matches reports whether h serves interface iface: the same name, or a legacy
// host-local claim that recorded no interface.
func (h holding) matches(iface string) bool {
	return h.iface == iface || h.iface == ""
}

// NewAllocator returns an Allocator for the options.
func NewAllocator(opts Options) (*Allocator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	a := &Allocator{
		source:  opts.Pools,
		store:   opts.Store,
		log:     opts.Logger,
		resync:  opts.ResyncInterval,
		quarant: opts.Quarantine,
	}
	if a.store == nil {
		a.store = memstore.New()
	}
	a.cursors, _ = a.store.(store.Cursors)
	_, a.static = a.source.(*Catalog)
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.resync == 0 {
		a.resync = time.Second
	}
	return a, nil
}

// Allocate is AllocateAt at time.Now().
func (a *Allocator) Allocate(ctx context.Context, req Request) (Result, error) {
	return a.AllocateAt(ctx, req, time.Now())
}

// AllocateAt serves every interface of req and records the claims at time now.
//
// An interface that names its pools gets one address from each, in order
// (host-local's range sets). An interface that names none gets its pools from
// Spiderpool's chain (Select): per IP family, the candidates are filtered
// (Subject.Check), sorted by priority (Sort) and tried in that order, an
// exhausted, fully excluded or fully reserved pool falling through to the next.
// The Result's Trace says what happened to every pool considered; the same
// trace rides in the error when something cannot be served.
//
// It is idempotent: an owner that already holds an address for an interface
// (in that pool, or, for selected pools, of that family) gets it back
// (Reused), and a requested address must then be that one (else
// ErrOwnerConflict). It is all-or-nothing across pools, families and
// interfaces: if any part fails, the addresses this call claimed are released
// before the error returns, and the addresses the owner held before the call
// are kept. Requested addresses are placed before anything is claimed, and
// claimed before any dynamic address.
func (a *Allocator) AllocateAt(ctx context.Context, req Request, now time.Time) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	owner := store.Owner{Namespace: req.Namespace, Name: req.Name, UID: req.UID, ContainerID: req.ContainerID, Stable: req.Stable}
	id := identity(owner)

	var (
		selected []Candidates
		sreq     *Request // a heap copy of req, made only when selecting
	)
	if req.selects() {
		sreq = new(Request)
		*sreq = req
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
			if slices.IndexFunc(req.Interfaces[:i], func(x Interface) bool { return len(x.Pools) == 0 }) < 0 {
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
			idx, err := a.index(ctx, name, now)
			if err != nil {
				return Result{}, &AllocationError{Interface: ifc.Name, Pool: name, Reason: err.Error(), Err: err}
			}
			def := idx.def.Load()
			tasks = append(tasks, task{iface: ifc.Name, idx: idx, pool: def.pool, lay: def.layout, source: SourceRequest})
		}
		if err := placeRequested(ifc, tasks[start:]); err != nil {
			return Result{}, err
		}
	}

	// What the owner holds already, then requested addresses, then the rest.
	// The owner index knows the claims of loaded pools only: load the
	// candidates, and for a stable owner (whose pools may have changed since
	// its last allocation) every pool.
	if req.Stable {
		if err := a.loadAll(ctx, now); err != nil {
			return Result{}, &AllocationError{Err: err, Reason: "loading claims: " + err.Error()}
		}
	} else if sreq != nil {
		for _, c := range selected {
			for _, name := range c.Pools {
				if idx := a.indexFor(name); idx != nil && idx.def.Load() != nil {
					continue // loaded: its owners are known; a new definition is picked up when it is tried
				}
				if _, err := a.index(ctx, name, now); err != nil && !errors.Is(err, ErrNotFound) {
					return Result{}, &AllocationError{Interface: c.Interface, Family: c.Family, Pool: name, Err: err, Reason: err.Error()}
				}
			}
		}
	}
	for i := range tasks {
		t := &tasks[i]
		if err := a.reuse(ctx, t, id, owner, now); err != nil {
			return Result{}, t.fail(tasks, err)
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
			owner.Interface = t.iface
			var err error
			if t.sel != nil {
				err = a.claimSelected(ctx, t, owner, now)
			} else {
				t.ip, t.reused, err = a.claim(ctx, t.idx, t.iface, t.want, owner, now)
			}
			if err != nil {
				if t.sel == nil {
					t.outcome, t.note = StatusFailed, err.Error()
					if errors.Is(err, ErrExhausted) {
						t.outcome, t.reason = StatusExhausted, ReasonExhausted
					}
				}
				a.rollback(ctx, tasks, claimed)
				return Result{}, t.fail(tasks, err)
			}
			if !t.reused {
				claimed = append(claimed, i)
			}
		}
	}

	for i := range tasks {
		if c := tasks[i].stale; c != nil {
			if idx := a.indexFor(c.Pool); idx != nil {
				if _, err := a.releaseClaim(ctx, idx, c.IP, ownerFilter{id: id, iface: c.Owner.Interface}, a.quarantineUntil(now)); err != nil {
					a.log.Warn("ipam: cannot release the address of a pool no longer chosen", "pool", c.Pool, "ip", c.IP, "err", err)
				}
			}
		}
	}
	entries := 0
	for i := range tasks {
		entries += max(1, len(tasks[i].trace)+len(tasks[i].order))
	}
	res := newResult(len(tasks), entries)
	for i := range tasks {
		t := &tasks[i]
		res.IPs = append(res.IPs, t.config())
		res.Trace = t.appendTrace(res.Trace)
	}
	return res, nil
}

// appendSelected adds the task for one interface and family whose pools the
// chain selected: the named pools, filtered for the pod, then sorted.
func (a *Allocator) appendSelected(tasks []task, req *Request, c *Candidates) ([]task, error) {
	ifc := Interface{Name: c.Interface}
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

// reuse finds what the owner already holds for t and, if the Store agrees,
// makes it t's address.
func (a *Allocator) reuse(ctx context.Context, t *task, id ownerID, owner store.Owner, now time.Time) error {
	var (
		h     holding
		hid   ownerID
		c     store.Claim
		held  bool
		found bool
	)
	for attempt := 0; attempt < 2 && !held; attempt++ {
		if attempt > 0 {
			// Another Allocator on the Store may have claimed for this pod
			// since this one loaded the pools: read them again before taking
			// a new address. Stable pods are few and restart rarely.
			if !owner.Stable {
				break
			}
			if err := a.refresh(ctx, t, now); err != nil {
				return &AllocationError{Interface: t.iface, Err: err, Reason: "reloading claims: " + err.Error()}
			}
		}
		if h, hid, found = a.findHeld(t, id, owner); !found {
			continue
		}
		// The index may be stale (a release or a reload raced it, or another
		// Allocator released the claim): trust the Store only.
		var err error
		if c, held, err = a.stillHeld(ctx, h, hid); err != nil {
			return &AllocationError{Interface: t.iface, Pool: h.pool.name, IP: h.ip, Err: err, Reason: "store: " + err.Error()}
		}
	}
	if !held {
		return nil
	}
	if owner.Stable && t.sel != nil && !slices.Contains(t.sel.Pools, h.pool.name) {
		// The pod's pools changed: serve it anew, and let the old address go
		// once that worked (Spiderpool releases it first).
		stale := c
		t.stale = &stale
		return nil
	}
	if err := a.adopt(ctx, t.iface, h.pool, c, hid, owner); err != nil {
		return err
	}
	if t.want.IsValid() && t.want != h.ip {
		owner.Interface = t.iface
		return &AllocationError{Interface: t.iface, Pool: h.pool.name, IP: t.want, Err: ErrOwnerConflict,
			Reason: fmt.Sprintf("%s already holds %s in this pool, not the requested %s", owner, h.ip, t.want)}
	}
	if t.sel != nil {
		def := h.pool.def.Load()
		t.idx, t.pool, t.lay = h.pool, def.pool, def.layout
	}
	t.ip, t.reused = h.ip, true
	return nil
}

// findHeld returns what the owner holds for t, and under which identity: its
// own, or, for a stable owner, its pod UID's (a claim of this very pod made
// before it was marked stable, or imported from Spiderpool, whose records
// know no such thing).
func (a *Allocator) findHeld(t *task, id ownerID, owner store.Owner) (holding, ownerID, bool) {
	if h, ok := a.holdingFor(t, id); ok {
		return h, id, true
	}
	if owner.Stable && owner.UID != "" {
		uid := ownerID{byUID, owner.UID}
		if h, ok := a.holdingFor(t, uid); ok {
			return h, uid, true
		}
	}
	return holding{}, id, false
}

// refresh reloads the claims of t's pools that are loaded.
func (a *Allocator) refresh(ctx context.Context, t *task, now time.Time) error {
	if t.sel == nil {
		return a.reload(ctx, t.idx, now)
	}
	for _, name := range t.sel.Pools {
		if idx := a.indexFor(name); idx != nil && idx.def.Load() != nil {
			if err := a.reload(ctx, idx, now); err != nil {
				return err
			}
		}
	}
	return nil
}

// adopt makes claim c, which hid holds in idx, the owner's as this request
// describes it: a stable owner's claim follows the pod of the same name to its
// new UID, and a pod claim that names no interface (imported from Spiderpool,
// whose records have none) is adopted by the first interface that finds it,
// so that a second interface on the same pool gets an address of its own. The
// update is revision-checked.
func (a *Allocator) adopt(ctx context.Context, iface string, idx *poolIndex, c store.Claim, hid ownerID, owner store.Owner) error {
	if !(owner.Stable && (c.Owner.UID != owner.UID || !c.Owner.Stable)) && !(c.Owner.Interface == "" && identity(owner).kind != byContainer) {
		return nil
	}
	moved := c
	moved.Owner = owner
	moved.Owner.Interface = cmp.Or(c.Owner.Interface, iface)
	if _, err := a.store.Update(ctx, moved, c.Revision); err != nil {
		return &AllocationError{Interface: iface, Pool: idx.name, IP: c.IP, Err: err,
			Reason: fmt.Sprintf("re-pointing the claim of %s (uid %s) on %s: %v", owner, c.Owner.UID, c.IP, err)}
	}
	a.dropHolding(hid, idx, c.IP)
	a.addHolding(idx, moved)
	return nil
}

// holdingFor returns an address id holds for t: in t's pool for a task that
// names its pool, else in a pool of t's family. A holding of t's interface is
// preferred to one that records no interface (a legacy or imported claim).
func (a *Allocator) holdingFor(t *task, id ownerID) (holding, bool) {
	if t.sel == nil {
		return a.held(id, t.iface, func(p *poolIndex) bool { return p == t.idx })
	}
	return a.held(id, t.iface, func(p *poolIndex) bool { return p.def.Load().layout.family() == t.family })
}

// claimSelected tries t's pools in order until one gives an address.
func (a *Allocator) claimSelected(ctx context.Context, t *task, owner store.Owner, now time.Time) error {
	for k, p := range t.order {
		rank := k + 1
		idx, err := a.index(ctx, p.Name, now)
		if err != nil {
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFailed, Message: err.Error(), Rank: rank})
			t.tried = rank
			return &AllocationError{Interface: t.iface, Family: t.family, Pool: p.Name, Reason: err.Error(), Err: err}
		}
		def := idx.def.Load()
		if def.empty != "" {
			msg := "every address is excluded"
			if def.empty == ReasonReserved {
				msg = "every address is reserved"
			}
			t.trace = append(t.trace, TraceEntry{Pool: p.Name, Status: StatusFiltered, Reason: def.empty, Message: msg, Rank: rank})
			t.tried = rank
			continue
		}
		ip, reused, err := a.claim(ctx, idx, t.iface, netip.Addr{}, owner, now)
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
		t.idx, t.pool, t.lay, t.ip, t.reused, t.served = idx, def.pool, def.layout, ip, reused, rank
		return nil
	}
	// Nothing served: say why, pool by pool.
	var b strings.Builder
	fmt.Fprintf(&b, "no pool can serve %s", t.ownerName(owner))
	sep := ": "
	for _, e := range t.trace {
		b.WriteString(sep)
		b.WriteString(e.Pool)
		b.WriteString(": ")
		b.WriteString(e.Message)
		sep = "; "
	}
	return &AllocationError{Interface: t.iface, Family: t.family, Err: ErrNoCandidates, Reason: b.String()}
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
	reused bool

	// Selected tasks only.
	sel    *Candidates
	family int
	stale  *store.Claim // a stable owner's claim in a pool no longer chosen

	// What happened to a task that names its pool, when it did not serve.
	outcome Status
	reason  Reason
	note    string

	order  []*Pool      // the candidates that passed the filters, sorted
	tried  int          // how many of order were tried and did not serve
	served int          // rank of the pool of order that served; 0 if none
	trace  []TraceEntry // filtered, exhausted and failed pools so far
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
		return append(out, e)
	}
	// Filtered and tried pools in the order they were found, then the pool
	// that served (if it was not already held), then the pools never tried.
	start := len(out)
	out = append(out, t.trace...)
	next := t.tried
	held := ""
	if t.served > 0 {
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
	if t.stale != nil {
		out = append(out, TraceEntry{Pool: t.stale.Pool, Status: StatusReleased,
			Message: "released " + t.stale.IP.String() + ": the pod's pools no longer include this one"})
	}
	for j := start; j < len(out); j++ {
		out[j].Interface, out[j].Family, out[j].Source = t.iface, fam, t.source
	}
	return out
}

// fail returns err with the trace of every task so far, if it is an
// *AllocationError without one.
func (t *task) fail(tasks []task, err error) error {
	var ae *AllocationError
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

func (t *task) config() IPConfig {
	var r Range
	if si, ok := t.lay.segAt(t.ip); ok {
		r = t.lay.ranges[t.lay.segs[si].rng]
	} else if k := t.lay.rangeOf(t.ip); k >= 0 {
		r = t.lay.ranges[k]
	}
	routes := t.pool.Routes
	if t.sel != nil && !t.sel.CleanGateway && r.Gateway.IsValid() {
		// Spiderpool's default route through the pool's gateway.
		dst := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
		if !r.Gateway.Is4() {
			dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
		}
		routes = append(slices.Clip(routes), Route{Dst: dst, GW: r.Gateway})
	}
	return IPConfig{
		Interface: t.iface,
		Pool:      t.idx.name,
		Address:   netip.PrefixFrom(t.ip, r.Subnet.Bits()),
		Gateway:   r.Gateway,
		Vlan:      t.pool.Vlan,
		Routes:    routes,
		Reused:    t.reused,
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
			if !ip.IsValid() {
				fe.add(fmt.Sprintf("interfaces[%d].ips[%d]", i, j), "", "invalid IP address")
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
// are errors, reported before anything is claimed.
func placeRequested(ifc Interface, tasks []task) error {
	if len(ifc.IPs) == 0 {
		return nil
	}
	var left []string
	var errs []error
	seen := make(map[netip.Addr]bool, len(ifc.IPs))
	for _, ip := range ifc.IPs {
		ip = ip.Unmap()
		if seen[ip] {
			continue
		}
		seen[ip] = true
		placed := false
		for k := range tasks {
			t := &tasks[k]
			if t.want.IsValid() {
				continue
			}
			rng := t.lay.rangeOf(ip)
			if rng < 0 {
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
		if !placed {
			left = append(left, ip.String())
		}
	}
	if len(left) > 0 {
		names := make([]string, len(tasks))
		for k, t := range tasks {
			names[k] = fmt.Sprintf("%q (%s)", t.idx.name, t.lay)
		}
		errs = append(errs, &AllocationError{Interface: ifc.Name, Err: ErrNotInRange,
			Reason: fmt.Sprintf("requested IP addresses %s: not in any free slot of pools %s", strings.Join(left, " "), strings.Join(names, ", "))})
	}
	return errors.Join(errs...)
}

// held returns what id holds for iface in a pool that in accepts, if
// anything: a holding of that interface, else one that records no interface
// (a legacy claim).
func (a *Allocator) held(id ownerID, iface string, in func(*poolIndex) bool) (holding, bool) {
	a.omu.Lock()
	defer a.omu.Unlock()
	hs, _ := a.owners.get(id)
	var legacy holding
	found := false
	for i := range hs.n {
		h := hs.at(i)
		if !h.matches(iface) || !in(h.pool) {
			continue
		}
		if h.iface == iface {
			return h, true
		}
		if !found {
			legacy, found = h, true
		}
	}
	return legacy, found
}

// stillHeld reports whether the Store still has id's claim h, for h's
// interface, and puts the Store's version in the index if not: another
// Allocator may have released it and given it to someone else, or to another
// interface of the same owner.
func (a *Allocator) stillHeld(ctx context.Context, h holding, id ownerID) (store.Claim, bool, error) {
	idx, ip := h.pool, h.ip
	c, err := a.store.Get(ctx, idx.name, ip)
	switch {
	case errors.Is(err, store.ErrNotFound):
		idx.forget(ip)
		a.dropHolding(id, idx, ip)
		return c, false, nil
	case err != nil:
		return c, false, err
	case identity(c.Owner) != id || c.Owner.Interface != h.iface:
		a.dropHolding(id, idx, ip)
		idx.commit(c)
		a.addHolding(idx, c)
		return c, false, nil
	}
	return c, true, nil
}

// claim takes one address in idx for owner: want if valid, else the next free
// one. reused reports that a concurrent call for the same owner won the race and
// its address is returned instead.
func (a *Allocator) claim(ctx context.Context, idx *poolIndex, iface string, want netip.Addr, owner store.Owner, now time.Time) (ip netip.Addr, reused bool, err error) {
	resynced := false
	for {
		if err := ctx.Err(); err != nil {
			return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, Err: err, Reason: err.Error()}
		}
		ip, slot, ok := idx.reserve(want, now)
		if !ok {
			if want.IsValid() {
				// The index says taken; the Store decides. If another Allocator
				// released it, forget it and try once more.
				if !resynced {
					_, err := a.store.Get(ctx, idx.name, want)
					if errors.Is(err, store.ErrNotFound) {
						resynced = true
						idx.forget(want)
						continue
					}
				}
				return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, IP: want, Err: ErrUnavailable,
					Reason: fmt.Sprintf("requested IP address %s is not available in range set %s: already claimed", want, idx.def.Load().layout)}
			}
			if !resynced && a.resync > 0 && idx.dueResync(now, a.resync) {
				resynced = true
				if err := a.reload(ctx, idx, now); err != nil {
					return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, Err: err, Reason: "reloading claims: " + err.Error()}
				}
				continue
			}
			return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, Err: ErrExhausted,
				Reason: "no free address in range set " + idx.describe()}
		}
		c, err := a.create(ctx, store.Claim{Pool: idx.name, IP: ip, Owner: owner, Time: now})
		switch {
		case err == nil:
			if !a.record(idx, c, slot) {
				// A concurrent call for the same owner won: give ours back.
				if _, err := a.releaseClaim(ctx, idx, c.IP, ownerFilter{id: identity(owner), iface: iface}, time.Time{}); err != nil {
					a.log.Warn("ipam: cannot release a duplicate claim", "pool", idx.name, "ip", c.IP, "err", err)
				}
				h, _ := a.held(identity(owner), iface, func(p *poolIndex) bool { return p == idx })
				if c, err := a.store.Get(ctx, idx.name, h.ip); err == nil && identity(c.Owner) == identity(owner) {
					if err := a.adopt(ctx, iface, idx, c, identity(owner), owner); err != nil {
						return netip.Addr{}, false, err
					}
				}
				return h.ip, true, nil
			}
			return ip, false, nil
		case errors.Is(err, store.ErrExists):
			// Our index was stale: the address stays marked used; try the next.
			idx.learnTaken(ip)
			if want.IsValid() {
				return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, IP: want, Err: ErrUnavailable,
					Reason: fmt.Sprintf("requested IP address %s is not available in range set %s: already claimed", want, idx.def.Load().layout)}
			}
		default:
			idx.unreserve(ip)
			return netip.Addr{}, false, &AllocationError{Interface: iface, Pool: idx.name, IP: ip, Err: err, Reason: "store: " + err.Error()}
		}
	}
}

// create stores a new claim and moves its pool's cursor to it (host-local's
// last_reserved_ip): in one call if the Store can, else in two, the second a
// hint whose failure is only logged.
func (a *Allocator) create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return store.CreateAndSetCursor(ctx, a.store, c, func(err error) {
		a.log.Warn("ipam: cannot record last reserved address", "pool", c.Pool, "ip", c.IP, "err", err)
	})
}

// rollback releases what this call claimed, logging what it cannot.
func (a *Allocator) rollback(ctx context.Context, tasks []task, claimed []int) {
	// A rollback must finish even if the caller has given up.
	ctx = context.WithoutCancel(ctx)
	for _, i := range claimed {
		t := &tasks[i]
		if _, err := a.releaseClaim(ctx, t.idx, t.ip, ownerFilter{}, time.Time{}); err != nil {
			a.log.Warn("ipam: rollback could not release", "pool", t.idx.name, "ip", t.ip, "err", err)
		}
		t.outcome, t.note = StatusReleased, "released "+t.ip.String()+": the request failed"
	}
}

// record marks a claim just created in idx's tree and adds it to the owner
// index, as addHolding, with the pool's lock held throughout. The mark is
// usually there already (reserve set it), but a reload in progress may be
// rebuilding the tree from a List that predates the Create; holding the lock
// orders this after that reload, whose registerOwners would otherwise drop the
// new holding. Without it TestConcurrentAllocators loses idempotency.
func (a *Allocator) record(idx *poolIndex, c store.Claim, at slot) bool {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	lay := idx.def.Load().layout
	if at.lay == lay {
		idx.tree.set(at.ord)
	} else if o, ok := lay.ordinal(c.IP); ok {
		idx.tree.set(o)
	}
	return a.addHolding(idx, c)
}

// slot is where reserve marked an address: its ordinal in a layout.
type slot struct {
	lay *layout
	ord u128
}

// addHolding records a claim of idx in the owner index. It reports false if
// the owner already holds another address in that pool for that interface.
func (a *Allocator) addHolding(idx *poolIndex, c store.Claim) bool {
	id := identity(c.Owner)
	a.omu.Lock()
	defer a.omu.Unlock()
	hs, _ := a.owners.get(id)
	for i := range hs.n {
		h := hs.at(i)
		if h.pool == idx && h.ip == c.IP {
			return true
		}
		if h.pool == idx && h.iface == c.Owner.Interface {
			return false
		}
	}
	hs.add(holding{pool: idx, ip: c.IP, iface: c.Owner.Interface})
	a.owners.put(id, hs)
	return true
}

func (a *Allocator) dropHolding(id ownerID, idx *poolIndex, ip netip.Addr) {
	a.omu.Lock()
	defer a.omu.Unlock()
	a.dropHoldingLocked(id, idx, ip)
}

func (a *Allocator) dropHoldingLocked(id ownerID, idx *poolIndex, ip netip.Addr) {
	hs, ok := a.owners.get(id)
	if !ok {
		return
	}
	for i := range hs.n {
		if h := hs.at(i); h.pool == idx && h.ip == ip {
			hs.remove(i)
			break
		}
	}
	if hs.n == 0 {
		a.owners.del(id)
	} else {
		a.owners.put(id, hs)
	}
}

func (a *Allocator) indexFor(name string) *poolIndex {
	idx, _ := a.pools.Get(name)
	return idx
}

// index returns the loaded index of the named pool, rebuilding its layout if
// the PoolSource now returns a different definition.
func (a *Allocator) index(ctx context.Context, name string, now time.Time) (*poolIndex, error) {
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
	if err := a.load(ctx, idx, p, reserved, now); err != nil {
		return nil, err
	}
	return idx, nil
}

// load builds or rebuilds idx for definition p and the cluster's reserved
// addresses.
func (a *Allocator) load(ctx context.Context, idx *poolIndex, p *Pool, reserved *netipx.IPSet, now time.Time) error {
	rs, err := p.RangeSet()
	if err != nil {
		return err
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
	if def.layout.total.isZero() {
		def.empty = ReasonExcluded
		if reserved != nil && !FullyExcluded(p) {
			def.empty = ReasonReserved
		}
	}

	// The pool's lock is held across the List, so that every claim and release
	// of this pool either is in the snapshot or is applied after it.
	idx.mu.Lock()
	defer idx.mu.Unlock()
	d := idx.def.Load()
	if d != nil && d.pool == p && d.reserved == reserved {
		return nil
	}
	// A new pool, or a new definition of one: the index holds no claims of its
	// own, so the used addresses come from the Store.
	claims, err := a.list(ctx, idx.name)
	if err != nil {
		return fmt.Errorf("listing claims of pool %q: %w", idx.name, err)
	}
	var cursor netip.Addr
	if a.cursors != nil {
		if cursor, err = a.cursors.Cursor(ctx, idx.name); err != nil {
			a.log.Warn("ipam: cannot read last reserved address", "pool", idx.name, "err", err)
		}
	}
	idx.rebuild(def, claims, now)
	if d == nil && cursor.IsValid() {
		idx.cursor, idx.nextLay = cursor, nil
	}
	// A first load has no entries of idx to replace: only add, so that
	// loading many pools one by one does not walk every owner each time.
	a.registerOwners(idx, claims, d != nil)
	return nil
}

// list is the Store's List, except that unreadable records (ErrCorrupt) are
// logged and skipped: their addresses look free to the index, and the Store
// refuses to create a claim over them, so they stay taken.
func (a *Allocator) list(ctx context.Context, pool string) ([]store.Claim, error) {
	claims, err := a.store.List(ctx, pool)
	if err != nil && errors.Is(err, store.ErrCorrupt) {
		a.log.Warn("ipam: unreadable claims left taken", "pool", pool, "err", err)
		return claims, nil
	}
	return claims, err
}

// reload replaces idx's claims with the Store's.
func (a *Allocator) reload(ctx context.Context, idx *poolIndex, now time.Time) error {
	// As in load, the List happens under the pool's lock: a release that
	// lands between the List and the rebuild must not be undone by it.
	idx.mu.Lock()
	defer idx.mu.Unlock()
	claims, err := a.list(ctx, idx.name)
	if err != nil {
		return err
	}
	idx.rebuild(idx.def.Load(), claims, now)
	a.registerOwners(idx, claims, true)
	return nil
}

// registerOwners replaces the owner index entries of idx with those of claims.
// With replace it walks every owner, so it is for reloads, not for each claim;
// without, idx must have no entries yet (its first load).
func (a *Allocator) registerOwners(idx *poolIndex, claims []store.Claim, replace bool) {
	a.omu.Lock()
	defer a.omu.Unlock()
	if replace {
		a.dropPoolLocked(idx)
	}
	for _, c := range claims {
		id := identity(c.Owner)
		hs, _ := a.owners.get(id)
		hs.add(holding{pool: idx, ip: c.IP, iface: c.Owner.Interface})
		a.owners.put(id, hs)
	}
}

// dropPoolLocked removes every owner index entry of idx. Called with omu held.
func (a *Allocator) dropPoolLocked(idx *poolIndex) {
	for id, hs := range a.owners.all() {
		changed := false
		for i := 0; i < hs.n; {
			if hs.at(i).pool == idx {
				hs.remove(i)
				changed = true
				continue
			}
			i++
		}
		switch {
		case hs.n == 0:
			a.owners.del(id)
		case changed:
			a.owners.put(id, hs)
		}
	}
}

// loadAll loads every pool of the source, so that owner lookups see every claim.
func (a *Allocator) loadAll(ctx context.Context, now time.Time) error {
	a.omu.Lock()
	done := a.allLoaded
	a.omu.Unlock()
	if done {
		return nil
	}
	var errs []error
	for p := range a.source.Pools() {
		if _, err := a.index(ctx, p.Name, now); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		a.omu.Lock()
		a.allLoaded = true
		a.omu.Unlock()
	}
	return errors.Join(errs...)
}

// quarantineUntil returns until when an address released at now stays out of
// reuse; the zero Time if there is no quarantine.
func (a *Allocator) quarantineUntil(now time.Time) time.Time {
	if a.quarant <= 0 {
		return time.Time{}
	}
	return now.Add(a.quarant)
}

// Release is ReleaseAt at time.Now().
func (a *Allocator) Release(ctx context.Context, owner store.Owner) error {
	return a.ReleaseAt(ctx, owner, time.Now())
}

// ReleaseAt releases what owner holds: with owner.Interface set, the addresses
// of that interface; otherwise those of every interface. An owner identified by
// container ID that holds nothing for the interface releases its legacy claims
// that recorded no interface (host-local's fallback). Releasing what is not held
// is not an error. A claim that someone else changed in the Store meanwhile is
// left alone.
//
// A Stable owner releases only the claims that name its UID: a late release
// from an earlier pod of the same name leaves the current pod's addresses
// alone. An owner not marked Stable, but with a name and UID, that holds
// nothing by UID releases the claims held by its name that name its UID, so a
// caller that forgot the flag still frees them.
func (a *Allocator) ReleaseAt(ctx context.Context, owner store.Owner, now time.Time) error {
	if owner.IsZero() {
		return &FieldError{Object: "owner", Field: "uid", Reason: "required (or containerID)"}
	}
	if err := a.loadAll(ctx, now); err != nil {
		return err
	}
	id := identity(owner)
	var buf [4]holding
	held := a.lookup(id, owner.Interface, buf[:0])
	uid := ""
	if owner.Stable {
		// A late release from an earlier pod of that name must not free what
		// the pod of now holds.
		uid = owner.UID
	} else if len(held) == 0 && owner.UID != "" && owner.Name != "" {
		// The caller did not say the pod is stable, but its claims may be
		// held by name: release those that name this very pod.
		stable := owner
		stable.Stable = true
		id, uid = identity(stable), owner.UID
		held = a.lookup(id, owner.Interface, buf[:0])
	}
	var errs []error
	for _, h := range held {
		if _, err := a.releaseClaim(ctx, h.pool, h.ip, ownerFilter{id, uid, owner.Interface}, a.quarantineUntil(now)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ownerFilter limits a release to claims of one identity and, if uid is set,
// of one pod UID, and if iface is set, of that interface or of none (a legacy
// claim).
type ownerFilter struct {
	id    ownerID
	uid   string
	iface string
}

// lookup appends to out the holdings of id for iface ("" for all), with
// host-local's legacy fallback.
func (a *Allocator) lookup(id ownerID, iface string, out []holding) []holding {
	a.omu.Lock()
	defer a.omu.Unlock()
	hs, _ := a.owners.get(id)
	for i := range hs.n {
		if h := hs.at(i); iface == "" || h.iface == iface {
			out = append(out, h)
		}
	}
	if len(out) == 0 && iface != "" {
		for i := range hs.n {
			if h := hs.at(i); h.iface == "" {
				out = append(out, h)
			}
		}
	}
	return out
}

// Lookup returns the claims owner holds, as ReleaseAt would select them, sorted
// by pool and address, as the Store has them.
func (a *Allocator) Lookup(ctx context.Context, owner store.Owner) ([]store.Claim, error) {
	if owner.IsZero() {
		return nil, &FieldError{Object: "owner", Field: "uid", Reason: "required (or containerID)"}
	}
	if err := a.loadAll(ctx, time.Now()); err != nil {
		return nil, err
	}
	var out []store.Claim
	for _, h := range a.lookup(identity(owner), owner.Interface, nil) {
		c, err := a.store.Get(ctx, h.pool.name, h.ip)
		if errors.Is(err, store.ErrNotFound) {
			continue // released by someone else since
		}
		if err != nil {
			return nil, err
		}
		if identity(c.Owner) == identity(owner) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y store.Claim) int {
		if c := strings.Compare(x.Pool, y.Pool); c != 0 {
			return c
		}
		return x.IP.Compare(y.IP)
	})
	return out, nil
}

// Claims lists every claim of every pool of the PoolSource, as the Store has
// them now, sorted by pool and address. It is what a garbage collector
// inspects before deciding (see ReleaseClaim).
func (a *Allocator) Claims(ctx context.Context) ([]store.Claim, error) {
	var out []store.Claim
	for p := range a.source.Pools() {
		cs, err := a.list(ctx, p.Name)
		if err != nil {
			return nil, fmt.Errorf("listing claims of pool %q: %w", p.Name, err)
		}
		out = append(out, cs...)
	}
	slices.SortFunc(out, func(x, y store.Claim) int {
		if c := strings.Compare(x.Pool, y.Pool); c != 0 {
			return c
		}
		return x.IP.Compare(y.IP)
	})
	return out, nil
}

// ReleaseClaim releases claim c only if the Store still has it at c.Revision:
// a claim that changed since it was inspected (re-pointed to a new pod,
// released and claimed again) is left alone, and ReleaseClaim returns an error
// wrapping ErrConflict. A claim already gone returns an error wrapping
// ErrNotFound. The Allocator's index learns the outcome either way.
func (a *Allocator) ReleaseClaim(ctx context.Context, c store.Claim) error {
	return a.ReleaseClaimAt(ctx, c, time.Now())
}

// ReleaseClaimAt is ReleaseClaim at time now (which starts the address's
// quarantine, if the Allocator has one).
func (a *Allocator) ReleaseClaimAt(ctx context.Context, c store.Claim, now time.Time) error {
	idx, err := a.index(ctx, c.Pool, now)
	if err != nil {
		return err
	}
	err = a.store.Delete(ctx, c.Pool, c.IP, c.Revision)
	switch {
	case err == nil:
		idx.retire(c.IP, a.quarantineUntil(now))
		a.dropHolding(identity(c.Owner), idx, c.IP)
		return nil
	case errors.Is(err, store.ErrNotFound):
		idx.forget(c.IP)
		a.dropHolding(identity(c.Owner), idx, c.IP)
		return fmt.Errorf("pool %q: %s: %w", c.Pool, c.IP, ErrNotFound)
	case errors.Is(err, store.ErrConflict):
		// Someone changed it: learn who holds it now.
		if cur, gerr := a.store.Get(ctx, c.Pool, c.IP); gerr == nil {
			a.dropHolding(identity(c.Owner), idx, c.IP)
			idx.commit(cur)
			a.addHolding(idx, cur)
		}
		return fmt.Errorf("pool %q: %s changed since revision %d: %w", c.Pool, c.IP, c.Revision, ErrConflict)
	default:
		return fmt.Errorf("pool %q: releasing %s: %w", c.Pool, c.IP, err)
	}
}

// ReleaseIP releases the claim on ip in pool, whoever holds it. It returns
// ErrNotFound if the address is not claimed.
func (a *Allocator) ReleaseIP(ctx context.Context, pool string, ip netip.Addr) error {
	return a.ReleaseIPAt(ctx, pool, ip, time.Now())
}

// ReleaseIPAt is ReleaseIP at time now (which starts the address's
// quarantine, if the Allocator has one).
func (a *Allocator) ReleaseIPAt(ctx context.Context, pool string, ip netip.Addr, now time.Time) error {
	idx, err := a.index(ctx, pool, now)
	if err != nil {
		return err
	}
	found, err := a.releaseClaim(ctx, idx, ip, ownerFilter{}, a.quarantineUntil(now))
	if err == nil && !found {
		return fmt.Errorf("pool %q: %s: %w", pool, ip, ErrNotFound)
	}
	return err
}

// releaseClaim deletes the claim on ip, revision-checked against what the
// Store says now. If the filter names an identity, the claim is released only
// while that identity (and pod UID, if the filter has one) holds it. The index
// is updated to what the Store says. found reports whether the Store had a
// claim on ip at all. A released address stays out of reuse until the given
// time (zero: none).
func (a *Allocator) releaseClaim(ctx context.Context, idx *poolIndex, ip netip.Addr, filter ownerFilter, until time.Time) (found bool, err error) {
	only := filter.id
	for attempt := 0; ; attempt++ {
		c, err := a.store.Get(ctx, idx.name, ip)
		if errors.Is(err, store.ErrNotFound) {
			idx.forget(ip)
			if only != (ownerID{}) {
				a.dropHolding(only, idx, ip)
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("pool %q: releasing %s: %w", idx.name, ip, err)
		}
		if only != (ownerID{}) && filter.uid != "" && identity(c.Owner) == only && c.Owner.UID != filter.uid {
			// The pod of that name now is another one: leave its claim.
			return true, nil
		}
		if only != (ownerID{}) && (identity(c.Owner) != only || filter.iface != "" && c.Owner.Interface != "" && c.Owner.Interface != filter.iface) {
			// Someone else holds it now: learn that, release nothing.
			a.dropHolding(only, idx, ip)
			idx.commit(c)
			a.addHolding(idx, c)
			return true, nil
		}
		err = a.store.Delete(ctx, idx.name, ip, c.Revision)
		switch {
		case err == nil || errors.Is(err, store.ErrNotFound):
			// If someone claimed ip again since, the index may now call it
			// free: the Store refuses a second claim, and the index learns.
			idx.retire(ip, until)
			a.dropHolding(identity(c.Owner), idx, ip)
			return true, nil
		case errors.Is(err, store.ErrConflict) && attempt < 3:
			// Changed since we read it: read again and decide again.
		default:
			return true, fmt.Errorf("pool %q: releasing %s: %w", idx.name, ip, err)
		}
	}
}

// poolIndex is the Allocator's view of one pool: its layout and which ordinals
// are used. It keeps no claim records: the Store has those.
type poolIndex struct {
	name string
	// def is the definition and layout in force; written under mu, read
	// without it.
	def atomic.Pointer[poolDef]

	mu         sync.Mutex
	tree       *usedTree
	quarantine []quarantined            // releases still kept, in the order they came
	quarUntil  map[netip.Addr]time.Time // each quarantined address and its latest end
	// lent is each address a request took out of quarantine, and when its
	// quarantine was to end: if the address is given back (the request
	// failed, or its claim is released), the quarantine resumes.
	lent     map[netip.Addr]time.Time
	cursor   netip.Addr
	next     u128    // where round-robin resumes: the ordinal after cursor
	nextLay  *layout // the layout next is an ordinal of; nil: work it out
	lastSync time.Time
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

// rebuild installs definition d, marking the claims used. Called with mu held.
func (idx *poolIndex) rebuild(d *poolDef, claims []store.Claim, now time.Time) {
	idx.def.Store(d)
	lay := d.layout
	idx.lastSync = now
	idx.tree = newUsedTree(lay.levels)
	for _, c := range claims {
		if o, ok := lay.ordinal(c.IP); ok {
			idx.tree.set(o)
		}
	}
	for ip := range idx.quarUntil {
		if o, ok := lay.ordinal(ip); ok {
			idx.tree.set(o)
		}
	}
}

// reserve marks an address used before it is created in the Store: want if
// valid and free, else the next free one by the pool's strategy.
func (idx *poolIndex) reserve(want netip.Addr, now time.Time) (netip.Addr, slot, bool) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	d := idx.def.Load()
	lay := d.layout
	idx.drain(now)
	if want.IsValid() {
		o, ok := lay.ordinal(want)
		if !ok || (!idx.tree.set(o) && !idx.unquarantine(want)) {
			return netip.Addr{}, slot{}, false
		}
		idx.cursor, idx.next, idx.nextLay = want, o.addOne(), lay
		return want, slot{lay, o}, true
	}
	var start u128
	if d.pool.Strategy == RoundRobin {
		start = idx.nextOrd(lay)
	}
	o, ok := idx.tree.pick(lay.total, start, d.pool.Strategy)
	if !ok {
		return netip.Addr{}, slot{}, false
	}
	idx.tree.set(o)
	ip, _ := lay.addr(o)
	idx.cursor, idx.next, idx.nextLay = ip, o.addOne(), lay
	return ip, slot{lay, o}, true
}

// nextOrd returns the ordinal a round-robin search starts from: just after
// the cursor. It is kept as an ordinal after each reservation, and worked out
// from the cursor address only when the cursor was set otherwise (loaded from
// the Store, a requested address) or the layout changed. Called with mu held.
func (idx *poolIndex) nextOrd(lay *layout) u128 {
	if idx.nextLay == lay {
		return idx.next
	}
	var start u128
	if idx.cursor.IsValid() {
		start, _ = lay.after(idx.cursor)
	}
	idx.next, idx.nextLay = start, lay
	return start
}

// unreserve undoes reserve after a failed Create.
func (idx *poolIndex) unreserve(ip netip.Addr) {
	idx.forget(ip)
}

// learnTaken records that the Store already had a claim on ip.
func (idx *poolIndex) learnTaken(ip netip.Addr) {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
	}
}

// commit records a claim the Store now holds. The address was reserved, or is
// someone else's claim just learnt.
func (idx *poolIndex) commit(c store.Claim) {
	idx.learnTaken(c.IP)
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
	if o, ok := idx.def.Load().layout.ordinal(ip); ok {
		idx.tree.set(o)
		idx.quarantine = append(idx.quarantine, quarantined{ip, until})
		if idx.quarUntil == nil {
			idx.quarUntil = make(map[netip.Addr]time.Time)
		}
		if cur, ok := idx.quarUntil[ip]; !ok || until.After(cur) {
			idx.quarUntil[ip] = until
		}
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

func (idx *poolIndex) dueResync(now time.Time, every time.Duration) bool {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	return now.Sub(idx.lastSync) >= every || now.Before(idx.lastSync)
}

func (l *layout) family() int {
	if l.is4 {
		return 4
	}
	return 6
}
