package benchmarks

import (
	"context"
	"encoding/binary"
	"flag"
	"math/bits"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam"
)

// window is how many allocations BenchmarkEssentials and BenchmarkAllocate
// make between releases, which they do with the timer stopped so that the
// fill level stays where it was set.
const window = 64

// BenchmarkEssentials is not a peer: it is the floor, the least an Allocate
// must do to give this library's guarantees, written out with nothing else,
// so that Allocate can be stated as a multiple of it (BenchmarkAllocate, and
// the report's "Against the floor" table). Per allocation, each step because
// a guarantee needs it:
//
//  1. Read the clock: a claim records when it was made, which garbage
//     collection needs to tell a new claim from a stale one.
//  2. Look the owner up by its string ID: a repeat ADD must return what the
//     owner holds (idempotency), so every Allocate asks first.
//  3. Take the next free bit after the round-robin cursor, a word at a time.
//  4. Write the claim record (owner, interface, time, revision) into a block
//     of 64 consecutive addresses: the store's truth about who holds it.
//  5. Insert the owner by its string ID, so that the next Allocate, Release or
//     Lookup finds it.
//  6. Allocate the result a one-address answer must carry: the address with
//     its prefix, the gateway, the pool's name and the interface.
//
// Steps 2 to 5 share one critical section under one mutex, as they must
// (another goroutine may allocate at the same time), and the blocks are a
// dense slice indexed by address, not a map. It has no pool lookup, no
// validation, no trace, no rollback and no second family: everything the
// library does beyond these steps is what its ratio to this floor measures.
func BenchmarkEssentials(b *testing.B) {
	essentials(b, 65536, nil) // an IPv4 /16, empty
}

// BenchmarkEssentialsAt is the floor on the data of each case of
// BenchmarkAllocate: as many addresses as the case's pools span, the same
// share of them claimed at random, each claim with its record and its
// owner's entry by string ID. The target is stated against
// BenchmarkEssentials; this says how much of the distance to it is the
// size of the data (caches missed by any Store that holds as many claims)
// rather than the work. Where free addresses are few and far apart (the
// 99.99 % cases) its search, a word at a time, walks thousands of words that
// the library's tree of used bits skips: there it is slower than Allocate's
// search and bounds nothing.
func BenchmarkEssentialsAt(b *testing.B) {
	for _, c := range allocateCases() {
		b.Run(c.name(), func(b *testing.B) {
			pool := netip.PrefixFrom(netip.IPv4Unspecified(), c.bits)
			usable := UsableCount(pool)
			used := min(int(float64(usable)*c.fill), usable-1)
			n := (window + usable - used - 1) / (usable - used)
			span := 1 << (32 - c.bits)
			// The network and broadcast addresses of each pool are
			// never free; the claimed ones are the case's random fill.
			taken := make([]int, 0, n*(used+2))
			_, ips := randomFill(pool, float64(used)/float64(usable))
			for i := range n {
				taken = append(taken, i*span, i*span+span-1)
				for _, ip := range ips {
					a := ip.As4() // in 0.0.0.0/bits: the offset in the pool
					taken = append(taken, i*span+int(binary.BigEndian.Uint32(a[:])))
				}
			}
			essentials(b, n*span, taken)
		})
	}
}

// essentials is the floor over size addresses of which those in taken are
// claimed already, by owners of their own: the loop BenchmarkEssentials
// documents, a window of allocations timed and then released with the timer
// stopped.
func essentials(b *testing.B, size int, taken []int) {
	f := newFloor(size, taken)
	runtime.GC()
	b.ReportAllocs()
	k := 0
	for b.Loop() {
		if !f.alloc(k) {
			b.Fatal("owner holds an address already")
		}
		if k++; k == window {
			b.StopTimer()
			f.release()
			k = 0
			b.StartTimer()
		}
	}
}

// floor is the state of BenchmarkEssentials: the steps its documentation
// lists, over a dense slice of blocks.
type floor struct {
	mu      sync.Mutex
	owners  map[string]uint64
	words   []uint64
	blocks  []floorBlock
	cursor  uint64
	rev     int64
	keys    [window]string
	held    [window]uint64
	base    uint32
	gateway netip.Addr
}

type floorRecord struct {
	containerID, iface string
	time               time.Time
	rev                int64
}

type floorBlock struct {
	used uint64
	recs [64]floorRecord
}

func newFloor(size int, taken []int) *floor {
	f := &floor{
		owners:  make(map[string]uint64, window+len(taken)),
		words:   make([]uint64, (size+63)/64),
		blocks:  make([]floorBlock, (size+63)/64),
		base:    uint32(10 << 24),
		gateway: netip.AddrFrom4([4]byte{10, 0, 0, 1}),
	}
	start := time.Now()
	for j, i := range taken {
		id := "fill-" + strconv.Itoa(j)
		f.rev++
		f.words[i/64] |= 1 << (i % 64)
		f.blocks[i/64].used |= 1 << (i % 64)
		f.blocks[i/64].recs[i%64] = floorRecord{containerID: id, iface: "eth0", time: start, rev: f.rev}
		f.owners[id] = uint64(i)
	}
	if size%64 != 0 {
		f.words[len(f.words)-1] |= ^uint64(0) << (size % 64) // past the end: never free
	}
	for i := range f.keys {
		f.keys[i] = "container-" + strconv.Itoa(i)
	}
	return f
}

// alloc is one allocation of the floor, for the owner of window slot k. It
// reports false if that owner holds an address already (a release missed).
func (f *floor) alloc(k int) bool {
	const poolName = "p"
	now := time.Now()
	f.mu.Lock()
	if _, ok := f.owners[f.keys[k]]; ok {
		f.mu.Unlock()
		return false
	}
	w := f.cursor / 64 % uint64(len(f.words))
	free := ^f.words[w] &^ (1<<(f.cursor%64) - 1) // bits at or after the cursor
	for free == 0 {
		w = (w + 1) % uint64(len(f.words))
		free = ^f.words[w]
	}
	i := w*64 + uint64(bits.TrailingZeros64(free))
	f.words[w] |= 1 << (i % 64)
	f.cursor = i + 1
	f.rev++
	blk := &f.blocks[w]
	blk.used |= 1 << (i % 64)
	blk.recs[i%64] = floorRecord{containerID: f.keys[k], iface: "eth0", time: now, rev: f.rev}
	f.owners[f.keys[k]] = i
	f.mu.Unlock()
	v := f.base + uint32(i)
	addr := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	essentialsSink = &essentialResult{Address: netip.PrefixFrom(addr, 16), Gateway: f.gateway, Pool: poolName, Interface: "eth0"}
	f.held[k] = i
	return true
}

// release frees the window's addresses and owners.
func (f *floor) release() {
	for j, i := range f.held {
		f.words[i/64] &^= 1 << (i % 64)
		f.blocks[i/64].used &^= 1 << (i % 64)
		delete(f.owners, f.keys[j])
	}
}

// essentialResult is what a one-address result must carry (88 bytes).
type essentialResult struct {
	Address         netip.Prefix
	Gateway         netip.Addr
	Pool, Interface string
}

// essentialsSink keeps BenchmarkEssentials's results on the heap.
var essentialsSink *essentialResult

// BenchmarkAllocate is one Allocate through the public API into the default
// in-memory store, as the root package's BenchmarkAllocate measures it (same
// cases, same fill, same window): one address for a new owner, in a pool
// filled at random to a level, the window's 64 addresses released with the
// timer stopped. It is here so that the report states it against
// BenchmarkEssentials, the floor, measured in the same process and run.
func BenchmarkAllocate(b *testing.B) {
	for _, c := range allocateCases() {
		b.Run(c.name(), func(b *testing.B) { c.env(b).run(b) })
	}
}

// allocateCase is a case of BenchmarkAllocate: an IPv4 prefix length and a
// fill level.
type allocateCase struct {
	bits int
	fill float64
}

func allocateCases() []allocateCase {
	var cs []allocateCase
	for _, bits := range []int{24, 16, 12} {
		for _, fill := range []float64{0, 0.5, 0.99, 0.9999} {
			cs = append(cs, allocateCase{bits, fill})
		}
	}
	return cs
}

func (c allocateCase) name() string {
	return "v4-" + strconv.Itoa(c.bits) + "/fill-" + strconv.FormatFloat(c.fill*100, 'f', -1, 64) + "%"
}

// allocateEnv is a set of identical pools filled to a level, with a window
// of requests: as many pools as it takes to have 64 free addresses.
type allocateEnv struct {
	alloc *ipam.Allocator
	reqs  []ipam.Request // one per window slot
	held  []ipam.Result
	uses  int // runs that used it, for allocateEnvs
}

// allocateEnvs keeps each case's filled pools for the next -count run:
// filling a /12 through Allocate takes seconds. A run leaves the pools as it
// found them; the last run of a case drops them.
var allocateEnvs = map[allocateCase]*allocateEnv{}

func (c allocateCase) env(b *testing.B) *allocateEnv {
	if env := allocateEnvs[c]; env != nil {
		return env.use(c)
	}
	ctx := context.Background()
	usable := UsableCount(netip.PrefixFrom(netip.IPv4Unspecified(), c.bits))
	used := min(int(float64(usable)*c.fill), usable-1)
	n := (window + usable - used - 1) / (usable - used)
	env := &allocateEnv{held: make([]ipam.Result, 0, window)}
	pools := make([]*ipam.Pool, n)
	for i := range pools {
		pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(10 + i), 0, 0, 0}), c.bits)
		pools[i] = &ipam.Pool{Name: "p" + strconv.Itoa(i), Ranges: []ipam.Range{{Subnet: pfx}}}
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		b.Fatal(err)
	}
	if env.alloc, err = ipam.NewAllocator(ipam.Options{Pools: cat}); err != nil {
		b.Fatal(err)
	}
	for _, p := range pools {
		_, ips := randomFill(p.Ranges[0].Subnet, float64(used)/float64(usable))
		for _, ip := range ips {
			req := ipam.Request{ContainerID: "fill-" + p.Name + "-" + ip.String(),
				Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{p.Name}, IPs: []netip.Addr{ip}}}}
			if _, err := env.alloc.Allocate(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	}
	for k := range window {
		env.reqs = append(env.reqs, ipam.Request{ContainerID: "bench-" + strconv.Itoa(k),
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pools[k%n].Name}}}})
	}
	// Collect the filling's garbage now, so that the timed allocations reuse
	// its memory instead of paying for the heap's growth into fresh pages.
	runtime.GC()
	allocateEnvs[c] = env
	return env.use(c)
}

// use counts a run of env and drops it from allocateEnvs after the last.
func (env *allocateEnv) use(c allocateCase) *allocateEnv {
	env.uses++
	if count, err := strconv.Atoi(flag.Lookup("test.count").Value.String()); err != nil || env.uses >= count {
		delete(allocateEnvs, c)
	}
	return env
}

// run times Allocate, a window at a time. Between windows, with the timer
// stopped, it releases them and times a window of the floor's allocations
// (BenchmarkEssentials's, on its empty /16), so that the two are measured
// over the same stretch of the run, in turns of a few microseconds: a
// shared machine's speed drifts from one second to the next, and so does a
// ratio of figures taken a minute apart. It reports the floor's time per
// allocation as floor-ns/op and Allocate's over it as ×floor.
func (env *allocateEnv) run(b *testing.B) {
	ctx := context.Background()
	f := interleavedFloor()
	var floorTime time.Duration
	floorOps := 0
	b.ReportAllocs()
	for b.Loop() {
		res, err := env.alloc.Allocate(ctx, env.reqs[len(env.held)])
		if err != nil {
			b.Fatal(err)
		}
		if env.held = append(env.held, res); len(env.held) == window {
			b.StopTimer()
			env.release(b)
			start := time.Now()
			for k := range window {
				if !f.alloc(k) {
					b.Fatal("floor: owner holds an address already")
				}
			}
			floorTime += time.Since(start)
			floorOps += window
			f.release()
			b.StartTimer()
		}
	}
	b.StopTimer()
	env.release(b)
	if floorOps > 0 {
		perFloor := float64(floorTime.Nanoseconds()) / float64(floorOps)
		perAlloc := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(perFloor, "floor-ns/op")
		b.ReportMetric(perAlloc/perFloor, "×floor")
	}
}

// interleaved is the floor that BenchmarkAllocate's cases time between
// their windows, made once per process.
var interleaved *floor

func interleavedFloor() *floor {
	if interleaved == nil {
		interleaved = newFloor(65536, nil)
	}
	return interleaved
}

func (env *allocateEnv) release(b *testing.B) {
	ctx := context.Background()
	for _, res := range env.held {
		for _, c := range res.IPs {
			if err := env.alloc.ReleaseIP(ctx, c.Pool, c.Address.Addr()); err != nil {
				b.Fatal(err)
			}
		}
	}
	env.held = env.held[:0]
}

// TestEssentials pins what the floor allocates: one result, nothing else
// (testing.AllocsPerRun counts allocations, averaged and rounded down, so
// the growth of the owners' map now and then is not pinned). The bytes per
// op are the benchmark's to report (-benchmem): a byte count measured on a
// whole process counts what other goroutines allocate meanwhile, and was
// 101 B instead of 96 on a loaded machine.
func TestEssentials(t *testing.T) {
	f := newFloor(65536, nil)
	k := 0
	allocs := testing.AllocsPerRun(1000, func() {
		if !f.alloc(k) {
			t.Fatal("floor: owner holds an address already")
		}
		if k++; k == window {
			f.release()
			k = 0
		}
	})
	if allocs != 1 {
		t.Errorf("the floor makes %v allocations per op, want 1", allocs)
	}
}

// TestAllocateCase runs one case of BenchmarkAllocate as with -count 2:
// each run makes more than a window of allocations and leaves the pools
// holding what they held before, and the last run drops them.
func TestAllocateCase(t *testing.T) {
	count := flag.Lookup("test.count")
	defer count.Value.Set(count.Value.String())
	if err := count.Value.Set("2"); err != nil {
		t.Fatal(err)
	}
	c := allocateCase{24, 0.99}
	var env *allocateEnv
	claims := func() int {
		cs, err := env.alloc.Claims(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	var before int
	for i := range 2 {
		run(t, "150x", func(b *testing.B) {
			env = c.env(b)
			if i == 0 {
				before = claims()
			}
			env.run(b)
		})
		if got := claims(); got != before {
			t.Fatalf("run %d left %d claims, want %d", i, got, before)
		}
		if _, kept := allocateEnvs[c]; kept != (i == 0) {
			t.Fatalf("after run %d of 2: pools kept %t", i, kept)
		}
	}
	// 99 % of a /24's 253 usable addresses is 250, leaving 3 free: a
	// window of 64 takes 22 pools.
	if want := 22 * 250; before != want {
		t.Fatalf("the case's pools hold %d claims, want %d (22 pools with 3 free addresses each)", before, want)
	}
}
