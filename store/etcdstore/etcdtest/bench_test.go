package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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

// counting is an etcdstore.Store that counts the conflicts its writes meet:
// creates of a taken address (store.ErrExists), exclusive creates refused
// for what the owner holds (store.ErrHeld), and updates and deletes at a
// stale revision (store.ErrConflict). It keeps every capability of the
// Store it embeds, and overrides every write that can conflict.
type counting struct {
	*etcdstore.Store
	conflicts *atomic.Int64
}

func (c counting) count(err error) {
	if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrHeld) || errors.Is(err, store.ErrConflict) {
		c.conflicts.Add(1)
	}
}

func (c counting) Create(ctx context.Context, cl store.Claim) (store.Claim, error) {
	got, err := c.Store.Create(ctx, cl)
	c.count(err)
	return got, err
}

func (c counting) CreateAndSetCursor(ctx context.Context, cl store.Claim) (store.Claim, error) {
	got, err := c.Store.CreateAndSetCursor(ctx, cl)
	c.count(err)
	return got, err
}

func (c counting) CreateExclusive(ctx context.Context, cl store.Claim) (store.Claim, error) {
	got, err := c.Store.CreateExclusive(ctx, cl)
	c.count(err)
	return got, err
}

func (c counting) Update(ctx context.Context, cl store.Claim, rev int64) (store.Claim, error) {
	got, err := c.Store.Update(ctx, cl, rev)
	c.count(err)
	return got, err
}

func (c counting) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	err := c.Store.Delete(ctx, pool, ip, rev)
	c.count(err)
	return err
}

// parallel runs op from n goroutines, each with its index, once per
// iteration of b.Loop, and returns when every op has returned. The timer
// stops when b.Loop has handed out the last op, before the last n finish:
// they are a negligible part of thousands.
func parallel(b *testing.B, n int, op func(g int) error) {
	work := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for g := range n {
		wg.Go(func() {
			for range work {
				if err := op(g); err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	for b.Loop() {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// claimValue is a value of the size of a claim's, for the raw transactions.
var claimValue = `{"pool":"bench","ip":"10.0.0.1","owner":{"namespace":"default","name":"web-0",` +
	`"uid":"9f2c1a4e-4b7d-4c1e-9a55-0c3c2f6e7a10","containerID":"` + strings.Repeat("c", 64) +
	`","interface":"eth0"},"time":"2024-05-01T12:34:56.789Z"}`

// benchCluster is the cluster of the benchmarks: three members with etcd's
// default ticks, as a cluster in production has them.
var benchCluster = &sharedCluster{opts: benchOptions}

// durableCluster is benchCluster with its members syncing to disk before
// they acknowledge a write, as members in production do.
var durableCluster = &sharedCluster{opts: func() etcdtest.Options { o := benchOptions; o.Fsync = true; return o }()}

// benchOptions are the options of benchCluster and, with Fsync, of
// durableCluster.
var benchOptions = etcdtest.Options{Members: 3, TickMs: 100, ElectionMs: 1000, CompactEvery: 10 * time.Second}

// BenchmarkEtcd compares, on one 3-member cluster in one run, the raw
// create-if-absent transaction on disjoint keys with allocations through
// the public ipam API over etcdstore, by 1 and 8 clients or Allocators,
// each with a client of its own, on one shared pool and on a pool each.
// Each allocation is for a new owner and is not released. conflicts/alloc
// counts the Store writes that found the address taken or the revision
// stale, per successful allocation.
func BenchmarkEtcd(b *testing.B) {
	c := benchCluster.get(b)
	for _, n := range []int{1, 8} {
		b.Run(fmt.Sprintf("raw-txn/disjoint/clients=%d", n), func(b *testing.B) {
			prefix := benchPrefix(b, c.Endpoints())
			clis := make([]*clientv3.Client, n)
			for i := range clis {
				clis[i] = rawClient(b, c.Endpoints())
			}
			var next atomic.Int64
			b.ReportAllocs()
			start := time.Now()
			parallel(b, n, func(g int) error {
				return rawCreate(clis[g], fmt.Sprintf("%skey/%08x", prefix, next.Add(1)))
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "txn/s")
		})
	}
	b.Run("alloc/shared-pool/allocators=8/follow", func(b *testing.B) { benchAllocate(b, c.Endpoints(), 8, true, true, false) })
	// Each Allocator with an Options.Spread of its own, as agents of
	// different nodes would have: they claim from different parts of the
	// shared pool.
	b.Run("alloc/shared-pool/allocators=8/spread", func(b *testing.B) { benchAllocate(b, c.Endpoints(), 8, true, false, true) })
	for _, shared := range []bool{true, false} {
		for _, n := range []int{1, 8} {
			name := fmt.Sprintf("alloc/pool-each/allocators=%d", n)
			if shared {
				name = fmt.Sprintf("alloc/shared-pool/allocators=%d", n)
			}
			b.Run(name, func(b *testing.B) { benchAllocate(b, c.Endpoints(), n, shared, false, false) })
		}
	}
}

// benchPrefix returns a new prefix whose keys are deleted when b ends, so
// that each benchmark finds the cluster as small as the first did.
func benchPrefix(b *testing.B, endpoints []string) string {
	prefix := newPrefix(b)
	cli := rawClient(b, endpoints)
	b.Cleanup(func() {
		if _, err := cli.Delete(context.Background(), prefix, clientv3.WithPrefix()); err != nil {
			b.Errorf("deleting the keys under %s: %v", prefix, err)
		}
	})
	return prefix
}

// rawCreate creates key with a claim-sized value if it is absent, with one
// transaction, as etcdstore's Create does without its owner records.
func rawCreate(cli *clientv3.Client, key string) error {
	resp, err := cli.Txn(context.Background()).
		If(clientv3.Compare(clientv3.Version(key), "=", 0)).
		Then(clientv3.OpPut(key, claimValue)).
		Commit()
	if err == nil && !resp.Succeeded {
		err = fmt.Errorf("key %s exists", key)
	}
	return err
}

// BenchmarkEtcdRounds checks the throughput target against the drift of a
// shared machine, whose speed changes from one second to the next: each
// round has n clients make roundOps raw create-if-absent transactions each,
// on new keys, then n Allocators make roundOps allocations each, on a pool
// of their own or, with Spread values of their own, on one pool they share,
// then n etcdstore Stores, with no Allocator, make roundOps CreateExclusive
// calls each, on an address of their own for a new owner: the transaction
// an allocation sends (the claim, its owner record and the pool's cursor),
// alone. A round takes about a second, so every kind meets the same
// machine; each kind's rate is its requests over the time of its phases.
// alloc/raw-% is the ratio the etcdstore target puts at 70 % or more;
// store/raw-% says how much of the distance to raw is that transaction's
// own cost on the server, and alloc/store-% how much the Allocator adds.
// It runs every case twice: on durableCluster (fsync=true), whose members
// sync to disk as production members do, and on benchCluster
// (fsync=false), whose members do not, so that the CPU the transactions
// take is all the two CPUs of this machine spend on.
func BenchmarkEtcdRounds(b *testing.B) {
	for _, fsync := range []bool{true, false} {
		cluster := benchCluster
		if fsync {
			cluster = durableCluster
		}
		b.Run("fsync="+strconv.FormatBool(fsync), func(b *testing.B) { benchRounds(b, cluster.get(b)) })
	}
}

// benchRounds is BenchmarkEtcdRounds on c.
func benchRounds(b *testing.B, c *etcdtest.Cluster) {
	for _, tc := range []struct {
		name   string
		n      int
		shared bool
	}{{"clients=1", 1, false}, {"clients=8/pool-each", 8, false}, {"clients=8/shared-pool-spread", 8, true}} {
		b.Run(tc.name, func(b *testing.B) {
			as, conflicts := benchAllocators(b, c.Endpoints(), tc.n, false, tc.shared)
			clis := make([]*clientv3.Client, tc.n)
			for i := range clis {
				clis[i] = rawClient(b, c.Endpoints())
			}
			prefix := benchPrefix(b, c.Endpoints())
			stores := benchStores(b, c.Endpoints(), tc.n)
			var next atomic.Int64
			var rawTime, allocTime, storeTime time.Duration
			b.ReportAllocs()
			for b.Loop() {
				rawTime += phase(b, tc.n, func(g int) error {
					return rawCreate(clis[g], fmt.Sprintf("%skey/%08x", prefix, next.Add(1)))
				})
				allocTime += phase(b, tc.n, func(g int) error {
					pool := "p" + strconv.Itoa(g)
					if tc.shared {
						pool = "p0"
					}
					return benchAllocateOne(as[g], pool, next.Add(1))
				})
				storeTime += phase(b, tc.n, func(g int) error {
					return benchCreateOne(stores[g], g, next.Add(1))
				})
			}
			ops := float64(b.N * tc.n * roundOps)
			raw, alloc, st := ops/rawTime.Seconds(), ops/allocTime.Seconds(), ops/storeTime.Seconds()
			b.ReportMetric(raw, "raw-txn/s")
			b.ReportMetric(alloc, "allocs/s")
			b.ReportMetric(100*alloc/raw, "alloc/raw-%")
			b.ReportMetric(100*st/raw, "store/raw-%")
			b.ReportMetric(100*alloc/st, "alloc/store-%")
			b.ReportMetric(float64(conflicts.Load())/ops, "conflicts/alloc")
		})
	}
}

// roundOps is how many requests each client makes in a phase of
// BenchmarkEtcdRounds.
const roundOps = 100

// phase runs op roundOps times from each of n goroutines, each with its
// index, and returns how long that took.
func phase(b *testing.B, n int, op func(g int) error) time.Duration {
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	start := time.Now()
	for g := range n {
		wg.Go(func() {
			for range roundOps {
				if err := op(g); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return time.Since(start)
}

// benchAllocate measures allocations by n Allocators over etcdstore, on one
// pool they share or on a pool each, following the Store's changes or not,
// with Spread values of their own or not.
func benchAllocate(b *testing.B, endpoints []string, n int, shared, follow, spread bool) {
	as, conflicts := benchAllocators(b, endpoints, n, follow, spread)
	var next atomic.Int64
	b.ReportAllocs()
	start := time.Now()
	parallel(b, n, func(g int) error {
		pool := "p0"
		if !shared {
			pool = fmt.Sprintf("p%d", g)
		}
		return benchAllocateOne(as[g], pool, next.Add(1))
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "allocs/s")
	b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/alloc")
}

// benchAllocateOne allocates an address of pool for a new owner numbered
// n.
func benchAllocateOne(a *ipam.Allocator, pool string, n int64) error {
	owner := "pod-" + strconv.FormatInt(n, 10)
	_, err := a.Allocate(context.Background(), ipam.Request{Namespace: "bench", Name: owner, UID: owner,
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}})
	return err
}

// benchStores returns n etcdstore Stores, each with a client of its own,
// under a new prefix.
func benchStores(b *testing.B, endpoints []string, n int) []*etcdstore.Store {
	prefix := benchPrefix(b, endpoints)
	stores := make([]*etcdstore.Store, n)
	for i := range stores {
		stores[i] = openAt(b, endpoints, prefix)
	}
	return stores
}

// benchCreateOne creates, as an Allocator's allocation does (the claim, its
// owner record and the pool's cursor, in one transaction), the claim of a
// new owner numbered n on an address of pool p<g>: the n-th of
// <11+g>.0.0.0/8, so that the addresses of a goroutine come in order, as
// round-robin takes them.
func benchCreateOne(s *etcdstore.Store, g int, n int64) error {
	owner := "pod-" + strconv.FormatInt(n, 10)
	ip := netip.AddrFrom4([4]byte{byte(11 + g), byte(n >> 16), byte(n >> 8), byte(n)})
	_, err := s.CreateExclusive(context.Background(), store.Claim{Pool: "p" + strconv.Itoa(g), IP: ip,
		Owner: store.Owner{Namespace: "bench", Name: owner, UID: owner, Interface: "eth0"}, Time: time.Now()})
	return err
}

// benchAllocators returns n Allocators over etcdstore, each with a client
// of its own, on n pools of 65,536 addresses, p0 to p<n-1>, under a new
// prefix; and the count of the conflicts their writes meet.
func benchAllocators(b *testing.B, endpoints []string, n int, follow, spread bool) ([]*ipam.Allocator, *atomic.Int64) {
	prefix := benchPrefix(b, endpoints)
	var pools []*ipam.Pool
	for i := range n {
		pools = append(pools, ipam.MustParsePool(fmt.Sprintf(`{"name": "p%d", "ranges": [{"subnet": "10.%d.0.0/16"}]}`, i, 100+i)))
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		b.Fatal(err)
	}
	conflicts := new(atomic.Int64)
	as := make([]*ipam.Allocator, n)
	for i := range as {
		opts := ipam.Options{Pools: cat, Store: counting{openAt(b, endpoints, prefix), conflicts}}
		if spread {
			opts.Spread = fmt.Sprintf("agent-%d", i)
		}
		if as[i], err = ipam.NewAllocator(opts); err != nil {
			b.Fatal(err)
		}
		if follow {
			ctx, cancel := context.WithCancel(context.Background())
			b.Cleanup(cancel)
			go as[i].Follow(ctx)
		}
	}
	return as, conflicts
}
