package etcdtest_test

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

var (
	faultCycles = flag.Int("etcdtest.faults", 20,
		"member stops and restarts in TestFaults (every other one the leader's)")
	faultPause = flag.Duration("etcdtest.faultpause", 100*time.Millisecond,
		"how long TestFaults keeps a member stopped, and then running, per cycle (each time ±50%)")
)

// trio returns the three-member cluster of the fault tests, with every
// member running: fast ticks, so that elections after a kill are quick,
// and history compacted every 2 s, which keeps restarts fast and makes
// watches that resume after a kill find their history gone now and then.
// Its members run in processes of their own, so that Kill is a real crash
// (SIGKILL): stopping a member at once inside this process now and then
// panics etcd (etcd-io/etcd#14256, #17223).
func trio(t testing.TB) *etcdtest.Cluster {
	return trioCluster.get(t)
}

var trioCluster = &sharedCluster{opts: etcdtest.Options{Members: 3, CompactEvery: 2 * time.Second, Processes: true}}

// faultPools are the pools the Allocators of TestFaults share.
var faultPools = []string{
	`{"name": "f1", "ranges": [{"subnet": "10.50.0.0/25"}]}`,
	`{"name": "f2", "ranges": [{"subnet": "10.51.0.0/25"}, {"subnet": "10.51.1.0/26"}]}`,
}

// ledgerEntry is one step of a worker: an allocation that returned an
// address, a release that returned nil, an allocation that failed (its owner
// may hold an address nobody acknowledged), or a release that failed (it may
// have released the address all the same).
type ledgerEntry struct {
	Worker string    `json:"w"`
	Op     string    `json:"op"` // "alloc", "release", "failed", "unreleased"
	Owner  string    `json:"owner"`
	Pool   string    `json:"pool,omitempty"`
	IP     string    `json:"ip,omitempty"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Err    string    `json:"err,omitempty"`
	// Version is, for the release of an owner whose allocation failed,
	// the version of its pool read just before the release started: a
	// claim of the owner at that revision or older was written before the
	// release, which must find it.
	Version uint64 `json:"version,omitempty"`
}

// workerConfig is what a worker needs: where the cluster is and who it is.
type workerConfig struct {
	Endpoints []string
	Prefix    string
	Name      string
	Seed      uint64
	// Follow runs the Allocator's Follow (etcdstore's Watch) beside it.
	Follow bool
	// Timeout is the Store's Options.Timeout; zero means a second.
	Timeout time.Duration
}

// faultAllocator returns an Allocator over etcdstore for cfg.
func faultAllocator(cfg workerConfig) (*ipam.Allocator, *etcdstore.Store, error) {
	s, err := etcdstore.New(etcdstore.Options{Endpoints: cfg.Endpoints, Prefix: cfg.Prefix, Timeout: cmp.Or(cfg.Timeout, time.Second)})
	if err != nil {
		return nil, nil, err
	}
	var pools []*ipam.Pool
	for _, p := range faultPools {
		pools = append(pools, ipam.MustParsePool(p))
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		return nil, nil, err
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: s})
	return a, s, err
}

// runWorker allocates and releases addresses for owners of its own, one
// fresh owner per allocation, until stop is closed, and reports each step
// to record. It keeps between 2 and 6 owners holding addresses. An owner
// whose allocation failed is released too, as a CNI runtime calls DEL after
// a failed ADD, until the release succeeds; before each try, the worker
// reads the version of the pool the allocation asked for.
func runWorker(cfg workerConfig, stop <-chan struct{}, record func(ledgerEntry)) error {
	a, s, err := faultAllocator(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	if cfg.Follow {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Follow(ctx) }()
		defer func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				fmt.Fprintf(os.Stderr, "worker %s: Follow: %v\n", cfg.Name, err)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	var held []string       // owners holding an acknowledged address
	var dirty []ledgerEntry // failed allocations, whose owners to release
	var n int
	// release releases owner; failed, if set, is its failed allocation.
	release := func(owner string, failed *ledgerEntry) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var version uint64
		if failed != nil {
			var err error
			if version, err = s.PoolVersion(ctx, failed.Pool); err != nil {
				return false // try again
			}
		}
		start := time.Now()
		err := a.Release(ctx, store.Owner{Namespace: "faults", Name: owner, UID: owner})
		if err != nil {
			// It may have been applied all the same.
			record(ledgerEntry{Worker: cfg.Name, Op: "unreleased", Owner: owner, Start: start, End: time.Now(), Err: err.Error()})
			return false
		}
		record(ledgerEntry{Worker: cfg.Name, Op: "release", Owner: owner, Start: start, End: time.Now(), Version: version})
		return true
	}
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		if len(dirty) > 0 {
			if release(dirty[0].Owner, &dirty[0]) {
				dirty = dirty[1:]
			}
			continue
		}
		if len(held) >= 6 || len(held) > 2 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			if release(held[i], nil) {
				held = slices.Delete(held, i, i+1)
			}
			continue
		}
		n++
		owner := fmt.Sprintf("%s-%d", cfg.Name, n)
		pool := []string{"f1", "f2"}[rng.IntN(2)]
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		res, err := a.Allocate(ctx, ipam.Request{Namespace: "faults", Name: owner, UID: owner,
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}})
		cancel()
		end := time.Now()
		if err != nil {
			e := ledgerEntry{Worker: cfg.Name, Op: "failed", Owner: owner, Pool: pool, Start: start, End: end, Err: err.Error()}
			record(e)
			dirty = append(dirty, e)
			continue
		}
		ip := res.IPs[0]
		record(ledgerEntry{Worker: cfg.Name, Op: "alloc", Owner: owner, Pool: ip.Pool, IP: ip.Address.Addr().String(),
			Start: start, End: end})
		held = append(held, owner)
	}
}

// Environment of a child worker process of TestFaults.
const (
	envEndpoints = "ETCDTEST_ENDPOINTS"
	envPrefix    = "ETCDTEST_PREFIX"
	envSeed      = "ETCDTEST_SEED"
	envFollow    = "ETCDTEST_FOLLOW"
	ledgerMark   = "LEDGER "
)

// TestFaultChild is a worker of TestFaults in a process of its own: it runs
// until its standard input closes, and writes its ledger to standard output.
func TestFaultChild(t *testing.T) {
	name := os.Getenv(childEnv)
	if name == "" {
		t.Skip("run by TestFaults")
	}
	seed, _ := strconv.ParseUint(os.Getenv(envSeed), 10, 64)
	follow, _ := strconv.ParseBool(os.Getenv(envFollow))
	cfg := workerConfig{Endpoints: strings.Split(os.Getenv(envEndpoints), ","), Prefix: os.Getenv(envPrefix),
		Name: name, Seed: seed, Follow: follow}
	stop := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(stop)
	}()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	err := runWorker(cfg, stop, func(e ledgerEntry) {
		b, _ := json.Marshal(e)
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s%s\n", ledgerMark, b)
		out.Flush()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startChild starts a worker in a child process; wait stops it and returns
// its ledger.
func startChild(t *testing.T, cfg workerConfig) (wait func() []ledgerEntry) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestFaultChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+cfg.Name, envEndpoints+"="+strings.Join(cfg.Endpoints, ","),
		envPrefix+"="+cfg.Prefix, envSeed+"="+strconv.FormatUint(cfg.Seed, 10), envFollow+"="+strconv.FormatBool(cfg.Follow))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ledger []ledgerEntry
	var other strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), ledgerMark)
			if !ok {
				other.WriteString(sc.Text() + "\n")
				continue
			}
			var e ledgerEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Errorf("child %s: bad ledger line %q: %v", cfg.Name, line, err)
				continue
			}
			ledger = append(ledger, e)
		}
	}()
	return func() []ledgerEntry {
		stdin.Close()
		<-read
		if err := cmd.Wait(); err != nil {
			t.Errorf("child %s: %v\nstdout:\n%s\nstderr:\n%s", cfg.Name, err, other.String(), stderr.String())
		}
		return ledger
	}
}

// TestFaults has 8 Allocators, 2 of them in processes of their own, each
// with a client of its own, allocate and release addresses of two shared
// pools while members of a 3-member cluster are stopped without warning and
// restarted (the leader every other time), then loses quorum and checks that
// every call fails in time with ErrUnavailable. Then it checks the ledger of
// what every Allocator acknowledged against the Store: no address was held
// by two owners at once, no acknowledged claim was lost, and once every
// owner is released no claim is left.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("stops and restarts etcd members for several seconds")
	}
	c := trio(t)
	t.Logf("%s: start", time.Now().Format(time.StampMilli))
	prefix := newPrefix(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	var mu sync.Mutex
	var ledger []ledgerEntry
	record := func(e ledgerEntry) {
		mu.Lock()
		ledger = append(ledger, e)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 6 {
		cfg := workerConfig{Endpoints: c.Endpoints(), Prefix: prefix, Name: fmt.Sprintf("in%d", i), Seed: seed + uint64(i),
			Follow: i%2 == 0}
		wg.Go(func() {
			if err := runWorker(cfg, stop, record); err != nil {
				t.Errorf("worker %s: %v", cfg.Name, err)
			}
		})
	}
	var children []func() []ledgerEntry
	for i := range 2 {
		children = append(children, startChild(t, workerConfig{Endpoints: c.Endpoints(), Prefix: prefix,
			Name: fmt.Sprintf("proc%d", i), Seed: seed + 100 + uint64(i), Follow: i == 0}))
	}

	pause := func() {
		time.Sleep(*faultPause/2 + rand.N(*faultPause))
	}
	var leaders int
	var slowest time.Duration
	for cycle := range *faultCycles {
		pause()
		victim := c.Members[rng.IntN(len(c.Members))]
		if cycle%2 == 0 {
			l, err := c.WaitLeader(leaderWait)
			if err != nil {
				t.Fatalf("cycle %d: %v", cycle, err)
			}
			victim = l
			leaders++
		}
		victim.Kill()
		pause()
		start := time.Now()
		if err := victim.Restart(); err != nil {
			t.Fatalf("cycle %d: restarting %s: %v", cycle, victim.Name, err)
		}
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("slowest restart %s", slowest)
	pause()

	t.Logf("%s: faults done", time.Now().Format(time.StampMilli))
	t.Run("QuorumLost", func(t *testing.T) { quorumLost(t, c, prefix) })
	t.Logf("%s: quorum back", time.Now().Format(time.StampMilli))

	close(stop)
	wg.Wait()
	for _, wait := range children {
		ledger = append(ledger, wait()...)
	}
	if _, err := c.WaitLeader(leaderWait); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: workers stopped", time.Now().Format(time.StampMilli))
	checkLedger(t, c, prefix, ledger)
	t.Logf("%s: checked", time.Now().Format(time.StampMilli))
	t.Logf("%d member stops (%d of the leader), %d ledger entries", *faultCycles, leaders, len(ledger))
}

// quorumLost stops two of c's three members and checks that every call of
// the Store and of an Allocator fails at its deadline with ErrUnavailable,
// then restarts them. The Store's own Timeout is a minute, so that a call
// that ignored its context's deadline (a second) would take a minute; the
// bound allows ten seconds more than the deadline, for a loaded machine
// (with -race, on 2 CPUs shared with the members and the workers).
func quorumLost(t *testing.T, c *etcdtest.Cluster, prefix string) {
	l, err := c.WaitLeader(leaderWait)
	if err != nil {
		t.Fatal(err)
	}
	stopped := []*etcdtest.Member{l}
	for _, m := range c.Members {
		if m != l && len(stopped) < 2 {
			stopped = append(stopped, m)
		}
	}
	var wg sync.WaitGroup
	for _, m := range stopped {
		wg.Go(m.Kill)
	}
	wg.Wait()
	defer func() {
		for _, m := range stopped {
			if err := m.Restart(); err != nil {
				t.Fatalf("restarting %s: %v", m.Name, err)
			}
		}
	}()
	a, s, err := faultAllocator(workerConfig{Endpoints: c.Endpoints(), Prefix: prefix, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const limit, slack = time.Second, 10 * time.Second
	calls := append(storeCalls(s),
		storeCall{"Allocator.Allocate", "", func(ctx context.Context) error {
			_, err := a.Allocate(ctx, ipam.Request{Namespace: "faults", Name: "q", UID: "q",
				Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"f1"}}}})
			return err
		}},
		storeCall{"Allocator.Release", "", func(ctx context.Context) error {
			return a.Release(ctx, store.Owner{Namespace: "faults", Name: "q", UID: "q"})
		}},
	)
	for _, call := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			err := call.f(ctx)
			took := time.Since(start)
			switch {
			case errors.Is(err, etcdstore.ErrUnavailable):
			case call.names == "" && errors.Is(err, context.DeadlineExceeded):
				// An Allocator may spend its deadline on a read it can
				// do without (a cursor) and then report its context's
				// error.
			default:
				t.Errorf("%s without quorum: %v, want an error wrapping etcdstore.ErrUnavailable", call.name, err)
			}
			if took > limit+slack {
				t.Errorf("%s without quorum took %s, with a deadline of %s", call.name, took, limit)
			}
		})
	}
	wg.Wait()
}

// ownerFate is what the ledger says of one owner.
type ownerFate struct {
	alloc     *ledgerEntry // the acknowledged allocation, if any
	failed    bool         // an allocation failed
	releaseAt time.Time    // start of the first release attempt; zero if none
	released  bool         // a release was acknowledged
	// version is, if the allocation failed, its pool's version read
	// before the acknowledged release.
	version uint64
}

// fates sorts the ledger by owner, and reports owners allocated twice.
func fates(t *testing.T, ledger []ledgerEntry) map[string]*ownerFate {
	m := map[string]*ownerFate{}
	var allocs, releases, failures, unreleased int
	for i, e := range ledger {
		f := m[e.Owner]
		if f == nil {
			f = &ownerFate{}
			m[e.Owner] = f
		}
		switch e.Op {
		case "alloc":
			if f.alloc != nil {
				t.Errorf("owner %s was allocated twice: %s and %s", e.Owner, f.alloc.IP, e.IP)
			}
			f.alloc = &ledger[i]
			allocs++
		case "failed":
			f.failed = true
			failures++
		case "release", "unreleased":
			if f.releaseAt.IsZero() || e.Start.Before(f.releaseAt) {
				f.releaseAt = e.Start
			}
			if e.Op == "release" {
				f.released = true
				f.version = e.Version
				releases++
			} else {
				unreleased++
			}
		}
	}
	t.Logf("%d allocations, %d releases acknowledged; %d allocations and %d releases failed",
		allocs, releases, failures, unreleased)
	if allocs < 100 {
		t.Errorf("only %d allocations in the run: too few to mean anything", allocs)
	}
	return m
}

// checkLedger checks what the workers acknowledged against the Store, then
// releases every owner through a fresh Allocator and checks that nothing is
// left.
func checkLedger(t *testing.T, c *etcdtest.Cluster, prefix string, ledger []ledgerEntry) {
	owners := fates(t, ledger)

	// No address held by two owners at once: an owner holds its address
	// from the end of its allocation to the start of its first release
	// attempt (one that failed may have released it).
	type span struct {
		owner    string
		from, to time.Time
	}
	byAddr := map[string][]span{}
	for owner, f := range owners {
		if f.alloc == nil {
			continue
		}
		to := f.releaseAt
		if to.IsZero() {
			to = time.Now().Add(time.Hour)
		}
		k := f.alloc.Pool + "/" + f.alloc.IP
		byAddr[k] = append(byAddr[k], span{owner, f.alloc.End, to})
	}
	var dups int
	for addr, spans := range byAddr {
		slices.SortFunc(spans, func(a, b span) int { return a.from.Compare(b.from) })
		for i := 1; i < len(spans); i++ {
			if spans[i].from.Before(spans[i-1].to) {
				dups++
				t.Errorf("%s held twice: by %s from %s and by %s from %s, before %s's release started at %s",
					addr, spans[i-1].owner, spans[i-1].from.Format(time.StampMicro), spans[i].owner,
					spans[i].from.Format(time.StampMicro), spans[i-1].owner, spans[i-1].to.Format(time.StampMicro))
			}
		}
	}

	// No acknowledged claim lost: every owner acknowledged an address and
	// never released has its claim; every owner whose release was
	// acknowledged has none, but for the claim of a failed allocation
	// written after the release began (newer than its pool's version read
	// before it), which the release of every owner below must find.
	// The checks' Stores wait up to a minute for each request, and try
	// again when the cluster is unavailable (as a CNI runtime repeats a
	// DEL that got code 11): the cluster has its quorum back, but on a
	// loaded machine its members miss heartbeats and elect leaders again.
	s, err := etcdstore.New(etcdstore.Options{Endpoints: c.Endpoints(), Prefix: prefix, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	var lost, leaked, late atomic.Int64
	var wg sync.WaitGroup
	next := make(chan string)
	for range 8 {
		wg.Go(func() {
			for owner := range next {
				f := owners[owner]
				var got []store.Claim
				err := retryUnavailable(func() (err error) {
					got, err = s.Owned(ctx, store.ByUID(owner))
					return err
				})
				if err != nil {
					t.Errorf("Owned(%s): %v", owner, err)
					continue
				}
				switch {
				case f.alloc != nil && f.releaseAt.IsZero():
					a := f.alloc
					if !slices.ContainsFunc(got, func(c store.Claim) bool { return c.Pool == a.Pool && c.IP.String() == a.IP }) {
						lost.Add(1)
						t.Errorf("owner %s was acknowledged %s/%s at %s, but the Store has %v", owner, a.Pool, a.IP,
							a.End.Format(time.StampMicro), got)
					}
				case f.released && len(got) > 0 && f.alloc == nil && writtenAfter(got, f.version):
					// The failed allocation's write was applied after
					// the release had begun: etcd had taken it before
					// the client gave up, and committed it once it
					// could. Nothing acknowledged it, and the release
					// of every owner below finds it.
					late.Add(1)
					t.Logf("owner %s's allocation failed, and its release was acknowledged at %s, but its claims %v were written later (pool version %d before the release)",
						owner, f.releaseAt.Format(time.StampMicro), got, f.version)
				case f.released && len(got) > 0:
					// Also for an owner whose allocation failed after
					// its claim was written: its release must find it.
					leaked.Add(1)
					t.Errorf("owner %s's release was acknowledged at %s, but the Store still has %v",
						owner, f.releaseAt.Format(time.StampMicro), got)
				}
			}
		})
	}
	for owner := range owners {
		next <- owner
	}
	close(next)
	wg.Wait()

	// Release every owner, as a new process would, and find nothing left:
	// neither claims nor owner records.
	a, s2, err := faultAllocator(workerConfig{Endpoints: c.Endpoints(), Prefix: prefix, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	next = make(chan string)
	for range 8 {
		wg.Go(func() {
			for owner := range next {
				err := retryUnavailable(func() error {
					return a.Release(ctx, store.Owner{Namespace: "faults", Name: owner, UID: owner})
				})
				if err != nil {
					t.Errorf("final Release(%s): %v", owner, err)
				}
			}
		})
	}
	for owner := range owners {
		next <- owner
	}
	close(next)
	wg.Wait()
	for _, pool := range []string{"f1", "f2"} {
		var left []store.Claim
		err := retryUnavailable(func() (err error) {
			left, err = s.List(ctx, pool)
			return err
		})
		if err != nil || len(left) > 0 {
			t.Errorf("pool %s after every owner released: %v, %v; want no claims", pool, left, err)
		}
	}
	resp, err := rawClient(t, c.Endpoints()).Get(ctx, prefix+"owners/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("owner records left after every owner released: %v, %v", resp, err)
	}
	t.Logf("%d addresses held twice, %d acknowledged claims lost, %d claims kept after their release; %d owners checked",
		dups, lost.Load(), leaked.Load(), len(owners))
	t.Logf("%d failed allocations written after their owner's release", late.Load())
}

// retryUnavailable calls f until it returns an error that does not wrap
// etcdstore.ErrUnavailable, for up to two minutes, and returns its last
// error.
func retryUnavailable(f func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := f()
		if !errors.Is(err, etcdstore.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writtenAfter reports whether every claim in got was written after
// revision version.
func writtenAfter(got []store.Claim, version uint64) bool {
	for _, c := range got {
		if uint64(c.Revision) <= version {
			return false
		}
	}
	return true
}
