package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
)

// errLostLease is returned when this replica led and lost its lease while
// it was not asked to stop.
var errLostLease = errors.New("lost the lease")

// restConfig applies client-go's default loading rules: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, else the pod's service account
// (in-cluster); --context picks a context. It returns the namespace of the
// context (of the pod, in-cluster) too.
func restConfig(c *config) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("kubeconfig: namespace: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(c.qps), c.burst
	cfg.UserAgent = "ipam-controller/" + version()
	return cfg, ns, nil
}

// controller runs until ctx is done (nil), or until it loses its lease
// (errLostLease).
func controller(ctx context.Context, c *config, log *slog.Logger) error {
	cfg, ns, err := restConfig(c)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// The one cache of each kind every part reads. Pods are kept slim:
	// only what garbage collection reads (the subnet runner only counts
	// their deletions).
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithTransform(kubegc.SlimPod))
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, "ipam-controller")

	m := newMetrics()
	st, err := kubestore.New(cfg, kubestore.Options{Logger: log})
	if err != nil {
		return err
	}
	pools, err := kubepools.New(cfg, kubepools.Options{Logger: log, Informers: dynamicInformers(dynFactory), Events: recorder})
	if err != nil {
		return err
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st, Logger: log})
	if err != nil {
		return err
	}
	usage := m.registerUsage(alloc, c.usageInterval)

	var parts []func(context.Context) error
	if c.gc {
		gc, err := kubegc.New(cfg, alloc, kubegc.Options{
			GC: c.gcOptions(), Period: c.gcPeriod, Logger: log,
			Informers: typedInformers(factory), Events: recorder, Observe: m.observeGC,
			// Full passes page through the IPClaims (500 at a time)
			// rather than hold every claim of the cluster.
			Claims: st,
		})
		if err != nil {
			return err
		}
		parts = append(parts, gc.Run)
	}
	var sub *kubesubnet.Runner
	if c.subnet {
		sub, err = kubesubnet.New(cfg, kubesubnet.Options{
			Claims: st, Kinds: c.subnetKinds, Workers: c.subnetWorkers, Logger: log,
			Informers: factory, DynamicInformers: dynFactory, Events: recorder,
		})
		if err != nil {
			return err
		}
		parts = append(parts, sub.Run)
	}
	if c.usage {
		run, err := usageWriter(cfg, c, alloc, usage, sub, dynFactory, recorder, log)
		if err != nil {
			return err
		}
		parts = append(parts, run)
	}

	// Every informer is asked for: start them, for the life of the process.
	factory.Start(ctx.Done())
	dynFactory.Start(ctx.Done())
	defer factory.Shutdown()
	var ready atomic.Bool
	go func() {
		synced := true
		for _, ok := range factory.WaitForCacheSync(ctx.Done()) {
			synced = synced && ok
		}
		for _, ok := range dynFactory.WaitForCacheSync(ctx.Done()) {
			synced = synced && ok
		}
		if synced && ctx.Err() == nil {
			ready.Store(true)
			log.Info("ipam-controller: informers synced")
		}
	}()
	go func() { _ = pools.Run(ctx) }()

	var watchdog *leaderelection.HealthzAdaptor
	if c.leaderElect {
		watchdog = leaderelection.NewLeaderHealthzAdaptor(c.renewDeadline)
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.listen, err)
	}
	srv := &http.Server{Handler: m.handler(&ready, watchdog), ReadHeaderTimeout: 10 * time.Second}
	log.Info("ipam-controller: serving", "addr", ln.Addr().String(), "version", version())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ipam-controller: http", "err", err)
		}
	}()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()

	work := func(ctx context.Context) {
		var wg sync.WaitGroup
		for _, p := range parts {
			wg.Go(func() {
				if err := p(ctx); err != nil && !errors.Is(err, context.Canceled) {
					log.Error("ipam-controller: part stopped", "err", err)
				}
			})
		}
		wg.Wait()
	}
	if !c.leaderElect {
		m.leading.Set(1)
		work(ctx)
		return nil
	}
	return elect(ctx, c, ns, kube, watchdog, m, log, work)
}

// elect runs work while this replica leads. On ctx's end, work stops first
// and the lease is given up after, so that a standby takes over at once and
// no two replicas work at the same time.
func elect(ctx context.Context, c *config, ns string, kube kubernetes.Interface,
	watchdog *leaderelection.HealthzAdaptor, m *metrics, log *slog.Logger, work func(context.Context)) error {
	if c.leaseNamespace != "" {
		ns = c.leaseNamespace
	}
	id := c.identity
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s_%d", host, os.Getpid())
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: c.leaseName},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// electCtx ends after the work has stopped: ReleaseOnCancel then gives
	// the lease up.
	electCtx, cancelElect := context.WithCancel(context.Background())
	defer cancelElect()
	var (
		mu       sync.Mutex
		stopping bool
		working  sync.WaitGroup
	)
	go func() {
		<-ctx.Done()
		mu.Lock()
		stopping = true
		mu.Unlock()
		working.Wait()
		cancelElect()
	}()
	var lost atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   c.leaseDuration,
		RenewDeadline:   c.renewDeadline,
		RetryPeriod:     c.retryPeriod,
		ReleaseOnCancel: true,
		Name:            c.leaseName,
		WatchDog:        watchdog,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if stopping {
					mu.Unlock()
					return
				}
				working.Add(1)
				mu.Unlock()
				defer working.Done()
				log.Info("ipam-controller: leading", "id", id, "lease", ns+"/"+c.leaseName)
				m.leading.Set(1)
				defer m.leading.Set(0)
				wctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(ctx, cancel)()
				work(wctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost.Store(true)
				}
			},
			OnNewLeader: func(leader string) {
				if leader != id {
					log.Info("ipam-controller: standing by", "leader", leader)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	log.Info("ipam-controller: standing for election", "id", id, "lease", ns+"/"+c.leaseName)
	le.Run(electCtx)
	working.Wait()
	if lost.Load() {
		return errLostLease
	}
	return nil
}

// typedInformers gives kubegc the informers of the program's typed factory.
func typedInformers(f informers.SharedInformerFactory) kubeclient.Informers {
	return func(r schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
		i, err := f.ForResource(r)
		if err != nil {
			return nil, err
		}
		return i.Informer(), nil
	}
}

// dynamicInformers gives kubepools the informers of the program's dynamic
// factory (the Spiderpool kinds).
func dynamicInformers(f dynamicinformer.DynamicSharedInformerFactory) kubeclient.Informers {
	return func(r schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
		return f.ForResource(r).Informer(), nil
	}
}
