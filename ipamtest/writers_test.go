package ipamtest_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/ipamkit/ipam/store/filestore"
	"github.com/ipamkit/ipam/store/memstore"
)

var (
	writersSeeds     = flag.Int("writers.seeds", 1000, "how many seeded histories TestManyWriters runs over memstore")
	writersHostLocal = flag.Int("writers.hostlocal", 50, "how many more seeded histories TestManyWriters runs host-local style over store/filestore, two agents in other processes")
	writersFirst     = flag.Uint64("writers.first", 1, "the first seed TestManyWriters runs over memstore; it runs writers.seeds seeds from it, then the host-local ones after them")
	writersSeed      = flag.Uint64("writers.seed", 0, "replay only this seed of TestManyWriters (a host-local one if it comes after the memstore seeds that -writers.first and -writers.seeds give), printing its whole history")
	writersFailFast  = flag.Bool("writers.failfast", false, "stop TestManyWriters at the first seed that fails")
	writersStore     = flag.String("writers.store", "", "run TestManyWriters with this broken Store wrapped around every agent's (see storeMutants)")
)

// agentEnv, set in the environment of the test binary, makes it serve as a
// remote agent (ipamtest.ServeAgent) instead of running the tests.
const agentEnv = "IPAMTEST_REMOTE_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) != "" {
		if err := ipamtest.ServeAgent(os.Stdin, os.Stdout, openFileBackend); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fileBackend is what a remote agent needs to open a filestore instance on
// the history's directory.
type fileBackend struct {
	Dir   string           `json:"dir"`
	Pools []filestore.Pool `json:"pools"`
}

func openFileBackend(backend string) (store.Store, error) {
	var b fileBackend
	if err := json.Unmarshal([]byte(backend), &b); err != nil {
		return nil, fmt.Errorf("backend %q: %w", backend, err)
	}
	return filestore.Open(b.Dir, filestore.Options{Pools: b.Pools})
}

// fileBackendOf maps the pools of a host-local history onto one network
// directory: each pool owns the subnets of its ranges (its cursor file is
// last_reserved_ip.<i>), which it never leaves (see HostLocalOptions).
func fileBackendOf(dir string, pools []*ipam.Pool) fileBackend {
	b := fileBackend{Dir: dir}
	for i, p := range pools {
		fp := filestore.Pool{Name: p.Name, Index: i}
		for _, r := range p.Ranges {
			if pfx := r.Subnet.Masked(); !slices.Contains(fp.Prefixes, pfx) {
				fp.Prefixes = append(fp.Prefixes, pfx)
			}
		}
		b.Pools = append(b.Pools, fp)
	}
	return b
}

// startAgents starts n copies of the test binary as remote agents.
func startAgents(t testing.TB, n int) []*ipamtest.RemoteAgent {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	var out []*ipamtest.RemoteAgent
	for range n {
		cmd := exec.Command(exe)
		// A race-enabled binary sleeps a second before exiting unless told not to.
		cmd.Env = append(os.Environ(), agentEnv+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
		cmd.Stderr = os.Stderr
		r, err := ipamtest.StartRemoteAgent(cmd)
		require.NoError(t, err)
		out = append(out, r)
	}
	t.Cleanup(func() {
		for _, r := range out {
			if err := r.Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return out
}

// writersRun is one history of TestManyWriters: its seed, and for a
// host-local one the directory and remote agents it uses.
type writersRun struct {
	seed   uint64
	dir    string                  // host-local: the network directory
	remote []*ipamtest.RemoteAgent // host-local: agents in other processes
	broken func(store.Store) store.Store
}

// options returns the history's options, with its Stores opened; close
// closes them.
func (r writersRun) options() (o ipamtest.SimOptions, close func() error, err error) {
	if r.dir == "" {
		o = ipamtest.WritersOptions(r.seed)
		if r.broken != nil {
			base := memstore.New()
			o.Store = base
			o.OpenStore = func() (store.Store, error) { return r.broken(base.Open()), nil }
		}
		return o, func() error { return nil }, nil
	}
	o = ipamtest.HostLocalOptions(r.seed)
	b := fileBackendOf(r.dir, o.Pools)
	doc, err := json.Marshal(b)
	if err != nil {
		return o, nil, err
	}
	checker, err := filestore.Open(b.Dir, filestore.Options{Pools: b.Pools})
	if err != nil {
		return o, nil, err
	}
	o.Store = checker
	o.OpenStore = func() (store.Store, error) {
		st, err := filestore.Open(b.Dir, filestore.Options{Pools: b.Pools})
		if err != nil || r.broken == nil {
			return st, err
		}
		return r.broken(st), nil
	}
	o.Remote, o.Backend = r.remote, string(doc)
	return o, checker.Close, nil
}

// run runs the history; stats are what it did.
func (r writersRun) run(steps int) (ipamtest.SimStats, error) {
	o, closeStores, err := r.options()
	if err != nil {
		return ipamtest.SimStats{}, err
	}
	defer closeStores()
	s, err := ipamtest.NewSim(r.seed, o)
	if err != nil {
		return ipamtest.SimStats{}, err
	}
	defer s.Close()
	err = s.Run(steps)
	return s.Stats(), err
}

// TestManyWriters runs the many-writers mode (SimOptions.Writers):
// -writers.seeds histories of -sim.steps steps over memstore, with the
// options WritersOptions draws from each seed, then -writers.hostlocal
// histories host-local style over store/filestore, with HostLocalOptions,
// two in-process agents each on a filestore instance of its own and two
// agents in other processes (this test binary, serving ipamtest.ServeAgent)
// on the same directory. Each checks every invariant after every step,
// every Lookup against the Store's Owned, and, after the final release
// (Drain), that the Store holds nothing. A failure names the seed and the
// step; -writers.seed=N replays one seed and logs its whole history.
func TestManyWriters(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	seeds, hostLocal := *writersSeeds, *writersHostLocal
	if testing.Short() {
		seeds, hostLocal = min(seeds, 100), min(hostLocal, 5)
	}
	var broken func(store.Store) store.Store
	if *writersStore != "" {
		m, ok := storeMutants[*writersStore]
		require.True(t, ok, "no broken Store %q", *writersStore)
		broken = m
	}
	if *writersSeed != 0 {
		seeds, hostLocal = 1, 0
		if *writersSeed >= *writersFirst+uint64(*writersSeeds) {
			seeds, hostLocal = 0, 1
		}
	}
	var (
		next     atomic.Int64
		stop     atomic.Bool
		mu       sync.Mutex
		total    = ipamtest.SimStats{Events: map[ipamtest.Event]int{}}
		hlTotal  = ipamtest.SimStats{Events: map[ipamtest.Event]int{}}
		failures []uint64
		wg       sync.WaitGroup
	)
	workers := runtime.GOMAXPROCS(0)
	for range workers {
		wg.Go(func() {
			var remote []*ipamtest.RemoteAgent // started on the first host-local history
			for !stop.Load() {
				i := int(next.Add(1)) - 1
				if i >= seeds+hostLocal {
					return
				}
				r := writersRun{seed: *writersFirst + uint64(i), broken: broken}
				if *writersSeed != 0 {
					r.seed = *writersSeed
				}
				if i >= seeds {
					if remote == nil {
						remote = startAgents(t, 2)
					}
					r.dir = filepath.Join(t.TempDir(), "net")
					r.remote = remote
				}
				if *writersSeed != 0 {
					replayWriters(t, r)
					return
				}
				st, err := r.run(*simSteps)
				mu.Lock()
				if err != nil {
					failures = append(failures, r.seed)
					if len(failures) <= 3 {
						t.Error(err)
					}
					if *writersFailFast {
						stop.Store(true)
					}
				}
				if r.dir == "" {
					addStats(&total, st)
				} else {
					addStats(&hlTotal, st)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if *writersSeed != 0 {
		return
	}
	if len(failures) > 0 {
		slices.Sort(failures)
		t.Fatalf("%d of %d seeds failed: %v (replay one with -run TestManyWriters -writers.seed=N)", len(failures), seeds+hostLocal, failures)
	}
	first := *writersFirst
	t.Logf("memstore: %d seeds (%d to %d) x %d steps: %+v", seeds, first, first+uint64(seeds)-1, *simSteps, total)
	t.Logf("filestore, host-local style, two more agents in other processes: %d seeds (%d to %d) x %d steps: %+v",
		hostLocal, first+uint64(seeds), first+uint64(seeds+hostLocal)-1, *simSteps, hlTotal)
	// The runs must have exercised what they are meant to check.
	for name, n := range map[string]int{
		"lookups": total.Lookups, "imports": total.Imports, "adopted imports": total.Adopted,
		"interleaved operations": total.Interleaved, "stolen addresses": total.Stolen,
		"overlapping pools refused": total.Refused, "agent restarts": total.Events[ipamtest.EventAgentRestart],
		"garbage collections": total.Collected, "exhaustion": total.Exhausted, "repeated ADDs": total.Repeats,
	} {
		require.Positive(t, n, name)
	}
	if hostLocal > 0 {
		for name, n := range map[string]int{
			"host-local lookups": hlTotal.Lookups, "legacy imports": hlTotal.Imports, "legacy claims served": hlTotal.Adopted,
			"host-local interleaved operations": hlTotal.Interleaved, "host-local repeated ADDs": hlTotal.Repeats,
		} {
			require.Positive(t, n, name)
		}
	}
}

// replayWriters runs one history keeping all of it, and logs it.
func replayWriters(t *testing.T, r writersRun) {
	o, closeStores, err := r.options()
	require.NoError(t, err)
	defer closeStores()
	hist, err := ipamtest.Replay(r.seed, o, *simSteps)
	t.Logf("history of seed %d:\n%s", r.seed, strings.Join(hist, "\n"))
	if err != nil {
		var v *ipamtest.Violation
		if errors.As(err, &v) {
			t.Fatalf("seed %d, step %d: invariant %q: %s", v.Seed, v.Step, v.Invariant, v.Detail)
		}
		t.Fatal(err)
	}
}

// TestWritersReplayIsDeterministic: in the many-writers mode too, the same
// seed and options give the same history, byte for byte, interleavings
// included.
func TestWritersReplayIsDeterministic(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		a, errA := ipamtest.Replay(seed, ipamtest.WritersOptions(seed), 500)
		b, errB := ipamtest.Replay(seed, ipamtest.WritersOptions(seed), 500)
		require.Equal(t, fmt.Sprint(errA), fmt.Sprint(errB))
		require.Equal(t, strings.Join(a, "\n"), strings.Join(b, "\n"), "seed %d", seed)
		require.True(t, slices.ContainsFunc(a, func(l string) bool { return strings.Contains(l, "(during agent") }), "seed %d interleaved nothing", seed)
	}
}
