package kubetest_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
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
// one address; allocs/s is what to compare.
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
		cfg := srv.Config()
		cfg.GroupVersion = &schema.GroupVersion{Group: kubestore.Group, Version: kubestore.Version}
		cfg.APIPath = "/apis"
		cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
		c, err := rest.RESTClientFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
	}
	var seq atomic.Uint32
	inParallel(b, n, func(i int) error {
		k := seq.Add(1)
		ip := netip.AddrFrom4([4]byte{10, 64, byte(k >> 8), byte(k)})
		name, _ := kubestore.ClaimName(pool.Name, ip)
		body := fmt.Sprintf(`{"apiVersion":"ipam.ipamkit.io/v1alpha1","kind":"IPClaim",`+
			`"metadata":{"name":%q,"labels":{%q:%q,%q:"uid-%d",%q:"true"}},`+
			`"spec":{"pool":%q,"ip":%q,"owner":{"namespace":"bench","name":"pod-%d","uid":"uid-%d","interface":"eth0"},"time":"2024-05-01T12:34:56.789Z"}}`,
			name, kubestore.LabelPool, pool.Name, kubestore.LabelUID, k, kubestore.LabelCursor,
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
	allocs := make([]*ipam.Allocator, n)
	for i := range allocs {
		if allocs[i], err = ipam.NewAllocator(ipam.Options{Pools: cat, Store: newStore(b)}); err != nil {
			b.Fatal(err)
		}
	}
	ifaces := []ipam.Interface{{Name: "eth0", Pools: []string{pool.Name}}}
	var seq atomic.Int64
	inParallel(b, n, func(i int) error {
		k := seq.Add(1)
		_, err := allocs[i].Allocate(context.Background(), ipam.Request{
			Namespace: "bench", Name: fmt.Sprint("pod-", k), UID: fmt.Sprint("uid-", k), Interfaces: ifaces,
		})
		return err
	})
}
