package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/metrics"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// series gathers reg and returns every sample as "name{labels}" -> value,
// histograms as their _count and _sum.
func series(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count{"+strings.Join(ls, ",")+"}"] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum{"+strings.Join(ls, ",")+"}"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func key(name, pool string, family int) string {
	return fmt.Sprintf("%s{family=%q,pool=%q}", name, fmt.Sprint(family), pool)
}

// TestGaugesOverSimulation: over simulator histories, at every step, every
// pool gauge of a UsageCollector on the simulator's Allocator equals what
// the Store and the pool say (claims counted by List, capacity by
// ipam.UsageOf), and a second UsageCollector, on a second Allocator of its
// own over the same Store, reports the same figures: two replicas agree.
// The quarantine is each Allocator's own, so quarantined and free are
// compared only in runs without one.
func TestGaugesOverSimulation(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			opts := ipamtest.RandomOptions(seed)
			st := memstore.New()
			opts.Store = st
			sim, err := ipamtest.NewSim(seed, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			cat, err := ipam.NewCatalog(opts.Pools...)
			if err != nil {
				t.Fatal(err)
			}
			other, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st.Open()})
			if err != nil {
				t.Fatal(err)
			}
			now := func() time.Time { return sim.Now() }
			regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
			regA.MustRegister(metrics.NewUsageCollector(sim.Allocator(), metrics.UsageOptions{Now: now}))
			regB.MustRegister(metrics.NewUsageCollector(other, metrics.UsageOptions{Now: now}))
			ctx := context.Background()
			for step := 0; step < 200; step++ {
				if err := sim.Step(); err != nil {
					t.Fatal(err)
				}
				a, b := series(t, regA), series(t, regB)
				if a["ipamkit_usage_up{}"] != 1 {
					t.Fatalf("step %d: usage not read: %v", step, a)
				}
				for _, p := range opts.Pools {
					claims, err := st.List(ctx, p.Name)
					if err != nil {
						t.Fatal(err)
					}
					q := a[key("ipamkit_pool_quarantined_addresses", p.Name, p.Family())]
					u, err := ipam.UsageOf(p, nil, len(claims), int(q))
					if err != nil {
						t.Fatal(err)
					}
					want := map[string]float64{
						"ipamkit_pool_capacity_addresses":  u.Capacity.Float64(),
						"ipamkit_pool_reserved_addresses":  0,
						"ipamkit_pool_allocated_addresses": float64(len(claims)),
						"ipamkit_pool_free_addresses":      u.Free.Float64(),
					}
					for name, v := range want {
						k := key(name, p.Name, p.Family())
						got, ok := a[k]
						if !ok || got != v {
							t.Fatalf("seed %d step %d: %s = %v (present %t), the Store says %v", seed, step, k, got, ok, v)
						}
						if name == "ipamkit_pool_free_addresses" && opts.Quarantine > 0 {
							continue
						}
						if b[k] != got {
							t.Fatalf("seed %d step %d: %s: one collector says %v, the other %v", seed, step, k, got, b[k])
						}
					}
				}
				if opts.Quarantine == 0 && !maps.Equal(a, b) {
					t.Fatalf("seed %d step %d: two collectors on one Store disagree:\n%v\n%v", seed, step, a, b)
				}
				if got := len(a); got != 1+5*len(opts.Pools) {
					t.Fatalf("step %d: %d series, want %d", step, got, 1+5*len(opts.Pools))
				}
			}
			if err := sim.Settle(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func request(id, pool string) ipam.Request {
	return ipam.Request{ContainerID: id, Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}}
}

// TestDeletedPoolLeavesNoSeries: a pool removed from the PoolSource has no
// series at the next scrape, though its claims are still in the Store; a
// pool added shows at once.
func TestDeletedPoolLeavesNoSeries(t *testing.T) {
	ctx := context.Background()
	src := ipamtest.NewSource(
		ipam.MustParsePool(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/29"}]}`),
		ipam.MustParsePool(`{"name":"green","subnet":"fd00::/120","ips":["fd00::10-fd00::1f"]}`))
	a, err := ipam.NewAllocator(ipam.Options{Pools: src})
	if err != nil {
		t.Fatal(err)
	}
	for i, pool := range []string{"blue", "green", "green"} {
		if _, err := a.Allocate(ctx, request(fmt.Sprint(i), pool)); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewUsageCollector(a, metrics.UsageOptions{}))
	got := series(t, reg)
	if got[key("ipamkit_pool_allocated_addresses", "green", 6)] != 2 || got[key("ipamkit_pool_capacity_addresses", "green", 6)] != 16 {
		t.Fatalf("before: %v", got)
	}
	src.Remove("green")
	src.Set(ipam.MustParsePool(`{"name":"red","ranges":[{"subnet":"10.1.0.0/30"}]}`))
	got = series(t, reg)
	for k := range got {
		if strings.Contains(k, `pool="green"`) {
			t.Errorf("series of the deleted pool: %s", k)
		}
	}
	if _, ok := got[key("ipamkit_pool_free_addresses", "red", 4)]; !ok {
		t.Errorf("no series of the new pool: %v", got)
	}
	if got[key("ipamkit_pool_allocated_addresses", "blue", 4)] != 1 {
		t.Errorf("blue: %v", got)
	}
}

// failingSource is a UsageSource whose Store does not answer.
type failingSource struct{}

func (failingSource) Usage(context.Context, time.Time) ([]ipam.Usage, error) {
	return nil, errors.New("store unavailable")
}

func TestUsageDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := metrics.NewUsageCollector(failingSource{}, metrics.UsageOptions{})
	reg.MustRegister(c)
	got := series(t, reg)
	want := map[string]float64{"ipamkit_usage_up{}": 0}
	if !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if c.Err() == nil {
		t.Error("Err is nil after a failed scrape")
	}
}

func TestRecorder(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := metrics.NewRecorder(metrics.RecorderOptions{Now: func() time.Time {
		clock = clock.Add(5 * time.Millisecond) // each reading 5 ms after the last
		return clock
	}})
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/30"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(rec)
	if _, err := a.Allocate(ctx, request("a", "p")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, request("b", "p")); !errors.Is(err, ipam.ErrExhausted) {
		t.Fatalf("second Allocate: %v, want exhausted", err)
	}
	if _, err := a.Allocate(ctx, request("c", "nope")); err == nil {
		t.Fatal("Allocate from an unknown pool succeeded")
	}
	if err := a.Release(ctx, store.Owner{ContainerID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := a.ReleaseIP(ctx, "p", netip.MustParseAddr("10.0.0.1")); err == nil {
		t.Fatal("ReleaseIP of a free address succeeded")
	}
	rec.GCReleased(gc.ReleasePodGone, 2)
	rec.GCDecisions([]gc.Decision{
		{Release: true, Applied: true, Reason: gc.ReleaseUIDMismatch},
		{Release: true, Applied: false, Reason: gc.ReleaseUIDMismatch}, // not released
		{Release: false, Reason: "kept"},
	})
	want := map[string]float64{
		`ipamkit_allocations_total{result="success"}`:       1,
		`ipamkit_allocations_total{result="exhausted"}`:     1,
		`ipamkit_allocations_total{result="not_found"}`:     1,
		`ipamkit_allocations_total{result="no_candidates"}`: 0,
		`ipamkit_allocations_total{result="error"}`:         0,
		`ipamkit_allocation_duration_seconds_count{}`:       3,
		`ipamkit_allocation_duration_seconds_sum{}`:         3 * 0.005,
		`ipamkit_releases_total{result="success"}`:          1,
		`ipamkit_releases_total{result="not_found"}`:        1,
		`ipamkit_gc_released_total{reason="pod-gone"}`:      2,
		`ipamkit_gc_released_total{reason="uid-mismatch"}`:  1,
	}
	got := series(t, reg)
	if !maps.EqualFunc(got, want, func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }) {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if n, err := testutil.GatherAndCount(prometheus.DefaultGatherer, "ipamkit_allocations_total", "ipamkit_pool_free_addresses"); err != nil || n != 0 {
		t.Fatalf("the global registry has %d ipamkit series (%v): want none", n, err)
	}
	// No label names a pod, a namespace, a UID or an address.
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains([]string{"result", "reason"}, l.GetName()) {
					t.Errorf("%s has label %s", mf.GetName(), l.GetName())
				}
			}
		}
	}
}

func TestResult(t *testing.T) {
	for err, want := range map[error]string{
		nil:                                    "success",
		fmt.Errorf("x: %w", ipam.ErrExhausted): "exhausted",
		&ipam.AllocationError{Err: ipam.ErrNoCandidates}: "no_candidates",
		ipam.ErrUnavailable:                               "unavailable",
		ipam.ErrOwnerConflict:                             "invalid",
		&ipam.FieldError{Object: "request", Field: "uid"}: "invalid",
		ipam.ErrNotReady:                                  "not_ready",
		fmt.Errorf("etcd: %w", context.DeadlineExceeded):  "canceled",
		errors.New("disk on fire"):                        "error",
	} {
		if got := metrics.Result(err); got != want {
			t.Errorf("Result(%v) = %q, want %q", err, got, want)
		}
	}
}

func Example() {
	ctx := context.Background()
	cat, _ := ipam.NewCatalog(ipam.MustParsePool(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	rec := metrics.NewRecorder(metrics.RecorderOptions{})
	alloc, _ := ipam.NewAllocator(ipam.Options{Pools: cat, Observer: rec})
	reg := prometheus.NewRegistry() // the caller's, never the global one
	reg.MustRegister(rec, metrics.NewUsageCollector(alloc, metrics.UsageOptions{}))

	alloc.Allocate(ctx, request("a", "blue"))
	alloc.Allocate(ctx, request("b", "blue"))

	n, _ := testutil.GatherAndCount(reg)
	fmt.Println("series:", n)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "ipamkit_pool_") {
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetGauge().GetValue())
		}
	}
	// Output:
	// series: 11
	// ipamkit_pool_allocated_addresses 2
	// ipamkit_pool_capacity_addresses 5
	// ipamkit_pool_free_addresses 3
	// ipamkit_pool_quarantined_addresses 0
	// ipamkit_pool_reserved_addresses 0
}

// TestGCDecisions: the decisions of a real garbage collection, applied by
// ipam.Allocator.CollectGarbage, count one release per claim released, by
// reason; the claim kept and the pods' own release do not count as GC
// releases (but the GC's release shows in releases_total, as every
// release through the Allocator does).
func TestGCDecisions(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	rec := metrics.NewRecorder(metrics.RecorderOptions{Now: func() time.Time { return now }})
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Observer: rec})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "gone", "old"} {
		req := ipam.Request{Namespace: "default", Name: name, UID: "uid-" + name,
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}}}
		if _, err := a.AllocateAt(ctx, req, now.Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := gc.NewSnapshot(now, []gc.Pod{
		{Namespace: "default", Name: "web", UID: "uid-web", Phase: gc.PodRunning, NodeReady: true, HasIPs: true},
		{Namespace: "default", Name: "old", UID: "uid-new", Phase: gc.PodRunning, NodeReady: true, HasIPs: true},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := gc.Collect(ctx, a, snap, now, gc.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec.GCDecisions(ds)
	reg := prometheus.NewRegistry()
	reg.MustRegister(rec)
	got := series(t, reg)
	for k, want := range map[string]float64{
		`ipamkit_gc_released_total{reason="pod-gone"}`:     1,
		`ipamkit_gc_released_total{reason="uid-mismatch"}`: 1,
		`ipamkit_releases_total{result="success"}`:         2,
		`ipamkit_allocations_total{result="success"}`:      3,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "ipamkit_gc_released_total") && !strings.Contains(k, "pod-gone") && !strings.Contains(k, "uid-mismatch") {
			t.Errorf("unexpected GC series %s", k)
		}
	}
}
