package kubeusage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/internal/eventnote"
	"github.com/ipamkit/ipam/k8s/internal/kubeerr"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/subnet"
)

// The resources whose status a Writer writes.
var (
	IPPoolResource = kubepools.IPPoolResource
	SubnetResource = schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spidersubnets"}
)

// Defaults of Options.
const (
	DefaultInterval       = 10 * time.Second
	DefaultLowFreePercent = 10.0
)

// EventNearlyExhausted is the reason of the Warning Event recorded on a
// SpiderIPPool whose free addresses fall below the threshold.
const EventNearlyExhausted = "PoolNearlyExhausted"

// Options configure a Writer. The zero Options are the usual ones.
type Options struct {
	// Interval is the time between two passes, and so the least time
	// between two status writes of one object. Zero means DefaultInterval.
	Interval time.Duration
	// LowFreePercent is the share of a pool's addresses (capacity less
	// reserved), in per cent, below which its free addresses make it
	// nearly exhausted. Zero means DefaultLowFreePercent; at most 100.
	LowFreePercent float64
	// LowFreeAddresses, if not zero, is the number of free addresses below
	// which a pool is nearly exhausted, whatever its size, instead of
	// LowFreePercent.
	LowFreeAddresses uint64
	// Subnets, if set, returns the SpiderSubnets' counts to write
	// (kubesubnet.Runner.Status); nil or an empty answer writes none.
	Subnets func() []subnet.Status
	// Informers, if set, gives the shared informers of the SpiderIPPools
	// and SpiderSubnets (of a dynamic factory the caller starts after New
	// and stops), which the Writer reads the current counts and the
	// objects' UIDs from. Nil: Run makes and runs informers of its own.
	Informers kubeclient.Informers
	// Events, if set, records the EventNearlyExhausted Events. Nil records
	// none (the threshold is still followed).
	Events kubeclient.EventRecorder
	// Logger receives a line per Event and per failed write. Nil discards
	// them.
	Logger *slog.Logger
	// Observe, if set, is called after each pass of Run with its result.
	Observe func(Pass)
	// Usage, if set, is where a pass reads the pools' usage instead of
	// the Allocator: a reading the caller shares (ipam-controller's
	// metrics cache), so that the Store is read once per interval for
	// both. Its figures may then be up to its own age older.
	Usage UsageSource
}

// UsageSource reports the usage of every pool at a time; *ipam.Allocator
// is one.
type UsageSource interface {
	Usage(ctx context.Context, now time.Time) ([]ipam.Usage, error)
}

// Validate reports whether the options make sense, naming the field and
// its value.
func (o Options) Validate() error {
	var errs []error
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("kubeusage: options: Interval %v: negative", o.Interval))
	}
	if math.IsNaN(o.LowFreePercent) || o.LowFreePercent < 0 || o.LowFreePercent > 100 {
		errs = append(errs, fmt.Errorf("kubeusage: options: LowFreePercent %v: want 0 to 100", o.LowFreePercent))
	}
	return errors.Join(errs...)
}

// Pass is what one pass did.
//
// The zero Pass did nothing. A Pass is a plain value.
type Pass struct {
	// PoolWrites and SubnetWrites count the status writes made.
	PoolWrites, SubnetWrites int
	// Events counts the EventNearlyExhausted Events recorded.
	Events int
	// Err is what failed in the pass (the usage could not be read, writes
	// that failed), nil if nothing did; the next pass tries again.
	Err error
}

// Writer writes the count columns of SpiderIPPools and SpiderSubnets and
// records the Events of nearly exhausted pools; see the package
// documentation.
//
// The zero Writer is not usable; create one with New. A *Writer is safe
// for concurrent use; Run runs once.
type Writer struct {
	usage   UsageSource
	opts    Options
	log     *slog.Logger
	dyn     dynamic.Interface
	shared  bool
	pools   cache.SharedIndexInformer
	subnets cache.SharedIndexInformer

	mu      sync.Mutex // serializes passes; guards low and running
	low     map[string]lowState
	running bool
}

// lowState is whether a pool, of one UID, was last seen nearly exhausted.
type lowState struct {
	uid types.UID
	low bool
}

// New returns a Writer of the usage of alloc's pools, on the cluster cfg
// names. It does not contact the server until Run.
func New(cfg *rest.Config, alloc *ipam.Allocator, opts Options) (*Writer, error) {
	if alloc == nil {
		return nil, errors.New("kubeusage: nil *ipam.Allocator")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.LowFreePercent == 0 {
		opts.LowFreePercent = DefaultLowFreePercent
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeusage: %w", err)
	}
	w := &Writer{usage: alloc, opts: opts, log: log, dyn: dyn, shared: opts.Informers != nil, low: map[string]lowState{}}
	if opts.Usage != nil {
		w.usage = opts.Usage
	}
	informer := func(gvr schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
		if w.shared {
			return opts.Informers(gvr)
		}
		return kubeclient.DynamicInformer(dyn, gvr), nil
	}
	if w.pools, err = informer(IPPoolResource); err != nil {
		return nil, fmt.Errorf("kubeusage: the informer of %s: %w", IPPoolResource.Resource, err)
	}
	if opts.Subnets != nil {
		if w.subnets, err = informer(SubnetResource); err != nil {
			return nil, fmt.Errorf("kubeusage: the informer of %s: %w", SubnetResource.Resource, err)
		}
	}
	return w, nil
}

// Run makes a pass once the informers have synced and one every
// Options.Interval after, until ctx is done; it then returns ctx's error.
func (w *Writer) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("kubeusage: Run called twice")
	}
	w.running = true
	w.mu.Unlock()
	synced := []cache.InformerSynced{w.pools.HasSynced}
	if w.subnets != nil {
		synced = append(synced, w.subnets.HasSynced)
	}
	if !w.shared {
		var wg sync.WaitGroup
		defer wg.Wait()
		ictx, cancel := context.WithCancel(ctx)
		defer cancel()
		wg.Go(func() { w.pools.RunWithContext(ictx) })
		if w.subnets != nil {
			wg.Go(func() { w.subnets.RunWithContext(ictx) })
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		p := w.Sync(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if p.Err != nil {
			w.log.Warn("kubeusage: pass failed in part; the next tries again", "err", p.Err)
		}
		if w.opts.Observe != nil {
			w.opts.Observe(p)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Sync makes one pass now: it reads every pool's usage, writes the counts
// that changed and records the Events of pools that crossed the threshold.
// Run must be running and synced (the pass reads its informers' caches);
// Run makes passes itself, so call this only to force one.
func (w *Writer) Sync(ctx context.Context) Pass {
	w.mu.Lock()
	defer w.mu.Unlock()
	var p Pass
	var errs []error
	usage, err := w.usage.Usage(ctx, time.Now())
	if err != nil {
		// Nothing is known of any pool: keep what was known of each, so
		// that a pass that fails does not record their Events again.
		p.Err = fmt.Errorf("kubeusage: reading the pools' usage: %w", err)
		return p
	}
	seen := map[string]bool{}
	for _, u := range usage {
		obj := cached(w.pools, u.Pool)
		if obj == nil {
			continue // a pool of the PoolSource that is no SpiderIPPool
		}
		seen[u.Pool] = true
		total, _ := u.Capacity.Uint64()
		wrote, err := w.writeCounts(ctx, IPPoolResource, obj, int64(u.Allocated), clamp(total))
		if err != nil {
			errs = append(errs, err)
		}
		if wrote {
			p.PoolWrites++
		}
		if w.follow(obj, u) {
			p.Events++
		}
	}
	for name := range w.low {
		if !seen[name] {
			delete(w.low, name)
		}
	}
	if w.opts.Subnets != nil {
		for _, st := range w.opts.Subnets() {
			obj := cached(w.subnets, st.Name)
			if obj == nil {
				continue
			}
			wrote, err := w.writeCounts(ctx, SubnetResource, obj, st.AllocatedIPCount, st.TotalIPCount)
			if err != nil {
				errs = append(errs, err)
			}
			if wrote {
				p.SubnetWrites++
			}
		}
	}
	p.Err = errors.Join(errs...)
	return p
}

// cached returns the object of that name in inf's cache, nil if none.
func cached(inf cache.SharedIndexInformer, name string) *unstructured.Unstructured {
	obj, ok, err := inf.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// clamp returns n as an int64, math.MaxInt64 if it is larger (an IPv6
// pool wider than a /65), as subnet.StatusOf does.
func clamp(n uint64) int64 {
	if n > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n)
}

// writeCounts writes obj's status.allocatedIPCount and status.totalIPCount
// through the status subresource, unless the object has them already, and
// reports whether it wrote.
func (w *Writer) writeCounts(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured, allocated, total int64) (bool, error) {
	a, aok, _ := unstructured.NestedInt64(obj.Object, "status", "allocatedIPCount")
	t, tok, _ := unstructured.NestedInt64(obj.Object, "status", "totalIPCount")
	if aok && tok && a == allocated && t == total {
		return false, nil
	}
	patch := fmt.Appendf(nil, `{"status":{"allocatedIPCount":%d,"totalIPCount":%d}}`, allocated, total)
	_, err := w.dyn.Resource(gvr).Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return false, fmt.Errorf("kubeusage: writing the counts of %s %s: %w", gvr.Resource, obj.GetName(), kubeerr.Wrap(ctx, err))
	}
	return true, nil
}

// follow updates the threshold state of pool obj from its usage u, records
// the Event if it just crossed the threshold, and reports whether it did.
func (w *Writer) follow(obj *unstructured.Unstructured, u ipam.Usage) bool {
	st := w.low[u.Pool]
	if st.uid != obj.GetUID() {
		st = lowState{uid: obj.GetUID()}
	}
	low, recovered := w.opts.level(u)
	crossed := low && !st.low
	switch {
	case crossed:
		st.low = true
	case st.low && recovered:
		st.low = false
	}
	w.low[u.Pool] = st
	if !crossed {
		return false
	}
	usable := u.Capacity.Big()
	usable.Sub(usable, u.Reserved.Big())
	note := eventnote.Sprintf("pool %s (IPv%d, %s) is nearly exhausted: %s of %s addresses free (threshold: %s); %d allocated, %s reserved",
		u.Pool, u.Family, u.Subnet, u.Free, usable, w.opts.threshold(), u.Allocated, u.Reserved)
	w.log.Warn("kubeusage: "+note, "pool", u.Pool)
	if w.opts.Events == nil {
		return false
	}
	w.opts.Events.Eventf(obj, nil, corev1.EventTypeWarning, EventNearlyExhausted, "Allocate", "%s", note)
	return true
}

// threshold says the threshold in words.
func (o Options) threshold() string {
	if o.LowFreeAddresses > 0 {
		return fmt.Sprintf("fewer than %d free", o.LowFreeAddresses)
	}
	return fmt.Sprintf("fewer than %v %% free", o.LowFreePercent)
}

// level reports whether u's free addresses are below the threshold (low),
// and whether they are back at one and a half times it, and at least one
// address above it (recovered). A pool that can hand out nothing is never
// low.
func (o Options) level(u ipam.Usage) (low, recovered bool) {
	usable := u.Capacity.Big()
	usable.Sub(usable, u.Reserved.Big())
	if usable.Sign() <= 0 {
		return false, true
	}
	var limit *big.Rat
	if o.LowFreeAddresses > 0 {
		limit = new(big.Rat).SetInt(new(big.Int).SetUint64(o.LowFreeAddresses))
	} else {
		pct := o.LowFreePercent
		if pct == 0 {
			pct = DefaultLowFreePercent
		}
		p := new(big.Rat).SetFloat64(pct)
		limit = p.Mul(p, new(big.Rat).SetFrac(usable, big.NewInt(100)))
	}
	free := new(big.Rat).SetInt(u.Free.Big())
	low = free.Cmp(limit) < 0
	back := new(big.Rat).Mul(limit, big.NewRat(3, 2))
	if plusOne := new(big.Rat).Add(limit, big.NewRat(1, 1)); plusOne.Cmp(back) > 0 {
		back = plusOne
	}
	return low, free.Cmp(back) >= 0
}
