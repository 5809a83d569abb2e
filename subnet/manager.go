package subnet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/internal/k8slabel"
	"github.com/ipamkit/ipam/store"
)

// This file holds Manager, which applies the auto-pool decisions of
// decide.go in memory as applications and pods come and go, and
// serves the pools to an Allocator.

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Subnets are the SpiderSubnets. Required: without one, no application
	// gets a pool.
	Subnets []*Subnet
	// Pools are the pools written by hand. Those in a subnet's CIDR are
	// served with the subnet's gateway and routes where they set none
	// (Subnet.Adopt), and their addresses are never given to auto-pools.
	Pools []*ipam.Pool
	// AutoPools are auto-pools that exist already (a restart). Until an
	// application accounts for them (SetApplication) or Resync finds none
	// does, they are served as they are.
	AutoPools []*AutoPool
	// Reserved are the cluster's reserved addresses (SpiderReservedIP): no
	// auto-pool gets them, and no pool hands them out.
	Reserved []*ipam.ReservedIP
	// Claims is the Store of the Allocator that serves these pools.
	// Required: a pool shrinks and is deleted only once the Store shows that
	// no pod holds the addresses it gives back.
	Claims store.Store
	// AutoPool tunes the decisions (the default pool size).
	AutoPool Options
	// Apply, if set, writes each change of an auto-pool where the pools
	// live (SpiderIPPool objects, say) before the manager serves it: the
	// decisions Create, Grow, Shrink, Update, Terminate and Delete, with
	// the pool as the decision leaves it (for Delete, the pool deleted). It is
	// called with the lock of the pool's subnet held, so the changes of one
	// subnet are written one at a time, in order, and those of different
	// subnets in parallel. When Apply is called for a shrink or a deletion,
	// the manager already serves the pool without the addresses it gives
	// back, and has checked that no pod holds one (see Manager). If
	// Apply returns an error, the change is not made: the addresses stay where they were, and the
	// decision becomes a Wait whose Err wraps ErrNotReady and says
	// why, retried on Sync. An application's pools are then not all or
	// nothing: those written stay.
	Apply func(ctx context.Context, d *Decision) error
	// Logger receives debug records. Nil discards them.
	Logger *slog.Logger
}

// Manager runs SpiderSubnet in memory: told which applications and
// pods exist, it creates, resizes and deletes their auto-pools by the rules
// of Decide, and serves them, with the pools written by hand, as the
// PoolSource of an Allocator (it is an AppPoolSource, a DefaultPoolSource
// and a ReservedSource).
//
// Everything happens in the calls that report a change: SetApplication
// creates or resizes the application's pools before it returns, so a pod's
// pool is ready when its allocation arrives; when it cannot be (too few free
// addresses, an unknown subnet), the allocation fails at once with the
// reason, an error wrapping ErrNotReady when it is worth retrying. Nothing
// polls: what waits (a pool waiting for free addresses, a shrink or a
// deletion waiting for pods to release theirs) is retried when addresses are
// given back to its subnet, when a pod of its application is deleted
// (DeletePod), or on Sync.
//
// The addresses of each pool live in the pool; a subnet keeps only the set
// of its free addresses, and decisions for different subnets run in
// parallel. A shrink or a deletion first fences, by range, the addresses it
// gives back: it serves the pool with them excluded, so that no Allocator
// on this manager hands one out any more (one that claimed one under the
// old definition gives it back: it checks the definition after its
// create), and then reads the pool's claims in the Claims store: if a pod
// got one of them in the meantime, the change waits and the fence is
// lifted. Its cost is that of the pool's ranges and claims, not of its
// addresses (Spiderpool's pool of 16,777,216 addresses shrinks as cheaply as
// one of ten). Allocators elsewhere (other processes) that still serve the
// old definition are not fenced: a claim of theirs in the old pool meets
// the new pool's claims of the address only through the Store's
// store.AddressReader, where the later of the two is given back (every
// Store of this module that several processes share has it).
//
// A pod asks for its application's pools with the subnet annotations and
// names its application in Request.App (its top controller). The auto-pools
// are served with their podAffinity, which the Allocator's filters match
// against Request.App (see IsAutoPool): a pod of another application that
// names an auto-pool in ipam.spidernet.io/ippool(s) is refused, as
// Spiderpool refuses it. Auto-pools hand out their lowest free address, as
// Spiderpool's do.
//
// A Manager is safe for concurrent use. Its zero value is not usable:
// call NewManager.
type Manager struct {
	opts     Options
	writer   func(context.Context, *Decision) error
	claims   store.Store
	log      *slog.Logger
	manual   *ipam.Catalog
	subnets  map[string]*subnetState
	reserved [2]*netipx.IPSet

	mu   sync.Mutex
	apps map[string]*Application // by UID
	// podPools are the pools AutoPool served each pod from, by pod UID: a
	// pool may have changed hands (reuse) since.
	podPools map[string][]string
	auto     map[string]*AutoPool   // by name
	byUID    map[string][]*AutoPool // by application UID
	pending  map[autoPoolKey]error  // why an application's pool cannot serve
	// names are the names of pools being created, reserved until they
	// are published or given up, so that decisions for different subnets
	// never create two pools of one name.
	names   map[string]bool
	waiting map[string]*waiters // by subnet name: what to retry when it frees addresses

	served sync.Map // name -> *Pool: what Pool returns
	// list is every served pool by name, as of version; rebuilt on demand
	// once version moves on (every change of served).
	list    atomic.Pointer[poolList]
	version atomic.Uint64
}

// poolList is the served pools by name, as of a version of them.
type poolList struct {
	version uint64
	pools   []*ipam.Pool
}

// autoPoolKey names one pool an application asks for; iface "" and family
// 0 name the application as a whole.
type autoPoolKey struct {
	uid, iface string
	family     int
}

// waiters are what waits for a subnet: applications (by UID) and reclaimed
// pools (by name).
type waiters struct {
	apps  map[string]bool
	pools map[string]bool
}

// subnetState is one subnet's free addresses and auto-pools, guarded by mu.
type subnetState struct {
	s    *Subnet
	mu   sync.Mutex
	free *netipx.IPSet
	// pools are the subnet's auto-pools, by name.
	pools map[string]*AutoPool
	// keep indexes the pools with reclaim false by keptKey, then name: the
	// pools an application of the same kind and name may reuse.
	keep map[string]map[string]*AutoPool
}

// keptKey is what makes a pool with reclaim false reusable by an
// application: its group, kind, namespace and name, interface and family.
func keptKey(app ipam.AppRef, iface string, family int) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%s\x00%d", app.Group(), k8slabel.Value(app.Kind), k8slabel.Value(app.Namespace), k8slabel.Value(app.Name), iface, family)
}

// index adds a to or removes it from st.pools and st.keep.
func (st *subnetState) index(a *AutoPool, add bool) {
	name := a.Name()
	k := keptKey(a.App, a.Interface, a.Family())
	if add {
		st.pools[name] = a
		if !a.Reclaim {
			if st.keep[k] == nil {
				st.keep[k] = make(map[string]*AutoPool)
			}
			st.keep[k][name] = a
		}
		return
	}
	delete(st.pools, name)
	delete(st.keep[k], name)
	if len(st.keep[k]) == 0 {
		delete(st.keep, k)
	}
}

// retiredOwner owned the claims earlier versions of Manager made, one
// per address a pool gave back; they are ignored as pods' claims and deleted
// when found (unretire).
var retiredOwner = store.Owner{ContainerID: "ipam.spidernet.io/subnet-manager"}

func isRetired(c store.Claim) bool {
	return c.Owner.UID == "" && c.Owner.ContainerID == retiredOwner.ContainerID
}

// NewManager checks the options (subnets, pools and auto-pools
// against each other, as NewSnapshot does) and returns a manager
// that serves the pools.
func NewManager(opts ManagerOptions) (*Manager, error) {
	if opts.Claims == nil {
		return nil, &ipam.FieldError{Object: "subnet manager options", Field: "Claims", Reason: "required: the Allocator's Store"}
	}
	if err := opts.AutoPool.Validate(); err != nil {
		return nil, err
	}
	snap, err := NewSnapshot(opts.Subnets, opts.Pools, opts.AutoPools, opts.Reserved, nil)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		opts:     opts.AutoPool,
		writer:   opts.Apply,
		claims:   opts.Claims,
		log:      opts.Logger,
		subnets:  make(map[string]*subnetState, len(opts.Subnets)),
		reserved: snap.reserved,
		apps:     make(map[string]*Application),
		podPools: make(map[string][]string),
		auto:     make(map[string]*AutoPool),
		byUID:    make(map[string][]*AutoPool),
		pending:  make(map[autoPoolKey]error),
		waiting:  make(map[string]*waiters),
		names:    make(map[string]bool),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	adopted := make([]*ipam.Pool, len(opts.Pools))
	for i, p := range opts.Pools {
		adopted[i] = p
		for _, s := range opts.Subnets {
			if s.Controls(p) {
				adopted[i] = s.Adopt(p)
			}
		}
	}
	cat, err := ipam.NewCatalog(adopted...)
	if err != nil {
		return nil, err
	}
	if m.manual, err = cat.WithReserved(opts.Reserved...); err != nil {
		return nil, err
	}
	for _, p := range adopted {
		m.served.Store(p.Name, p)
	}
	for _, s := range opts.Subnets {
		m.subnets[s.Name] = &subnetState{s: s, free: snap.FreeAddresses(s), pools: make(map[string]*AutoPool), keep: make(map[string]map[string]*AutoPool)}
	}
	for _, a := range opts.AutoPools {
		m.publishLocked(m.subnets[a.Subnet], a)
	}
	return m, nil
}

// Pool returns the named pool: a pool written by hand, or an auto-pool as
// the Allocator sees it.
func (m *Manager) Pool(name string) (*ipam.Pool, bool) {
	p, ok := m.served.Load(name)
	if !ok {
		return nil, false
	}
	return p.(*ipam.Pool), true
}

// Pools yields every pool, by name.
func (m *Manager) Pools() iter.Seq[*ipam.Pool] {
	v := m.version.Load()
	if l := m.list.Load(); l != nil && l.version == v {
		return slices.Values(l.pools)
	}
	var all []*ipam.Pool
	m.served.Range(func(_, p any) bool {
		all = append(all, p.(*ipam.Pool))
		return true
	})
	slices.SortFunc(all, func(a, b *ipam.Pool) int { return cmp.Compare(a.Name, b.Name) })
	// Every change before v is in all; a change during the Range moved the
	// version on, so this list is not used after it.
	m.list.Store(&poolList{version: v, pools: all})
	return slices.Values(all)
}

// DefaultPools yields the cluster default pools, which are pools written by
// hand (an auto-pool is never a default).
func (m *Manager) DefaultPools() iter.Seq[*ipam.Pool] { return m.manual.DefaultPools() }

// Reserved returns the reserved addresses of family 4 or 6.
func (m *Manager) Reserved(family int) *netipx.IPSet { return m.manual.Reserved(family) }

// AutoPool returns the auto-pool that serves interface iface and IP family
// family of the pod req describes from the subnet named subnet: the pool of
// the pod's application, req.App (by its UID). It does not create or resize
// pools (SetApplication did), and it never waits: see AppPoolSource. A
// request without App is a pod without a controller, which SpiderSubnet does
// not serve (ErrNotSupported); an App whose UID SetApplication has not
// recorded is not known yet (ErrNotReady).
func (m *Manager) AutoPool(req *ipam.Request, iface string, family int, subnet string) (string, error) {
	app := req.App
	podName := req.Namespace + "/" + req.Name
	fail := func(app ipam.AppRef, reason string, sentinel error) (string, error) {
		return "", &Error{App: app, Pod: podName, Interface: iface, Family: family, Subnet: subnet, Reason: reason, Err: sentinel}
	}
	if app.IsZero() {
		return fail(ipam.AppRef{}, "SpiderSubnet auto-pools serve the pods of a controller, and the request names none (Request.App is empty) "+
			"(Spiderpool: SpiderSubnet feature doesn't support no-controller pod)", ipam.ErrNotSupported)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.apps[app.UID]; !ok || app.UID == "" {
		return fail(app, fmt.Sprintf("the application (uid %q) is not known to the subnet manager yet (SetApplication creates its pools)", app.UID), ipam.ErrNotReady)
	}
	// A pool that exists serves, even while it waits to grow or shrink:
	// the Allocator says if it has no free address.
	var other *AutoPool
	for _, a := range m.byUID[app.UID] {
		if a.Interface != iface || a.Family() != family {
			continue
		}
		if a.Subnet == subnet && !a.Pool.Terminating {
			if !slices.Contains(m.podPools[req.UID], a.Name()) {
				m.podPools[req.UID] = append(m.podPools[req.UID], a.Name())
			}
			return a.Name(), nil
		}
		other = a
	}
	if err := m.pending[autoPoolKey{uid: app.UID, iface: iface, family: family}]; err != nil {
		return "", m.forPod(err, podName)
	}
	if err := m.pending[autoPoolKey{uid: app.UID}]; err != nil {
		return "", m.forPod(err, podName)
	}
	if other != nil && other.Subnet == subnet {
		return fail(app, fmt.Sprintf("the application's pool %q is being deleted", other.Name()), ipam.ErrNotReady)
	}
	if other != nil {
		return fail(app, fmt.Sprintf("the pod names subnet %q, but its application's pool %q is from subnet %q", subnet, other.Name(), other.Subnet), ipam.ErrNotSupported)
	}
	return fail(app, "the application asks for no pool of this interface and family", ipam.ErrNotFound)
}

// forPod returns err naming the pod, when it is an *Error.
func (m *Manager) forPod(err error, pod string) error {
	var ae *Error
	if errors.As(err, &ae) {
		c := *ae
		c.Pod = pod
		return &c
	}
	return err
}

// DeletePod forgets a pod. Call it once the pod's addresses are released:
// the shrinks and deletions that waited for pods to give addresses back are
// retried, and their decisions returned (what still cannot be done is in
// their Errs). For a pod this manager served (AutoPool), those of the
// subnets of the pools it was served from; for any other pod (served before
// a restart, or by another manager), all that wait, as Sync does. The error
// is ctx's, if it ended.
func (m *Manager) DeletePod(ctx context.Context, uid string) ([]Decision, error) {
	m.mu.Lock()
	names, served := m.podPools[uid]
	var subnets []string
	for _, name := range names {
		if a := m.auto[name]; a != nil {
			subnets = append(subnets, a.Subnet)
		}
	}
	delete(m.podPools, uid)
	m.mu.Unlock()
	if !served {
		return m.Sync(ctx)
	}
	return m.retry(ctx, subnets)
}

// SetApplication records app (a new one, or a change: replicas, annotations)
// and creates, resizes or refreshes its pools before it returns. It returns
// the decisions (see Decide) and, if some pool is not as the
// application asks, an error joining the Errs of its decisions: bad input (ErrInvalid,
// ErrNotFound, ErrNotSupported) changes nothing; a wait (ErrNotReady) is
// retried when the subnet gets addresses back. Addresses other pools give
// back meanwhile are handed to the applications waiting for them, whose
// decisions are returned too.
func (m *Manager) SetApplication(ctx context.Context, app Application) ([]Decision, error) {
	app.Annotations = maps.Clone(app.Annotations)
	m.mu.Lock()
	m.apps[app.UID] = &app
	m.mu.Unlock()
	ds, freed := m.apply(ctx, app.UID)
	more, err := m.retry(ctx, freed)
	return append(ds, more...), errors.Join(decisionErrors(ds), err)
}

// DeleteApplication forgets the application with ref's UID and reclaims its
// pools: those with reclaim true are deleted once no pod holds their
// addresses (Terminate until then), the others are kept for an
// application of the same kind, namespace and name. What cannot be done yet
// is in the decisions' Errs; the error is ctx's, if it ended.
func (m *Manager) DeleteApplication(ctx context.Context, ref ipam.AppRef) ([]Decision, error) {
	m.mu.Lock()
	delete(m.apps, ref.UID)
	for k := range m.pending {
		if k.uid == ref.UID {
			delete(m.pending, k)
		}
	}
	pools := slices.Clone(m.byUID[ref.UID])
	m.mu.Unlock()
	var ds []Decision
	var freed []string
	for _, a := range pools {
		d, f := m.reclaimPool(ctx, a.Name())
		if d != nil {
			ds = append(ds, *d)
		}
		freed = append(freed, f...)
	}
	more, err := m.retry(ctx, freed)
	return append(ds, more...), err
}

// Resync reconciles against the complete list of applications, as after a
// restart: the applications not in apps are forgotten and the auto-pools
// none of apps accounts for are reclaimed first, so that the addresses they
// give back are free for the others; then every application is set
// (SetApplication).
func (m *Manager) Resync(ctx context.Context, apps []Application) ([]Decision, error) {
	live := make(map[string]bool, len(apps))
	for _, app := range apps {
		live[app.UID] = true
	}
	m.mu.Lock()
	for uid := range m.apps {
		if !live[uid] {
			delete(m.apps, uid)
		}
	}
	for k := range m.pending {
		if !live[k.uid] {
			delete(m.pending, k)
		}
	}
	var orphans []string
	for name, a := range m.auto {
		if !live[a.App.UID] {
			orphans = append(orphans, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(orphans)
	var ds []Decision
	var freed []string
	for _, name := range orphans {
		d, f := m.reclaimPool(ctx, name)
		if d != nil {
			ds = append(ds, *d)
		}
		freed = append(freed, f...)
	}
	more, err := m.retry(ctx, freed)
	ds = append(ds, more...)
	errs := []error{err}
	for _, app := range apps {
		d, err := m.SetApplication(ctx, app)
		ds = append(ds, d...)
		errs = append(errs, err)
	}
	return ds, errors.Join(errs...)
}

// Sync retries everything that waits: pools waiting for free addresses,
// shrinks and deletions waiting for pods to release theirs. Call it after
// releasing addresses other than through DeletePod (garbage collection).
// What still cannot be done is in the decisions' Errs; the error is ctx's,
// if it ended.
func (m *Manager) Sync(ctx context.Context) ([]Decision, error) {
	m.mu.Lock()
	subnets := slices.Collect(maps.Keys(m.waiting))
	m.mu.Unlock()
	slices.Sort(subnets)
	return m.retry(ctx, subnets)
}

// Status returns every subnet's status (StatusOf), by name.
func (m *Manager) Status() []Status {
	names := slices.Sorted(maps.Keys(m.subnets))
	out := make([]Status, 0, len(names))
	manual := slices.Collect(m.manual.Pools())
	for _, n := range names {
		st := m.subnets[n]
		st.mu.Lock()
		pools := slices.Collect(maps.Values(st.pools))
		st.mu.Unlock()
		out = append(out, StatusOf(st.s, manual, pools))
	}
	return out
}

// AutoPools returns every auto-pool, by name.
func (m *Manager) AutoPools() []*AutoPool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Collect(maps.Values(m.auto))
	slices.SortFunc(out, func(a, b *AutoPool) int { return cmp.Compare(a.Name(), b.Name()) })
	return out
}

// decisionErrors joins the Errs of ds.
func decisionErrors(ds []Decision) error {
	var errs []error
	for _, d := range ds {
		if d.Err != nil {
			errs = append(errs, d.Err)
		}
	}
	return errors.Join(errs...)
}

// lockSubnets locks the named subnets that exist, in name order, and
// returns the function that unlocks them.
func (m *Manager) lockSubnets(names []string) func() {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	var locked []*subnetState
	for _, n := range names {
		if st, ok := m.subnets[n]; ok {
			st.mu.Lock()
			locked = append(locked, st)
		}
	}
	return func() {
		for _, st := range locked {
			st.mu.Unlock()
		}
	}
}

// subnetsOf returns the subnets app's decisions touch: those its template
// names and those of its pools.
func (m *Manager) subnetsOf(app *Application) []string {
	var names []string
	if cfg, ok, err := ParseConfig(app.Annotations); ok && err == nil {
		for _, e := range cfg.Subnets {
			names = append(names, e.IPv4...)
			names = append(names, e.IPv6...)
		}
	}
	m.mu.Lock()
	for _, a := range m.byUID[app.UID] {
		names = append(names, a.Subnet)
	}
	m.mu.Unlock()
	return names
}

// apply decides and applies the pools of the application with that UID, and
// returns the decisions and the subnets that got addresses back.
func (m *Manager) apply(ctx context.Context, uid string) ([]Decision, []string) {
	// Decide on the application as it is once its subnets are locked: two
	// calls for one application, racing, both apply the latest version.
	var app *Application
	var unlock func()
	for {
		m.mu.Lock()
		app = m.apps[uid]
		m.mu.Unlock()
		if app == nil {
			return nil, nil
		}
		subnets := m.subnetsOf(app)
		unlock = m.lockSubnets(subnets)
		m.mu.Lock()
		latest := m.apps[uid]
		m.mu.Unlock()
		if latest == app {
			break
		}
		unlock()
	}
	defer unlock()
	w := &managerWorld{m: m, ctx: ctx}
	defer w.releaseNames()
	e := newAutoPoolEngine(w, m.opts)
	p := e.plan(app)
	// The application's pools it no longer accounts for (it dropped an
	// interface, or the subnet annotations) are reclaimed.
	var orphans []*AutoPool
	for _, a := range w.AutoPoolsOf(app.UID) {
		if !slices.ContainsFunc(p.owned, func(o *AutoPool) bool { return o.Name() == a.Name() }) {
			orphans = append(orphans, a)
		}
	}
	var freed []string
	for _, a := range orphans {
		d := m.reclaimLocked(ctx, e, a)
		if d.Action == Delete {
			freed = append(freed, d.Subnet)
		}
		p.decisions = append(p.decisions, d)
	}
	for i := range p.decisions {
		d := &p.decisions[i]
		if d.Action != Shrink {
			continue
		}
		m.mu.Lock()
		cur := m.auto[d.Pool.Name()]
		m.mu.Unlock()
		lift, err := m.fence(ctx, cur, d.Removed)
		reason := fmt.Sprintf("shrinking: %v; retried when a pod is deleted", err)
		if err == nil {
			if err = m.write(ctx, d); err != nil {
				reason = fmt.Sprintf("shrinking: %v; retried on Sync", err)
				lift()
			}
		}
		if err != nil {
			m.mu.Lock()
			was := m.auto[d.Pool.Name()]
			m.mu.Unlock()
			d.Pool, d.Removed, d.Action, d.Message = was, nil, Wait, reason
			d.Err = &Error{App: d.App, Interface: d.Interface, Family: d.Family, Subnet: d.Subnet, Pool: was.Name(), Reason: reason, Err: errors.Join(ipam.ErrNotReady, unwrapWrite(err))}
			continue
		}
		e.release(d)
		freed = append(freed, d.Subnet)
	}
	e.take(p)
	for i := range p.decisions {
		m.commit(ctx, e, &p.decisions[i])
	}
	for name, f := range e.free {
		m.subnets[name].free = f
	}
	m.mu.Lock()
	for k := range m.pending {
		if k.uid == app.UID {
			delete(m.pending, k)
		}
	}
	for _, d := range p.decisions {
		if d.Err != nil {
			m.pending[autoPoolKey{uid: app.UID, iface: d.Interface, family: d.Family}] = d.Err
		}
		if d.Action == Wait {
			m.waitFor(d.Subnet).apps[app.UID] = true
		}
	}
	m.mu.Unlock()
	return p.decisions, freed
}

// commit applies one decision of apply (a shrink was written with the
// retirement of its addresses, before).
func (m *Manager) commit(ctx context.Context, e *autoPoolEngine, d *Decision) {
	switch d.Action {
	case Create, Grow, Update:
		if err := m.write(ctx, d); err != nil {
			m.mu.Lock()
			was := m.auto[d.PoolName()]
			m.mu.Unlock()
			// The addresses taken for it go back to the subnet.
			if len(d.Added) > 0 {
				var b netipx.IPSetBuilder
				b.AddSet(e.freeSet(m.subnets[d.Subnet].s))
				for _, r := range d.Added {
					b.AddRange(r)
				}
				e.free[d.Subnet], _ = b.IPSet()
			}
			reason := fmt.Sprintf("%s: %v; retried on Sync", d.Action, err)
			d.Pool, d.Added, d.Action, d.Message = was, nil, Wait, reason
			d.Err = &Error{App: d.App, Interface: d.Interface, Family: d.Family, Subnet: d.Subnet, Pool: d.PoolName(), Reason: reason, Err: errors.Join(ipam.ErrNotReady, unwrapWrite(err))}
			return
		}
	case Shrink:
	default:
		return
	}
	if d.Action == Grow {
		// Addresses this pool gave back before and now takes again may carry
		// the retirement claims of an earlier version: drop them, so that
		// pods may claim them.
		if err := m.unretire(ctx, d.Pool.Name(), d.Added); err != nil {
			m.log.Warn("ipam: cannot drop retirement claims; those addresses stay unused", "pool", d.Pool.Name(), "err", err)
		}
	}
	m.mu.Lock()
	if old := m.auto[d.Pool.Name()]; old != nil && old.App.UID != d.Pool.App.UID {
		m.byUID[old.App.UID] = slices.DeleteFunc(m.byUID[old.App.UID], func(a *AutoPool) bool { return a.Name() == d.Pool.Name() })
	}
	m.publishLocked(m.subnets[d.Subnet], d.Pool)
	m.mu.Unlock()
}

// publishLocked makes a the served version of its pool. The caller holds
// m.mu (or has m to itself) and the lock of a's subnet.
func (m *Manager) publishLocked(st *subnetState, a *AutoPool) {
	name := a.Name()
	m.auto[name] = a
	list := m.byUID[a.App.UID]
	if i := slices.IndexFunc(list, func(x *AutoPool) bool { return x.Name() == name }); i >= 0 {
		list[i] = a
	} else {
		m.byUID[a.App.UID] = append(list, a)
	}
	if old := st.pools[name]; old != nil {
		st.index(old, false)
	}
	st.index(a, true)
	q := *a.Pool
	q.Strategy = ipam.LowestFree
	m.served.Store(name, &q)
	m.version.Add(1)
}

// unpublishLocked removes a. The caller holds m.mu and the lock of a's
// subnet.
func (m *Manager) unpublishLocked(st *subnetState, a *AutoPool) {
	name := a.Name()
	delete(m.auto, name)
	m.byUID[a.App.UID] = slices.DeleteFunc(m.byUID[a.App.UID], func(x *AutoPool) bool { return x.Name() == name })
	if len(m.byUID[a.App.UID]) == 0 {
		delete(m.byUID, a.App.UID)
	}
	st.index(a, false)
	m.served.Delete(name)
	m.version.Add(1)
}

// fence serves a, the pool as it is served, without the addresses of rs,
// and then checks in the Claims store that no pod holds one of them. From
// the fence on, no Allocator on this manager hands one out, and one that
// claimed one under the old definition gives it back (it reads the
// definition after its create): so a claim the check does not see is given
// back. If a pod holds one, or the claims cannot be read, the fence is
// lifted and the error says why; else lift lifts it (the change could not
// be written). It costs O(ranges + the pool's claims), whatever the number
// of addresses. The caller holds the lock of a's subnet.
func (m *Manager) fence(ctx context.Context, a *AutoPool, rs []netipx.IPRange) (lift func(), err error) {
	name := a.Name()
	prev, _ := m.served.Load(name)
	lift = func() {
		if prev != nil {
			m.served.Store(name, prev)
			m.version.Add(1)
		}
	}
	q := *a.Pool
	q.Strategy = ipam.LowestFree
	q.ExcludeIPs = append(slices.Clone(q.ExcludeIPs), rs...)
	m.served.Store(name, &q)
	m.version.Add(1)
	var b netipx.IPSetBuilder
	for _, r := range rs {
		b.AddRange(r)
	}
	out, _ := b.IPSet()
	cs, err := m.claims.List(ctx, name)
	if err != nil {
		lift()
		return nil, fmt.Errorf("reading the pool's claims: %w", err)
	}
	for _, c := range cs {
		if !isRetired(c) && out.Contains(c.IP) {
			lift()
			return nil, fmt.Errorf("address %s was claimed by a pod meanwhile", c.IP)
		}
	}
	return lift, nil
}

// unretire deletes pool's retirement claims of the addresses of rs (all of
// the pool's when rs is nil): the fences earlier versions wrote, one claim
// per address given back, which may remain in a Store.
func (m *Manager) unretire(ctx context.Context, pool string, rs []netipx.IPRange) error {
	cs, err := m.claims.List(ctx, pool)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range cs {
		if !isRetired(c) || (rs != nil && !rangesContain(rs, c.IP)) {
			continue
		}
		if err := m.claims.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// reclaimPool decides and applies the reclaim of the auto-pool named name,
// whose application is gone. It returns the decision (nil if the pool is
// gone or its application is back) and the subnet if it got addresses back.
func (m *Manager) reclaimPool(ctx context.Context, name string) (*Decision, []string) {
	m.mu.Lock()
	a := m.auto[name]
	m.mu.Unlock()
	if a == nil {
		return nil, nil
	}
	unlock := m.lockSubnets([]string{a.Subnet})
	defer unlock()
	m.mu.Lock()
	a = m.auto[name]
	live := false
	if a != nil {
		_, live = m.apps[a.App.UID]
	}
	m.mu.Unlock()
	if a == nil || live {
		return nil, nil
	}
	e := newAutoPoolEngine(&managerWorld{m: m, ctx: ctx}, m.opts)
	d := m.reclaimLocked(ctx, e, a)
	var freed []string
	if f, ok := e.free[a.Subnet]; ok {
		m.subnets[a.Subnet].free = f
		freed = append(freed, a.Subnet)
	}
	return &d, freed
}

// reclaimLocked decides and applies the reclaim of a, which no application
// accounts for. The caller holds the lock of a's subnet; addresses given
// back go to e's free set of it.
func (m *Manager) reclaimLocked(ctx context.Context, e *autoPoolEngine, a *AutoPool) Decision {
	name := a.Name()
	st := m.subnets[a.Subnet]
	d := e.reclaim(a)
	wait := func(reason string, err error) {
		d.Action, d.Removed, d.Message, d.Pool = Wait, nil, reason, a
		d.Err = &Error{App: d.App, Interface: d.Interface, Family: d.Family, Subnet: d.Subnet, Pool: name, Reason: reason, Err: errors.Join(ipam.ErrNotReady, unwrapWrite(err))}
	}
	switch d.Action {
	case Terminate:
		if err := m.write(ctx, &d); err != nil {
			wait(fmt.Sprintf("terminating: %v; retried on Sync", err), err)
			break
		}
		m.mu.Lock()
		m.publishLocked(st, d.Pool)
		m.mu.Unlock()
	case Delete:
		lift, err := m.fence(ctx, a, d.Removed)
		if err != nil {
			wait(fmt.Sprintf("deleting: %v; retried when a pod is deleted", err), nil)
			break
		}
		if err := m.write(ctx, &d); err != nil {
			lift()
			wait(fmt.Sprintf("deleting: %v; retried on Sync", err), err)
			break
		}
		m.mu.Lock()
		m.unpublishLocked(st, a)
		m.mu.Unlock()
		if err := m.unretire(ctx, name, nil); err != nil {
			m.log.Warn("ipam: cannot drop old retirement claims of a deleted pool", "pool", name, "err", err)
		}
		e.release(&d)
	}
	if d.Action == Terminate || d.Action == Wait {
		m.mu.Lock()
		m.waitFor(a.Subnet).pools[name] = true
		m.mu.Unlock()
	}
	return d
}

// write writes decision d where the pools live (Options.Apply), if that is
// set. Its error is a *writeError.
func (m *Manager) write(ctx context.Context, d *Decision) error {
	if m.writer == nil {
		return nil
	}
	if err := m.writer(ctx, d); err != nil {
		return &writeError{err}
	}
	return nil
}

// writeError is an error of Options.Apply.
type writeError struct{ err error }

func (e *writeError) Error() string { return "writing the pool: " + e.err.Error() }

// unwrapWrite returns the error of Options.Apply in err, or nil.
func unwrapWrite(err error) error {
	var we *writeError
	if errors.As(err, &we) {
		return we.err
	}
	return nil
}

// waitFor returns the waiters of a subnet. The caller holds m.mu.
func (m *Manager) waitFor(subnet string) *waiters {
	w := m.waiting[subnet]
	if w == nil {
		w = &waiters{apps: make(map[string]bool), pools: make(map[string]bool)}
		m.waiting[subnet] = w
	}
	return w
}

// retry retries what waits for the subnets, and for those that get
// addresses back in turn, until nothing changes.
func (m *Manager) retry(ctx context.Context, subnets []string) ([]Decision, error) {
	var ds []Decision
	var queue []string
	enqueue := func(names []string) {
		for _, n := range names {
			if !slices.Contains(queue, n) {
				queue = append(queue, n)
			}
		}
	}
	enqueue(subnets)
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return ds, err
		}
		name := queue[0]
		queue = queue[1:]
		m.mu.Lock()
		w := m.waiting[name]
		delete(m.waiting, name)
		var apps, pools []string
		if w != nil {
			for uid := range w.apps {
				if _, ok := m.apps[uid]; ok {
					apps = append(apps, uid)
				}
			}
			pools = slices.Sorted(maps.Keys(w.pools))
		}
		m.mu.Unlock()
		slices.Sort(apps)
		for _, name := range pools {
			d, freed := m.reclaimPool(ctx, name)
			if d != nil {
				ds = append(ds, *d)
			}
			enqueue(freed)
		}
		for _, uid := range apps {
			d, freed := m.apply(ctx, uid)
			ds = append(ds, d...)
			enqueue(freed)
		}
	}
	return ds, nil
}

// managerWorld is a Manager's state as the decisions see it. The
// subnets the decisions touch are locked by the caller.
type managerWorld struct {
	m   *Manager
	ctx context.Context
	// reserved are the names this world reserved (reserveName).
	reserved []string
}

// reserveName reserves the name of a pool to create, and reports whether
// it could: no pool is served under it and no decision reserved it.
func (w *managerWorld) reserveName(name string) bool {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if _, ok := w.m.served.Load(name); ok || w.m.names[name] {
		return false
	}
	w.m.names[name] = true
	w.reserved = append(w.reserved, name)
	return true
}

// releaseNames gives up the names w reserved: their pools are published,
// or were not created.
func (w *managerWorld) releaseNames() {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	for _, n := range w.reserved {
		delete(w.m.names, n)
	}
	w.reserved = nil
}

func (w *managerWorld) Subnet(name string) (*Subnet, bool) {
	st, ok := w.m.subnets[name]
	if !ok {
		return nil, false
	}
	return st.s, true
}

func (w *managerWorld) FreeAddresses(s *Subnet) *netipx.IPSet { return w.m.subnets[s.Name].free }

func (w *managerWorld) PoolExists(name string) bool {
	_, ok := w.m.served.Load(name)
	return ok
}

func (w *managerWorld) AutoPoolsOf(uid string) []*AutoPool {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return slices.Clone(w.m.byUID[uid])
}

func (w *managerWorld) KeptAutoPools(app ipam.AppRef, iface string, family int, subnet string) []*AutoPool {
	st := w.m.subnets[subnet]
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	var out []*AutoPool
	for _, a := range st.keep[keptKey(app, iface, family)] {
		if _, live := w.m.apps[a.App.UID]; !live && keptFor(a, app, iface, family, subnet) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b *AutoPool) int { return cmp.Compare(a.Name(), b.Name()) })
	return out
}

func (w *managerWorld) UsedAddresses(a *AutoPool) (*netipx.IPSet, error) {
	cs, err := w.m.claims.List(w.ctx, a.Name())
	if err != nil {
		// Unreadable records (ErrCorrupt) may be held: give nothing back.
		return nil, err
	}
	var b netipx.IPSetBuilder
	for _, c := range cs {
		if !isRetired(c) {
			b.Add(c.IP)
		}
	}
	b.Intersect(a.Pool.Addresses())
	set, _ := b.IPSet()
	return set, nil
}

func (w *managerWorld) Reserved(family int) *netipx.IPSet {
	return w.m.reserved[familyIndex(family)]
}
