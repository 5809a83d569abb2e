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
// Spiderpool's webhook fills in defaults (ipVersion, the merged ips list) and
// refuses invalid objects before they are stored; objects written without it
// (as in tests) must be in that form.
package kubepools

import (
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam"
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
	// Logger receives the objects skipped as invalid. Nil discards them.
	Logger *slog.Logger
}

// Source is an ipam.PoolSource (and ipam.DefaultPoolSource and
// ipam.ReservedSource) that follows a cluster's SpiderIPPool and
// SpiderReservedIP objects. Start it with Run and wait for WaitForSync
// before the first allocation; until then it has no pools.
//
// Each change publishes a new snapshot; a pool whose object did not change
// keeps the same *ipam.Pool, so the Allocator rebuilds only the indexes of
// the pools that changed. The zero Source is not usable; create one with
// New. A *Source is safe for concurrent use.
type Source struct {
	log      *slog.Logger
	factory  dynamicinformer.DynamicSharedInformerFactory
	informer [2]cache.SharedIndexInformer // pools, reserved IPs

	mu       sync.Mutex // orders the updates of the maps below
	pools    map[string]entry[*ipam.Pool]
	reserved map[string]entry[*ipam.ReservedIP]
	snap     atomic.Pointer[snapshot]
}

// entry is what one object gave: its value, or nil if it is invalid.
type entry[T any] struct {
	rv    string
	value T
}

// snapshot is what Source serves between two changes.
type snapshot struct {
	byName               map[string]*ipam.Pool
	order                []*ipam.Pool // by name
	defaults             []*ipam.Pool
	reserved4, reserved6 *netipx.IPSet
}

// New returns a Source reading the cluster cfg names. It does not contact
// the server until Run.
func New(cfg *rest.Config, opts Options) (*Source, error) {
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
		factory:  dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		pools:    map[string]entry[*ipam.Pool]{},
		reserved: map[string]entry[*ipam.ReservedIP]{},
	}
	s.snap.Store(&snapshot{byName: map[string]*ipam.Pool{}})
	for i, gvr := range []schema.GroupVersionResource{IPPoolResource, ReservedIPResource} {
		s.informer[i] = s.factory.ForResource(gvr).Informer()
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

// Run follows the objects until ctx is done, then stops the informers and
// returns ctx's error.
func (s *Source) Run(ctx context.Context) error {
	s.factory.Start(ctx.Done())
	<-ctx.Done()
	s.factory.Shutdown()
	return ctx.Err()
}

// WaitForSync waits until both informers have listed their objects once
// (Run must be running), or ctx is done.
func (s *Source) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), s.informer[0].HasSynced, s.informer[1].HasSynced) {
		return fmt.Errorf("kubepools: waiting for the informers: %w", context.Cause(ctx))
	}
	return nil
}

// update applies one event of informer i.
func (s *Source) update(i int, obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = d.Obj, true
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		s.log.Warn("kubepools: object of unexpected type skipped", "type", fmt.Sprintf("%T", obj))
		return
	}
	name, rv := u.GetName(), u.GetResourceVersion()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i == 0 {
		if deleted {
			delete(s.pools, name)
		} else if old, ok := s.pools[name]; !ok || old.rv != rv {
			p, err := parsePool(u)
			if err != nil {
				s.log.Warn("kubepools: SpiderIPPool skipped", "name", name, "resourceVersion", rv, "err", err)
			}
			s.pools[name] = entry[*ipam.Pool]{rv, p}
		}
	} else {
		if deleted {
			delete(s.reserved, name)
		} else if old, ok := s.reserved[name]; !ok || old.rv != rv {
			r, err := parseReservedIP(u)
			if err != nil {
				s.log.Warn("kubepools: SpiderReservedIP skipped", "name", name, "resourceVersion", rv, "err", err)
			}
			s.reserved[name] = entry[*ipam.ReservedIP]{rv, r}
		}
	}
	s.publish(i == 1)
}

// publish makes a new snapshot of the maps; reservedChanged says whether
// the reserved sets must be made again (else the old pointers are kept).
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
		next.reserved4, next.reserved6 = nonEmpty(ipam.ReservedSet(4, rs)), nonEmpty(ipam.ReservedSet(6, rs))
	}
	s.snap.Store(next)
}

func nonEmpty(s *netipx.IPSet) *netipx.IPSet {
	if s == nil || len(s.Ranges()) == 0 {
		return nil
	}
	return s
}

// parsePool reads a SpiderIPPool: its spec, named after the object, and
// Terminating if the object is being deleted.
func parsePool(u *unstructured.Unstructured) (*ipam.Pool, error) {
	data, err := specJSON(u)
	if err != nil {
		return nil, err
	}
	p, err := ipam.ParsePool(data)
	if err != nil {
		return nil, err
	}
	p.Terminating = u.GetDeletionTimestamp() != nil
	return p, nil
}

// parseReservedIP reads a SpiderReservedIP the same way.
func parseReservedIP(u *unstructured.Unstructured) (*ipam.ReservedIP, error) {
	data, err := specJSON(u)
	if err != nil {
		return nil, err
	}
	r := &ipam.ReservedIP{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, err
	}
	r.Terminating = u.GetDeletionTimestamp() != nil
	return r, nil
}

// specJSON returns u's spec as JSON with the object's name inside, so that
// the parsers' errors name the object.
func specJSON(u *unstructured.Unstructured) ([]byte, error) {
	spec, ok := u.Object["spec"].(map[string]any)
	if !ok {
		return nil, errors.New("spec: missing or not an object")
	}
	withName := make(map[string]any, len(spec)+1)
	for k, v := range spec {
		withName[k] = v
	}
	withName["name"] = u.GetName()
	return json.Marshal(withName)
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
