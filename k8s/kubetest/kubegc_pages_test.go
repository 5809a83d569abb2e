package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// A *kubestore.Store lists a full pass's claims in pages.
var _ store.ClaimPager = (*kubestore.Store)(nil)

// TestGCRunnerPages: a full pass over a kubestore.Store's ClaimPages, in
// pages of 3, judges every claim of the cluster (pools the Allocator does
// not know included), releases those of the pods that are gone and keeps the
// others; an IPClaim that is no valid claim is left out and reported; the
// pass keeps only the decisions that release.
func TestGCRunnerPages(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	c := newGCCluster(t, "gcpages")
	c.node("gcpages-node", true)
	pools := []*ipam.Pool{
		{Name: "gcpages-a", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.41.0.0/24")}}},
		{Name: "gcpages-b", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.42.0.0/24")}}},
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for i := range 10 {
		name := fmt.Sprint("keep-", i)
		if i%2 == 1 {
			name = fmt.Sprint("gone-", i)
		}
		p := c.pod(podSpec{name: name, node: "gcpages-node", phase: corev1.PodRunning})
		res, err := agent.Allocate(ctx, k8s.Request(p, nil, nil, ipam.NIC{Name: "eth0", Pools: []string{pools[i%2].Name}}))
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			c.deletePod(name)
		} else {
			kept[pools[i%2].Name+"/"+res.IPs[0].Address.Addr().String()] = true
		}
	}
	createRaw(t, "gcpages-corrupt", nil, map[string]any{"pool": "gcpages-a", "ip": "not-an-ip", "owner": map[string]any{"uid": "x"}})

	pager := newStore(t)
	var sizes []int
	err = pager.ClaimPages(ctx, 3, func(page []store.Claim) error { sizes = append(sizes, len(page)); return nil })
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("ClaimPages: %v, want an error wrapping store.ErrCorrupt", err)
	}
	total := 0
	for _, n := range sizes {
		total += n
		if n > 3 {
			t.Errorf("a page of %d claims, want at most 3: %v", n, sizes)
		}
	}
	if total != 10 || len(sizes) != 4 {
		t.Errorf("pages %v: want 10 claims in 4 pages (11 objects, 1 no claim)", sizes)
	}

	// The Allocator of the collector knows none of the pools.
	empty, err := ipam.NewCatalog()
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: empty, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	passes := make(chan kubegc.Pass, 1)
	r, err := kubegc.New(srv.Config(), a, kubegc.Options{Period: time.Hour, Claims: pager, PageSize: 3,
		Observe: func(p kubegc.Pass) {
			if p.Full {
				select {
				case passes <- p:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	var p kubegc.Pass
	select {
	case p = <-passes:
	case <-time.After(time.Minute):
		t.Fatal("no full pass in a minute")
	}
	if p.Judged() != 10 || len(p.Released()) != 5 || len(p.Decisions) != 5 {
		t.Errorf("the pass judged %d claims, released %d, kept %d decisions; want 10, 5, 5", p.Judged(), len(p.Released()), len(p.Decisions))
	}
	if !errors.Is(p.Err, store.ErrCorrupt) {
		t.Errorf("the pass's error %v, want one wrapping store.ErrCorrupt (gcpages-corrupt)", p.Err)
	}
	st := newStore(t)
	left := map[string]bool{}
	for _, pool := range pools {
		cs, err := st.List(ctx, pool.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range cs {
			left[cl.Key()] = true
		}
	}
	if fmt.Sprint(left) != fmt.Sprint(kept) {
		t.Errorf("claims left %v, want those of the pods kept %v", left, kept)
	}
}
