package etcdtest_test

import (
	"flag"
	"fmt"
	"testing"

	"github.com/ipamkit/ipam/ipamtest"
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
