package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubeusage"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// statusWrites counts the changes the API server makes to object name of
// gvr (its status writes, as nothing else writes it) from now until t ends.
func statusWrites(t *testing.T, gvr schema.GroupVersionResource, name string) *atomic.Int64 {
	t.Helper()
	w, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(gvr).Watch(t.Context(),
		metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			if e.Type == watch.Modified {
				n.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		w.Stop()
		<-done
	})
	return &n
}

// counts returns the status counts of object name of gvr on the server.
func counts(t *testing.T, gvr schema.GroupVersionResource, name string) (allocated, total int64) {
	t.Helper()
	_, u := spiderObject(t, gvr, name)
	allocated, _, _ = unstructured.NestedInt64(u.Object, "status", "allocatedIPCount")
	total, _, _ = unstructured.NestedInt64(u.Object, "status", "totalIPCount")
	return allocated, total
}

// nearlyExhaustedEvents counts the PoolNearlyExhausted Events of pool on the
// server (an Event repeated with the same note is one object whose series
// counts the repeats).
func nearlyExhaustedEvents(t *testing.T, cs kubernetes.Interface, pool string) int {
	t.Helper()
	n := 0
	for _, e := range eventsOf(t, cs, "default") {
		if e.Regarding.Kind == "SpiderIPPool" && e.Regarding.Name == pool && e.Reason == kubeusage.EventNearlyExhausted && e.Type == "Warning" {
			if e.Series != nil {
				n += int(e.Series.Count)
			} else {
				n++
			}
		}
	}
	return n
}

// TestUsageWriter runs a kubeusage.Writer against the server, beside an
// Allocator on live SpiderIPPools: the pool's count columns appear and
// follow allocations and releases, a burst of allocations is written a few
// times, not once each; the PoolNearlyExhausted Event is on the server once
// per crossing of the threshold (not again while the pool stays low or
// hovers below the recovery mark), and again after the pool recovered; a
// SpiderSubnet's counts are written as Options.Subnets gives them.
func TestUsageWriter(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	const pool, sub = "usage-a", "usage-s"
	// 40 addresses: nearly exhausted below 4 free (10 %), recovered at 6.
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", pool, map[string]any{
		"ipVersion": int64(4), "subnet": "10.81.0.0/24", "ips": []any{"10.81.0.10-10.81.0.49"},
	})
	applySpider(t, kubeusage.SubnetResource, "SpiderSubnet", sub, map[string]any{
		"ipVersion": int64(4), "subnet": "10.81.0.0/16", "ips": []any{"10.81.0.10-10.81.0.109"},
	})
	t.Cleanup(func() {
		deleteSpiderObjects(t, kubepools.IPPoolResource, pool)
		deleteSpiderObjects(t, kubeusage.SubnetResource, sub)
	})
	poolWrites := statusWrites(t, kubepools.IPPoolResource, pool)

	var log syncBuffer
	src := runSource(t, &log)
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	bctx, stopEvents := context.WithCancel(context.Background())
	t.Cleanup(stopEvents)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(bctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broadcaster.Shutdown)

	var subnetAllocated atomic.Int64
	subnetAllocated.Store(40)
	var passes, patches atomic.Int64
	const interval = time.Second
	w, err := kubeusage.New(srv.Config(), alloc, kubeusage.Options{
		Interval: interval,
		Events:   broadcaster.NewRecorder(scheme.Scheme, "kubeusagetest"),
		Subnets: func() []subnet.Status {
			return []subnet.Status{{Name: sub, TotalIPCount: 100, AllocatedIPCount: subnetAllocated.Load()}}
		},
		Observe: func(p kubeusage.Pass) {
			if p.Err != nil {
				t.Logf("pass: %v", p.Err)
			}
			patches.Add(int64(p.PoolWrites + p.SubnetWrites))
			passes.Add(1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	// settled waits until the pool's counts are allocated of 40, then for
	// two more passes, so that what a pass would write or record is done.
	settled := func(allocated int64) {
		t.Helper()
		waitFor(t, fmt.Sprintf("allocatedIPCount %d, totalIPCount 40", allocated), func() bool {
			a, tot := counts(t, kubepools.IPPoolResource, pool)
			return a == allocated && tot == 40
		})
		p := passes.Load()
		waitFor(t, "two passes", func() bool { return passes.Load() >= p+2 })
	}
	owner := func(i int) store.Owner { return store.Owner{UID: fmt.Sprint("usage-uid-", i)} }
	allocate := func(from, to int) { // owners [from, to), 4 at a time
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, to-from)
		next := atomic.Int64{}
		next.Store(int64(from))
		for range 4 {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < to; i = int(next.Add(1) - 1) {
					_, err := alloc.Allocate(ctx, ipam.Request{Namespace: "default", Name: fmt.Sprint("usage-", i), UID: owner(i).UID,
						Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}})
					if err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	release := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := alloc.Release(ctx, owner(i)); err != nil {
				t.Fatal(err)
			}
		}
	}

	// The columns appear on an empty pool, and on the subnet.
	settled(0)
	waitFor(t, "the subnet's counts", func() bool {
		a, tot := counts(t, kubeusage.SubnetResource, sub)
		return a == 40 && tot == 100
	})

	// A burst of 30 allocations: a few writes, at most one per interval.
	before := poolWrites.Load()
	start := time.Now()
	allocate(0, 30)
	elapsed := time.Since(start)
	settled(30)
	writes := poolWrites.Load() - before
	t.Logf("30 allocations in %v: %d status writes", elapsed.Round(time.Millisecond), writes)
	if limit := int64(elapsed/interval) + 3; writes > limit || writes >= 15 {
		t.Errorf("30 allocations in %v made %d status writes; want at most one per %v interval (%d) and far fewer than 30",
			elapsed, writes, interval, limit)
	}
	// Quiet: nothing changes, nothing is written.
	before, sent := poolWrites.Load(), patches.Load()
	p := passes.Load()
	waitFor(t, "three passes", func() bool { return passes.Load() >= p+3 })
	if n, m := poolWrites.Load()-before, patches.Load()-sent; n != 0 || m != 0 {
		t.Errorf("%d status writes (%d patches sent) while the counts stayed put", n, m)
	}
	if n := nearlyExhaustedEvents(t, cs, pool); n != 0 {
		t.Errorf("%d PoolNearlyExhausted Events with 10 of 40 free", n)
	}

	// 37 allocated, 3 free: below 4, one Event.
	allocate(30, 37)
	settled(37)
	waitFor(t, "the PoolNearlyExhausted Event", func() bool { return nearlyExhaustedEvents(t, cs, pool) == 1 })
	// Lower still (2 free), then up to 5 (below the recovery mark, 6) and
	// down to 3 again: no second Event.
	allocate(37, 38)
	settled(38)
	release(35, 38)
	settled(35)
	allocate(35, 37)
	settled(37)
	if n := nearlyExhaustedEvents(t, cs, pool); n != 1 {
		t.Errorf("%d PoolNearlyExhausted Events after the pool stayed low; want 1", n)
	}
	// Recovered (7 free), then low again (2 free): a second Event.
	release(33, 37)
	settled(33)
	allocate(33, 38)
	settled(38)
	waitFor(t, "a second PoolNearlyExhausted Event", func() bool { return nearlyExhaustedEvents(t, cs, pool) == 2 })

	// Releases follow: all gone, the column says 0.
	release(0, 38)
	settled(0)

	// The subnet's counts follow what Subnets says.
	subnetAllocated.Store(55)
	waitFor(t, "the subnet's new count", func() bool {
		a, _ := counts(t, kubeusage.SubnetResource, sub)
		return a == 55
	})
}

// failingList is a Store whose List and ClaimPages fail while fail is set:
// what Allocator.PoolUsage and Allocator.Usage count with on kubestore.
type failingList struct {
	*kubestore.Store
	fail atomic.Bool
}

func (s *failingList) List(ctx context.Context, pool string) ([]store.Claim, error) {
	if s.fail.Load() {
		return nil, errors.New("kubetest: list refused")
	}
	return s.Store.List(ctx, pool)
}

func (s *failingList) ClaimPages(ctx context.Context, size int, page func([]store.Claim) error) error {
	if s.fail.Load() {
		return errors.New("kubetest: list refused")
	}
	return s.Store.ClaimPages(ctx, size, page)
}

// TestUsageWriterUnreadable: passes that cannot read the usage record no
// Event and forget nothing: a pool nearly exhausted before them is not
// announced again after them. (A failed pass dropped every pool's state,
// so the next pass announced the pool again.)
func TestUsageWriterUnreadable(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	const pool = "usage-unread"
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", pool, map[string]any{
		"ipVersion": int64(4), "subnet": "10.82.0.0/24", "ips": []any{"10.82.0.10-10.82.0.13"},
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, pool) })
	var log syncBuffer
	src := runSource(t, &log)
	agent, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := agent.Allocate(ctx, ipam.Request{Namespace: "default", Name: fmt.Sprint("unread-", i), UID: fmt.Sprint("unread-uid-", i),
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}}); err != nil {
			t.Fatal(err)
		}
	}
	st := &failingList{Store: newStore(t)}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	rec := &countingRecorder{}
	w, err := kubeusage.New(srv.Config(), alloc, kubeusage.Options{Interval: time.Hour, Events: rec})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// Run's first pass announces the pool (no address free); the others
	// are forced by Sync (the interval is an hour).
	waitFor(t, "the Event of the exhausted pool", func() bool { return rec.n.Load() == 1 })
	st.fail.Store(true)
	for range 2 {
		if p := w.Sync(ctx); p.Err == nil {
			t.Fatal("a pass read the usage through a Store that fails")
		}
	}
	st.fail.Store(false)
	if p := w.Sync(ctx); p.Err != nil {
		t.Fatal(p.Err)
	}
	if n := rec.n.Load(); n != 1 {
		t.Errorf("%d Events of a pool that stayed exhausted through passes that could not read the usage; want 1", n)
	}
}

// countingRecorder counts the Events recorded.
type countingRecorder struct{ n atomic.Int64 }

func (r *countingRecorder) Eventf(runtime.Object, runtime.Object, string, string, string, string, ...any) {
	r.n.Add(1)
}

// countedUsage is a kubeusage.UsageSource that counts its readings.
type countedUsage struct {
	src kubeusage.UsageSource
	n   atomic.Int32
}

func (c *countedUsage) Usage(ctx context.Context, now time.Time) ([]ipam.Usage, error) {
	c.n.Add(1)
	return c.src.Usage(ctx, now)
}

// TestUsageWriterSource: with Options.Usage, a pass reads the usage from
// that source (ipam-controller's metrics cache, shared with the scrapes),
// not from the Allocator a second time.
func TestUsageWriterSource(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	var log syncBuffer
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: runSource(t, &log), Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	src := &countedUsage{src: alloc}
	w, err := kubeusage.New(srv.Config(), alloc, kubeusage.Options{Interval: time.Hour, Usage: src})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitFor(t, "the first pass's reading", func() bool { return src.n.Load() == 1 })
	if p := w.Sync(ctx); p.Err != nil {
		t.Fatal(p.Err)
	}
	if n := src.n.Load(); n != 2 {
		t.Fatalf("the source was read %d times in two passes, want 2", n)
	}
}
