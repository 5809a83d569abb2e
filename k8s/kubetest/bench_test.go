package kubetest_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// benchAllocators is the number of Allocators (and of raw clients) of the
// parallel benchmarks.
const benchAllocators = 8

// benchSeq numbers the pools of the benchmarks, so that every run starts on
// a fresh pool.
var benchSeq atomic.Int64

// BenchmarkClaims compares, in one run on one server, allocations through
// ipam.Allocator over kubestore with raw creates of the same IPClaim objects
// (one POST each, the body built the way kubestore builds it), with one
// client and with benchAllocators clients on one shared pool. Each op is
// one address; allocs/s is what to compare. The Allocators follow the
// Store and have Spread values of their own; creates/op, reads/op (Get,
// List, Owned, Cursor) and checks/op (OwnedAtLeast) count their Store
// calls, requests/op their HTTP requests but the watch's.
func BenchmarkClaims(b *testing.B) {
	for _, n := range []int{1, benchAllocators} {
		b.Run(fmt.Sprintf("raw-create/%d", n), func(b *testing.B) { benchRawCreate(b, n) })
		b.Run(fmt.Sprintf("allocate/%d", n), func(b *testing.B) { benchAllocate(b, n) })
	}
}

// benchPool returns a fresh pool: a /16, so that no run fills it.
func benchPool(b *testing.B) *ipam.Pool {
	emptyBackend(b)
	return &ipam.Pool{
		Name:   fmt.Sprintf("bench-%d", benchSeq.Add(1)),
		Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.64.0.0/16")}},
	}
}

// inParallel runs op on n goroutines, goroutine i passing i, until b has
// done b.N ops, and reports allocs/s. With n == 1 it runs b.Loop.
func inParallel(b *testing.B, n int, op func(i int) error) {
	b.ReportAllocs()
	if n == 1 {
		for b.Loop() {
			if err := op(0); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		b.SetParallelism((n + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		var next atomic.Int64
		b.ResetTimer() // b.Loop does this itself
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)-1) % n
			for pb.Next() {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "allocs/s")
}

func benchRawCreate(b *testing.B, n int) {
	pool := benchPool(b)
	clients := make([]rest.Interface, n)
	for i := range clients {
		clients[i] = rawClient(b, srv.Config())
	}
	var seq atomic.Uint32
	inParallel(b, n, func(i int) error {
		k := seq.Add(1)
		ip := netip.AddrFrom4([4]byte{10, 64, byte(k >> 8), byte(k)})
		name, _ := kubestore.ClaimName(ip)
		body := fmt.Sprintf(`{"apiVersion":"ipam.ipamkit.io/v1alpha1","kind":"IPClaim",`+
			`"metadata":{"name":%q,"labels":{%q:%q,%q:"%x",%q:"uid-%d"}},`+
			`"spec":{"pool":%q,"ip":%q,"owner":{"namespace":"bench","name":"pod-%d","uid":"uid-%d","interface":"eth0"},"time":"2024-05-01T12:34:56.789Z"}}`,
			name, kubestore.LabelPool, pool.Name, kubestore.LabelIP, ip.AsSlice(), kubestore.LabelUID, k,
			pool.Name, ip, k, k)
		return clients[i].Post().Resource(kubestore.ClaimResource).Body([]byte(body)).Do(context.Background()).Error()
	})
}

func benchAllocate(b *testing.B, n int) {
	pool := benchPool(b)
	cat, err := ipam.NewCatalog(pool)
	if err != nil {
		b.Fatal(err)
	}
	// Each Allocator has a Store (a client) of its own, and follows the
	// Store's watch, as long-lived Allocators sharing a pool should: it then
	// knows what the others claim and seldom probes a taken address.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	allocs := make([]*ipam.Allocator, n)
	var calls requestCount
	var requests atomic.Int64
	for i := range allocs {
		st := &countingStore{Store: newCountingStore(b, &requests), n: &calls}
		if allocs[i], err = ipam.NewAllocator(ipam.Options{Pools: cat, Store: st, Spread: fmt.Sprint("agent-", i)}); err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { allocs[i].Follow(ctx) })
	}
	ifaces := []ipam.NIC{{Name: "eth0", Pools: []string{pool.Name}}}
	var seq atomic.Int64
	allocate := func(i int) error {
		k := seq.Add(1)
		_, err := allocs[i].Allocate(context.Background(), ipam.Request{
			Namespace: "bench", Name: fmt.Sprint("pod-", k), UID: fmt.Sprint("uid-", k), Interfaces: ifaces,
		})
		return err
	}
	// Outside the timer, each Allocator loads the pool (its cursor) with a
	// first allocation: the figures are of Allocators at work.
	for i := range allocs {
		if err := allocate(i); err != nil {
			b.Fatal(err)
		}
	}
	calls.creates.Store(0)
	calls.reads.Store(0)
	calls.checks.Store(0)
	requests.Store(0)
	inParallel(b, n, allocate)
	b.ReportMetric(float64(calls.creates.Load())/float64(b.N), "creates/op")
	b.ReportMetric(float64(calls.reads.Load())/float64(b.N), "reads/op")
	b.ReportMetric(float64(calls.checks.Load())/float64(b.N), "checks/op")
	b.ReportMetric(float64(requests.Load())/float64(b.N), "requests/op")
}

// requestCount counts the Store calls of Allocators.
type requestCount struct {
	creates atomic.Int64 // Create and CreateAndSetCursor, won or lost
	reads   atomic.Int64 // Get, List, Owned and Cursor
	checks  atomic.Int64 // OwnedAtLeast, from the watch or the server
}

// countingStore is a kubestore.Store that counts the calls an Allocator
// makes, keeping every capability of the Store.
type countingStore struct {
	*kubestore.Store
	n *requestCount
}

func (s *countingStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.n.creates.Add(1)
	return s.Store.Create(ctx, c)
}

func (s *countingStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	s.n.creates.Add(1)
	return s.Store.CreateAndSetCursor(ctx, c)
}

func (s *countingStore) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	s.n.reads.Add(1)
	return s.Store.Get(ctx, pool, ip)
}

func (s *countingStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.n.reads.Add(1)
	return s.Store.List(ctx, pool)
}

func (s *countingStore) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	s.n.reads.Add(1)
	return s.Store.Owned(ctx, q)
}

func (s *countingStore) OwnedAtLeast(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, error) {
	s.n.checks.Add(1)
	return s.Store.OwnedAtLeast(ctx, q, rev)
}

func (s *countingStore) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	s.n.reads.Add(1)
	return s.Store.Cursor(ctx, pool)
}

// BenchmarkOwned measures one Owned on a quiet server, and right after a
// write to another resource (a namespace): the API server then serves the
// consistent list only once its watch cache of IPClaims has caught up with
// etcd's revision, which, without a write of an IPClaim to carry it there,
// takes a progress notification from etcd, requested every 100 ms.
// OwnedAtLeast, at the revision of a claim written just before the
// namespace, is served as soon as the cache has that claim.
func BenchmarkOwned(b *testing.B) {
	emptyBackend(b)
	s := newStore(b)
	q := store.ByUID("nobody")
	b.Run("quiet", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Owned(b.Context(), q); err != nil {
				b.Fatal(err)
			}
		}
	})
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	// writeElsewhere creates a claim and then a namespace, and returns the
	// claim's revision.
	i := 0
	writeElsewhere := func(b *testing.B) int64 {
		i++
		k := benchSeq.Add(1)
		c, err := s.Create(b.Context(), store.Claim{Pool: "owned", IP: netip.AddrFrom4([4]byte{10, 65, byte(k >> 8), byte(k)}),
			Owner: store.Owner{UID: fmt.Sprint("owned-", k)}})
		if err != nil {
			b.Fatal(err)
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bench-owned-%d-%d", k, i)}}
		if _, err := cs.CoreV1().Namespaces().Create(b.Context(), ns, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		return c.Revision
	}
	b.Run("after-write-elsewhere", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			writeElsewhere(b)
			b.StartTimer()
			if _, err := s.Owned(b.Context(), q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("at-least-after-write-elsewhere", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			rev := writeElsewhere(b)
			b.StartTimer()
			if _, err := s.OwnedAtLeast(b.Context(), q, rev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
