package kubetest_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// flatN is the number of claims of other owners and pools that
// BenchmarkColdAllocate seeds besides none.
var flatN = flag.Int("flat.n", 2000, "claims of other owners BenchmarkColdAllocate seeds (it also runs with none)")

// requestLog records the requests of the clients it wraps, as "METHOD path"
// with "?labelSelector" when the request has one.
type requestLog struct {
	rt  http.RoundTripper
	mu  *sync.Mutex
	log *[]string
}

func (l requestLog) RoundTrip(r *http.Request) (*http.Response, error) {
	what := r.Method + " " + strings.TrimPrefix(r.URL.Path, "/apis/"+kubestore.Group+"/"+kubestore.Version+"/")
	if r.URL.Query().Has("labelSelector") || r.URL.Query().Has("limit") {
		what += "?list"
	}
	l.mu.Lock()
	*l.log = append(*l.log, what)
	l.mu.Unlock()
	return l.rt.RoundTrip(r)
}

// loggedStore is a Store on the test server whose requests go to log.
func loggedStore(t testing.TB, log *[]string) *kubestore.Store {
	t.Helper()
	cfg := srv.Config()
	cfg.QPS = -1
	var mu sync.Mutex
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return requestLog{rt, &mu, log} }
	s, err := kubestore.New(cfg, kubestore.Options{Node: "flat-node"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// seedClaims creates n IPClaims of other owners, over 10 other pools, by
// raw POSTs as a Store of this version names and labels them (without
// owner indexes: no query here asks for their owners).
func seedClaims(t testing.TB, n int) {
	t.Helper()
	cfg := srv.Config()
	cfg.QPS = -1
	client := rawClient(t, cfg)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				k := next.Add(1) - 1
				if k >= int64(n) {
					return
				}
				ip := netip.AddrFrom4([4]byte{10, 90, byte(k >> 8), byte(k)})
				name, _ := kubestore.ClaimName(ip)
				pool := fmt.Sprint("seed-", k%10)
				body := fmt.Sprintf(`{"apiVersion":"ipam.ipamkit.io/v1alpha1","kind":"IPClaim",`+
					`"metadata":{"name":%q,"labels":{%q:%q,%q:"%x",%q:"seed-%d"}},`+
					`"spec":{"pool":%q,"ip":%q,"owner":{"namespace":"seed","name":"pod-%d","uid":"seed-%d","interface":"eth0"}}}`,
					name, kubestore.LabelPool, pool, kubestore.LabelIP, ip.AsSlice(), kubestore.LabelUID, k, pool, ip, k, k)
				if err := client.Post().Resource(kubestore.ClaimResource).Body([]byte(body)).Do(context.Background()).Error(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("seeding %d claims: %v", n, err)
	}
}

// rawClient is a REST client of kubestore's API group on cfg, for objects
// written by hand.
func rawClient(t testing.TB, cfg *rest.Config) rest.Interface {
	t.Helper()
	cfg.GroupVersion = &schema.GroupVersion{Group: kubestore.Group, Version: kubestore.Version}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// flatPools are the pools of the cold allocations: one per family, as a
// dual-stack pod has.
func flatPools(t testing.TB) *ipam.Catalog {
	t.Helper()
	cat, err := ipam.NewCatalog(
		&ipam.Pool{Name: "flat-v4", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.80.0.0/16")}}},
		&ipam.Pool{Name: "flat-v6", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("fd00:80::/64")}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

// coldCall makes one call the way the CNI plugin does per exec: a fresh
// Store and Allocator. It returns the requests the call made.
func coldCall(t testing.TB, call func(a *ipam.Allocator) error) []string {
	t.Helper()
	var log []string
	a, err := ipam.NewAllocator(ipam.Options{Pools: flatPools(t), Store: loggedStore(t, &log)})
	if err != nil {
		t.Fatal(err)
	}
	if err := call(a); err != nil {
		t.Fatal(err)
	}
	return log
}

// flatRequest is a dual-stack pod's request.
func flatRequest(uid string) ipam.Request {
	return ipam.Request{Namespace: "flat", Name: uid, UID: uid,
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"flat-v4", "flat-v6"}}}}
}

// TestFlatRequests (issue 27): a cold Allocate of a dual-stack pod and its
// Release, each by a fresh Allocator and Store as the CNI plugin makes per
// call, make the same requests with no other claim in the cluster and with
// 2,000 of other owners and pools, and none of them is a list of IPClaims
// (a label-selector list costs the API server every IPClaim in its cache,
// whatever it returns). The requests are logged: kubestore's package
// documentation gives them.
func TestFlatRequests(t *testing.T) {
	emptyBackend(t)
	// The layout check of the cluster's first write (once per cluster)
	// happens here, not in the calls measured.
	coldCall(t, func(a *ipam.Allocator) error {
		_, err := a.Allocate(t.Context(), flatRequest("warm-up"))
		return err
	})
	var kinds [2][2][]string // [N][allocate, release]
	for i, n := range []int{0, 2000} {
		seedClaims(t, n)
		uid := fmt.Sprint("flat-", n)
		kinds[i][0] = coldCall(t, func(a *ipam.Allocator) error {
			_, err := a.Allocate(t.Context(), flatRequest(uid))
			return err
		})
		kinds[i][1] = coldCall(t, func(a *ipam.Allocator) error {
			return a.Release(t.Context(), store.Owner{UID: uid, Interface: "eth0"})
		})
		for k, what := range []string{"Allocate", "Release"} {
			t.Logf("N=%d: cold %s: %d requests: %s", n, what, len(kinds[i][k]), strings.Join(kinds[i][k], ", "))
			for _, r := range kinds[i][k] {
				if strings.HasPrefix(r, "GET "+kubestore.ClaimResource) && (!strings.Contains(r, "/") || strings.HasSuffix(r, "?list")) {
					t.Errorf("N=%d: cold %s lists IPClaims: %s", n, what, r)
				}
				if strings.HasSuffix(r, "?list") {
					t.Errorf("N=%d: cold %s makes a list: %s", n, what, r)
				}
			}
		}
	}
	for k, what := range []string{"Allocate", "Release"} {
		if !slices.Equal(shapes(kinds[0][k]), shapes(kinds[1][k])) {
			t.Errorf("cold %s: requests at N=0 %v, at N=2000 %v: want the same", what, kinds[0][k], kinds[1][k])
		}
	}
}

// shapes returns the requests without the names of the objects (which
// differ between calls), only their method and resource.
func shapes(reqs []string) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		if j := strings.IndexByte(r, '/'); j >= 0 {
			r = r[:j] + "/name"
		}
		out[i] = r
	}
	return out
}

// BenchmarkColdAllocate (issue 27): a cold Allocate of a dual-stack pod and
// its Release, each through a fresh Allocator and Store as the CNI plugin
// makes per call, with no other claim in the cluster and with -flat.n of
// other owners and pools (2,000 by default). ns/op should not grow with N.
func BenchmarkColdAllocate(b *testing.B) {
	for _, n := range []int{0, *flatN} {
		b.Run(fmt.Sprint("N=", n), func(b *testing.B) {
			emptyBackend(b)
			coldCall(b, func(a *ipam.Allocator) error {
				_, err := a.Allocate(context.Background(), flatRequest("warm-up"))
				return err
			})
			seedClaims(b, n)
			var requests int
			i := 0
			for b.Loop() {
				uid := fmt.Sprint("bench-", i)
				i++
				requests += len(coldCall(b, func(a *ipam.Allocator) error {
					_, err := a.Allocate(context.Background(), flatRequest(uid))
					return err
				}))
				requests += len(coldCall(b, func(a *ipam.Allocator) error {
					return a.Release(context.Background(), store.Owner{UID: uid, Interface: "eth0"})
				}))
			}
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
		})
	}
}
