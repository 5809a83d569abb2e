// Command kubecontroller is an IP address controller for a Kubernetes
// cluster, built from the library's parts: it gives every scheduled pod an
// address from the cluster's SpiderIPPools and writes it into the pod's
// annotation ipam.ipamkit.io/addresses, and takes addresses back from pods
// that are gone, as the garbage collection rules say.
//
// The parts, each one call:
//
//   - kubestore.New: the claims, one IPClaim custom resource per address,
//     so that several controllers (or CNI plugins) share the pools safely;
//   - kubepools.New: the pools, followed live from SpiderIPPool and
//     SpiderReservedIP objects;
//   - ipam.NewAllocator with Spread (this replica's name), and
//     Allocator.Follow: the Allocator keeps its view of every pool current
//     with the Store's watch, so its creates seldom meet a taken address,
//     and replicas claim from different parts of a pool;
//   - kubegc.New: the garbage collector, which judges claims against the
//     cluster's pods, StatefulSets and nodes with gc.Decide and
//     releases what it must, once, whichever replica gets there first;
//   - one shared informer factory (client-go's informers package): the
//     controller's pod informer and the garbage collector's are one, so
//     the process keeps one cache of the cluster's pods.
//
// It teaches; the program to deploy for garbage collection and SpiderSubnet
// is cmd/ipam-controller (leader election, health probes, metrics, Events).
//
// Run it against a cluster whose CRDs are installed (the repository's
// k8s/config/crd, and Spiderpool's SpiderIPPool and SpiderReservedIP):
//
//	go run ./examples/kubecontroller --kubeconfig ~/.kube/config
//
// Its test runs it against an API server started in the test process
// (k8s/kubetest).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
)

// Annotation is where the controller writes a pod's addresses: a JSON list
// such as ["10.0.0.5/24"].
const Annotation = "ipam.ipamkit.io/addresses"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig `file` of the cluster; empty: the pod's service account (in-cluster)")
	name := flag.String("name", "", "this replica's `name`, which spreads replicas over each pool; default: the host name")
	flag.Parse()
	if *name == "" {
		*name, _ = os.Hostname()
	}
	cfg, err := kubeclient.Config(*kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// client-go's default of 5 requests per second would allow about two
	// allocations per second: raise it to what the API server gives.
	cfg.QPS, cfg.Burst = 100, 200
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := Run(ctx, cfg, Options{Name: *name, Logger: log}); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("kubecontroller", "err", err)
		os.Exit(1)
	}
}

// Options configure Run.
type Options struct {
	// Name is this replica's name (Allocator's Options.Spread).
	Name string
	// GC tunes the garbage collector; the zero value is Spiderpool's
	// defaults, with a full pass every five minutes.
	GC     kubegc.Options
	Logger *slog.Logger
	// Ready, if set, is called once the controller has synced and serves.
	Ready func()
}

// Run runs the controller until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := kubestore.New(cfg, kubestore.Options{Logger: log})
	if err != nil {
		return err
	}
	pools, err := kubepools.New(cfg, kubepools.Options{Logger: log})
	if err != nil {
		return err
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st, Logger: log, Spread: opts.Name})
	if err != nil {
		return err
	}
	client, err := kubeclient.New(cfg)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// One cache of each kind for every part: the garbage collector takes
	// its pod, StatefulSet and node informers from the factory, and so
	// does the controller its pods.
	factory := informers.NewSharedInformerFactory(kube, 0)
	gcOpts := opts.GC
	gcOpts.Logger = log
	gcOpts.Informers = func(r schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
		i, err := factory.ForResource(r)
		if err != nil {
			return nil, err
		}
		return i.Informer(), nil
	}
	gc, err := kubegc.New(cfg, alloc, gcOpts)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { pools.Run(ctx) })
	wg.Go(func() { alloc.Follow(ctx) })
	wg.Go(func() { gc.Run(ctx) })
	if err := pools.WaitForSync(ctx); err != nil {
		return err
	}

	// The pods to serve: an informer, and a queue of pod keys that retries
	// with a growing delay.
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	pods := factory.Core().V1().Pods().Informer()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && needsAddress(p) {
			if key, err := cache.MetaNamespaceKeyFunc(p); err == nil {
				queue.Add(key)
			}
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done()) // after every part has asked for its informers
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return ctx.Err()
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	c := &controller{alloc: alloc, client: client, pods: pods.GetStore(), log: log}
	wg.Go(func() {
		<-ctx.Done()
		queue.ShutDown()
	})
	for {
		key, shutdown := queue.Get()
		if shutdown {
			return ctx.Err()
		}
		err := c.serve(ctx, key)
		switch {
		case err == nil:
			queue.Forget(key)
		case ctx.Err() == nil:
			log.Warn("kubecontroller: pod not served, will retry", "pod", key, "err", err)
			queue.AddRateLimited(key)
		}
		queue.Done(key)
	}
}

// needsAddress reports whether the controller should give p an address: it
// is scheduled, not finished or terminating, on the pod network, and has
// none yet.
func needsAddress(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && !p.Spec.HostNetwork && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
		p.Annotations[Annotation] == ""
}

// controller serves pods.
type controller struct {
	alloc  *ipam.Allocator
	client *kubeclient.Client
	pods   cache.Store
	log    *slog.Logger
}

// serve gives the pod key its addresses, unless it no longer needs them.
// The allocation is idempotent: a pod served before (its annotation not
// written yet, or a retry) gets what it holds.
func (c *controller) serve(ctx context.Context, key string) error {
	obj, ok, err := c.pods.GetByKey(key)
	if err != nil || !ok {
		return err // gone: the garbage collector takes its addresses back
	}
	pod := obj.(*corev1.Pod)
	if !needsAddress(pod) {
		return nil
	}
	ns, err := c.client.Namespace(ctx, pod.Namespace)
	if err != nil {
		return err
	}
	node, err := c.client.Node(ctx, pod.Spec.NodeName)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.alloc.Allocate(actx, k8s.Request(pod, ns, node))
	if err != nil {
		return err
	}
	var addrs []string
	for _, ip := range res.IPs {
		addrs = append(addrs, ip.Address.String())
	}
	value, err := json.Marshal(addrs)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID, // a pod replaced meanwhile under the name refuses the patch
		"annotations": map[string]string{Annotation: string(value)},
	}})
	if err != nil {
		return err
	}
	err = c.client.Core().Patch(types.MergePatchType).Namespace(pod.Namespace).Resource("pods").Name(pod.Name).
		Body(patch).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("writing the addresses of %s: %w", key, err)
	}
	c.log.Info("kubecontroller: served", "pod", key, "addresses", strings.Join(addrs, ","))
	return nil
}
