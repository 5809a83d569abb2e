package kubetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go4.org/netipx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// gcscaleClaims is the number of IPClaims BenchmarkGCScale seeds: small by
// default, so that running every benchmark once stays short; the README's
// figures are at 50,000 and 150,000.
var gcscaleClaims = flag.Int("gcscale.claims", 2000, "IPClaims BenchmarkGCScale seeds")

// The shape of BenchmarkGCScale's cluster.
const (
	gcscaleNS      = "gcscale"
	gcscalePods    = 1000 // the pods that hold the claims, all running
	gcscalePools   = 100  // the claims are spread over this many pools
	gcscaleGone    = 100  // claims of a pod that is gone, released by each pass
	gcscaleApp     = "gcscale-app"
	gcscaleSubnet  = "gcscale-subnet"
	gcscaleChildEV = "KUBETEST_GCSCALE_CHILD" // the kubeconfig of a child
	gcscaleModeEV  = "KUBETEST_GCSCALE_MODE"  // how its kubegc pass lists claims: all or pages
)

// gcscaleResult is what a child measured, as it writes it on stdout.
type gcscaleResult struct {
	GCSeconds     float64 `json:"gcSeconds"`     // one full kubegc pass
	GCJudged      int     `json:"gcJudged"`      // claims it judged
	GCReleased    int     `json:"gcReleased"`    // claims it released
	GCPeakHeap    uint64  `json:"gcPeakHeap"`    // peak HeapInuse above the start's, bytes
	GCAllocated   uint64  `json:"gcAllocated"`   // bytes allocated by the pass
	SubnetSeconds float64 `json:"subnetSeconds"` // a Runner's start (its read of the cluster) and one shrink
	SubnetPeak    uint64  `json:"subnetPeakHeap"`
	SubnetAlloc   uint64  `json:"subnetAllocated"`
	MaxRSS        int64   `json:"maxRSS"` // the child's peak resident set, bytes
}

// BenchmarkGCScale seeds -gcscale.claims IPClaims, spread over 100 pools
// and held by 1,000 running pods, and 100 claims of a pod that is gone; then
// each iteration runs, in a process of its own (so that the API server's
// memory in this one does not count), one full kubegc pass, which judges
// every claim and releases the 100, and one kubesubnet pass: a Runner's
// start (its read of the cluster) and the shrink of an application's
// auto-pool, which reads that pool's claims. It reports each pass's
// seconds, its peak heap above the process's start (MB) and what it
// allocated (MB), and the child's peak resident set.
//
//	go test ./k8s/kubetest -run '^$' -bench BenchmarkGCScale -benchtime 1x -gcscale.claims 50000
func BenchmarkGCScale(b *testing.B) {
	seedStart := time.Now()
	gcscaleSeed(b, *gcscaleClaims)
	b.Logf("seeded %d claims in %v", *gcscaleClaims, time.Since(seedStart).Round(time.Millisecond))
	kubeconfig := kubeconfigFile(b)
	// A full pass over Allocator.Claims (every claim in one list), and over
	// kubegc.IPClaimPages (a page of 500 at a time).
	for _, mode := range []string{"all", "pages"} {
		b.Run("gc="+mode, func(b *testing.B) { gcscaleRun(b, kubeconfig, mode) })
	}
}

// gcscaleRun runs the child of BenchmarkGCScale b.N times, its kubegc pass
// listing claims as mode says (all or pages), and reports what it measured.
func gcscaleRun(b *testing.B, kubeconfig, mode string) {
	ctx := context.Background()
	var sum gcscaleResult
	n := 0
	for b.Loop() {
		b.StopTimer()
		gcscaleGoneClaims(b)
		gcscaleScale(b, 4)
		b.StartTimer()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), gcscaleChildEV+"="+kubeconfig, gcscaleModeEV+"="+mode)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, stderr.String())
		}
		var r gcscaleResult
		if err := json.Unmarshal(out, &r); err != nil {
			b.Fatalf("child's result %q: %v\n%s", out, err, stderr.String())
		}
		if want := *gcscaleClaims + gcscaleGone; r.GCJudged != want || r.GCReleased != gcscaleGone {
			b.Fatalf("the pass judged %d claims and released %d; want %d and %d", r.GCJudged, r.GCReleased, want, gcscaleGone)
		}
		sum.GCSeconds += r.GCSeconds
		sum.GCPeakHeap = max(sum.GCPeakHeap, r.GCPeakHeap)
		sum.GCAllocated += r.GCAllocated
		sum.SubnetSeconds += r.SubnetSeconds
		sum.SubnetPeak = max(sum.SubnetPeak, r.SubnetPeak)
		sum.SubnetAlloc += r.SubnetAlloc
		sum.MaxRSS = max(sum.MaxRSS, r.MaxRSS)
		n++
	}
	const mb = 1 << 20
	b.ReportMetric(sum.GCSeconds/float64(n), "gc-s/pass")
	b.ReportMetric(float64(sum.GCPeakHeap)/mb, "gc-peak-heap-MB")
	b.ReportMetric(float64(sum.GCAllocated)/float64(n)/mb, "gc-alloc-MB/pass")
	b.ReportMetric(sum.SubnetSeconds/float64(n), "subnet-s/pass")
	b.ReportMetric(float64(sum.SubnetPeak)/mb, "subnet-peak-heap-MB")
	b.ReportMetric(float64(sum.SubnetAlloc)/float64(n)/mb, "subnet-alloc-MB/pass")
	b.ReportMetric(float64(sum.MaxRSS)/mb, "child-max-RSS-MB")
}

// gcscaleSeeded is the number of claims seeded so far (the server lives as
// long as the test binary): a second run of the benchmark seeds only what
// is missing.
var gcscaleSeeded int

// gcscaleSeed makes the cluster of BenchmarkGCScale with n claims: the
// namespace, the pods, the subnet and its application, and the claims.
func gcscaleSeed(b *testing.B, n int) {
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	if gcscaleSeeded == 0 {
		emptyBackend(b)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gcscaleNS}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		inWorkers(b, gcscalePods, func(i int) error {
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: gcscaleNS, Name: fmt.Sprint("p-", i)},
				Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "192.0.2.1"}}},
			}
			_, err := cs.CoreV1().Pods(gcscaleNS).Create(ctx, p, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
		sub := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderSubnet",
			"metadata": map[string]any{"name": gcscaleSubnet},
			"spec":     map[string]any{"ipVersion": int64(4), "subnet": "10.250.0.0/16", "ips": []any{"10.250.0.10-10.250.0.200"}},
		}}
		_, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(kubesubnet.SubnetResource).Create(ctx, sub, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
		replicas := int32(4)
		set := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: gcscaleNS, Name: gcscaleApp},
			Spec: appsv1.StatefulSetSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": gcscaleApp}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": gcscaleApp},
						Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["` + gcscaleSubnet + `"]}`}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "c"}}},
				},
			},
		}
		if _, err := cs.AppsV1().StatefulSets(gcscaleNS).Create(ctx, set, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			b.Fatal(err)
		}
	}
	pods := map[int]*corev1.Pod{}
	list, err := cs.CoreV1().Pods(gcscaleNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range list.Items {
		var k int
		if _, err := fmt.Sscanf(list.Items[i].Name, "p-%d", &k); err == nil {
			pods[k] = &list.Items[i]
		}
	}
	st := gcscaleStore(b)
	from := gcscaleSeeded
	start := time.Now()
	defer func() { b.Logf("created %d claims in %v", n-from, time.Since(start).Round(time.Millisecond)) }()
	inWorkers(b, n-from, func(i int) error {
		k := from + i
		p := pods[k%gcscalePods]
		// Pool k%100, address k/100 of 10.0.0.0/8 upwards.
		a := uint32(k / gcscalePools)
		c := store.Claim{Pool: fmt.Sprint("gcscale-", k%gcscalePools), IP: netip.AddrFrom4([4]byte{10, byte(a >> 16), byte(a >> 8), byte(a)}),
			Owner: store.Owner{Namespace: gcscaleNS, Name: p.Name, UID: string(p.UID), Interface: fmt.Sprint("net", k/gcscalePods)},
			Time:  time.Now()}
		_, err := st.Create(ctx, c)
		if errors.Is(err, store.ErrExists) {
			return nil
		}
		return err
	})
	gcscaleSeeded = max(n, gcscaleSeeded)
}

// gcscaleGoneClaims (re)creates the claims of the pod that is gone.
func gcscaleGoneClaims(b *testing.B) {
	st := gcscaleStore(b)
	inWorkers(b, gcscaleGone, func(i int) error {
		c := store.Claim{Pool: "gcscale-gone", IP: netip.AddrFrom4([4]byte{10, 255, 0, byte(i)}),
			Owner: store.Owner{Namespace: gcscaleNS, Name: "gone", UID: "gcscale-gone-uid", Interface: fmt.Sprint("net", i)}, Time: time.Now()}
		_, err := st.Create(context.Background(), c)
		if errors.Is(err, store.ErrExists) {
			return nil
		}
		return err
	})
}

// gcscaleScale sets the replicas of the application.
func gcscaleScale(b testing.TB, replicas int32) {
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	if _, err := cs.AppsV1().StatefulSets(gcscaleNS).Patch(context.Background(), gcscaleApp, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
}

func gcscaleStore(b testing.TB) *kubestore.Store {
	cfg := srv.Config()
	cfg.QPS = -1
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	return st
}

// inWorkers calls f(0..n-1) on 16 goroutines and fails b on the first error.
func inWorkers(b testing.TB, n int, f func(i int) error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && failed.Load() == nil; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// heapWatch samples the heap every 5 ms, from start until stop, and
// returns the peak HeapInuse above the start's and the bytes allocated.
type heapWatch struct {
	stop              chan struct{}
	done              chan struct{}
	base, peak, alloc uint64
}

func watchHeap() *heapWatch {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h := &heapWatch{stop: make(chan struct{}), done: make(chan struct{}), base: m.HeapInuse, peak: m.HeapInuse, alloc: m.TotalAlloc}
	go func() {
		defer close(h.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				var m runtime.MemStats
				runtime.ReadMemStats(&m)
				h.peak = max(h.peak, m.HeapInuse)
			}
		}
	}()
	return h
}

// end stops the sampling; it returns the peak above the start and the
// bytes allocated since.
func (h *heapWatch) end() (peak, allocated uint64) {
	close(h.stop)
	<-h.done
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	h.peak = max(h.peak, m.HeapInuse)
	return h.peak - h.base, m.TotalAlloc - h.alloc
}

// gcscaleChild is the child of BenchmarkGCScale: it runs the two passes on
// the cluster of the kubeconfig in gcscaleChildEV and writes a
// gcscaleResult on stdout.
func gcscaleChild() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "gcscale child:", err)
		return 2
	}
	cfg, err := kubeclient.Config(os.Getenv(gcscaleChildEV))
	if err != nil {
		return fail(err)
	}
	cfg.QPS = -1
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return fail(err)
	}
	cat, err := ipam.NewCatalog()
	if err != nil {
		return fail(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		return fail(err)
	}
	var r gcscaleResult
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()

	// One full kubegc pass: the first, which Run makes once synced.
	passes := make(chan kubegc.Pass, 1)
	opts := kubegc.Options{Period: time.Hour, Observe: func(p kubegc.Pass) {
		select {
		case passes <- p:
		default:
		}
	}}
	if os.Getenv(gcscaleModeEV) == "pages" {
		if opts.Claims, err = kubegc.IPClaimPages(cfg); err != nil {
			return fail(err)
		}
	}
	gc, err := kubegc.New(cfg, alloc, opts)
	if err != nil {
		return fail(err)
	}
	h := watchHeap()
	gctx, stopGC := context.WithCancel(ctx)
	defer stopGC()
	gcDone := make(chan error, 1)
	go func() { gcDone <- gc.Run(gctx) }()
	p := <-passes
	r.GCSeconds = time.Since(p.At).Seconds()
	r.GCPeakHeap, r.GCAllocated = h.end()
	stopGC()
	<-gcDone
	if p.Err != nil {
		return fail(p.Err)
	}
	r.GCJudged, r.GCReleased = p.Judged(), len(p.Released())

	// One kubesubnet pass: the Runner reads the cluster (and grows the
	// application's pool to 5 addresses), then shrinks it to 2, reading
	// its claims first.
	sub, err := kubesubnet.New(cfg, kubesubnet.Options{Claims: st, Kinds: []string{kubesubnet.KindStatefulSet}})
	if err != nil {
		return fail(err)
	}
	h = watchHeap()
	start := time.Now()
	sctx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	subDone := make(chan error, 1)
	go func() { subDone <- sub.Run(sctx) }()
	dyn := dynamic.NewForConfigOrDie(cfg)
	poolSize := func() (int, error) {
		list, err := dyn.Resource(kubesubnet.IPPoolResource).List(ctx, metav1.ListOptions{LabelSelector: subnet.LabelOwnerAppName + "=" + gcscaleApp})
		if err != nil || len(list.Items) == 0 {
			return 0, err
		}
		ips, _, _ := unstructured.NestedStringSlice(list.Items[0].Object, "spec", "ips")
		n := 0
		for _, s := range ips {
			if r, err := netipx.ParseIPRange(s); err == nil {
				n += rangeLen(r)
			} else if _, err := netip.ParseAddr(s); err == nil {
				n++
			}
		}
		return n, nil
	}
	waitSize := func(want int) error {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			n, err := poolSize()
			if err != nil {
				return err
			}
			if n == want {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the auto-pool of %s has %d addresses after 5 minutes, want %d", gcscaleApp, n, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	<-sub.Ready()
	if err := waitSize(5); err != nil {
		return fail(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.AppsV1().StatefulSets(gcscaleNS).Patch(ctx, gcscaleApp, "application/merge-patch+json", []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}); err != nil {
		return fail(err)
	}
	if err := waitSize(2); err != nil {
		return fail(err)
	}
	r.SubnetSeconds = time.Since(start).Seconds()
	r.SubnetPeak, r.SubnetAlloc = h.end()
	stopSub()
	<-subDone

	r.MaxRSS = peakRSS()
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	return 0
}

// peakRSS returns the process's peak resident set (VmHWM), in bytes; 0 if
// it cannot be read. (getrusage's ru_maxrss would not do: Linux keeps it
// across fork and exec, so a child reports its parent's.)
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// rangeLen returns the number of addresses of an IPv4 range.
func rangeLen(r netipx.IPRange) int {
	f, t := r.From().As4(), r.To().As4()
	from := uint32(f[0])<<24 | uint32(f[1])<<16 | uint32(f[2])<<8 | uint32(f[3])
	to := uint32(t[0])<<24 | uint32(t[1])<<16 | uint32(t[2])<<8 | uint32(t[3])
	return int(to-from) + 1
}
