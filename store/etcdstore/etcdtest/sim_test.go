package etcdtest_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
)

var (
	simSeeds = flag.Int("etcdtest.simseeds", 8, "seeds TestSimOverEtcd runs")
	simSteps = flag.Int("etcdtest.simsteps", 300, "steps per seed of TestSimOverEtcd")
)

// TestSimOverEtcd runs ipamtest's cluster simulator over etcdstore, with
// three Allocators (agents) sharing it: the simulator checks after every
// step that no address is held twice and no live pod lost its address, and
// once settled that nothing leaks.
func TestSimOverEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds against etcd")
	}
	var stats ipamtest.SimStats
	for seed := range uint64(*simSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			opts := ipamtest.RandomOptions(seed)
			opts.Store = open(t, single, newPrefix(t))
			opts.Agents = 3
			s, err := ipamtest.NewSim(seed, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(*simSteps); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if err := s.Settle(); err != nil {
				t.Fatalf("seed %d: settling: %v", seed, err)
			}
			st := s.Stats()
			stats.Allocations += st.Allocations
			stats.Exhausted += st.Exhausted
			stats.Released += st.Released
			stats.Collected += st.Collected
			stats.FullChecks += st.FullChecks
		})
	}
	t.Logf("%d seeds: %+v", *simSeeds, stats)
	if stats.Allocations == 0 || stats.Released == 0 || stats.FullChecks == 0 {
		t.Errorf("the runs checked nothing much: %+v", stats)
	}
}

var writersSeeds = flag.Int("etcdtest.writersseeds", 6, "seeds TestManyWritersOverEtcd runs")

// TestManyWritersOverEtcd runs ipamtest's many-writers mode over etcdstore:
// every operation through a randomly drawn agent, each with a Store of its
// own (its own etcd client) on one key prefix, agents replaced mid-history,
// claims without interface, legacy and container-only owners, pools that
// overlap or move; 0 addresses held twice, every Lookup equal to the Store's
// answer, and nothing left once every owner is gone.
func TestManyWritersOverEtcd(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds against etcd")
	}
	for seed := range uint64(*writersSeeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			prefix := newPrefix(t)
			opts := ipamtest.WritersOptions(seed)
			opts.Store = open(t, single, prefix)
			opts.OpenStore = func() (store.Store, error) {
				return etcdstore.New(etcdstore.Options{Endpoints: single.Endpoints(), Prefix: prefix})
			}
			s, err := ipamtest.NewSim(seed, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Run(*simSteps); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if err := s.Drain(); err != nil {
				t.Fatalf("seed %d: draining: %v", seed, err)
			}
			st := s.Stats()
			t.Logf("seed %d: %+v", seed, st)
			if st.Allocations == 0 || st.Released == 0 {
				t.Errorf("seed %d checked nothing much: %+v", seed, st)
			}
		})
	}
}
