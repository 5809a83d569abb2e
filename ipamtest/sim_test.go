package ipamtest_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

var (
	simSeeds  = flag.Int("sim.seeds", 1000, "how many seeded histories TestSim runs")
	simSteps  = flag.Int("sim.steps", 1000, "how many steps each history of TestSim takes")
	simFirst  = flag.Uint64("sim.first", 1, "the first seed TestSim runs; it runs sim.seeds seeds from it")
	simSeed   = flag.Uint64("sim.seed", 0, "replay only this seed of TestSim, printing its whole history")
	simAgents = flag.Int("sim.agents", 300, "how many more seeds TestSimAgents runs, beyond those it lists")
)

// TestSim runs -sim.seeds seeded histories of -sim.steps steps each, with
// the options RandomOptions draws from each seed, checking the invariants
// after every step and leaks after settling. A failure names the seed and
// the step; -sim.seed=N replays one seed and logs its whole history.
func TestSim(t *testing.T) {
	if *simSeed != 0 {
		replayOne(t, *simSeed, *simSteps)
		return
	}
	// The simulator allocates freely; collect garbage less often.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	seeds := *simSeeds
	if testing.Short() {
		seeds = min(seeds, 100)
	}
	var (
		next     atomic.Uint64
		mu       sync.Mutex
		total    ipamtest.SimStats
		failures []uint64
	)
	total.Events = map[ipamtest.Event]int{}
	next.Store(*simFirst)
	last := *simFirst + uint64(seeds)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				seed := next.Add(1) - 1
				if seed >= last {
					return
				}
				s, err := ipamtest.NewSim(seed, ipamtest.RandomOptions(seed))
				if err != nil {
					t.Errorf("seed %d: %v", seed, err)
					return
				}
				err = s.Run(*simSteps)
				st := s.Stats()
				mu.Lock()
				if err != nil {
					failures = append(failures, seed)
					if len(failures) <= 3 {
						t.Error(err)
					}
				}
				addStats(&total, st)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		slices.Sort(failures)
		t.Fatalf("%d of %d seeds failed: %v (replay one with -run TestSim -sim.seed=N)", len(failures), seeds, failures)
	}
	t.Logf("%d seeds x %d steps: %+v", seeds, *simSteps, total)
	// The runs must have exercised what they are meant to check.
	require.Positive(t, total.Exhausted, "no allocation ever ran out of addresses")
	require.Positive(t, total.Repeats, "no repeated ADD was checked")
	require.Positive(t, total.Sticky, "no StatefulSet pod came back for its addresses")
	require.Positive(t, total.Collected, "garbage collection never released anything")
	require.Positive(t, total.LostDELs)
	for e := ipamtest.EventCreate; e <= ipamtest.EventGC; e++ {
		require.Positive(t, total.Events[e], "event %s never happened", e)
	}
}

func addStats(total *ipamtest.SimStats, st ipamtest.SimStats) {
	for k, v := range st.Events {
		total.Events[k] += v
	}
	total.Allocations += st.Allocations
	total.Exhausted += st.Exhausted
	total.Repeats += st.Repeats
	total.Sticky += st.Sticky
	total.Released += st.Released
	total.Collected += st.Collected
	total.LostDELs += st.LostDELs
	total.FullChecks += st.FullChecks
	total.Lookups += st.Lookups
	total.Imports += st.Imports
	total.Adopted += st.Adopted
	total.Interleaved += st.Interleaved
	total.Stolen += st.Stolen
	total.Refused += st.Refused
}

func replayOne(t *testing.T, seed uint64, steps int) {
	hist, err := ipamtest.Replay(seed, ipamtest.RandomOptions(seed), steps)
	o := ipamtest.RandomOptions(seed)
	for _, p := range o.Pools {
		t.Logf("pool %s: %v %s default=%t nodeName=%v nodeAffinity=%v", p.Name, p.Ranges, p.Strategy, p.Default, p.NodeName, p.NodeAffinity)
	}
	o.Pools = nil
	t.Logf("seed %d options: %+v", seed, o)
	t.Logf("history of seed %d:\n%s", seed, strings.Join(hist, "\n"))
	if err != nil {
		var v *ipamtest.Violation
		if errors.As(err, &v) {
			t.Fatalf("seed %d, step %d: invariant %q: %s", v.Seed, v.Step, v.Invariant, v.Detail)
		}
		t.Fatal(err)
	}
}

// forgetfulStore is a broken Store: List shows no claims, and Create
// overwrites a claim instead of refusing it. An Allocator that loads or
// reloads a pool from it believes the pool empty and hands out addresses
// that live pods hold.
type forgetfulStore struct{ *memstore.Store }

func (forgetfulStore) List(context.Context, string) ([]store.Claim, error) {
	return []store.Claim{}, nil
}

func (f forgetfulStore) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	if old, err := f.Store.Get(ctx, c.Pool, c.IP); err == nil {
		return f.Store.Update(ctx, c, old.Revision)
	}
	return f.Store.Create(ctx, c)
}

// CreateAndSetCursor overwrites as Create does: the embedded memstore's
// would refuse.
func (f forgetfulStore) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	c, err := f.Create(ctx, c)
	if err == nil {
		err = f.SetCursor(ctx, c.Pool, c.IP)
	}
	return c, err
}

// CreateExclusive checks what the owner holds, as memstore's does, but then
// overwrites as Create does.
func (f forgetfulStore) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	held, err := f.Owned(ctx, c.Owner.Query())
	if err != nil {
		return store.Claim{}, err
	}
	held = slices.DeleteFunc(held, func(h store.Claim) bool { return !store.Conflicts(c, h) })
	if len(held) > 0 {
		return store.Claim{}, &store.HeldError{Claim: c, Held: held}
	}
	return f.CreateAndSetCursor(ctx, c)
}

// lyingStore is a broken Store whose Delete reports success and deletes
// nothing.
type lyingStore struct{ *memstore.Store }

func (lyingStore) Delete(context.Context, string, netip.Addr, int64) error { return nil }

// renamingStore is a broken Store whose List garbles the owners' pod names,
// so that garbage collection finds no pod for any claim and releases live
// pods' addresses.
type renamingStore struct{ *memstore.Store }

func (r renamingStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	cs, err := r.Store.List(ctx, pool)
	for i := range cs {
		cs[i].Owner.Name = "renamed-" + cs[i].Owner.Name
	}
	return cs, err
}

// blindStore is a broken Store whose List shows nothing once blind is set,
// so that garbage collection from then on finds nothing to collect.
type blindStore struct {
	*memstore.Store
	blind *bool
}

func (b blindStore) List(ctx context.Context, pool string) ([]store.Claim, error) {
	if *b.blind {
		return []store.Claim{}, nil
	}
	return b.Store.List(ctx, pool)
}

// TestSimCatchesBrokenStores runs the simulator against Stores that break
// the contract and requires the violation each must cause, named with its
// seed and step, and reproduced by Replay.
func TestSimCatchesBrokenStores(t *testing.T) {
	const seed, steps = 7, 2000
	// Deployments only, no lost DELs, no node failures: no claim outlives
	// its pod, so an address handed out twice or released wrongly can only
	// be a live pod's. No agent restarts either: an Allocator reloaded from a
	// forgetful Store forgets what running pods hold, and the repeated ADD
	// check would trip first.
	liveOnly := func(o *ipamtest.SimOptions) {
		o.StatefulSets = -1
		o.Mix = ipamtest.DefaultMix()
		o.Mix.DeleteLost, o.Mix.NodeFail, o.Mix.AgentRestart = 0, 0, 0
	}
	blind := new(bool)
	tests := []struct {
		name   string
		store  func() store.Store
		tweak  func(*ipamtest.SimOptions)
		settle func() // called before Settle; nil: Replay must reproduce
		want   ipamtest.Invariant
	}{
		{"create overwrites, list forgets", func() store.Store { return forgetfulStore{memstore.New()} }, liveOnly, nil, ipamtest.InvariantUnique},
		{"list garbles owners", func() store.Store { return renamingStore{memstore.New()} }, liveOnly, nil, ipamtest.InvariantKept},
		{"delete lies", func() store.Store { return lyingStore{memstore.New()} }, nil, nil, ipamtest.InvariantStore},
		{
			"list goes blind before settling",
			func() store.Store { return blindStore{memstore.New(), blind} },
			func(o *ipamtest.SimOptions) {
				o.Mix = ipamtest.DefaultMix()
				o.Mix.GC = 0 // lost DELs pile up until Settle
			},
			func() { *blind = true },
			ipamtest.InvariantNoLeak,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			*blind = false
			opts := func() ipamtest.SimOptions {
				o := ipamtest.RandomOptions(seed)
				o.Store = tt.store()
				o.CheckEvery = -1 // only what each step touches: the step that breaks is the one reported
				if tt.tweak != nil {
					tt.tweak(&o)
				}
				return o
			}
			s, err := ipamtest.NewSim(seed, opts())
			require.NoError(t, err)
			n := steps
			if tt.settle != nil {
				n = 300
			}
			for range n {
				if err = s.Step(); err != nil {
					break
				}
			}
			if err == nil {
				if tt.settle != nil {
					tt.settle()
				}
				err = s.Settle()
			}
			var v *ipamtest.Violation
			require.ErrorAs(t, err, &v)
			require.ErrorIs(t, err, ipamtest.ErrViolation)
			require.Equal(t, tt.want, v.Invariant, "%v", err)
			require.Equal(t, uint64(seed), v.Seed)
			require.Equal(t, s.Steps(), v.Step)
			require.Equal(t, tt.settle != nil, v.AtSettle)
			require.NotEmpty(t, v.History)
			require.LessOrEqual(t, len(v.History), 20)
			require.Contains(t, v.History[len(v.History)-1], fmt.Sprintf("step %d ", v.Step))
			require.Contains(t, err.Error(), fmt.Sprintf("seed %d, step %d", seed, v.Step))
			t.Logf("%v", err)
			if tt.settle != nil {
				return
			}

			// Replay reproduces it: the same violation at the same step,
			// after the same events.
			hist, rerr := ipamtest.Replay(seed, opts(), steps)
			var rv *ipamtest.Violation
			require.ErrorAs(t, rerr, &rv)
			require.Equal(t, v.Step, rv.Step)
			require.Equal(t, v.Detail, rv.Detail)
			require.Equal(t, v.History, hist[len(hist)-len(v.History):])
		})
	}
}

// TestReplayIsDeterministic: the same seed and options give the same
// history, byte for byte; another seed gives another.
func TestReplayIsDeterministic(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 99} {
		a, err := ipamtest.Replay(seed, ipamtest.RandomOptions(seed), 1000)
		require.NoError(t, err)
		b, err := ipamtest.Replay(seed, ipamtest.RandomOptions(seed), 1000)
		require.NoError(t, err)
		require.Equal(t, strings.Join(a, "\n"), strings.Join(b, "\n"), "seed %d", seed)
		require.Len(t, a, len(b))
		c, err := ipamtest.Replay(seed+1000, ipamtest.RandomOptions(seed+1000), 1000)
		require.NoError(t, err)
		require.NotEqual(t, a, c)
	}
}

// TestRandomOptionsVary: the seeds TestSim runs cover both strategies, IPv6,
// quarantines, and every garbage collection option RandomOptions draws.
func TestRandomOptionsVary(t *testing.T) {
	var strategies [2]int
	var v6, quarantine, delay, skew, notReady, noSTS, nodeBound int
	for seed := uint64(1); seed <= 1000; seed++ {
		o := ipamtest.RandomOptions(seed)
		for _, p := range o.Pools {
			strategies[p.Strategy]++
			if p.Family() == 6 {
				v6++
			}
			if len(p.NodeName) > 0 || p.NodeAffinity != nil {
				nodeBound++
			}
		}
		count := func(n *int, ok bool) {
			if ok {
				*n++
			}
		}
		count(&quarantine, o.Quarantine > 0)
		count(&delay, o.GC.AdditionalGraceDelay > 0)
		count(&skew, o.GC.ClockSkew > 0)
		count(&notReady, o.GC.DisableTerminatingOnNotReadyNode)
		count(&noSTS, o.GC.DisableStatefulSet)
		require.Equal(t, o, func() ipamtest.SimOptions { return ipamtest.RandomOptions(seed) }(), "seed %d", seed)
	}
	for name, n := range map[string]int{
		"round-robin": strategies[ipam.RoundRobin], "lowest-free": strategies[ipam.LowestFree], "IPv6 pools": v6,
		"node-bound pools": nodeBound, "quarantine": quarantine, "grace delay": delay, "clock skew": skew,
		"DisableTerminatingOnNotReadyNode": notReady, "DisableStatefulSet": noSTS,
	} {
		require.Greater(t, n, 50, name)
	}
}
