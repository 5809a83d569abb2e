// Package metrics exports an ipam Allocator's figures to Prometheus: pool
// usage as gauges computed at every scrape, and allocation, release and
// garbage collection outcomes as counters and a histogram.
//
// It is a module of its own, so that the CNI plugin and every other user of
// the core that does not export metrics never link the Prometheus client.
//
// Nothing here touches Prometheus' global registry: the caller registers the
// collectors on its own registry (prometheus.NewRegistry, or the one its
// program already serves):
//
//	rec := metrics.NewRecorder(metrics.RecorderOptions{})
//	alloc, _ := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st, Observer: rec})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(rec, metrics.NewUsageCollector(alloc, metrics.UsageOptions{}))
//
// # Pool usage
//
// UsageCollector reads every pool's usage (ipam.Allocator.Usage: the
// Store's count of claims, one Count per pool where the Store can count,
// else one paged pass over every claim where it is a store.ClaimPager)
// from its UsageSource when it is scraped, and reports nothing between
// scrapes: a pool deleted
// from the PoolSource has no series at the next scrape, a restarted process
// reports the true figures at its first, and two replicas that export the
// same pools report the same numbers from the same Store, so neither
// overwrites the other (Prometheus tells them apart by their instance
// label). A program whose Store makes that reading costly (kubestore: a
// pass over every IPClaim of the cluster) can give NewUsageCollector a
// UsageSource that caches the Allocator's figures: cmd/ipam-controller
// reads them at most once per --usage-interval, so its gauges are at most
// one interval stale and a deleted pool's series go at the next reading.
// The gauges, each with the labels pool and family ("4" or "6"):
//
//	ipamkit_pool_capacity_addresses     addresses the pool can hand out (its ranges less excludeIPs and gateways)
//	ipamkit_pool_reserved_addresses     of those, reserved by the cluster (SpiderReservedIP)
//	ipamkit_pool_allocated_addresses    claims of the pool in the Store
//	ipamkit_pool_quarantined_addresses  released addresses this Allocator holds back (ipam.Options.Quarantine)
//	ipamkit_pool_free_addresses         capacity - reserved - allocated - quarantined, at least 0
//	ipamkit_usage_up                    1 if the last scrape read every pool's usage, else 0 (and no pool series)
//
// See ipam.Usage for what each figure counts. An IPv6 pool's capacity can
// exceed 2^64: the gauges are float64, exact up to 2^53 and within a part
// in 2^53 beyond.
//
// # Outcomes
//
// Recorder is an ipam.Observer: set it as ipam.Options.Observer and it
// counts every allocation and release by result, and times allocations:
//
//	ipamkit_allocations_total{result}          Allocate calls by result (see Result)
//	ipamkit_allocation_duration_seconds        histogram of Allocate calls' latency
//	ipamkit_releases_total{result}             Release, ReleaseClaim and ReleaseIP calls by result
//	ipamkit_gc_released_total{reason}          claims garbage collection released, by gc.Reason
//
// Garbage collection reports through GCReleased or GCDecisions, which the
// program that runs the collection calls with what it released. No metric
// has a pod, namespace, UID or address label: their number would grow with
// the cluster.
//
// # Alerts
//
// alerts.yaml, beside this file, holds Prometheus alerting rules built on
// these metrics: a pool nearly exhausted, a suspected leak, allocations
// failing. A test evaluates them on recorded series.
package metrics

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
)

// Results of an allocation or a release, the values of the result label.
const (
	ResultSuccess      = "success"
	ResultExhausted    = "exhausted"     // ipam.ErrExhausted: no free address in any pool tried
	ResultNoCandidates = "no_candidates" // ipam.ErrNoCandidates: no pool may serve the pod
	ResultUnavailable  = "unavailable"   // ipam.ErrUnavailable: a requested address is taken
	ResultInvalid      = "invalid"       // ipam.ErrInvalid, ErrNotInRange, ErrOwnerConflict: the request cannot be served as asked
	ResultNotFound     = "not_found"     // ipam.ErrNotFound: an unknown pool, or a release of what is not held
	ResultConflict     = "conflict"      // ipam.ErrConflict: a claim changed under a release
	ResultNotReady     = "not_ready"     // ipam.ErrNotReady: an auto-pool not made yet
	ResultCanceled     = "canceled"      // the caller's context ended
	ResultError        = "error"         // anything else: the Store failed
)

// Result returns the result label value of an outcome's error: one of the
// Result constants, a fixed set, so the label's values stay few.
func Result(err error) string {
	switch {
	case err == nil:
		return ResultSuccess
	case errors.Is(err, ipam.ErrExhausted):
		return ResultExhausted
	case errors.Is(err, ipam.ErrNoCandidates):
		return ResultNoCandidates
	case errors.Is(err, ipam.ErrUnavailable):
		return ResultUnavailable
	case errors.Is(err, ipam.ErrInvalid), errors.Is(err, ipam.ErrNotInRange), errors.Is(err, ipam.ErrOwnerConflict):
		return ResultInvalid
	case errors.Is(err, ipam.ErrNotFound):
		return ResultNotFound
	case errors.Is(err, ipam.ErrConflict):
		return ResultConflict
	case errors.Is(err, ipam.ErrNotReady):
		return ResultNotReady
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return ResultCanceled
	}
	return ResultError
}

// DefaultBuckets are the allocation latency histogram's buckets, in seconds:
// from half a millisecond (memstore, filestore) to ten seconds (a Store
// without quorum until the caller's deadline).
var DefaultBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// RecorderOptions configure a Recorder. The zero RecorderOptions is ready
// to use.
type RecorderOptions struct {
	// Buckets are the allocation latency histogram's upper bounds, in
	// seconds, increasing. Nil means DefaultBuckets.
	Buckets []float64
	// ConstLabels are added to every metric (a cluster or network name).
	ConstLabels prometheus.Labels
	// Now is the clock latencies are measured with; nil means time.Now.
	Now func() time.Time
}

// Recorder counts allocation, release and garbage collection outcomes. It
// is an ipam.Observer and a prometheus.Collector. Every result and reason
// seen is reported from then on, at zero until it happens for the known
// results.
//
// The zero Recorder is not usable: call NewRecorder. A Recorder is safe for
// concurrent use.
type Recorder struct {
	now      func() time.Time
	allocs   *prometheus.CounterVec
	releases *prometheus.CounterVec
	duration prometheus.Histogram
	gc       *prometheus.CounterVec
}

var _ ipam.Observer = (*Recorder)(nil)

// NewRecorder returns a Recorder for opts.
func NewRecorder(opts RecorderOptions) *Recorder {
	buckets := opts.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	r := &Recorder{
		now: opts.Now,
		allocs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipamkit_allocations_total", Help: "Allocate calls, by result.", ConstLabels: opts.ConstLabels,
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipamkit_releases_total", Help: "Release, ReleaseClaim and ReleaseIP calls, by result.", ConstLabels: opts.ConstLabels,
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ipamkit_allocation_duration_seconds", Help: "Latency of Allocate calls, whatever their result.",
			Buckets: buckets, ConstLabels: opts.ConstLabels,
		}),
		gc: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipamkit_gc_released_total", Help: "Claims released by garbage collection, by reason.", ConstLabels: opts.ConstLabels,
		}, []string{"reason"}),
	}
	if r.now == nil {
		r.now = time.Now
	}
	// The results an alert divides by exist from the start, so that a
	// rate over them is defined before the first failure.
	for _, res := range []string{ResultSuccess, ResultExhausted, ResultNoCandidates, ResultError} {
		r.allocs.WithLabelValues(res)
	}
	return r
}

// Start returns the Recorder's time (ipam.Observer).
func (r *Recorder) Start() time.Time { return r.now() }

// Allocated counts an allocation and its latency (ipam.Observer).
func (r *Recorder) Allocated(ev ipam.AllocateEvent) {
	r.allocs.WithLabelValues(Result(ev.Err)).Inc()
	if !ev.Start.IsZero() {
		r.duration.Observe(r.now().Sub(ev.Start).Seconds())
	}
}

// Released counts a release (ipam.Observer).
func (r *Recorder) Released(ev ipam.ReleaseEvent) {
	r.releases.WithLabelValues(Result(ev.Err)).Inc()
}

// GCReleased counts n claims that garbage collection released for reason.
func (r *Recorder) GCReleased(reason gc.Reason, n int) {
	if n > 0 {
		r.gc.WithLabelValues(string(reason)).Add(float64(n))
	}
}

// GCDecisions counts the claims that decisions (from
// gc.Collect or a runner that applies gc.Decide)
// released: those Applied.
func (r *Recorder) GCDecisions(decisions []gc.Decision) {
	for _, d := range decisions {
		if d.Release && d.Applied {
			r.gc.WithLabelValues(string(d.Reason)).Inc()
		}
	}
}

// Describe sends the descriptions of the Recorder's metrics
// (prometheus.Collector).
func (r *Recorder) Describe(ch chan<- *prometheus.Desc) {
	r.allocs.Describe(ch)
	r.releases.Describe(ch)
	r.duration.Describe(ch)
	r.gc.Describe(ch)
}

// Collect sends the Recorder's metrics (prometheus.Collector).
func (r *Recorder) Collect(ch chan<- prometheus.Metric) {
	r.allocs.Collect(ch)
	r.releases.Collect(ch)
	r.duration.Collect(ch)
	r.gc.Collect(ch)
}

// UsageSource reports pool usage; *ipam.Allocator is one.
type UsageSource interface {
	Usage(ctx context.Context, now time.Time) ([]ipam.Usage, error)
}

// UsageOptions configure a UsageCollector. The zero UsageOptions is ready to
// use.
type UsageOptions struct {
	// Timeout bounds the reading of every pool's usage at a scrape; zero
	// means 10 seconds.
	Timeout time.Duration
	// ConstLabels are added to every metric (a cluster or network name).
	ConstLabels prometheus.Labels
	// Now is the time usage is read at (which ends quarantines); nil means
	// time.Now.
	Now func() time.Time
}

// UsageCollector reports pool usage gauges, read from its UsageSource at
// every scrape (see the package documentation). It is a
// prometheus.Collector.
//
// The zero UsageCollector is not usable: call NewUsageCollector. A
// UsageCollector is safe for concurrent use.
type UsageCollector struct {
	src     UsageSource
	timeout time.Duration
	now     func() time.Time

	capacity, reserved, allocated, quarantined, free, up *prometheus.Desc

	mu      sync.Mutex // one scrape reads the Store at a time
	lastErr error
}

// NewUsageCollector returns a UsageCollector that reads src.
func NewUsageCollector(src UsageSource, opts UsageOptions) *UsageCollector {
	c := &UsageCollector{src: src, timeout: opts.Timeout, now: opts.Now}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	labels := []string{"pool", "family"}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, opts.ConstLabels)
	}
	c.capacity = desc("ipamkit_pool_capacity_addresses", "Addresses the pool can hand out: its ranges less excludeIPs and gateways.")
	c.reserved = desc("ipamkit_pool_reserved_addresses", "Addresses of the pool's capacity that the cluster reserves.")
	c.allocated = desc("ipamkit_pool_allocated_addresses", "Claims of the pool in the Store.")
	c.quarantined = desc("ipamkit_pool_quarantined_addresses", "Released addresses of the pool this allocator holds back from reuse.")
	c.free = desc("ipamkit_pool_free_addresses", "Addresses of the pool a new owner can get: capacity less reserved, allocated and quarantined.")
	c.up = prometheus.NewDesc("ipamkit_usage_up", "1 if the last scrape read every pool's usage from the Store, else 0.", nil, opts.ConstLabels)
	return c
}

// Describe sends the descriptions of the usage gauges (prometheus.Collector).
func (c *UsageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.reserved, c.allocated, c.quarantined, c.free, c.up} {
		ch <- d
	}
}

// Collect reads every pool's usage and sends its gauges
// (prometheus.Collector). If the usage cannot be read (the Store does not
// answer in time), it sends ipamkit_usage_up 0 and no pool gauge, rather
// than figures that are not the Store's.
func (c *UsageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	us, err := c.src.Usage(ctx, c.now())
	c.lastErr = err
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, u := range us {
		fam := strconv.Itoa(u.Family)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, u.Pool, fam)
		}
		gauge(c.capacity, u.Capacity.Float64())
		gauge(c.reserved, u.Reserved.Float64())
		gauge(c.allocated, float64(u.Allocated))
		gauge(c.quarantined, float64(u.Quarantined))
		gauge(c.free, u.Free.Float64())
	}
}

// Err returns the error of the last scrape's reading of usage; nil if it
// succeeded or there was none.
func (c *UsageCollector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}
