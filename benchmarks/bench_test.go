package benchmarks

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

// The workloads. Each runs on every peer it names, as sub-benchmarks named
// after the peer, so one `go test -bench .` measures them all side by side.
// One op is one allocation (workload c: one allocation and one release),
// whatever the workload does around it with the timer stopped, so ns/op is
// the cost of an allocation and the ratios between peers are ratios per
// allocation.
//
//	a  Fill20:           fill a /20 one address at a time, from empty to full.
//	b  Holes16:          allocate the holes of a /16 that is 99 % full, holes at random.
//	c  Cycle16:          allocate and release one owner in a /16 half full at random.
//	d  FillIPv6:         the first 10,000 addresses of an IPv6 /64, and the heap they retain.
//	e  ConcurrentFill20: two goroutines fill one /20; addresses handed out twice are counted.
//	f  the file stores:  a, b and c also run on this library's filestore and
//	                     on host-local's disk store (DiskPeers).
var (
	pool20   = netip.MustParsePrefix("10.0.0.0/20")
	pool16   = netip.MustParsePrefix("10.0.0.0/16")
	pool64   = netip.MustParsePrefix("2001:db8:1::/64")
	ipv6Fill = 10000
)

func BenchmarkFill20(b *testing.B) {
	for _, p := range append(Peers(), DiskPeers()...) {
		b.Run(p.Name, func(b *testing.B) { benchFill(b, p, pool20, UsableCount(pool20), false) })
	}
}

func BenchmarkHoles16(b *testing.B) {
	for _, p := range append(Peers(), DiskPeers()...) {
		b.Run(p.Name, func(b *testing.B) { benchHoles(b, p, pool16, 0.99) })
	}
}

func BenchmarkCycle16(b *testing.B) {
	for _, p := range append(Peers(), DiskPeers()...) {
		b.Run(p.Name, func(b *testing.B) { benchCycle(b, p, pool16, 0.5) })
	}
}

func BenchmarkFillIPv6(b *testing.B) {
	for _, p := range Peers() {
		b.Run(p.Name, func(b *testing.B) { benchFill(b, p, pool64, ipv6Fill, true) })
	}
}

func BenchmarkConcurrentFill20(b *testing.B) {
	peers := append(Peers()[:1:1], OursTwoAllocators())
	peers = append(peers, Peers()[1:]...)
	for _, p := range peers {
		b.Run(p.Name, func(b *testing.B) { benchConcurrentFill(b, p, pool20) })
	}
}

// sweeps says at which fill levels the b.N allocations of a fill workload are
// timed. With b.N at least count, every level is timed, over whole fills
// (sweeps) of fresh pools. With fewer, as for the peers that take
// milliseconds per allocation, the timed allocations are spread evenly over
// one fill, in at most `strata` runs of consecutive levels, and the pool is
// brought from one run to the next outside the timer (Claim), so that the
// mean is that of a whole fill, not of its cheap beginning. Runs, rather than
// single allocations, bound the untimed steps, which for some peers cost as
// much as the whole pool whatever their size.
type sweeps struct {
	n, count    int
	total, done int   // sweeps in all; sweeps finished
	levels      []int // the levels of the current sweep, in order
	pos         int   // how many of them are made
}

const strata = 64

func newSweeps(n, count int) *sweeps {
	s := &sweeps{n: n, count: count, total: (n + count - 1) / count}
	s.start()
	return s
}

func (s *sweeps) start() {
	m := s.n / s.total // allocations in this sweep, at most count
	if s.done < s.n%s.total {
		m++
	}
	s.levels, s.pos = s.levels[:0], 0
	if m == s.count {
		for l := range m {
			s.levels = append(s.levels, l)
		}
		return
	}
	runs := min(m, strata)
	next := 0 // the lowest level the next run may start at
	left := m // allocations not yet placed
	for j := range runs {
		n := m / runs
		if j < m%runs {
			n++
		}
		center := (2*j + 1) * s.count / (2 * runs)
		start := max(center-n/2, next)
		start = min(start, s.count-left)
		for l := start; l < start+n; l++ {
			s.levels = append(s.levels, l)
		}
		next, left = start+n, left-n
	}
}

// next returns the fill level of the next timed allocation and whether it
// begins a new sweep.
func (s *sweeps) next() (level int, fresh bool) {
	if s.pos == len(s.levels) {
		s.done++
		s.start()
	}
	fresh = s.pos == 0
	level = s.levels[s.pos]
	s.pos++
	return level, fresh
}

// benchFill times allocations into a pool being filled from empty, one
// address at a time, up to count addresses. Every allocation must return the
// next address: the pool holds exactly the addresses before it.
//
// It counts b.N itself, not with b.Loop, because the sampling plan depends on
// how many allocations are timed.
func benchFill(b *testing.B, p Peer, pool netip.Prefix, count int, heap bool) {
	first, _ := Usable(pool)
	var (
		a     Allocator
		level int // addresses held in a
		dirs  dirMaker
		run   = make([]netip.Addr, 0, count) // allocated since the timer last stopped
	)
	// check makes sure the last run of allocations handed out the addresses
	// before level, in order: the next free address each time.
	check := func() {
		for i, ip := range run {
			if want := Nth(first, uint64(level-len(run)+i)); ip != want {
				fatalf(b, "allocation %d: got %s, want %s, the next free address", level-len(run)+i, ip, want)
			}
		}
		run = run[:0]
	}
	defer func() { closeAllocator(b, a) }()
	plan := newSweeps(b.N, count)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		want, fresh := plan.next()
		if fresh || want < level {
			b.StopTimer()
			check()
			closeAllocator(b, a)
			a = newAllocator(b, p, dirs.next(b, p), pool)
			level = 0
			b.StartTimer()
		}
		if want > level {
			b.StopTimer()
			check()
			claimRange(b, a, Nth(first, uint64(level)), want-level)
			level = want
			b.StartTimer()
		}
		ip, err := a.Allocate(level)
		if err != nil {
			fatalf(b, "allocation %d: %v", level, err)
		}
		run = append(run, ip)
		level++
	}
	b.StopTimer()
	check()
	closeAllocator(b, a)
	a = nil
	if heap {
		b.ReportMetric(retained(b, p, dirs.next(b, p), pool, count)/float64(count), "retained-B/alloc")
	}
}

// retained returns the heap that an allocator over pool keeps after count
// addresses are claimed (through Claim, the path of the fill's untimed
// steps, which stores what an allocation stores).
func retained(b *testing.B, p Peer, dir string, pool netip.Prefix, count int) float64 {
	first, _ := Usable(pool)
	before := heapInUse()
	a := newAllocator(b, p, dir, pool)
	claimRange(b, a, first, count)
	after := heapInUse()
	runtime.KeepAlive(a)
	closeAllocator(b, a)
	return float64(after) - float64(before)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// benchHoles times allocations into a pool filled to fill with random holes:
// each window of allocations takes every hole, then they are released
// outside the timer, so that every window starts from the same fill.
func benchHoles(b *testing.B, p Peer, pool netip.Prefix, fill float64) {
	var dirs dirMaker
	a, used, done := filled(b, p, &dirs, pool, fill)
	first, _ := Usable(pool)
	holes := 0
	for _, u := range used {
		if !u {
			holes++
		}
	}
	window := min(holes, MaxOwners)
	got := make([]netip.Addr, 0, window)
	seen := newSeenSet(len(used))
	check := func() {
		seen.reset()
		for _, ip := range got {
			off, ok := Offset(first, ip)
			if !ok || off >= uint64(len(used)) || used[off] || !seen.add(off) {
				fatalf(b, "allocation handed out %s, which is outside the pool, held before, or handed out twice", ip)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		k := len(got)
		ip, err := a.Allocate(k)
		if err != nil {
			fatalf(b, "allocation %d of %d holes: %v", k, window, err)
		}
		got = append(got, ip)
		if len(got) == window {
			b.StopTimer()
			check()
			releaseWindow(b, a, len(got))
			got = got[:0]
			b.StartTimer()
		}
	}
	b.StopTimer()
	check()
	releaseWindow(b, a, len(got))
	closeAllocator(b, a)
	done()
}

// seenSet is a set of offsets that empties in constant time.
type seenSet struct {
	gen  uint32
	mark []uint32
}

func newSeenSet(n int) *seenSet { return &seenSet{gen: 1, mark: make([]uint32, n)} }

func (s *seenSet) reset() { s.gen++ }

// add adds off and reports whether it was new.
func (s *seenSet) add(off uint64) bool {
	if s.mark[off] == s.gen {
		return false
	}
	s.mark[off] = s.gen
	return true
}

// benchCycle times one allocation and one release of the same owner in a
// pool filled to fill with random holes.
func benchCycle(b *testing.B, p Peer, pool netip.Prefix, fill float64) {
	var dirs dirMaker
	a, used, done := filled(b, p, &dirs, pool, fill)
	first, _ := Usable(pool)
	got := make([]netip.Addr, 0, 1<<16)
	check := func() {
		for _, ip := range got {
			off, ok := Offset(first, ip)
			if !ok || off >= uint64(len(used)) || used[off] {
				fatalf(b, "allocation handed out %s, which is outside the pool or held", ip)
			}
		}
		got = got[:0]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ip, err := a.Allocate(0)
		if err != nil {
			fatalf(b, "allocation: %v", err)
		}
		if err := a.Release(0); err != nil {
			fatalf(b, "release: %v", err)
		}
		got = append(got, ip)
		if len(got) == cap(got) {
			b.StopTimer()
			check()
			b.StartTimer()
		}
	}
	b.StopTimer()
	check()
	closeAllocator(b, a)
	done()
}

// benchConcurrentFill times two goroutines that fill one pool from empty
// together, each making half of the allocations through its own handle of
// the peer's Pair. One op of b.Loop is one whole fill; ns/op, B/op and
// allocs/op are then reported per allocation (wall time: the two goroutines
// overlap). "dups" counts addresses handed out twice over all fills, "errs"
// the allocations that failed although the pool had room.
func benchConcurrentFill(b *testing.B, p Peer, pool netip.Prefix) {
	if p.Pair == nil {
		b.Skip("no shared form")
	}
	var dirs dirMaker
	count := UsableCount(pool)
	first, _ := Usable(pool)
	var (
		fills, dups, errs int
		mem               memDelta
	)
	got := [2][]netip.Addr{make([]netip.Addr, 0, count), make([]netip.Addr, 0, count)}
	failed := [2]int{}
	seen := newSeenSet(count)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		a1, a2, err := p.Pair(dirs.next(b, p), pool)
		if err != nil {
			fatalf(b, "%v", err)
		}
		handles := [2]Allocator{a1, a2}
		got[0], got[1] = got[0][:0], got[1][:0]
		failed = [2]int{}
		var wg sync.WaitGroup
		mem.start()
		b.StartTimer()
		for g := range 2 {
			wg.Go(func() {
				for i := g; i < count; i += 2 {
					ip, err := handles[g].Allocate(i)
					if err != nil {
						failed[g]++
						continue
					}
					got[g] = append(got[g], ip)
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		mem.stop()
		seen.reset()
		for _, ips := range got {
			for _, ip := range ips {
				off, ok := Offset(first, ip)
				if !ok || off >= uint64(count) {
					fatalf(b, "allocation handed out %s, outside the pool", ip)
				}
				if !seen.add(off) {
					dups++
				}
			}
		}
		errs += failed[0] + failed[1]
		fills++
		closeAllocator(b, a1)
		if a2 != a1 {
			closeAllocator(b, a2)
		}
		b.StartTimer()
	}
	b.StopTimer()
	allocs := float64(fills * count)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/allocs, "ns/op")
	b.ReportMetric(float64(mem.bytes)/allocs, "B/op")
	b.ReportMetric(float64(mem.mallocs)/allocs, "allocs/op")
	b.ReportMetric(float64(dups), "dups")
	b.ReportMetric(float64(errs), "errs")
}

// memDelta adds up the heap allocations made between start and stop.
type memDelta struct {
	bytes, mallocs uint64
	m0             runtime.MemStats
}

func (d *memDelta) start() { runtime.ReadMemStats(&d.m0) }

func (d *memDelta) stop() {
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	d.bytes += m1.TotalAlloc - d.m0.TotalAlloc
	d.mallocs += m1.Mallocs - d.m0.Mallocs
}

// filled returns an allocator over pool with a random fill of its usable
// addresses claimed, in random order, and which offsets those are. The
// caller calls done once it has closed the allocator and released what it
// allocated.
func filled(b *testing.B, p Peer, dirs *dirMaker, pool netip.Prefix, fill float64) (a Allocator, used []bool, done func()) {
	b.Helper()
	if p.Files {
		return filledFiles(b, p, pool, fill)
	}
	used, ips := randomFill(pool, fill)
	a = newAllocator(b, p, dirs.next(b, p), pool)
	if err := a.Claim(ips); err != nil {
		fatalf(b, "%v", err)
	}
	return a, used, func() {}
}

// randomFill returns a random fill of pool's usable addresses, in random
// order, the same on every call, and which offsets those are.
func randomFill(pool netip.Prefix, fill float64) (used []bool, ips []netip.Addr) {
	n := UsableCount(pool)
	first, _ := Usable(pool)
	rng := rand.New(rand.NewPCG(1, uint64(pool.Bits())))
	perm := rng.Perm(n)[:int(float64(n)*fill)]
	used = make([]bool, n)
	ips = make([]netip.Addr, len(perm))
	for i, off := range perm {
		used[off] = true
		ips[i] = Nth(first, uint64(off))
	}
	return used, ips
}

// Pre-filled network directories in host-local's format, built once per
// process for each pool and fill and shared by the peers with Files and by
// every -count run: writing tens of thousands of files takes longer than
// the workloads on them. A workload leaves the directory as it found it (it
// releases what it allocated); the cursor file is put back after it.
var (
	templates    = map[string]*template{}
	templateRoot string
)

type template struct {
	dir    string // the directory given to Peer.New
	used   []bool
	files  int    // entries in the network directory when pristine
	cursor []byte // last_reserved_ip.0 when pristine
}

func filledFiles(b *testing.B, p Peer, pool netip.Prefix, fill float64) (Allocator, []bool, func()) {
	key := pool.String() + "@" + strconv.FormatFloat(fill, 'g', -1, 64)
	t := templates[key]
	if t == nil {
		if templateRoot == "" {
			root, err := os.MkdirTemp("", "ipam-bench-")
			if err != nil {
				fatalf(b, "%v", err)
			}
			templateRoot = root
		}
		used, ips := randomFill(pool, fill)
		t = &template{dir: filepath.Join(templateRoot, "t"+strconv.Itoa(len(templates))), used: used}
		if err := WriteHostLocalDir(t.dir, ips); err != nil {
			fatalf(b, "%v", err)
		}
		cursor, err := os.ReadFile(t.cursorFile())
		if err != nil {
			fatalf(b, "%v", err)
		}
		t.cursor = cursor
		t.files = t.entries(b)
		templates[key] = t
	}
	a := newAllocator(b, p, t.dir, pool)
	if w, ok := a.(interface{ Warm() error }); ok {
		if err := w.Warm(); err != nil {
			fatalf(b, "%v", err)
		}
	}
	return a, t.used, func() {
		if n := t.entries(b); n != t.files {
			delete(templates, key)
			fatalf(b, "%s left %d entries in the shared directory, want %d", p.Name, n, t.files)
		}
		if err := os.WriteFile(t.cursorFile(), t.cursor, 0o600); err != nil {
			fatalf(b, "%v", err)
		}
	}
}

func (t *template) cursorFile() string {
	return filepath.Join(t.dir, HostLocalNetwork, "last_reserved_ip.0")
}

func (t *template) entries(b *testing.B) int {
	f, err := os.Open(filepath.Join(t.dir, HostLocalNetwork))
	if err != nil {
		fatalf(b, "%v", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		fatalf(b, "%v", err)
	}
	return len(names)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if templateRoot != "" {
		os.RemoveAll(templateRoot)
	}
	os.Exit(code)
}

func newAllocator(b *testing.B, p Peer, dir string, pool netip.Prefix) Allocator {
	b.Helper()
	a, err := p.New(dir, pool)
	if err != nil {
		fatalf(b, "%s: %v", p.Name, err)
	}
	return a
}

func claimRange(b *testing.B, a Allocator, from netip.Addr, n int) {
	b.Helper()
	ips := make([]netip.Addr, n)
	for i := range ips {
		ips[i] = Nth(from, uint64(i))
	}
	if err := a.Claim(ips); err != nil {
		fatalf(b, "%v", err)
	}
}

func releaseWindow(b *testing.B, a Allocator, n int) {
	b.Helper()
	for k := range n {
		if err := a.Release(k); err != nil {
			fatalf(b, "release %d: %v", k, err)
		}
	}
}

func closeAllocator(b *testing.B, a Allocator) {
	b.Helper()
	if a == nil {
		return
	}
	if err := a.Close(); err != nil {
		fatalf(b, "%v", err)
	}
}

// dirMaker hands out a fresh directory for each allocator of a peer with
// Files and removes the one before, so that a benchmark that makes many fills
// keeps one on disk.
type dirMaker struct {
	root, last string
	n          int
}

func (d *dirMaker) next(b *testing.B, p Peer) string {
	if !p.Files {
		return "" // the peer keeps nothing on disk
	}
	if d.root == "" {
		d.root = b.TempDir()
	}
	if d.last != "" {
		if err := os.RemoveAll(d.last); err != nil {
			fatalf(b, "%v", err)
		}
	}
	d.n++
	d.last = filepath.Join(d.root, "a"+strconv.Itoa(d.n))
	if err := os.Mkdir(d.last, 0o755); err != nil {
		fatalf(b, "%v", err)
	}
	return d.last
}

// lastFailed is the message of the last workload that failed, for tests
// that run workloads through testing.Benchmark, which drops it.
var lastFailed struct {
	sync.Mutex
	msg string
}

func fatalf(b *testing.B, format string, args ...any) {
	b.Helper()
	msg := fmt.Sprintf(format, args...)
	lastFailed.Lock()
	lastFailed.msg = b.Name() + ": " + msg
	lastFailed.Unlock()
	b.Fatal(msg)
}

func lastFailure() string {
	lastFailed.Lock()
	defer lastFailed.Unlock()
	return lastFailed.msg
}
