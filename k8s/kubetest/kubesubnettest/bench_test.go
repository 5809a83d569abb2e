package kubesubnettest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go4.org/netipx"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/subnet"
)

// Spiderpool's figures for its issue #1375: 100 Deployments of 10 replicas
// on one /16 SpiderSubnet, about half of the addresses pre-allocated after 11
// minutes, most (about 1,058) after 19.
const (
	spiderpoolHalfReady = 11 * time.Minute
	spiderpoolMostReady = 19 * time.Minute
)

var allocateAll = flag.Bool("kubesubnet.allocate-all", false,
	"BenchmarkRunnerAutoPools: allocate every pod's address in the 1000x10 case too (10,000 IPClaim objects); the 100x10 case always does")

// benchRound counts the benchmark's rounds, to give each its own subnet.
var benchRound atomic.Int32

// BenchmarkRunnerAutoPools creates apps StatefulSets of replicas pods each
// (the apps/v1 kind the test server serves; the runner treats every native
// kind alike), every one with the subnet annotation of one /16 subnet and
// "+1", and runs the Runner against the real API server: each iteration
// measures from the first StatefulSet's create until the last pool, a
// SpiderIPPool with all its replicas + 1 addresses, is seen by a watch
// (pools-ready-s), and reports how many times less that is than
// Spiderpool's 19 minutes for its 100 x 10 case (x-vs-spiderpool-19min) and
// its 11 minutes for half of it (x-vs-spiderpool-half-11min). For 100 x 10
// (and 1000 x 10 with -kubesubnet.allocate-all) it then allocates every
// pod's address through an agent's Allocator (IPClaim objects, pools from
// kubepools, the auto-pool found by kubesubnet.Pools) and reports the time
// until the last one (all-allocated-s, from the first create).
func BenchmarkRunnerAutoPools(b *testing.B) {
	for _, n := range []struct{ apps, replicas int }{{100, 10}, {1000, 10}} {
		b.Run(fmt.Sprintf("%dx%d", n.apps, n.replicas), func(b *testing.B) {
			r, _ := startRunner(b, kubesubnet.Options{})
			alloc := n.apps <= 100 || *allocateAll
			var a *agent
			if alloc {
				a = startAgent(b)
			}
			var ready, done time.Duration
			var retries int64
			iters := 0
			b.ReportAllocs()
			for b.Loop() {
				round := benchRound.Add(1)
				subnet := fmt.Sprintf("bench-%d", round)
				ns := subnet
				cidr := fmt.Sprintf("10.%d.0.0/16", 100+round)
				createSubnet(b, subnet, cidr, fmt.Sprintf("10.%d.0.2-10.%d.255.254", 100+round, 100+round), "")
				eventually(b, "the runner reads the new subnet", func() (bool, string) {
					for _, s := range r.Status() {
						if s.Name == subnet {
							return true, ""
						}
					}
					return false, mustJSON(r.Status())
				})
				seen := watchPools(b, subnet, n.replicas+1, n.apps)

				start := time.Now()
				apps := createApps(b, ns, subnet, n.apps, int32(n.replicas))
				var last time.Time
				select {
				case last = <-seen:
				case <-time.After(10 * time.Minute):
					b.Fatalf("not every pool ready after 10 minutes: %s", mustJSON(r.Status()))
				}
				ready += last.Sub(start)
				if alloc {
					retries += allocateAllPods(b, a, apps, subnet, n.replicas)
					done += time.Since(start)
				}
				iters++
			}
			b.ReportMetric(ready.Seconds()/float64(iters), "pools-ready-s")
			b.ReportMetric(spiderpoolMostReady.Seconds()/(ready.Seconds()/float64(iters)), "x-vs-spiderpool-19min")
			b.ReportMetric(spiderpoolHalfReady.Seconds()/(ready.Seconds()/float64(iters)), "x-vs-spiderpool-half-11min")
			if alloc {
				b.ReportMetric(done.Seconds()/float64(iters), "all-allocated-s")
				b.ReportMetric(float64(retries)/float64(iters), "not-ready-retries")
			}
		})
	}
}

// watchPools follows the SpiderIPPools of subnet and sends the time it first
// sees want pools of size addresses each.
func watchPools(b *testing.B, subnetName string, size, want int) <-chan time.Time {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn(b), 0, metav1.NamespaceAll, func(o *metav1.ListOptions) {
		o.LabelSelector = subnet.LabelOwnerSubnet + "=" + subnetName
	})
	inf := f.ForResource(kubesubnet.IPPoolResource).Informer()
	out := make(chan time.Time, 1)
	var mu sync.Mutex
	full := map[string]bool{}
	count := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		p, _, err := kubesubnet.Pool(u)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || poolSize(p) != size {
			delete(full, u.GetName())
			return
		}
		full[u.GetName()] = true
		if len(full) == want {
			select {
			case out <- time.Now():
			default:
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, o any) { count(o) }}); err != nil {
		b.Fatal(err)
	}
	f.Start(ctx.Done())
	b.Cleanup(func() { cancel(); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the watch of the pools did not sync")
	}
	return out
}

func poolSize(p *ipam.Pool) int {
	var bld netipx.IPSetBuilder
	for _, r := range p.IPs {
		bld.AddRange(r)
	}
	set, _ := bld.IPSet()
	n := 0
	for _, r := range set.Ranges() {
		for ip := r.From(); r.Contains(ip); ip = ip.Next() {
			n++
		}
	}
	return n
}

// createApps creates n StatefulSets in namespace ns, 8 at a time, as a user
// applying manifests would.
func createApps(b *testing.B, ns, subnetName string, n int, replicas int32) []ipam.AppRef {
	b.Helper()
	apps := make([]ipam.AppRef, n)
	c := kube(b).AppsV1().StatefulSets(ns)
	ann := subnetAnn(subnetName, subnet.AnnotationIPNumber, "+1")
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				s := statefulSetObject(ns, fmt.Sprintf("app-%04d", i), replicas, ann)
				out, err := c.Create(context.Background(), s, metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				apps[i] = appOf(out)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return apps
}

// allocateAllPods allocates the address of every pod of apps, 8 at a time.
// A pod whose pool the agent has not seen yet is tried again 10 ms later, as
// the kubelet retries a CNI ADD; it returns how many times that happened.
func allocateAllPods(b *testing.B, a *agent, apps []ipam.AppRef, subnet string, replicas int) int64 {
	b.Helper()
	var next, retries atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	total := len(apps) * replicas
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < total; i = int(next.Add(1)) - 1 {
				app := apps[i/replicas]
				req := request(app.Namespace, fmt.Sprintf("%s-%d", app.Name, i%replicas), app, subnetAnn(subnet))
				for {
					_, err := a.alloc.Allocate(context.Background(), req)
					if errors.Is(err, ipam.ErrNotReady) {
						retries.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return retries.Load()
}
