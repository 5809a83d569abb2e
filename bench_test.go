package ipam_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// The allocation benchmarks measure one Allocate through the public API into
// the default in-memory store, at a fixed fill level. Each timed window makes
// `window` allocations, spread over as many identical pools as it takes to have
// that many free addresses; the window's addresses are then released with the
// timer stopped, so the fill level stays where it was set. Fill is random (holes
// anywhere), not a prefix of the range.

const window = 64

type fillCase struct {
	bits int     // prefix length of the IPv4 subnet
	fill float64 // fraction of usable addresses claimed before timing
}

func (c fillCase) name() string {
	return fmt.Sprintf("v4-%d/fill-%s", c.bits, strconv.FormatFloat(c.fill*100, 'f', -1, 64)+"%")
}

func BenchmarkAllocate(b *testing.B) {
	var cases []fillCase
	for _, bits := range []int{24, 16, 12} {
		for _, fill := range []float64{0, 0.5, 0.99, 0.9999} {
			cases = append(cases, fillCase{bits, fill})
		}
	}
	for _, c := range cases {
		b.Run(c.name(), func(b *testing.B) { benchAllocate(b, c.bits, c.fill) })
	}
}

// benchEnv is a set of identical pools filled to a level.
type benchEnv struct {
	alloc *ipam.Allocator
	pools []string
	reqs  []ipam.Request // one per window slot
	held  []ipam.Result
}

func newBenchEnv(b *testing.B, bits int, fill float64) *benchEnv {
	b.Helper()
	usable := (1 << (32 - bits)) - 3 // minus network, gateway, broadcast
	used := int(float64(usable) * fill)
	if used > usable-1 {
		used = usable - 1
	}
	free := usable - used
	n := (window + free - 1) / free
	var pools []*ipam.Pool
	env := &benchEnv{}
	for i := range n {
		name := fmt.Sprintf("p%d", i)
		pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(10 + i), 0, 0, 0}), bits)
		pools = append(pools, &ipam.Pool{Name: name, Ranges: []ipam.Range{{Subnet: pfx}}})
		env.pools = append(env.pools, name)
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		b.Fatal(err)
	}
	env.alloc, err = ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, uint64(bits)))
	for _, p := range pools {
		base := p.Ranges[0].Subnet.Addr().As4()
		first := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3]) + 2 // skip network and gateway
		// Claim a random `used` of the usable addresses.
		for _, off := range rng.Perm(usable)[:used] {
			v := first + uint32(off)
			ip := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
			if _, err := env.alloc.Allocate(ctx, ipam.Request{ContainerID: "fill-" + p.Name + "-" + ip.String(),
				Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{p.Name}, IPs: []netip.Addr{ip}}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	for k := range window {
		pool := env.pools[k%len(env.pools)]
		env.reqs = append(env.reqs, ipam.Request{ContainerID: "bench-" + strconv.Itoa(k),
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{pool}}}})
	}
	env.held = make([]ipam.Result, window)
	// Collect the filling's garbage now, so that the timed allocations reuse
	// its memory instead of paying for the heap's growth into fresh pages.
	runtime.GC()
	return env
}

func benchAllocate(b *testing.B, bits int, fill float64) {
	newBenchEnv(b, bits, fill).run(b)
}

// run allocates the window's requests in turn, releasing them with the timer
// stopped each time the window is used up.
func (env *benchEnv) run(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	k := 0
	for b.Loop() {
		res, err := env.alloc.Allocate(ctx, env.reqs[k])
		if err != nil {
			b.Fatal(err)
		}
		env.held[k] = res
		k++
		if k == window {
			b.StopTimer()
			env.releaseAll(b)
			k = 0
			b.StartTimer()
		}
	}
	b.StopTimer()
	env.held = env.held[:k]
	env.releaseAll(b)
}

func (env *benchEnv) releaseAll(b *testing.B) {
	ctx := context.Background()
	for _, res := range env.held {
		for _, c := range res.IPs {
			if err := env.alloc.ReleaseIP(ctx, c.Pool, c.Address.Addr()); err != nil {
				b.Fatal(err)
			}
		}
	}
	env.held = env.held[:cap(env.held)]
}

// BenchmarkAllocateRelease measures one allocate and one release of the same
// owner in a half-full /16.
func BenchmarkAllocateRelease(b *testing.B) {
	env := newBenchEnv(b, 16, 0.5)
	ctx := context.Background()
	owner := store.Owner{ContainerID: env.reqs[0].ContainerID, Interface: "eth0"}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := env.alloc.Allocate(ctx, env.reqs[0]); err != nil {
			b.Fatal(err)
		}
		if err := env.alloc.Release(ctx, owner); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateIPv6 measures the first 10,000 allocations in an IPv6 /64,
// with the heap they retain.
func BenchmarkAllocateIPv6(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	reqs := make([]ipam.Request, n)
	for i := range reqs {
		reqs[i] = ipam.Request{ContainerID: "c" + strconv.Itoa(i), Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"v6"}}}}
	}
	var heap float64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"v6","ranges":[{"subnet":"2001:db8:1::/64"}]}`))
		if err != nil {
			b.Fatal(err)
		}
		alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat})
		if err != nil {
			b.Fatal(err)
		}
		before := heapInUse()
		b.StartTimer()
		for i := range reqs {
			if _, err := alloc.Allocate(ctx, reqs[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		heap = float64(heapInUse() - before)
		runtime.KeepAlive(alloc)
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/alloc")
	b.ReportMetric(heap/n, "retained-B/alloc")
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkSelect measures a full Allocate through Spiderpool's chain: the
// pools come from the pod's ipam.spidernet.io/ippool annotation or from the
// cluster defaults, are filtered for the pod and sorted, then tried in order.
//
//   - annotation-10-of-N: the annotation names 10 pools of a catalogue of N;
//     the first 9 in priority order are filtered (nodeName names another
//     node), the 10th serves. Cost should follow the 10 candidates, not N.
//   - defaults-1000-affinity: 1,000 cluster default pools, every one with a
//     nodeAffinity, a namespaceAffinity and a podAffinity; the pod matches the
//     affinities of one pool in ten.
func BenchmarkSelect(b *testing.B) {
	for _, n := range []int{100, 10000} {
		b.Run(fmt.Sprintf("annotation-10-of-%d", n), func(b *testing.B) {
			pools := make([]*ipam.Pool, n)
			for i := range pools {
				pools[i] = spiderPool(i, "")
			}
			// Pools 0..8 are pinned to another node; pool 9 is the one that serves.
			names := make([]string, 10)
			for i := range names {
				names[i] = pools[i*(n/10)].Name
				if i < 9 {
					pools[i*(n/10)].NodeName = []string{"other"}
				}
			}
			anno := `{"ipv4":["` + strings.Join(names, `","`) + `"]}`
			benchSelect(b, pools, func(k int) ipam.Request {
				return ipam.Request{Namespace: "default", Name: "pod-" + strconv.Itoa(k), UID: "uid-" + strconv.Itoa(k), Node: "node1",
					Annotations: map[string]string{ipam.AnnotationIPPool: anno},
					Interfaces:  []ipam.NIC{{Name: "eth0"}}}
			})
		})
	}
	b.Run("defaults-1000-affinity", func(b *testing.B) {
		pools := make([]*ipam.Pool, 1000)
		for i := range pools {
			zone := "z" + strconv.Itoa(i%10)
			pools[i] = spiderPool(i, zone)
			pools[i].Default = true
		}
		benchSelect(b, pools, func(k int) ipam.Request {
			return ipam.Request{Namespace: "default", Name: "pod-" + strconv.Itoa(k), UID: "uid-" + strconv.Itoa(k), Node: "node1",
				Labels:          map[string]string{"zone": "z3", "app": "web"},
				NodeLabels:      map[string]string{"zone": "z3"},
				NamespaceLabels: map[string]string{"zone": "z3"},
				Interfaces:      []ipam.NIC{{Name: "eth0"}}}
		})
	})
}

// spiderPool returns SpiderIPPool-style pool i: a /24 of its own with a
// gateway, and, if zone is set, node, namespace and pod affinities for it.
func spiderPool(i int, zone string) *ipam.Pool {
	pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
	p := &ipam.Pool{Name: fmt.Sprintf("pool-%05d", i), IPVersion: 4, Subnet: pfx,
		IPs:     []netipx.IPRange{netipx.IPRangeFrom(pfx.Addr().Next().Next(), netipx.PrefixLastIP(pfx).Prev())},
		Gateway: pfx.Addr().Next()}
	if zone != "" {
		sel := &ipam.LabelSelector{MatchLabels: map[string]string{"zone": zone}}
		p.NodeAffinity, p.NamespaceAffinity, p.PodAffinity = sel, sel, sel
	}
	return p
}

func benchSelect(b *testing.B, pools []*ipam.Pool, request func(k int) ipam.Request) {
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		b.Fatal(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		b.Fatal(err)
	}
	env := &benchEnv{alloc: alloc, held: make([]ipam.Result, window)}
	for k := range window {
		env.reqs = append(env.reqs, request(k))
	}
	env.run(b)
}

// BenchmarkLoadAll measures a new Allocator's first Release, which loads every
// pool of the catalogue from the Store: n pools of 16 claims each, every claim
// of its own owner. The cost per pool should not grow with n.
func BenchmarkLoadAll(b *testing.B) {
	for _, n := range []int{100, 1000, 4000} {
		b.Run(fmt.Sprintf("pools-%d", n), func(b *testing.B) {
			ctx := context.Background()
			st := memstore.New()
			pools := make([]*ipam.Pool, n)
			for i := range pools {
				pfx := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
				pools[i] = &ipam.Pool{Name: fmt.Sprintf("p%d", i), Ranges: []ipam.Range{{Subnet: pfx}}}
				for k := range 16 {
					ip := pfx.Addr().Next().Next()
					for range k {
						ip = ip.Next()
					}
					c := store.Claim{Pool: pools[i].Name, IP: ip, Owner: store.Owner{ContainerID: fmt.Sprintf("c-%d-%d", i, k), Interface: "eth0"}}
					if _, err := st.Create(ctx, c); err != nil {
						b.Fatal(err)
					}
				}
			}
			cat, err := ipam.NewCatalog(pools...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
				if err != nil {
					b.Fatal(err)
				}
				if err := alloc.Release(ctx, store.Owner{ContainerID: "nobody"}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pool")
		})
	}
}
