package alerttest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/util/teststorage"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/metrics"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// cluster is a scripted history: Allocators on one Store, each exported by
// its own registry (a replica, an instance), scraped every minute of the
// simulated clock into a TSDB, with the alerting rules of alerts.yaml
// evaluated after every scrape by Prometheus' rule engine.
type cluster struct {
	t      *testing.T
	now    time.Time
	st     *memstore.Store
	src    *ipam.Catalog
	allocs map[string]*ipam.Allocator // by instance
	regs   map[string]*prometheus.Registry
	db     *teststorage.TestStorage
	engine *promql.Engine
	rules  []*rules.AlertingRule
	// firing is, per alert name, the label sets (pool, or instance) that
	// fired at least once, and when first.
	firing map[string]map[string]time.Time
	ids    int
}

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newCluster(t *testing.T, pools []string, instances ...string) *cluster {
	t.Helper()
	var ps []*ipam.Pool
	for _, p := range pools {
		ps = append(ps, ipam.MustParsePool(p))
	}
	cat, err := ipam.NewCatalog(ps...)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, now: start, st: memstore.New(), src: cat,
		allocs: map[string]*ipam.Allocator{}, regs: map[string]*prometheus.Registry{},
		firing: map[string]map[string]time.Time{}}
	for _, inst := range instances {
		rec := metrics.NewRecorder(metrics.RecorderOptions{Now: func() time.Time { return c.now }})
		a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: c.st.Open(), Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(rec, metrics.NewUsageCollector(a, metrics.UsageOptions{Now: func() time.Time { return c.now }}))
		c.allocs[inst], c.regs[inst] = a, reg
	}
	c.db = teststorage.New(t)
	c.engine = promql.NewEngine(promql.EngineOpts{MaxSamples: 1e6, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	c.rules = loadRules(t, "../alerts.yaml")
	return c
}

// loadRules parses the rules file as Prometheus does (rulefmt, which
// checks every expression and template) and builds its alerting rules.
func loadRules(t *testing.T, path string) []*rules.AlertingRule {
	t.Helper()
	p := parser.NewParser(parser.Options{})
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s: %v", path, errs)
	}
	var out []*rules.AlertingRule
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			expr, err := p.ParseExpr(r.Expr)
			if err != nil {
				t.Fatalf("%s: %s: %v", path, r.Alert, err)
			}
			out = append(out, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
				labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", false, nil))
		}
	}
	if len(out) != 3 {
		t.Fatalf("%s: %d alerting rules, want 3", path, len(out))
	}
	return out
}

// tick scrapes every instance at the current time, evaluates the rules, and
// moves the clock one minute on.
func (c *cluster) tick() {
	c.t.Helper()
	ctx := context.Background()
	app := c.db.Appender(ctx)
	for inst, reg := range c.regs {
		mfs, err := reg.Gather()
		if err != nil {
			c.t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				lb := map[string]string{"instance": inst}
				for _, l := range m.GetLabel() {
					lb[l.GetName()] = l.GetValue()
				}
				add := func(name string, v float64) {
					lb["__name__"] = name
					if _, err := app.Append(0, labels.FromMap(lb), c.now.UnixMilli(), v); err != nil {
						c.t.Fatal(err)
					}
				}
				switch mf.GetType() {
				case dto.MetricType_GAUGE:
					add(mf.GetName(), m.GetGauge().GetValue())
				case dto.MetricType_COUNTER:
					add(mf.GetName(), m.GetCounter().GetValue())
				case dto.MetricType_HISTOGRAM:
					add(mf.GetName()+"_count", float64(m.GetHistogram().GetSampleCount()))
					add(mf.GetName()+"_sum", m.GetHistogram().GetSampleSum())
				}
			}
		}
	}
	if err := app.Commit(); err != nil {
		c.t.Fatal(err)
	}
	query := rules.EngineQueryFunc(c.engine, c.db)
	for _, r := range c.rules {
		if _, err := r.Eval(ctx, 0, c.now, query, nil, 0); err != nil {
			c.t.Fatalf("%s at %s: %v", r.Name(), c.now.Sub(start), err)
		}
		for _, a := range r.ActiveAlerts() {
			if a.State != rules.StateFiring {
				continue
			}
			key := a.Labels.Get("pool")
			if key == "" {
				key = "instance=" + a.Labels.Get("instance")
			}
			if c.firing[r.Name()] == nil {
				c.firing[r.Name()] = map[string]time.Time{}
			}
			if _, ok := c.firing[r.Name()][key]; !ok {
				c.firing[r.Name()][key] = c.now
			}
		}
	}
	c.now = c.now.Add(time.Minute)
}

// run ticks for d.
func (c *cluster) run(d time.Duration) {
	c.t.Helper()
	for end := c.now.Add(d); c.now.Before(end); {
		c.tick()
	}
}

// allocate has instance inst allocate one address of pool for a new owner,
// and returns the owner; an error is returned too (exhaustion is one of the
// histories).
func (c *cluster) allocate(inst, pool string) (store.Owner, error) {
	c.ids++
	id := fmt.Sprintf("ctr%d", c.ids)
	_, err := c.allocs[inst].AllocateAt(context.Background(), ipam.Request{ContainerID: id,
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}}, c.now)
	return store.Owner{ContainerID: id}, err
}

func (c *cluster) release(inst string, o store.Owner) {
	c.t.Helper()
	if err := c.allocs[inst].ReleaseAt(context.Background(), o, c.now); err != nil {
		c.t.Fatal(err)
	}
}

// fired returns, for alert name, the sorted keys that fired (pools, or
// instance=NAME).
func (c *cluster) fired(name string) []string {
	var out []string
	for k := range c.firing[name] {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (c *cluster) want(name string, keys ...string) {
	c.t.Helper()
	if got := c.fired(name); !slices.Equal(got, keys) {
		c.t.Errorf("%s fired for %v, want %v", name, got, keys)
	}
}

// pool20 has 20 addresses (10.0.0.10-29), pool big 200.
const (
	pool20  = `{"name":"small","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.29"]}`
	poolBig = `{"name":"big","subnet":"10.1.0.0/24","ips":["10.1.0.1-10.1.0.200"]}`
)

// A pool that fills to more than 90 % fires IpamkitPoolNearlyExhausted
// after 5 minutes, once, though two replicas export it; the pool with room
// does not. Nothing else fires: all allocations succeed.
func TestPoolNearlyExhausted(t *testing.T) {
	c := newCluster(t, []string{pool20, poolBig}, "agent-a", "agent-b")
	c.run(10 * time.Minute)
	for i := range 17 { // 85 %: not yet
		if _, err := c.allocate([]string{"agent-a", "agent-b"}[i%2], "small"); err != nil {
			t.Fatal(err)
		}
		c.allocate("agent-a", "big")
		c.tick()
	}
	c.run(30 * time.Minute)
	c.want("IpamkitPoolNearlyExhausted")
	for range 2 { // 95 %
		if _, err := c.allocate("agent-b", "small"); err != nil {
			t.Fatal(err)
		}
	}
	filled := c.now
	c.run(4 * time.Minute)
	c.want("IpamkitPoolNearlyExhausted") // the 5 minutes of "for" not up
	c.run(3 * time.Minute)
	c.want("IpamkitPoolNearlyExhausted", "small")
	if at := c.firing["IpamkitPoolNearlyExhausted"]["small"]; at.Sub(filled) < 5*time.Minute {
		t.Errorf("fired %s after the pool filled, before its 5 minutes", at.Sub(filled))
	}
	c.want("IpamkitAllocationsFailing")
	c.want("IpamkitAddressLeakSuspected")
}

// Allocations that fail (a full pool) for more than 5 % of the calls fire
// IpamkitAllocationsFailing on the instance that makes them, after 10
// minutes; the other instance, whose calls succeed, does not.
func TestAllocationsFailing(t *testing.T) {
	c := newCluster(t, []string{pool20, poolBig}, "agent-a", "agent-b")
	for range 20 {
		if _, err := c.allocate("agent-b", "small"); err != nil {
			t.Fatal(err)
		}
	}
	// Both agents allocate every minute from big, which has room, and
	// agent-a also tries small, which is full, every other minute: a
	// third of its calls fail.
	for i := range 40 {
		for _, inst := range []string{"agent-a", "agent-b"} {
			o, err := c.allocate(inst, "big")
			if err != nil {
				t.Fatal(err)
			}
			c.release(inst, o)
		}
		if i%2 == 0 {
			if _, err := c.allocate("agent-a", "small"); err == nil {
				t.Fatal("small is full, yet an allocation succeeded")
			}
		}
		c.tick()
		if i == 10 {
			c.want("IpamkitAllocationsFailing") // failing for 10 minutes only now
		}
	}
	c.want("IpamkitAllocationsFailing", "instance=agent-a")
	if at, ok := c.firing["IpamkitAllocationsFailing"]["instance=agent-a"]; ok && at.Sub(start) < 10*time.Minute {
		t.Errorf("fired after %s, before the rate window and the 10 minutes of for", at.Sub(start))
	}
}

// A pool whose allocated count only rises for 8 hours, while addresses are
// released elsewhere (pods deleted), fires IpamkitAddressLeakSuspected; a
// pool with the same churn whose count comes back down does not, and
// neither does a steady scale-up with no release anywhere.
func TestAddressLeakSuspected(t *testing.T) {
	t.Run("leak", func(t *testing.T) {
		c := newCluster(t, []string{pool20, poolBig}, "agent-a")
		var churn []store.Owner
		for h := range 8 * 60 {
			if h%15 == 0 { // big: one more address every 15 minutes, never released: 24 in 6 hours, 12 % of 200
				if _, err := c.allocate("agent-a", "big"); err != nil {
					t.Fatal(err)
				}
			}
			if h%10 == 0 { // small: pods come and go
				o, err := c.allocate("agent-a", "small")
				if err != nil {
					t.Fatal(err)
				}
				churn = append(churn, o)
				if len(churn) > 3 {
					c.release("agent-a", churn[0])
					churn = churn[1:]
				}
			}
			c.tick()
		}
		c.want("IpamkitAddressLeakSuspected", "big")
		if at, ok := c.firing["IpamkitAddressLeakSuspected"]["big"]; ok && at.Sub(start) < 6*time.Hour+30*time.Minute {
			t.Errorf("fired after %s: before 6 hours of growth and 30 minutes of for", at.Sub(start))
		}
		c.want("IpamkitPoolNearlyExhausted")
		c.want("IpamkitAllocationsFailing")
	})
	t.Run("scale-up", func(t *testing.T) {
		c := newCluster(t, []string{poolBig}, "agent-a")
		for h := range 8 * 60 {
			if h%15 == 0 {
				if _, err := c.allocate("agent-a", "big"); err != nil {
					t.Fatal(err)
				}
			}
			c.tick()
		}
		c.want("IpamkitAddressLeakSuspected")
	})
}

// The rules file's expressions name only metrics the collectors export.
func TestRulesUseExportedMetrics(t *testing.T) {
	c := newCluster(t, []string{pool20}, "agent-a")
	if _, err := c.allocate("agent-a", "small"); err != nil {
		t.Fatal(err)
	}
	mfs, err := c.regs["agent-a"].Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
	}
	exported["ipamkit_releases_total"] = true // exported from the first release on
	for _, r := range c.rules {
		parser.Inspect(r.Query(), func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && !exported[vs.Name] {
				t.Errorf("%s uses %s, which no collector exports", r.Name(), vs.Name)
			}
			return nil
		})
	}
}
