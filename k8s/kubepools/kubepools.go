// Package kubepools is an ipam.PoolSource fed by a live cluster: the
// SpiderIPPool and SpiderReservedIP objects (spiderpool.spidernet.io/v2beta1)
// a Spiderpool cluster defines, followed with dynamic informers, so that an
// Allocator allocates from the pools the cluster has now, without a restart.
//
// No Spiderpool client or generated code is needed: objects are read as
// unstructured, and their spec is parsed by ipam.ParsePool and
// ipam.ReservedIP's JSON form. The CRDs themselves must be installed (as in a
// Spiderpool cluster). A pool object with a deletionTimestamp is a
// Terminating pool (no new allocations), a reserved-IP object with one
// reserves nothing, as in Spiderpool.
//
// An object that is not valid is skipped, with a log line (Options.Logger)
// naming the object and the fields at fault; the other pools keep serving.
// Two pools that share addresses are both served here; the Allocator refuses
// each of them (ipam.ErrOverlap) until one changes.
//
// A pool whose spec and deletion state are unchanged keeps its *ipam.Pool
// across updates (status writes, labels, resyncs), so the Allocator keeps
// what it knows of the pool: it starts over only for a pool whose pointer
// changes. Likewise the reserved sets keep their pointer until the addresses
// they hold change.
//
// Spiderpool's webhook fills in defaults (ipVersion, the merged ips list) and
// refuses invalid objects before they are stored; objects written without it
// (as in tests) must be in that form.
//
// Source follows the objects with informers for a long-lived process; Load
// reads them once, for a short-lived one such as a CNI plugin.
package kubepools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"go4.org/netipx"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/internal/eventnote"
	"github.com/ipamkit/ipam/k8s/internal/kubeerr"
	"github.com/ipamkit/ipam/k8s/kubeclient"
)

// The resources Source follows.
var (
	IPPoolResource     = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spiderippools"}
	ReservedIPResource = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spiderreservedips"}
)

// Compile-time checks of the capabilities Source gives the Allocator.
var (
	_ ipam.DefaultPoolSource = (*Source)(nil)
	_ ipam.ReservedSource    = (*Source)(nil)
)

// Options configure a Source. The zero Options are the usual ones.
type Options struct {
	// Logger receives the objects skipped as invalid, once per version of
	// their spec. Nil discards them.
	Logger *slog.Logger
	// Informers, if set, gives the shared informers (from a dynamic
	// informer factory) a Source made by New takes its two informers from, so that a program whose
	// other parts follow SpiderIPPools keeps one cache of them. The caller
	// starts it, after New, and stops it; Run then only waits for ctx. Nil:
	// the Source makes and runs informers of its own. Load ignores it.
	Informers kubeclient.Informers
	// Events, if set, records a Warning Event on each object skipped as
	// invalid (reasons EventInvalidPool and EventInvalidReservedIP), once
	// per version of its spec, as the log line. Nil records none.
	Events kubeclient.EventRecorder
}

// Reasons of the Events a Source records (Options.Events).
const (
	EventInvalidPool       = "InvalidPool"
	EventInvalidReservedIP = "InvalidReservedIP"
)

// Source is an ipam.PoolSource (and ipam.DefaultPoolSource and
// ipam.ReservedSource) that serves a cluster's SpiderIPPool and
// SpiderReservedIP objects. One made by New follows them: start it with Run
// and wait for WaitForSync before the first allocation; until then it has
// no pools. One made by Load holds what one list found.
//
// Each change publishes a new snapshot; a pool whose spec did not change
// keeps the same *ipam.Pool, so the Allocator rebuilds only the indexes of
// the pools that changed. The zero Source is not usable; create one with
// New or Load. A *Source is safe for concurrent use.
type Source struct {
	log      *slog.Logger
	events   kubeclient.EventRecorder // nil for none
	dyn      dynamic.Interface
	informer [2]cache.SharedIndexInformer // pools, reserved IPs; nil for Load's
	shared   bool                         // the informers are Options.Informers'

	mu       sync.Mutex // orders the updates of the maps below
	pools    map[string]entry[*ipam.Pool]
	reserved map[string]entry[*ipam.ReservedIP]
	snap     atomic.Pointer[snapshot]
}

// entry is what one object gave: its value, or nil if it is invalid, and
// the input it was made from (its spec and whether it is terminating), so
// that an update that leaves the input alone keeps the value.
type entry[T any] struct {
	input []byte
	value T
}

// snapshot is what Source serves between two changes.
type snapshot struct {
	byName               map[string]*ipam.Pool
	order                []*ipam.Pool // by name
	defaults             []*ipam.Pool
	reserved4, reserved6 *netipx.IPSet
}

// resources are the two kinds a Source reads, in the order of
// Source.informer.
var resources = [2]schema.GroupVersionResource{IPPoolResource, ReservedIPResource}

// newSource returns a Source with no objects yet.
func newSource(cfg *rest.Config, opts Options) (*Source, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubepools: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{
		log:      log,
		events:   opts.Events,
		dyn:      dyn,
		pools:    map[string]entry[*ipam.Pool]{},
		reserved: map[string]entry[*ipam.ReservedIP]{},
	}
	s.snap.Store(&snapshot{byName: map[string]*ipam.Pool{}})
	return s, nil
}

// New returns a Source that follows the cluster cfg names. It does not
// contact the server until Run.
func New(cfg *rest.Config, opts Options) (*Source, error) {
	s, err := newSource(cfg, opts)
	if err != nil {
		return nil, err
	}
	s.shared = opts.Informers != nil
	for i, gvr := range resources {
		if s.shared {
			if s.informer[i], err = opts.Informers(gvr); err != nil {
				return nil, fmt.Errorf("kubepools: the informer of %s: %w", gvr.Resource, err)
			}
		} else {
			s.informer[i] = kubeclient.DynamicInformer(s.dyn, gvr)
		}
		_, err := s.informer[i].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.update(i, obj, false) },
			UpdateFunc: func(_, obj any) { s.update(i, obj, false) },
			DeleteFunc: func(obj any) { s.update(i, obj, true) },
		})
		if err != nil {
			return nil, fmt.Errorf("kubepools: %w", err)
		}
	}
	return s, nil
}

// Load returns a Source holding the SpiderIPPool and SpiderReservedIP
// objects of one list of each, made within ctx: for a program that
// allocates once and exits, such as a CNI plugin, where informers would
// cost a watch it never uses. Invalid objects are skipped and logged as by
// New. When the API server gives no usable answer within ctx, the error
// wraps kubestore.ErrUnavailable (kubeclient.ErrUnavailable). The Source does not change afterwards; Run and WaitForSync are not
// for it.
func Load(ctx context.Context, cfg *rest.Config, opts Options) (*Source, error) {
	s, err := newSource(cfg, opts)
	if err != nil {
		return nil, err
	}
	for i, gvr := range resources {
		list, err := s.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("kubepools: listing %s: %w", gvr.Resource, kubeerr.Wrap(ctx, err))
		}
		for j := range list.Items {
			s.update(i, &list.Items[j], false)
		}
	}
	return s, nil
}

// Run follows the objects until ctx is done, then stops the informers and
// returns ctx's error; with Options.Informers, whose informers the caller
// runs, it only waits for ctx. It returns at once with an error for a
// Source made by Load.
func (s *Source) Run(ctx context.Context) error {
	if s.informer[0] == nil {
		return errors.New("kubepools: Run of a Source made by Load, which does not follow the cluster")
	}
	if s.shared {
		<-ctx.Done()
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for _, inf := range s.informer {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
	return ctx.Err()
}

// WaitForSync waits until both informers have listed their objects once
// (Run must be running), or ctx is done. A Source made by Load is synced.
func (s *Source) WaitForSync(ctx context.Context) error {
	if s.informer[0] == nil {
		return nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.informer[0].HasSynced, s.informer[1].HasSynced) {
		return fmt.Errorf("kubepools: waiting for the informers: %w", context.Cause(ctx))
	}
	return nil
}

// update applies one event of resource i (0 pools, 1 reserved IPs).
func (s *Source) update(i int, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		s.log.Warn("kubepools: object of unexpected type skipped", "type", fmt.Sprintf("%T", obj))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var changed bool
	if i == 0 {
		changed = apply(s, s.pools, u, deleted, "SpiderIPPool", EventInvalidPool, parsePool)
	} else {
		changed = apply(s, s.reserved, u, deleted, "SpiderReservedIP", EventInvalidReservedIP, parseReservedIP)
	}
	if changed {
		s.publish(i == 1)
	}
}

// apply records object u (deleted, or as it is now) in m, parsing it with
// parse unless its input is the one m holds, and reports whether m changed.
// An object that does not parse is logged (and recorded as an Event of
// reason invalid) and kept as nil, so that a later update with the same
// input is not logged again.
func apply[T any](s *Source, m map[string]entry[*T], u *unstructured.Unstructured, deleted bool, kind, invalid string,
	parse func([]byte) (*T, error)) bool {
	name := u.GetName()
	if deleted {
		_, had := m[name]
		delete(m, name)
		return had
	}
	input, err := inputOf(u)
	if old, ok := m[name]; ok && bytes.Equal(old.input, input) {
		return false
	}
	var v *T
	if err == nil {
		v, err = parse(input)
	}
	if err != nil {
		s.log.Warn("kubepools: "+kind+" skipped", "name", name, "resourceVersion", u.GetResourceVersion(), "err", err)
		if s.events != nil {
			s.events.Eventf(u, nil, corev1.EventTypeWarning, invalid, "Validate", "%s",
				eventnote.Sprintf("%s skipped by the allocators: %v", kind, err))
		}
		v = nil
	}
	m[name] = entry[*T]{input, v}
	return true
}

// publish makes a new snapshot of the maps; reservedChanged says whether
// the reserved sets may have changed (else the old pointers are kept, as
// they are when the sets made again hold the same addresses).
func (s *Source) publish(reservedChanged bool) {
	old := s.snap.Load()
	next := &snapshot{byName: make(map[string]*ipam.Pool, len(s.pools)), reserved4: old.reserved4, reserved6: old.reserved6}
	for _, name := range slices.Sorted(maps.Keys(s.pools)) {
		p := s.pools[name].value
		if p == nil {
			continue
		}
		next.byName[name] = p
		next.order = append(next.order, p)
		if p.Default {
			next.defaults = append(next.defaults, p)
		}
	}
	if reservedChanged {
		var rs []*ipam.ReservedIP
		for _, name := range slices.Sorted(maps.Keys(s.reserved)) {
			if r := s.reserved[name].value; r != nil {
				rs = append(rs, r)
			}
		}
		next.reserved4 = sameSet(old.reserved4, nonEmpty(ipam.ReservedSet(4, rs)))
		next.reserved6 = sameSet(old.reserved6, nonEmpty(ipam.ReservedSet(6, rs)))
	}
	s.snap.Store(next)
}

func nonEmpty(s *netipx.IPSet) *netipx.IPSet {
	if s == nil || len(s.Ranges()) == 0 {
		return nil
	}
	return s
}

// sameSet returns old if it holds the addresses of next, else next.
func sameSet(old, next *netipx.IPSet) *netipx.IPSet {
	if old == nil || next == nil || !old.Equal(next) {
		return next
	}
	return old
}

// inputOf returns what a pool or reserved IP is made from: u's spec as
// JSON, with the object's name inside so that the parsers' errors name the
// object, and "terminating" set if the object is being deleted (both are
// fields of the JSON forms of ipam.Pool and ipam.ReservedIP, and neither is
// a field of the objects' specs). encoding/json writes map keys sorted, so
// equal inputs are equal bytes.
func inputOf(u *unstructured.Unstructured) ([]byte, error) {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return nil, errors.New("spec: missing or not an object")
	}
	in := make(map[string]any, len(spec)+2)
	maps.Copy(in, spec)
	in["name"] = u.GetName()
	in["terminating"] = u.GetDeletionTimestamp() != nil
	return json.Marshal(in)
}

// parsePool reads a SpiderIPPool's input (see inputOf).
func parsePool(input []byte) (*ipam.Pool, error) { return ipam.ParsePool(input) }

// parseReservedIP reads a SpiderReservedIP's input (see inputOf).
func parseReservedIP(input []byte) (*ipam.ReservedIP, error) {
	r := &ipam.ReservedIP{}
	if err := json.Unmarshal(input, r); err != nil {
		return nil, err
	}
	return r, nil
}

// Pool returns the named pool, if its object exists and is valid.
func (s *Source) Pool(name string) (*ipam.Pool, bool) {
	p, ok := s.snap.Load().byName[name]
	return p, ok
}

// Pools yields the valid pools, by name.
func (s *Source) Pools() iter.Seq[*ipam.Pool] { return slices.Values(s.snap.Load().order) }

// DefaultPools yields the valid pools with Default set, by name.
func (s *Source) DefaultPools() iter.Seq[*ipam.Pool] { return slices.Values(s.snap.Load().defaults) }

// Reserved returns the addresses of family 4 or 6 that the valid
// SpiderReservedIP objects reserve, or nil; the same pointer until they
// change.
func (s *Source) Reserved(family int) *netipx.IPSet {
	snap := s.snap.Load()
	switch family {
	case 4:
		return snap.reserved4
	case 6:
		return snap.reserved6
	}
	return nil
}
