package subnet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/internal/k8slabel"
	"github.com/ipamkit/ipam/internal/u128"
	"github.com/ipamkit/ipam/store"
)

// This file decides what SpiderSubnet does about auto-pools: Decide
// is a pure function from the applications, the subnets and the pools that
// exist (a Snapshot) to one decision per pool: create it with the
// lowest free addresses of its subnet, grow it, shrink it, refresh its
// labels, keep it, wait, or reclaim it. Manager applies the same
// decisions as applications and pods come and go.
//
// The rules are Spiderpool's (its subnet manager and application
// controller); where the library differs, the difference is spelled out at
// the rule and listed in the README.

// Action is what a decision does to a pool.
type Action string

// Actions of a Decision.
const (
	// Create: a new pool with the lowest free addresses of its
	// subnet.
	Create Action = "create"
	// Grow: the pool keeps its addresses and gains the lowest free
	// addresses of its subnet.
	Grow Action = "grow"
	// Shrink: the pool gives back its lowest addresses that no pod
	// uses.
	Shrink Action = "shrink"
	// Update: same addresses; the labels change (a new application
	// UID, reclaim, or the size annotation).
	Update Action = "update"
	// Keep: nothing to change.
	Keep Action = "keep"
	// Skip: the application gets no pool (its pods use the host's
	// network).
	Skip Action = "skip"
	// Wait: the change cannot be made yet; Err wraps ErrNotReady and
	// says what it waits for. Nothing changes.
	Wait Action = "wait"
	// Terminate: the application is gone and the pool is reclaimed,
	// but pods still use some of its addresses: no new allocation from it,
	// deleted once they are released.
	Terminate Action = "terminate"
	// Delete: the pool is deleted and its addresses go back to the
	// subnet.
	Delete Action = "delete"
	// Fail: the application asks for something that cannot be done
	// (Err says what, naming the annotation or field and its value). Nothing
	// is created or changed.
	Fail Action = "fail"
)

// Decision is what to do about one auto-pool: one interface and IP
// family of an application, or a pool whose application is gone.
//
// The zero Decision decides nothing. It is a plain value.
type Decision struct {
	App       ipam.AppRef
	Interface string
	Family    int
	Subnet    string
	Action    Action
	// Pool is the pool as the action leaves it (for Terminate, marked
	// Terminating; for Delete, the pool deleted); for Wait
	// and Fail, the pool as it is, or nil if there is none.
	Pool *AutoPool
	// Desired is the number of addresses the pool should have; 0 for a
	// reclaimed pool.
	Desired int
	// Added and Removed are the addresses the action gives the pool and
	// takes from it.
	Added, Removed []netipx.IPRange
	// Message says why, for people.
	Message string
	// Err is set for Wait (wrapping ErrNotReady) and Fail.
	Err error
}

// PoolName returns the name of the decision's pool, or "".
func (d *Decision) PoolName() string {
	if d.Pool == nil || d.Pool.Pool == nil {
		return ""
	}
	return d.Pool.Name()
}

// String returns, for example, `create auto4-app-eth0-a5bd3 (Deployment
// default/app eth0 IPv4, subnet "subnet-6"): 3 addresses for 2 pods and
// ipam.spidernet.io/ippool-ip-number "+1"` (see the example).
func (d *Decision) String() string {
	var b strings.Builder
	b.WriteString(string(d.Action))
	if n := d.PoolName(); n != "" {
		b.WriteString(" " + n)
	}
	b.WriteString(" (" + d.App.String())
	if d.Interface != "" {
		b.WriteString(" " + d.Interface)
	}
	if d.Family != 0 {
		fmt.Fprintf(&b, " IPv%d", d.Family)
	}
	if d.Subnet != "" {
		fmt.Fprintf(&b, ", subnet %q", d.Subnet)
	}
	b.WriteString(")")
	if d.Message != "" {
		b.WriteString(": " + d.Message)
	}
	return b.String()
}

// Options tune the auto-pool decisions. The zero Options is
// Spiderpool's default configuration. It is a plain value.
type Options struct {
	// DefaultIPNumber sizes the pools of applications that set no
	// AnnotationIPNumber, in its syntax: Spiderpool's Helm value
	// ipam.spiderSubnet.autoPool.defaultRedundantIPNumber N is "+N". Empty
	// means "+1", Spiderpool's default.
	DefaultIPNumber string
}

// Validate checks DefaultIPNumber.
func (o Options) Validate() error {
	if o.DefaultIPNumber == "" {
		return nil
	}
	if _, err := ParseIPNumber(o.DefaultIPNumber); err != nil {
		return &ipam.FieldError{Object: "auto-pool options", Field: "DefaultIPNumber", Value: o.DefaultIPNumber, Reason: err.(*ipam.AnnotationError).Reason}
	}
	return nil
}

// defaultNumber returns DefaultIPNumber parsed; "+1" when empty or invalid.
func (o Options) defaultNumber() IPNumber {
	if n, err := ParseIPNumber(o.DefaultIPNumber); err == nil {
		return n
	}
	return IPNumber{N: 1, Relative: true}
}

// Snapshot is what exists at one moment: subnets, the pools written
// by hand, the auto-pools, the reserved addresses, and the claims of the
// auto-pools' addresses (which addresses pods use). Build it with
// NewSnapshot.
//
// The zero Snapshot has no subnet. An *Snapshot is
// immutable and safe for concurrent use.
type Snapshot struct {
	subnets  map[string]*Subnet
	pools    map[string]*ipam.Pool // every pool, by name
	all      []*ipam.Pool          // every pool: the free addresses of a subnet are those no pool has
	auto     []*AutoPool
	byUID    map[string][]*AutoPool
	reserved [2]*netipx.IPSet // IPv4, IPv6
	used     map[string]*netipx.IPSet
}

// NewSnapshot returns the snapshot of subnets, pools (written by
// hand), autoPools, reserved addresses and claims. It checks everything at
// once: subnets and pools by ValidateAll and ValidatePools (auto-pools
// included), each auto-pool's subnet exists and has the pool's CIDR, its
// application is named, and reserved objects are valid. Claims are matched to
// pools by pool name; claims of other pools are ignored.
func NewSnapshot(subnets []*Subnet, pools []*ipam.Pool, autoPools []*AutoPool, reserved []*ipam.ReservedIP, claims []store.Claim) (*Snapshot, error) {
	all := slices.Clone(pools)
	var errs []error
	for i, a := range autoPools {
		if a == nil || a.Pool == nil {
			errs = append(errs, &ipam.FieldError{Field: fmt.Sprintf("autoPools[%d]", i), Reason: "nil auto-pool"})
			continue
		}
		all = append(all, a.Pool)
	}
	if err := ipam.ValidatePools(all); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateAll(subnets, all); err != nil {
		errs = append(errs, err)
	}
	for i, r := range reserved {
		if r == nil {
			errs = append(errs, &ipam.FieldError{Field: fmt.Sprintf("reserved[%d]", i), Reason: "nil reservedIP"})
		} else if err := r.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	s := &Snapshot{
		subnets: make(map[string]*Subnet, len(subnets)),
		pools:   make(map[string]*ipam.Pool, len(all)),
		all:     all,
		byUID:   make(map[string][]*AutoPool),
		used:    make(map[string]*netipx.IPSet),
	}
	for _, sn := range subnets {
		if sn != nil {
			s.subnets[sn.Name] = sn
		}
	}
	for _, p := range all {
		if p != nil {
			s.pools[p.Name] = p
		}
	}
	for _, a := range autoPools {
		if a == nil || a.Pool == nil {
			continue
		}
		fe := &fieldErrors{object: poolObject(a.Pool)}
		if sn, ok := s.subnets[a.Subnet]; !ok {
			fe.add("metadata.labels."+LabelOwnerSubnet, a.Subnet, "no such subnet")
		} else if sn.Subnet != a.Pool.Subnet {
			fe.add("subnet", a.Pool.Subnet.String(), "not the CIDR of its subnet %q, %s", sn.Name, sn.Subnet)
		}
		validateApp(a.App, fe)
		if a.Interface == "" {
			fe.add("metadata.labels."+LabelInterface, "", "required")
		}
		if err := fe.err(); err != nil {
			errs = append(errs, err)
			continue
		}
		s.auto = append(s.auto, a)
		s.byUID[a.App.UID] = append(s.byUID[a.App.UID], a)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s.reserved = [2]*netipx.IPSet{ipam.ReservedSet(4, reserved), ipam.ReservedSet(6, reserved)}
	builders := make(map[string]*netipx.IPSetBuilder)
	for _, c := range claims {
		if _, ok := s.pools[c.Pool]; !ok {
			continue
		}
		b := builders[c.Pool]
		if b == nil {
			b = new(netipx.IPSetBuilder)
			builders[c.Pool] = b
		}
		b.Add(c.IP)
	}
	for name, b := range builders {
		s.used[name], _ = b.IPSet()
	}
	return s, nil
}

// view is what the auto-pool decisions read about the cluster. A Snapshot
// is one, built from lists; Manager keeps its own, so that a decision about
// one application costs what that application touches, not what the
// cluster holds (see decideApplication).
//
// A view must be consistent for the length of one decision: a runner that
// applies decisions concurrently serialises those that touch one subnet.
type view interface {
	// Subnet returns the subnet of that name.
	Subnet(name string) (*Subnet, bool)
	// FreeAddresses returns the addresses of s that no pool has and no
	// reservation holds (its Usable addresses less every pool's and the
	// family's reserved addresses).
	FreeAddresses(s *Subnet) *netipx.IPSet
	// PoolExists reports whether a pool of that name exists, auto-pool or
	// not.
	PoolExists(name string) bool
	// AutoPoolsOf returns the auto-pools labelled with application UID uid.
	AutoPoolsOf(uid string) []*AutoPool
	// KeptAutoPools returns the auto-pools from subnet, for iface and family,
	// that an earlier application of the same group, kind, namespace and name
	// as app kept (reclaim false) when it went: the pools app may reuse.
	// The decisions check each again, so a view may return more.
	KeptAutoPools(app ipam.AppRef, iface string, family int, subnet string) []*AutoPool
	// UsedAddresses returns the addresses of a that pods hold (their claims
	// in the Store), or an error if they cannot be read: then a decides no
	// shrink and no deletion.
	UsedAddresses(a *AutoPool) (*netipx.IPSet, error)
	// Reserved returns the reserved addresses of family 4 or 6, or nil.
	Reserved(family int) *netipx.IPSet
}

// Subnet implements the decisions' view.
func (s *Snapshot) Subnet(name string) (*Subnet, bool) {
	sn, ok := s.subnets[name]
	return sn, ok
}

// PoolExists implements the decisions' view.
func (s *Snapshot) PoolExists(name string) bool { _, ok := s.pools[name]; return ok }

// AutoPoolsOf implements the decisions' view.
func (s *Snapshot) AutoPoolsOf(uid string) []*AutoPool { return s.byUID[uid] }

// Reserved implements the decisions' view.
func (s *Snapshot) Reserved(fam int) *netipx.IPSet { return s.reserved[familyIndex(fam)] }

// FreeAddresses implements the decisions' view. It costs O(pools).
func (s *Snapshot) FreeAddresses(sn *Subnet) *netipx.IPSet {
	var b netipx.IPSetBuilder
	b.AddSet(sn.Usable())
	for _, p := range s.all {
		if p != nil && p.Family() == sn.Family() {
			b.RemoveSet(p.Addresses())
		}
	}
	if r := s.reserved[familyIndex(sn.Family())]; r != nil {
		b.RemoveSet(r)
	}
	set, _ := b.IPSet()
	return set
}

// KeptAutoPools implements the decisions' view.
func (s *Snapshot) KeptAutoPools(app ipam.AppRef, iface string, family int, subnet string) []*AutoPool {
	var out []*AutoPool
	for _, a := range s.auto {
		if keptFor(a, app, iface, family, subnet) {
			out = append(out, a)
		}
	}
	return out
}

// UsedAddresses implements the decisions' view: the addresses of the claims given
// to NewSnapshot.
func (s *Snapshot) UsedAddresses(a *AutoPool) (*netipx.IPSet, error) {
	u := s.used[a.Name()]
	if u == nil {
		return new(netipx.IPSet), nil
	}
	return u, nil
}

// keptFor reports whether auto-pool a may be reused by app for iface and
// family from subnet: its reclaim is false, it is not terminating, and it
// was made for another application of the same group, kind, namespace and
// name (Spiderpool looks such pools up by labels without the UID).
func keptFor(a *AutoPool, app ipam.AppRef, iface string, family int, subnet string) bool {
	return !a.Reclaim && !a.Pool.Terminating && a.App.UID != app.UID &&
		a.App.Group() == app.Group() && k8slabel.Value(a.App.Kind) == k8slabel.Value(app.Kind) &&
		k8slabel.Value(a.App.Namespace) == k8slabel.Value(app.Namespace) && k8slabel.Value(a.App.Name) == k8slabel.Value(app.Name) &&
		a.Interface == iface && a.Family() == family && a.Subnet == subnet
}

func familyIndex(fam int) int {
	if fam == 6 {
		return 1
	}
	return 0
}

// Decide decides, for every application of apps and every auto-pool
// of snap, what to do, and returns the decisions: each application's in the
// order of apps and of its interfaces (IPv4 before IPv6), then those of the
// pools no application accounts for. It reads no clock and touches no store.
// An invalid opts.DefaultIPNumber counts as "+1".
//
// For each application whose pod template has the subnet annotations (see
// ParseConfig), one pool per interface and family it names:
//
//  1. Bad input fails the whole application and changes nothing (Fail,
//     Err naming the annotation or field and the value): malformed
//     annotations; an unknown subnet, a subnet of the other family, or one
//     being deleted; two interfaces on one subnet; two interfaces whose
//     names differ only in case (a pool's name is lower-cased, so they
//     would get one pool); a pool bigger than the subnet's totalIPCount; a third-party controller without a fixed
//     ippool-ip-number (Spiderpool: "only supports fixed auto-created
//     IPPool IP Number"), or with "+N" when its replica count is unknown.
//     Its existing pools are kept as they are.
//  2. hostNetwork: no pool (Skip); existing pools are kept.
//  3. The size is ippool-ip-number (or opts.DefaultIPNumber) over the pod
//     count (Application.PodCount).
//  4. The pool is the application's own (labelled with its UID), else a pool
//     kept by an earlier application of the same group, kind, namespace and
//     name with reclaim false (Spiderpool's reuse: the UID label is
//     rewritten and the pool resized), else a new one with the subnet's
//     lowest free addresses: its addresses less every pool's, less the
//     reserved addresses of the family. The new pool is named by
//     Spiderpool's name (the first of AutoPoolNames), unless a pool has that name or
//     another create of the same call takes it (two applications whose
//     UIDs share five characters): then by the next of AutoPoolNames that
//     is free, or, if none is, it waits (Wait). No two creates of
//     one call have one name, whatever the input.
//  5. Too small: it grows by the lowest free addresses, keeping its own.
//     Too big: it gives back its lowest addresses that no pod holds, if
//     enough are free; otherwise it waits (Wait) until pods release
//     theirs. Same size: Update if the labels change, else
//     Keep.
//  6. If the subnet has too few free addresses, the pool waits
//     (Wait, Spiderpool's "insufficient subnet FreeIPs"). An
//     application's pools take addresses all or none: if one cannot, none
//     of its pools is created or grown.
//  7. An application whose pods now name another subnet than its pool's
//     keeps the pool and fails (ErrNotSupported): Spiderpool ignores the
//     change too.
//
// Every auto-pool that no application accounts for (its application is not
// in apps, has another UID, or no longer asks for that interface) is
// reclaimed if its reclaim label is true: deleted when no pod holds one of
// its addresses (Delete), else Terminate (then Wait
// while it is Terminating). With reclaim false it is kept for reuse.
//
// Addresses given back (shrinks, deletions) are free for the applications'
// new addresses in the same call: the result is where Spiderpool's
// controller, which retries waiting applications, ends up.
func Decide(apps []Application, snap *Snapshot, opts Options) []Decision {
	if snap == nil {
		snap = &Snapshot{}
	}
	e := newAutoPoolEngine(snap, opts)
	plans := make([]*appPlan, len(apps))
	owned := make(map[*AutoPool]bool)
	uids := make(map[string]bool, len(apps))
	for i := range apps {
		if app := &apps[i]; app.UID != "" && uids[app.UID] {
			plans[i] = &appPlan{app: app}
			plans[i].fail(Decision{App: app.AppRef}, &Error{App: app.AppRef,
				Reason: fmt.Sprintf("uid %q: the same application is listed twice", app.UID), Err: ipam.ErrInvalid})
			continue
		}
		uids[apps[i].UID] = true
		plans[i] = e.plan(&apps[i])
		for _, a := range plans[i].owned {
			owned[a] = true
		}
	}
	for _, p := range plans {
		for i := range p.decisions {
			e.release(&p.decisions[i])
		}
	}
	var orphans []Decision
	for _, a := range snap.auto {
		if owned[a] {
			continue
		}
		d := e.reclaim(a)
		e.release(&d)
		orphans = append(orphans, d)
	}
	var out []Decision
	for _, p := range plans {
		e.take(p)
		out = append(out, p.decisions...)
	}
	return append(out, orphans...)
}

// decideApplication decides about the pools of one application by the rules
// of Decide, reading only what the application touches through v:
// for a runner that reacts to one application's change. Pools of other
// applications are not judged; the application's own pools it no longer
// accounts for (an interface or the annotations dropped) are reclaimed.
// Addresses its shrinks and reclaims give back are free for its creates and
// grows: apply those first, and if one cannot be applied (a pod took an
// address meanwhile), decide again before applying the rest. A nil app
// decides nothing.
func decideApplication(app *Application, v view, opts Options) []Decision {
	if app == nil || v == nil {
		return nil
	}
	e := newAutoPoolEngine(v, opts)
	p := e.plan(app)
	for i := range p.decisions {
		e.release(&p.decisions[i])
	}
	for _, a := range v.AutoPoolsOf(app.UID) {
		if !slices.ContainsFunc(p.owned, func(o *AutoPool) bool { return o.Name() == a.Name() }) {
			d := e.reclaim(a)
			e.release(&d)
			p.decisions = append(p.decisions, d)
		}
	}
	e.take(p)
	return p.decisions
}

// decideReclaim decides about auto-pool a, whose application is gone, by the
// rules of Decide: keep it (reclaim false), delete it (no pod holds
// one of its addresses), terminate it, or wait while it terminates.
func decideReclaim(a *AutoPool, v view) Decision {
	if a == nil || a.Pool == nil || v == nil {
		return Decision{}
	}
	return newAutoPoolEngine(v, Options{}).reclaim(a)
}

// autoPoolEngine makes decisions against a world, keeping its own copy of
// the subnets' free addresses as decisions take and give back addresses.
type autoPoolEngine struct {
	w    view
	def  IPNumber
	free map[string]*netipx.IPSet
	// claimed are the kept pools a plan reuses, so that no two take one.
	claimed map[*AutoPool]bool
	// names are the names of the pools created in this call, each with
	// what it is for, so that no two creates take one name.
	names map[string]string
}

func newAutoPoolEngine(w view, opts Options) *autoPoolEngine {
	return &autoPoolEngine{w: w, def: opts.defaultNumber(), free: make(map[string]*netipx.IPSet),
		claimed: make(map[*AutoPool]bool), names: make(map[string]string)}
}

func (e *autoPoolEngine) freeSet(s *Subnet) *netipx.IPSet {
	f, ok := e.free[s.Name]
	if !ok {
		f = e.w.FreeAddresses(s)
		e.free[s.Name] = f
	}
	return f
}

// freeName returns the first of names that no pool has and no decision of
// this call took, and why each one before it could not be used.
func (e *autoPoolEngine) freeName(names []string) (string, []string) {
	var taken []string
	for _, n := range names {
		switch holder, planned := e.names[n]; {
		case planned:
			taken = append(taken, fmt.Sprintf("%q is planned for %s", n, holder))
		case e.nameTaken(n):
			taken = append(taken, fmt.Sprintf("%q is another pool's", n))
		default:
			return n, taken
		}
	}
	return "", taken
}

// nameTaken reports whether a pool has the name n: the view says so, or,
// for a view that reserves names (Manager's, whose decisions for
// different subnets run in parallel), it cannot reserve n.
func (e *autoPoolEngine) nameTaken(n string) bool {
	if r, ok := e.w.(interface{ reserveName(string) bool }); ok {
		return !r.reserveName(n)
	}
	return e.w.PoolExists(n)
}

// appPlan is one application's decisions, before addresses are taken.
type appPlan struct {
	app       *Application
	decisions []Decision
	// takes are the indexes of decisions that need addresses (create, grow).
	takes []int
	// owned are the existing pools the plan accounts for, which are not
	// reclaimed.
	owned []*AutoPool
	// was is the pool before the decision, by index of a grow.
	was map[int]*AutoPool
}

func (p *appPlan) fail(d Decision, err error) {
	d.Action, d.Err, d.Message = Fail, err, err.Error()
	p.decisions = append(p.decisions, d)
}

func (p *appPlan) wait(d Decision, err *Error) {
	err.Err = ipam.ErrNotReady
	d.Action, d.Err, d.Message = Wait, err, err.Reason
	p.decisions = append(p.decisions, d)
}

// autoPoolEntry is one pool an application asks for.
type autoPoolEntry struct {
	iface  string
	family int
	subnet *Subnet
}

// plan decides everything about app except which free addresses its
// creates and grows take (see take).
func (e *autoPoolEngine) plan(app *Application) *appPlan {
	p := &appPlan{app: app, owned: e.w.AutoPoolsOf(app.UID)}
	base := Decision{App: app.AppRef}
	if err := app.Validate(); err != nil {
		p.fail(base, err)
		return p
	}
	cfg, ok, err := ParseConfig(app.Annotations)
	if !ok {
		p.owned = nil // no longer asks: its pools are reclaimed
		return p
	}
	if err != nil {
		setAnnotationObject(err, "pod template of "+app.AppRef.String())
		p.fail(base, err)
		return p
	}
	if app.HostNetwork {
		d := base
		d.Action, d.Message = Skip, "its pods use the host's network: no pool"
		p.decisions = append(p.decisions, d)
		return p
	}
	desired, why, err := e.size(app, &cfg)
	if err != nil {
		p.fail(base, err)
		return p
	}
	entries, errs := e.entries(app, &cfg, desired)
	if len(errs) > 0 {
		for _, err := range errs {
			p.fail(base, err)
		}
		return p
	}
	p.owned = nil
	n := e.def
	if cfg.HasIPNumber {
		n = cfg.IPNumber
	}
	for _, en := range entries {
		e.planEntry(p, &cfg, n, en, desired, why)
	}
	return p
}

// size returns the number of addresses app's pools should have, and how
// that was worked out.
func (e *autoPoolEngine) size(app *Application, cfg *Config) (int, string, error) {
	n := e.def
	if cfg.HasIPNumber {
		n = cfg.IPNumber
	}
	count, known := app.PodCount()
	fail := func(reason string, sentinel error) (int, string, error) {
		return 0, "", &Error{App: app.AppRef, Reason: reason, Err: sentinel}
	}
	if !app.IsNative() {
		switch {
		case !cfg.HasIPNumber:
			return fail(fmt.Sprintf("annotation %s is required for a third-party controller (%s/%s/%s only supports a fixed auto-created pool size): set a number such as \"5\"",
				AnnotationIPNumber, app.Kind, app.Namespace, app.Name), ipam.ErrInvalid)
		case n.Relative && !known:
			// Spiderpool reads "+N" as N for third-party controllers, whose
			// replicas it cannot read; here "+N" needs the count.
			return fail(fmt.Sprintf("annotation %s %q counts on the pod count of a third-party controller, which is unknown (no replica count from its scale subresource): set a fixed number instead",
				AnnotationIPNumber, n.String()), ipam.ErrInvalid)
		}
	}
	size := n.Size(count)
	var why string
	if n.Relative {
		why = fmt.Sprintf("%d addresses for %d pods and %s %q", size, count, AnnotationIPNumber, n.String())
	} else {
		why = fmt.Sprintf("%d addresses by %s %q", size, AnnotationIPNumber, n.String())
	}
	if !cfg.HasIPNumber {
		why += " (the default)"
	}
	return size, why, nil
}

// entries resolves the pools app asks for, or returns every problem with
// them.
func (e *autoPoolEngine) entries(app *Application, cfg *Config, desired int) ([]autoPoolEntry, []error) {
	var out []autoPoolEntry
	var errs []error
	a := annotation{key: cfg.Key, value: app.Annotations[cfg.Key]}
	for i, sa := range cfg.Subnets {
		path := ""
		if cfg.Key == ipam.AnnotationSubnets {
			path = jsonIndex(i) + "."
		}
		for _, f := range [...]struct {
			fam   int
			names []string
		}{{4, sa.IPv4}, {6, sa.IPv6}} {
			if len(f.names) == 0 {
				continue
			}
			name := f.names[0]
			field := fmt.Sprintf("%sipv%d[0] %q", path, f.fam, name)
			s, ok := e.w.Subnet(name)
			switch {
			case !ok:
				ae := a.newError(field+": no SpiderSubnet of that name", ipam.ErrNotFound)
				errs = append(errs, ae)
				continue
			case s.Family() != f.fam:
				errs = append(errs, a.newError(fmt.Sprintf("%s: an IPv%d subnet, named for IPv%d", field, s.Family(), f.fam), ipam.ErrInvalid))
				continue
			case s.Terminating:
				errs = append(errs, a.newError(field+": the subnet is being deleted", ipam.ErrNotFound))
				continue
			}
			if total := setSize(s.Usable()); int64(desired) > total {
				errs = append(errs, &Error{App: app.AppRef, Interface: sa.Interface, Family: f.fam, Subnet: s.Name, Err: ipam.ErrInvalid,
					Reason: fmt.Sprintf("a pool of %d addresses cannot fit: the subnet has %d in all (totalIPCount); lower %s %q or widen the subnet's ips",
						desired, total, AnnotationIPNumber, annotationValueOr(app.Annotations, AnnotationIPNumber, e.def.String()))})
				continue
			}
			out = append(out, autoPoolEntry{iface: sa.Interface, family: f.fam, subnet: s})
		}
	}
	// Pool names are lower-cased: interfaces that differ only in case would
	// get one pool (Spiderpool's check compares them as they are).
	for i, sa := range cfg.Subnets {
		for j := range i {
			if o := cfg.Subnets[j].Interface; o != sa.Interface && strings.ToLower(o) == strings.ToLower(sa.Interface) {
				errs = append(errs, a.newError(fmt.Sprintf("%s.interface %q and %s.interface %q differ only in case, and an auto-pool's name is lower-cased: they would get one pool; rename one",
					jsonIndex(j), o, jsonIndex(i), sa.Interface), ipam.ErrInvalid))
			}
		}
	}
	for _, err := range errs {
		setAnnotationObject(err, "pod template of "+app.AppRef.String())
	}
	return out, errs
}

func annotationValueOr(m map[string]string, key, def string) string {
	if v, ok := m[key]; ok {
		return v
	}
	return def + " (the default)"
}

// planEntry decides app's pool for one interface and family.
func (e *autoPoolEngine) planEntry(p *appPlan, cfg *Config, n IPNumber, en autoPoolEntry, desired int, why string) {
	app := p.app
	d := Decision{App: app.AppRef, Interface: en.iface, Family: en.family, Subnet: en.subnet.Name, Desired: desired}
	aerr := func(reason string) *Error {
		return &Error{App: app.AppRef, Interface: en.iface, Family: en.family, Subnet: en.subnet.Name, Pool: d.PoolName(), Reason: reason}
	}
	var cur *AutoPool
	for _, a := range e.w.AutoPoolsOf(app.UID) {
		if a.Interface == en.iface && a.Family() == en.family {
			cur = a
		}
	}
	if cur != nil && cur.Subnet != en.subnet.Name {
		d.Pool = cur
		p.owned = append(p.owned, cur)
		err := aerr(fmt.Sprintf("the pod template now names subnet %q, but the application's pool %q is from subnet %q: a running application's subnet does not change (Spiderpool ignores the change too); delete and re-create the application to move it",
			en.subnet.Name, cur.Name(), cur.Subnet))
		err.Err = ipam.ErrNotSupported
		p.fail(d, err)
		return
	}
	reused := ""
	if cur == nil {
		for _, k := range e.w.KeptAutoPools(app.AppRef, en.iface, en.family, en.subnet.Name) {
			if !e.claimed[k] {
				cur = k
				e.claimed[k] = true
				reused = fmt.Sprintf("reuses the pool kept from %s (uid %s, ippool-reclaim false); ", k.App.String(), k.App.UID)
				break
			}
		}
	}
	if cur == nil {
		names, err := AutoPoolNames(en.family, app.AppRef, en.iface)
		if err != nil {
			p.fail(d, err)
			return
		}
		name, taken := e.freeName(names)
		if name == "" {
			e := aerr(fmt.Sprintf("every name this pool may have is taken: %s; waits until one is gone", strings.Join(taken, ", ")))
			e.Pool = names[0]
			p.wait(d, e)
			return
		}
		e.names[name] = fmt.Sprintf("%s %s IPv%d", app.AppRef.String(), en.iface, en.family)
		d.Action = Create
		d.Pool = newAutoPool(name, en.subnet, app.AppRef, en.iface, cfg, n, nil)
		d.Message = why
		if len(taken) > 0 {
			d.Message = why + "; named " + strconv.Quote(name) + " because " + strings.Join(taken, ", ")
		}
		p.takes = append(p.takes, len(p.decisions))
		p.decisions = append(p.decisions, d)
		return
	}
	p.owned = append(p.owned, cur)
	next := *cur
	next.App, next.Reclaim, next.IPNumber = app.AppRef, cfg.Reclaim, n
	d.Pool = &next
	size, want := cur.count(), u128.U128{Lo: uint64(max(desired, 0))}
	switch {
	case want.Cmp(size) > 0:
		d.Action, d.Message = Grow, reused+why
		if p.was == nil {
			p.was = make(map[int]*AutoPool)
		}
		p.was[len(p.decisions)] = cur
		p.takes = append(p.takes, len(p.decisions))
	case want.Cmp(size) < 0:
		used, err := e.w.UsedAddresses(cur)
		if err != nil {
			d.Pool = cur
			ae := aerr("reading which addresses pods hold: " + err.Error())
			p.wait(d, ae)
			return
		}
		var b netipx.IPSetBuilder
		b.AddSet(cur.Pool.Addresses())
		b.RemoveSet(used)
		idle, _ := b.IPSet()
		excess := size.Sub(want)
		if n := setCount(idle); n.Less(excess) {
			d.Pool = cur
			p.wait(d, aerr(fmt.Sprintf("shrinking from %s to %d addresses (%s) gives back %s, but pods hold %s of the %s, so only %s are free: waits for pods to release theirs",
				size, desired, why, excess, size.Sub(n), size, n)))
			return
		}
		removed, _ := takeLowest(idle, excess)
		var nb netipx.IPSetBuilder
		nb.AddSet(cur.Pool.Addresses())
		nb.RemoveSet(removed)
		d.Pool = withIPs(&next, &nb)
		d.Action, d.Removed, d.Message = Shrink, removed.Ranges(), reused+why
	case reused != "" || cur.App.UID != app.UID || cur.Reclaim != cfg.Reclaim || cur.IPNumber != n:
		d.Action, d.Message = Update, reused+why+"; labels refreshed"
	default:
		d.Action, d.Message = Keep, why
		d.Pool = cur
	}
	p.decisions = append(p.decisions, d)
}

// withIPs returns a copy of a whose pool has the addresses of b.
func withIPs(a *AutoPool, b *netipx.IPSetBuilder) *AutoPool {
	set, _ := b.IPSet()
	q := *a.Pool
	q.IPs = set.Ranges()
	q.ExcludeIPs = nil
	c := *a
	c.Pool = &q
	return &c
}

// release gives the addresses a decision removes back to its subnet's free
// set, except reserved ones.
func (e *autoPoolEngine) release(d *Decision) {
	if len(d.Removed) == 0 {
		return
	}
	s, ok := e.w.Subnet(d.Subnet)
	if !ok {
		return
	}
	var back netipx.IPSetBuilder
	for _, r := range d.Removed {
		back.AddRange(r)
	}
	back.Intersect(s.Usable())
	if r := e.w.Reserved(s.Family()); r != nil {
		back.RemoveSet(r)
	}
	back.AddSet(e.freeSet(s))
	e.free[s.Name], _ = back.IPSet()
}

// take gives the creates and grows of p the lowest free addresses of their
// subnets, all or none: if one cannot get enough, every one of them waits and
// takes nothing.
func (e *autoPoolEngine) take(p *appPlan) {
	if len(p.takes) == 0 {
		return
	}
	saved := make(map[string]*netipx.IPSet)
	for _, i := range p.takes {
		d := &p.decisions[i]
		s, _ := e.w.Subnet(d.Subnet)
		free := e.freeSet(s)
		if _, ok := saved[s.Name]; !ok {
			saved[s.Name] = free
		}
		have := 0
		if d.Action == Grow {
			have = d.Pool.Size() // less than d.Desired
		}
		need := d.Desired - have
		taken, rest := takeLowest(free, u128.U128{Lo: uint64(max(need, 0))})
		if got := setSize(taken); got < int64(need) {
			for name, f := range saved {
				e.free[name] = f
			}
			e.holdBack(p, i, fmt.Sprintf("insufficient free addresses: %d wanted, %d left (Spiderpool: insufficient subnet FreeIPs, required '%d' but only left '%d'); retried when addresses are given back",
				need, got, need, got))
			return
		}
		e.free[s.Name] = rest
		var b netipx.IPSetBuilder
		b.AddSet(d.Pool.Pool.Addresses())
		b.AddSet(taken)
		d.Pool = withIPs(d.Pool, &b)
		d.Added = taken.Ranges()
	}
}

// holdBack turns every create and grow of p into a wait: the one at index
// failed for reason, the others because of it.
func (e *autoPoolEngine) holdBack(p *appPlan, failed int, reason string) {
	f := &p.decisions[failed]
	for _, i := range p.takes {
		d := &p.decisions[i]
		r := reason
		if i != failed {
			r = fmt.Sprintf("held back with the application's pool for %s IPv%d (subnet %q): %s", f.Interface, f.Family, f.Subnet, reason)
		}
		err := &Error{App: d.App, Interface: d.Interface, Family: d.Family, Subnet: d.Subnet, Pool: d.PoolName(), Reason: r, Err: ipam.ErrNotReady}
		d.Pool = p.was[i] // nil for a create
		d.Action, d.Err, d.Message, d.Added = Wait, err, r, nil
	}
}

// reclaim decides about auto-pool a, which no application accounts for.
func (e *autoPoolEngine) reclaim(a *AutoPool) Decision {
	d := Decision{App: a.App, Interface: a.Interface, Family: a.Family(), Subnet: a.Subnet, Pool: a}
	if !a.Reclaim {
		d.Action = Keep
		d.Message = fmt.Sprintf("%s (uid %s) is gone or no longer asks for it, and ippool-reclaim is false: the pool keeps its addresses for the next %s of that namespace and name",
			a.App.String(), a.App.UID, a.App.Kind)
		return d
	}
	used, err := e.w.UsedAddresses(a)
	if err != nil {
		d.Action, d.Err = Wait, &Error{App: a.App, Interface: a.Interface, Family: a.Family(), Subnet: a.Subnet, Pool: a.Name(),
			Reason: "reading which addresses pods hold: " + err.Error(), Err: ipam.ErrNotReady}
		d.Message = d.Err.Error()
		return d
	}
	var b netipx.IPSetBuilder
	b.AddSet(used)
	b.Intersect(a.Pool.Addresses())
	held, _ := b.IPSet()
	if n := setSize(held); n > 0 {
		msg := fmt.Sprintf("%s (uid %s) is gone or no longer asks for it, and ippool-reclaim is true, but pods hold %d of its addresses: no new allocation from it; deleted once they are released",
			a.App.String(), a.App.UID, n)
		if a.Pool.Terminating {
			d.Action, d.Message = Wait, msg
			d.Err = &Error{App: a.App, Interface: a.Interface, Family: a.Family(), Subnet: a.Subnet, Pool: a.Name(), Reason: msg, Err: ipam.ErrNotReady}
			return d
		}
		q := *a.Pool
		q.Terminating = true
		t := *a
		t.Pool = &q
		d.Action, d.Pool, d.Message = Terminate, &t, msg
		return d
	}
	d.Action = Delete
	d.Removed = a.Pool.Addresses().Ranges()
	d.Message = fmt.Sprintf("%s (uid %s) is gone or no longer asks for it, and ippool-reclaim is true: its %s addresses go back to the subnet",
		a.App.String(), a.App.UID, a.count())
	return d
}

// takeLowest returns the lowest n addresses of set (fewer if it has fewer),
// and the rest.
func takeLowest(set *netipx.IPSet, n u128.U128) (taken, rest *netipx.IPSet) {
	var tb, rb netipx.IPSetBuilder
	rb.AddSet(set)
	left := n
	for _, r := range set.Ranges() {
		if left.IsZero() {
			break
		}
		span := u128.Span(r.From(), r.To())
		to := r.To()
		if span.Less(left) { // the whole range: span+1 <= left
			left = left.Sub(span).SubOne()
		} else {
			to = u128.From(r.From()).Add(left.SubOne()).Addr(r.From().Is4())
			left = u128.U128{}
		}
		tb.AddRange(netipx.IPRangeFrom(r.From(), to))
		rb.RemoveRange(netipx.IPRangeFrom(r.From(), to))
	}
	taken, _ = tb.IPSet()
	rest, _ = rb.IPSet()
	return taken, rest
}
