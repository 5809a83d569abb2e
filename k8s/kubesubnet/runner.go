package kubesubnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/internal/eventnote"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// Kinds of applications a Runner follows (Options.Kinds).
const (
	KindDeployment  = "Deployment"
	KindReplicaSet  = "ReplicaSet"
	KindStatefulSet = "StatefulSet"
	KindDaemonSet   = "DaemonSet"
	KindJob         = "Job"
	KindCronJob     = "CronJob"
)

// Options configure a Runner.
type Options struct {
	// Claims is the Store the cluster's allocators claim addresses in (a
	// kubestore.Store). Required: a pool shrinks, and is deleted, only once
	// the Store shows that no pod holds the addresses it gives back, and
	// those addresses are claimed there first, so that no allocator takes
	// one meanwhile.
	Claims store.Store
	// Lock elects the one replica that writes pools (client-go leader
	// election); the others wait to take over. Nil runs without an
	// election: then run exactly one Runner.
	Lock resourcelock.Interface
	// LeaseDuration, RenewDeadline and RetryPeriod time the election;
	// zero means 15 s, 10 s and 2 s, client-go's usual values.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Kinds are the kinds of applications followed: the apps/v1 and
	// batch/v1 controllers of the Kind constants. Empty means all six; the
	// API server must serve each kind named.
	Kinds []string
	// Workers is how many application changes are applied at once; zero
	// means 8. Changes of one subnet are applied one at a time whatever
	// their number (see subnet.Manager).
	Workers int
	// SyncPeriod is how often what waits (a pool waiting for free addresses
	// or for a write that failed, a shrink waiting for pods) is retried
	// besides when pods are deleted; zero means 10 s.
	SyncPeriod time.Duration
	// WriteTimeout bounds each write to the API server; zero means 10 s.
	WriteTimeout time.Duration
	// AutoPool tunes the decisions (the default pool size).
	AutoPool subnet.Options
	// Logger receives what the Runner does and what fails. Nil discards it.
	Logger *slog.Logger
	// Informers and DynamicInformers, if set, are the shared informer
	// factories the Runner takes its informers from: the applications'
	// and the pods' from Informers, the SpiderSubnets', SpiderIPPools' and
	// SpiderReservedIPs' from DynamicInformers; so that a program whose
	// other parts follow the same kinds keeps one cache of each. New asks
	// the factories for those informers; the caller starts the factories
	// after New and stops them. Each term of leading adds its event
	// handlers and removes them when it ends. Set both or neither; nil:
	// each term of leading makes and runs informers of its own.
	Informers        informers.SharedInformerFactory
	DynamicInformers dynamicinformer.DynamicSharedInformerFactory
	// Events, if set, records a Warning Event on the application whose
	// auto-pool must wait (reason EventAutoPoolWaiting: the subnet has too
	// few free addresses, pods still hold the addresses a shrink gives
	// back, ...) or cannot be made (EventAutoPoolFailed), with the reason
	// in its note. Nil records none.
	Events events.EventRecorder
}

// Reasons of the Events a Runner records (Options.Events).
const (
	EventAutoPoolWaiting = "AutoPoolWaiting"
	EventAutoPoolFailed  = "AutoPoolFailed"
)

func (o *Options) defaults() {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 15 * time.Second
	}
	if o.RenewDeadline == 0 {
		o.RenewDeadline = 10 * time.Second
	}
	if o.RetryPeriod == 0 {
		o.RetryPeriod = 2 * time.Second
	}
	if len(o.Kinds) == 0 {
		o.Kinds = []string{KindDeployment, KindReplicaSet, KindStatefulSet, KindDaemonSet, KindJob, KindCronJob}
	}
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.SyncPeriod == 0 {
		o.SyncPeriod = 10 * time.Second
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Runner runs SpiderSubnet on a live cluster: it follows the applications,
// and creates, resizes and deletes their auto-pools as SpiderIPPool objects,
// by the decisions of a subnet.Manager (subnet.Decide's rules).
// See the package documentation.
//
// A Runner is safe for concurrent use. Create one with New; the zero Runner
// is not usable.
type Runner struct {
	opts Options
	dyn  dynamic.Interface
	kube kubernetes.Interface
	meta metadata.Interface
	log  *slog.Logger

	// mu is held for reading by each operation on m, and for writing to
	// replace m: so no write of an old manager lands after a new one has
	// read the cluster.
	mu         sync.RWMutex
	m          *subnet.Manager // nil when not leading
	subnetUIDs map[string]types.UID

	objMu   sync.Mutex
	objects map[string]*unstructured.Unstructured // auto-pools as last written, by name

	extMu    sync.Mutex
	external map[string]subnet.Application // set by SetApplication, by UID

	leading   sync.Mutex // held while lead runs
	readyOnce sync.Once
	ready     chan struct{}
}

// New returns a Runner for the cluster cfg names. It does not contact the
// server until Run.
func New(cfg *rest.Config, opts Options) (*Runner, error) {
	if opts.Claims == nil {
		return nil, &ipam.FieldError{Object: "kubesubnet options", Field: "Claims", Reason: "required: the Store the cluster's allocators use"}
	}
	if err := opts.AutoPool.Validate(); err != nil {
		return nil, err
	}
	for _, k := range opts.Kinds {
		if _, ok := kindResource[k]; !ok {
			return nil, &ipam.FieldError{Object: "kubesubnet options", Field: "Kinds", Value: k, Reason: "not a kind SpiderSubnet follows"}
		}
	}
	if (opts.Informers == nil) != (opts.DynamicInformers == nil) {
		return nil, &ipam.FieldError{Object: "kubesubnet options", Field: "Informers", Reason: "set Informers and DynamicInformers both, or neither"}
	}
	opts.defaults()
	if opts.LeaseDuration <= opts.RenewDeadline || opts.RenewDeadline <= opts.RetryPeriod {
		return nil, &ipam.FieldError{Object: "kubesubnet options", Field: "LeaseDuration",
			Value: opts.LeaseDuration.String(), Reason: fmt.Sprintf("want LeaseDuration > RenewDeadline (%s) > RetryPeriod (%s)", opts.RenewDeadline, opts.RetryPeriod)}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesubnet: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesubnet: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubesubnet: %w", err)
	}
	r := &Runner{opts: opts, dyn: dyn, kube: kube, meta: meta, log: opts.Logger,
		objects: map[string]*unstructured.Unstructured{}, external: map[string]subnet.Application{}, ready: make(chan struct{})}
	if opts.Informers != nil {
		// Asked for now, so that the caller's Start starts them.
		if _, err := r.informers(opts.Informers, opts.DynamicInformers, nil); err != nil {
			return nil, fmt.Errorf("kubesubnet: %w", err)
		}
	}
	return r, nil
}

// followed are the informers a term of leading follows.
type followed struct {
	apps    map[string]informers.GenericInformer // by kind
	cluster map[schema.GroupVersionResource]cache.SharedIndexInformer
	pods    cache.SharedIndexInformer
}

// informers returns the informers of the factories; the pods' from kube
// when meta is nil.
func (r *Runner) informers(kube informers.SharedInformerFactory, dyn dynamicinformer.DynamicSharedInformerFactory,
	meta metadatainformer.SharedInformerFactory) (*followed, error) {
	f := &followed{apps: map[string]informers.GenericInformer{}, cluster: map[schema.GroupVersionResource]cache.SharedIndexInformer{}}
	for _, kind := range r.opts.Kinds {
		inf, err := kube.ForResource(kindResource[kind])
		if err != nil {
			return nil, fmt.Errorf("following %s: %w", kind, err)
		}
		f.apps[kind] = inf
	}
	for _, gvr := range []schema.GroupVersionResource{SubnetResource, IPPoolResource, ReservedIPResource} {
		f.cluster[gvr] = dyn.ForResource(gvr).Informer()
	}
	podsResource := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if meta != nil {
		f.pods = meta.ForResource(podsResource).Informer()
	} else {
		f.pods = kube.Core().V1().Pods().Informer()
	}
	return f, nil
}

// kindResource maps the kinds followed to their resources.
var kindResource = map[string]schema.GroupVersionResource{
	KindDeployment:  {Group: "apps", Version: "v1", Resource: "deployments"},
	KindReplicaSet:  {Group: "apps", Version: "v1", Resource: "replicasets"},
	KindStatefulSet: {Group: "apps", Version: "v1", Resource: "statefulsets"},
	KindDaemonSet:   {Group: "apps", Version: "v1", Resource: "daemonsets"},
	KindJob:         {Group: "batch", Version: "v1", Resource: "jobs"},
	KindCronJob:     {Group: "batch", Version: "v1", Resource: "cronjobs"},
}

// Run runs the Runner until ctx is done, and returns ctx's error. With a
// Lock, it writes only while it leads, and stands by otherwise; a Runner
// that loses the lead stops writing at once and stands for election again.
func (r *Runner) Run(ctx context.Context) error {
	if r.opts.Lock == nil {
		r.lead(ctx)
		return ctx.Err()
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            r.opts.Lock,
			LeaseDuration:   r.opts.LeaseDuration,
			RenewDeadline:   r.opts.RenewDeadline,
			RetryPeriod:     r.opts.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            "kubesubnet",
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { r.lead(ctx) },
				OnStoppedLeading: func() { r.log.Info("kubesubnet: not leading", "id", r.opts.Lock.Identity()) },
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
	}
	// The last lead may still be stopping: wait for it.
	r.leading.Lock()
	defer r.leading.Unlock()
	return ctx.Err()
}

// Ready is closed once this Runner leads for the first time and has read
// the cluster: from then on it reacts to every change.
func (r *Runner) Ready() <-chan struct{} { return r.ready }

// Status returns every subnet's status, as this Runner's manager has it
// (subnet.StatusOf); nil when it does not lead.
func (r *Runner) Status() []subnet.Status {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.m == nil {
		return nil
	}
	return r.m.Status()
}

// AutoPools returns every auto-pool, as this Runner's manager has it; nil
// when it does not lead.
func (r *Runner) AutoPools() []*subnet.AutoPool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.m == nil {
		return nil
	}
	return r.m.AutoPools()
}

// SetApplication records an application the Runner does not follow itself
// (a third-party controller, such as an OpenKruise CloneSet, with its replica
// count from its scale subresource, or a kind left out of Options.Kinds), and
// applies it at once if this Runner leads: its decisions are returned, and
// the error joins theirs (see subnet.Manager.SetApplication). Call it on
// every replica, for every change: the record outlives a change of leader and
// is part of each reading of the cluster, so its pools are never taken for an
// orphan's.
func (r *Runner) SetApplication(ctx context.Context, app subnet.Application) ([]subnet.Decision, error) {
	if err := app.Validate(); err != nil {
		return nil, err
	}
	r.extMu.Lock()
	r.external[app.UID] = app
	r.extMu.Unlock()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.m == nil {
		return nil, nil
	}
	return r.m.SetApplication(ctx, app)
}

// DeleteApplication forgets an application recorded with SetApplication
// and, if this Runner leads, reclaims its pools at once
// (subnet.Manager.DeleteApplication).
func (r *Runner) DeleteApplication(ctx context.Context, ref ipam.AppRef) ([]subnet.Decision, error) {
	r.extMu.Lock()
	delete(r.external, ref.UID)
	r.extMu.Unlock()
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.m == nil {
		return nil, nil
	}
	return r.m.DeleteApplication(ctx, ref)
}

// Queue keys.
const (
	keyRebuild = "rebuild"
	keySync    = "sync"
	keyApp     = "app/" // then kind/namespace/name
)

// opTimeout bounds the handling of one application or one Sync: its
// decisions, the Store's claims they read and write, and the pool writes.
const opTimeout = time.Minute

// leader is what one term of leading holds.
type leader struct {
	r       *Runner
	queue   workqueue.TypedRateLimitingInterface[string]
	listers map[string]cache.GenericLister // by kind

	mu   sync.Mutex
	apps map[string]ipam.AppRef // the application each key had when last applied
	// built reports that the manager has been built once this term: events
	// before that are in the first build.
	built bool
}

// lead writes pools until ctx is done.
func (r *Runner) lead(ctx context.Context) {
	r.leading.Lock()
	defer r.leading.Unlock()
	if ctx.Err() != nil {
		return
	}
	r.log.Info("kubesubnet: leading")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	l := &leader{r: r, listers: map[string]cache.GenericLister{}, apps: map[string]ipam.AppRef{},
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	shared := r.opts.Informers != nil
	kubeFactory, dynFactory := r.opts.Informers, r.opts.DynamicInformers
	var metaFactory metadatainformer.SharedInformerFactory
	if !shared {
		kubeFactory = informers.NewSharedInformerFactory(r.kube, 0)
		dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(r.dyn, 0)
		metaFactory = metadatainformer.NewSharedInformerFactory(r.meta, 0)
	}
	f, err := r.informers(kubeFactory, dynFactory, metaFactory)
	if err != nil {
		r.log.Error("kubesubnet: cannot follow the cluster", "err", err)
		return
	}
	var synced []cache.InformerSynced
	var removers []func()
	defer func() {
		for _, remove := range removers {
			remove()
		}
	}()
	follow := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandler) error {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return err
		}
		removers = append(removers, func() { _ = inf.RemoveEventHandler(reg) })
		synced = append(synced, inf.HasSynced)
		return nil
	}
	for _, kind := range r.opts.Kinds {
		l.listers[kind] = f.apps[kind].Lister()
		if err := follow(f.apps[kind].Informer(), l.appHandler(kind)); err != nil {
			r.log.Error("kubesubnet: cannot follow", "kind", kind, "err", err)
			return
		}
	}
	for _, gvr := range []schema.GroupVersionResource{SubnetResource, IPPoolResource, ReservedIPResource} {
		if err := follow(f.cluster[gvr], l.clusterHandler(gvr)); err != nil {
			r.log.Error("kubesubnet: cannot follow", "resource", gvr.Resource, "err", err)
			return
		}
	}
	// A pod that goes may have given addresses back: what waits for that is
	// retried (one Sync for any number of deletions queued meanwhile).
	if err := follow(f.pods, cache.ResourceEventHandlerFuncs{DeleteFunc: func(any) {
		l.queue.Add(keySync)
	}}); err != nil {
		r.log.Error("kubesubnet: cannot follow pods", "err", err)
		return
	}

	if !shared {
		kubeFactory.Start(ctx.Done())
		dynFactory.Start(ctx.Done())
		metaFactory.Start(ctx.Done())
	}
	defer func() {
		l.queue.ShutDown()
		cancel()
		if !shared {
			kubeFactory.Shutdown()
			dynFactory.Shutdown()
			metaFactory.Shutdown()
		}
		r.mu.Lock()
		r.m = nil
		r.mu.Unlock()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return
	}
	for ctx.Err() == nil {
		err := l.rebuild(ctx)
		if err == nil {
			break
		}
		r.log.Error("kubesubnet: cannot read the cluster; retried", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.opts.RetryPeriod):
		}
	}
	r.readyOnce.Do(func() { close(r.ready) })

	var wg sync.WaitGroup
	for range r.opts.Workers {
		wg.Go(func() {
			for l.work(ctx) {
			}
		})
	}
	tick := time.NewTicker(r.opts.SyncPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.queue.ShutDown()
			wg.Wait()
			return
		case <-tick.C:
			l.queue.Add(keySync)
		}
	}
}

func metaAccessor(obj any) (metav1.Object, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("object of type %T", obj)
	}
	return m, nil
}

// appHandler queues the changes of one kind of application.
func (l *leader) appHandler(kind string) cache.ResourceEventHandler {
	add := func(obj any) {
		m, err := metaAccessor(obj)
		if err != nil {
			return
		}
		key := keyApp + kind + "/" + m.GetNamespace() + "/" + m.GetName()
		l.queue.Add(key)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, obj any) { add(obj) }, DeleteFunc: add}
}

// clusterHandler queues a rebuild when subnets, pools written by hand or
// reserved addresses change. The auto-pools are this Runner's to write; it
// does not follow their events.
func (l *leader) clusterHandler(gvr schema.GroupVersionResource) cache.ResourceEventHandler {
	changed := func(obj any) {
		m, err := metaAccessor(obj)
		if err != nil {
			return
		}
		if gvr == IPPoolResource {
			if _, auto := m.GetLabels()[subnet.LabelOwnerAppName]; auto {
				return
			}
		}
		l.mu.Lock()
		built := l.built
		l.mu.Unlock()
		if built {
			l.queue.Add(keyRebuild)
		}
	}
	update := func(old, obj any) {
		if onlyStatus(old, obj) {
			return
		}
		changed(obj)
	}
	return cache.ResourceEventHandlerFuncs{AddFunc: changed, UpdateFunc: update, DeleteFunc: changed}
}

// onlyStatus reports whether the update from old to obj leaves alone what a
// rebuild reads (spec, labels, annotations, finalizers, deletion): a status
// write (kubeusage's count columns, at most once per interval) or a resync
// is not worth reading the cluster again. A CRD with a status subresource
// moves metadata.generation on every change of its spec.
func onlyStatus(old, obj any) bool {
	a, err := metaAccessor(old)
	if err != nil {
		return false
	}
	b, err := metaAccessor(obj)
	if err != nil {
		return false
	}
	return a.GetGeneration() == b.GetGeneration() &&
		maps.Equal(a.GetLabels(), b.GetLabels()) && maps.Equal(a.GetAnnotations(), b.GetAnnotations()) &&
		slices.Equal(a.GetFinalizers(), b.GetFinalizers()) &&
		a.GetDeletionTimestamp().Equal(b.GetDeletionTimestamp())
}

// work handles one key of the queue; false once the queue is shut down.
func (l *leader) work(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	var err error
	switch key {
	case keyRebuild:
		err = l.rebuild(ctx)
	case keySync:
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err = l.withManager(func(m *subnet.Manager) error {
			ds, err := m.Sync(octx)
			l.logDecisions(ds)
			return err
		})
		cancel()
	default:
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		err = l.app(octx, key)
		cancel()
	}
	if err != nil && ctx.Err() == nil {
		l.r.log.Warn("kubesubnet: retried", "key", key, "err", err)
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

// withManager runs f with the current manager, under the read lock.
func (l *leader) withManager(f func(*subnet.Manager) error) error {
	l.r.mu.RLock()
	defer l.r.mu.RUnlock()
	if l.r.m == nil {
		return errors.New("no manager")
	}
	return f(l.r.m)
}

func (l *leader) logDecisions(ds []subnet.Decision) {
	for _, d := range ds {
		switch d.Action {
		case subnet.Keep, subnet.Skip:
			continue
		case subnet.Fail, subnet.Wait:
			l.r.log.Warn("kubesubnet: "+d.String(), "pool", d.PoolName())
			l.r.recordWait(&d)
		default:
			l.r.log.Info("kubesubnet: "+d.String(), "pool", d.PoolName())
		}
	}
}

// recordWait records the Event of a decision that waits or fails, on its
// application.
func (r *Runner) recordWait(d *subnet.Decision) {
	if r.opts.Events == nil || d.App.Name == "" {
		return
	}
	reason := EventAutoPoolWaiting
	if d.Action == subnet.Fail {
		reason = EventAutoPoolFailed
	}
	app := &corev1.ObjectReference{APIVersion: d.App.APIVersion, Kind: d.App.Kind, Namespace: d.App.Namespace,
		Name: d.App.Name, UID: types.UID(d.App.UID)}
	r.opts.Events.Eventf(app, nil, corev1.EventTypeWarning, reason, "AllocatePool", "%s", eventnote.Sprintf("%s", d.String()))
}

// app applies the application of key (app/kind/namespace/name): its
// current object, or its deletion.
func (l *leader) app(ctx context.Context, key string) error {
	kind, nsName, _ := strings.Cut(key[len(keyApp):], "/")
	ns, name, _ := strings.Cut(nsName, "/")
	if l.listers[kind] == nil {
		return nil
	}
	obj, err := l.listers[kind].ByNamespace(ns).Get(name)
	var app subnet.Application
	live := false
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		m, ok := obj.(metav1.Object)
		if !ok {
			return nil
		}
		app, live, err = k8s.Application(m)
		if err != nil {
			l.r.log.Warn("kubesubnet: skipped", "key", key, "err", err)
			return nil
		}
	}
	l.mu.Lock()
	was, had := l.apps[key]
	if live {
		l.apps[key] = app.AppRef
	} else {
		delete(l.apps, key)
	}
	l.mu.Unlock()
	return l.withManager(func(m *subnet.Manager) error {
		if had && (!live || was.UID != app.UID) {
			ds, err := m.DeleteApplication(ctx, was)
			l.logDecisions(ds)
			if err != nil {
				return err
			}
		}
		if !live {
			return nil
		}
		ds, err := m.SetApplication(ctx, app)
		l.logDecisions(ds)
		if err != nil && errors.Is(err, ipam.ErrNotReady) {
			return nil // waits: retried on Sync and when pods go
		}
		if err != nil {
			l.r.log.Warn("kubesubnet: "+app.AppRef.String()+" gets no pool", "err", err)
		}
		return nil
	})
}

// rebuild reads the subnets, pools and reserved addresses with consistent
// lists, makes a new manager of them, and applies every application of the
// informers' caches to it (subnet.Manager.Resync), while no other
// operation runs.
func (l *leader) rebuild(ctx context.Context) error {
	r := l.r
	r.mu.Lock()
	defer r.mu.Unlock()
	l.mu.Lock()
	l.built = true
	l.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, r.opts.WriteTimeout)
	defer cancel()
	var (
		subnets  []*subnet.Subnet
		manual   []*ipam.Pool
		auto     []*subnet.AutoPool
		reserved []*ipam.ReservedIP
	)
	uids := map[string]types.UID{}
	list, err := r.dyn.Resource(SubnetResource).List(lctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing SpiderSubnets: %w", err)
	}
	// Oldest first: of two subnets that overlap (which Spiderpool's webhook
	// refuses), the one made first is kept.
	slices.SortStableFunc(list.Items, func(a, b unstructured.Unstructured) int {
		return a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time)
	})
	for i := range list.Items {
		u := &list.Items[i]
		s, err := Subnet(u)
		if err == nil {
			err = subnet.ValidateAll(append(slices.Clip(subnets), s), nil)
		}
		if err != nil {
			r.log.Warn("kubesubnet: SpiderSubnet skipped", "name", u.GetName(), "err", err)
			continue
		}
		subnets = append(subnets, s)
		uids[s.Name] = u.GetUID()
	}
	list, err = r.dyn.Resource(IPPoolResource).List(lctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing SpiderIPPools: %w", err)
	}
	objects := map[string]*unstructured.Unstructured{}
	for i := range list.Items {
		u := &list.Items[i]
		p, a, err := Pool(u)
		switch {
		case err != nil:
			r.log.Warn("kubesubnet: SpiderIPPool skipped", "name", u.GetName(), "err", err)
		case a != nil && uids[a.Subnet] != "":
			auto = append(auto, a)
			objects[u.GetName()] = u
		default:
			// A pool written by hand, or an auto-pool of a subnet skipped:
			// its addresses stay taken, and nothing resizes it.
			manual = append(manual, p)
		}
	}
	list, err = r.dyn.Resource(ReservedIPResource).List(lctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing SpiderReservedIPs: %w", err)
	}
	for i := range list.Items {
		u := &list.Items[i]
		res, err := ReservedIP(u)
		if err != nil {
			r.log.Warn("kubesubnet: SpiderReservedIP skipped", "name", u.GetName(), "err", err)
			continue
		}
		reserved = append(reserved, res)
	}
	m, err := subnet.NewManager(subnet.ManagerOptions{
		Subnets: subnets, Pools: manual, AutoPools: auto, Reserved: reserved,
		Claims: r.opts.Claims, AutoPool: r.opts.AutoPool, Logger: r.log, Apply: r.write,
	})
	if err != nil {
		return fmt.Errorf("the cluster's subnets and pools do not go together: %w", err)
	}
	r.objMu.Lock()
	r.objects = objects
	r.subnetUIDs = uids
	r.objMu.Unlock()

	var apps []subnet.Application
	keys := map[string]ipam.AppRef{}
	for _, kind := range r.opts.Kinds {
		objs, err := l.listers[kind].List(labels.Everything())
		if err != nil {
			return err
		}
		for _, obj := range objs {
			mo, ok := obj.(metav1.Object)
			if !ok {
				continue
			}
			app, isApp, err := k8s.Application(mo)
			if err != nil || !isApp {
				continue
			}
			apps = append(apps, app)
			keys[keyApp+kind+"/"+mo.GetNamespace()+"/"+mo.GetName()] = app.AppRef
		}
	}
	r.extMu.Lock()
	for _, app := range r.external {
		apps = append(apps, app)
	}
	r.extMu.Unlock()
	slices.SortFunc(apps, func(a, b subnet.Application) int { return compareApps(a.AppRef, b.AppRef) })
	r.m = m
	ds, err := m.Resync(ctx, apps)
	l.logDecisions(ds)
	l.mu.Lock()
	l.apps = keys
	l.mu.Unlock()
	r.log.Info("kubesubnet: read the cluster", "subnets", len(subnets), "pools", len(manual), "autoPools", len(auto), "applications", len(apps))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil && !errors.Is(err, ipam.ErrNotReady) {
		r.log.Warn("kubesubnet: some applications get no pool", "err", err)
	}
	return nil
}

func compareApps(a, b ipam.AppRef) int {
	for _, c := range [...][2]string{{a.Namespace, b.Namespace}, {a.Name, b.Name}, {a.Kind, b.Kind}, {a.UID, b.UID}} {
		if c[0] != c[1] {
			if c[0] < c[1] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// write writes one decision as SpiderIPPool objects (subnet.Manager's
// Apply), each call bounded by WriteTimeout.
func (r *Runner) write(ctx context.Context, d *subnet.Decision) error {
	ctx, cancel := context.WithTimeout(ctx, r.opts.WriteTimeout)
	defer cancel()
	pools := r.dyn.Resource(IPPoolResource)
	name := d.PoolName()
	switch d.Action {
	case subnet.Create:
		r.objMu.Lock()
		uid := r.subnetUIDs[d.Subnet]
		r.objMu.Unlock()
		obj, err := PoolObject(d.Pool, uid)
		if err != nil {
			return err
		}
		out, err := pools.Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating SpiderIPPool %q: %w", name, err)
		}
		r.remember(name, out)
		return nil
	case subnet.Grow, subnet.Shrink, subnet.Update:
		return r.update(ctx, d.Pool, func(cur, want *unstructured.Unstructured) {
			cur.Object["spec"] = want.Object["spec"]
			cur.SetLabels(want.GetLabels())
			cur.SetAnnotations(want.GetAnnotations())
		})
	case subnet.Terminate:
		// The finalizer keeps the object, now with a deletionTimestamp:
		// allocators see it terminating.
		cur, err := r.object(ctx, name)
		if err != nil {
			return err
		}
		rv := cur.GetResourceVersion()
		err = pools.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		r.remember(name, nil)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting SpiderIPPool %q: %w", name, err)
		}
		return nil
	case subnet.Delete:
		err := r.update(ctx, d.Pool, func(cur, _ *unstructured.Unstructured) {
			cur.SetFinalizers(slices.DeleteFunc(cur.GetFinalizers(), func(f string) bool { return f == subnet.Finalizer }))
		})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = pools.Delete(ctx, name, metav1.DeleteOptions{})
		r.remember(name, nil)
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting SpiderIPPool %q: %w", name, err)
		}
		return nil
	}
	return nil
}

// update changes the object of auto-pool a with change (given the object as
// it is and as a would write it) and writes it at the resourceVersion it was
// read at; on a conflict it reads the object again and tries once more.
func (r *Runner) update(ctx context.Context, a *subnet.AutoPool, change func(cur, want *unstructured.Unstructured)) error {
	name := a.Name()
	r.objMu.Lock()
	uid := r.subnetUIDs[a.Subnet]
	r.objMu.Unlock()
	want, err := PoolObject(a, uid)
	if err != nil {
		return err
	}
	for try := 0; ; try++ {
		cur, err := r.object(ctx, name)
		if err != nil {
			return err
		}
		next := cur.DeepCopy()
		change(next, want)
		out, err := r.dyn.Resource(IPPoolResource).Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) && try == 0 {
			r.remember(name, nil)
			continue
		}
		if err != nil {
			return fmt.Errorf("updating SpiderIPPool %q: %w", name, err)
		}
		r.remember(name, out)
		return nil
	}
}

// object returns the object of the auto-pool named name, as last written,
// or read from the server.
func (r *Runner) object(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	r.objMu.Lock()
	u := r.objects[name]
	r.objMu.Unlock()
	if u != nil {
		return u, nil
	}
	u, err := r.dyn.Resource(IPPoolResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading SpiderIPPool %q: %w", name, err)
	}
	r.remember(name, u)
	return u, nil
}

// remember keeps u as the object of the pool named name; nil forgets it.
func (r *Runner) remember(name string, u *unstructured.Unstructured) {
	r.objMu.Lock()
	defer r.objMu.Unlock()
	if u == nil {
		delete(r.objects, name)
		return
	}
	r.objects[name] = u
}
