package main

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipamkit/ipam"
	ipammetrics "github.com/ipamkit/ipam/metrics"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// listingStore shows only store.Store's methods (no Counter, no
// ClaimPager) and counts its Lists: each usage reading lists every pool.
type listingStore struct {
	store.Store
	mu    sync.Mutex
	lists int
}

func (s *listingStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	s.mu.Lock()
	s.lists++
	s.mu.Unlock()
	return s.Store.List(ctx, pool)
}

// series returns the value of the gauge name of each pool that reg
// gathers, and ipamkit_usage_up.
func series(t *testing.T, reg prometheus.Gatherer, name string) (map[string]float64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got, up := map[string]float64{}, -1.0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case name:
				for _, l := range m.GetLabel() {
					if l.GetName() == "pool" {
						got[l.GetValue()] = m.GetGauge().GetValue()
					}
				}
			case "ipamkit_usage_up":
				up = m.GetGauge().GetValue()
			}
		}
	}
	return got, up
}

// TestUsageScrapesRead (issue 29): the controller's usage gauges read the
// Store at most once per --usage-interval, whatever the number of scrapes:
// two scrapes in one interval list each of the two pools once.
func TestUsageScrapesRead(t *testing.T) {
	cat, err := ipam.NewCatalog(
		&ipam.Pool{Name: "a", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.0.0.0/24")}}},
		&ipam.Pool{Name: "b", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.0.1.0/24")}}},
	)
	if err != nil {
		t.Fatal(err)
	}
	st := &listingStore{Store: memstore.New()}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alloc.Allocate(t.Context(), ipam.Request{ContainerID: "c",
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"a"}}}}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	m.registerUsage(alloc, time.Hour)
	st.mu.Lock()
	before := st.lists
	st.mu.Unlock()
	for range 2 {
		got, up := series(t, m.reg, "ipamkit_pool_allocated_addresses")
		if up != 1 || got["a"] != 1 || got["b"] != 0 || len(got) != 2 {
			t.Errorf("scrape: allocated %v, up %v; want a 1, b 0, up 1", got, up)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := st.lists - before; n != 2 {
		t.Errorf("two scrapes in an interval made %d Lists, want 2 (one reading of 2 pools)", n)
	}
}

// usageSource is a metrics.UsageSource whose figures a test sets, and
// which counts its readings.
type usageSource struct {
	usage []ipam.Usage
	err   error
	reads int
}

func (s *usageSource) Usage(context.Context, time.Time) ([]ipam.Usage, error) {
	s.reads++
	return s.usage, s.err
}

// TestUsageCache: the gauges serve the last reading for one interval, then
// read again: a pool deleted in between leaves its series until then and
// none after; a failed reading is served (usage_up 0, no pool series) for
// one interval too, not retried at every scrape.
func TestUsageCache(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 11, 0, 0, 0, time.UTC)
	now := t0
	src := &usageSource{usage: []ipam.Usage{{Pool: "a", Family: 4, Allocated: 1}, {Pool: "b", Family: 4, Allocated: 2}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ipammetrics.NewUsageCollector(&usageCache{src: src, interval: 10 * time.Second},
		ipammetrics.UsageOptions{Now: func() time.Time { return now }}))
	scrape := func(at time.Duration, reads int, want map[string]float64, wantUp float64) {
		t.Helper()
		now = t0.Add(at)
		got, up := series(t, reg, "ipamkit_pool_allocated_addresses")
		if src.reads != reads || up != wantUp || len(got) != len(want) {
			t.Fatalf("scrape at +%v: %d readings, allocated %v, up %v; want %d, %v, %v", at, src.reads, got, up, reads, want, wantUp)
		}
		for p, v := range want {
			if got[p] != v {
				t.Fatalf("scrape at +%v: allocated %v, want %v", at, got, want)
			}
		}
	}
	scrape(0, 1, map[string]float64{"a": 1, "b": 2}, 1)
	src.usage = []ipam.Usage{{Pool: "a", Family: 4, Allocated: 3}} // b deleted
	scrape(5*time.Second, 1, map[string]float64{"a": 1, "b": 2}, 1)
	scrape(9999*time.Millisecond, 1, map[string]float64{"a": 1, "b": 2}, 1)
	scrape(10*time.Second, 2, map[string]float64{"a": 3}, 1)
	src.err = errors.New("store down")
	scrape(25*time.Second, 3, nil, 0)
	scrape(30*time.Second, 3, nil, 0)
	src.err = nil
	scrape(35*time.Second, 4, map[string]float64{"a": 3}, 1)
	// A clock that went back reads again.
	scrape(20*time.Second, 5, map[string]float64{"a": 3}, 1)
}
