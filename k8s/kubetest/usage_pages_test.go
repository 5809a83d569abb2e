package kubetest_test

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubetest"
	"github.com/ipamkit/ipam/store"
)

// selectorLog records the label-selector requests of IPClaims a client
// makes.
type selectorLog struct {
	rt        http.RoundTripper
	mu        *sync.Mutex
	selectors *[]string
}

func (l selectorLog) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.Query(); q.Has("labelSelector") {
		l.mu.Lock()
		*l.selectors = append(*l.selectors, r.URL.Path+"?labelSelector="+q.Get("labelSelector"))
		l.mu.Unlock()
	}
	return l.rt.RoundTrip(r)
}

// TestUsagePagesRequests (issues 27 and 29): Allocator.Usage on a
// kubestore.Store (a store.ClaimPager, no store.Counter) counts the claims
// of its 11 pools with one paged list of every IPClaim, not a
// label-selector list per pool (each of which costs the API server every
// IPClaim of the cluster), and its figures are those a List of each pool
// gives.
func TestUsagePagesRequests(t *testing.T) {
	emptyBackend(t)
	seedClaims(t, 60) // 6 claims in each of the pools seed-0 ... seed-9
	var pools []*ipam.Pool
	for i := range 11 { // seed-10 has no claim
		pools = append(pools, &ipam.Pool{Name: fmt.Sprint("seed-", i),
			Ranges: []ipam.Range{{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 91, byte(i), 0}), 24)}}})
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		t.Fatal(err)
	}

	cfg := srv.Config()
	cfg.UserAgent = "usagepages"
	var mu sync.Mutex
	var selectors []string
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return selectorLog{rt, &mu, &selectors} }
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	lists := kubetest.RequestKind{Agent: "usagepages", Verb: "list", Resource: kubestore.ClaimResource}
	before := srv.RequestCounts()[lists]
	got, err := a.Usage(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.RequestCounts()[lists] - before; n != 1 {
		t.Errorf("Usage of 11 pools made %d lists of IPClaims, want 1 (one page of 60 claims)", n)
	}
	mu.Lock()
	if len(selectors) != 0 {
		t.Errorf("Usage made label-selector requests: %v", selectors)
	}
	mu.Unlock()

	// The figures of a List of each pool, on a Store that shows only
	// store.Store's methods.
	b, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: struct{ store.Store }{newStore(t)}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := b.Usage(t.Context(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 11 || len(want) != 11 {
		t.Fatalf("%d and %d pools' usage, want 11", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("pool %s: usage %+v, a List of it gives %+v", got[i].Pool, got[i], want[i])
		}
		if n := map[bool]int{true: 6, false: 0}[i < 10]; got[i].Allocated != n {
			t.Errorf("pool %s: %d allocated, want %d", got[i].Pool, got[i].Allocated, n)
		}
	}
}
