package main

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubegc"
	ipammetrics "github.com/ipamkit/ipam/metrics"
)

// metrics is the program's own Prometheus registry (never the global one)
// and the series it writes itself.
type metrics struct {
	reg        *prometheus.Registry
	gcReleased *prometheus.CounterVec
	leading    prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		gcReleased: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ipamkit_gc_released_total",
			Help: "Claims released by garbage collection, by reason (gc.Reason: pod-gone, uid-mismatch, terminating-expired, ...).",
		}, []string{"reason"}),
		leading: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ipamkit_controller_leading",
			Help: "1 while this replica leads (runs garbage collection and the SpiderSubnet runner), else 0.",
		}),
	}
	m.reg.MustRegister(
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector(),
		m.gcReleased, m.leading,
	)
	return m
}

// registerUsage registers the pool-usage gauges of the metrics module
// (ipamkit_pool_capacity_addresses, ipamkit_pool_allocated_addresses,
// ipamkit_pool_free_addresses, ...) for alloc's pools, read at most once per
// interval (a usageCache): a scrape within an interval of the last reading
// serves its figures, so that scrapes never add passes over every claim of
// the cluster to the usage passes. A deleted pool leaves no series after
// the next reading, and replicas never overwrite one another. Every replica
// serves them, leader or not: each reads the Store. It returns the cache,
// which the leader's usage writer reads too (one reading per interval for
// both).
func (m *metrics) registerUsage(alloc *ipam.Allocator, interval time.Duration) *usageCache {
	c := &usageCache{src: alloc, interval: interval}
	m.reg.MustRegister(ipammetrics.NewUsageCollector(c, ipammetrics.UsageOptions{}))
	return c
}

// usageCache is a metrics.UsageSource that reads src at most once per
// interval and serves the last reading (its figures, or its error) in
// between. The figures it serves are at most interval old.
type usageCache struct {
	src      ipammetrics.UsageSource
	interval time.Duration

	mu    sync.Mutex // one reading at a time; a scrape during it waits for it
	read  time.Time  // when the last reading was asked for; zero: none yet
	usage []ipam.Usage
	err   error
}

// Usage returns the last reading if it was made less than interval before
// now, else reads src at now.
func (c *usageCache) Usage(ctx context.Context, now time.Time) ([]ipam.Usage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read.IsZero() && !now.Before(c.read) && now.Sub(c.read) < c.interval {
		return c.usage, c.err
	}
	c.usage, c.err = c.src.Usage(ctx, now)
	c.read = now
	return c.usage, c.err
}

// observeGC counts the releases of a garbage collection pass.
func (m *metrics) observeGC(p kubegc.Pass) {
	for _, d := range p.Released() {
		m.gcReleased.WithLabelValues(string(d.Reason)).Inc()
	}
}

// handler serves /healthz (the process serves and, when it leads, renews
// its lease), /readyz (every informer has synced) and /metrics.
func (m *metrics) handler(ready *atomic.Bool, watchdog *leaderelection.HealthzAdaptor) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if watchdog != nil {
			if err := watchdog.Check(r); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg}))
	return mux
}
