package benchmarks

import (
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"testing"
)

func allPeers() []Peer {
	return append(append(Peers(), OursTwoAllocators()), DiskPeers()...)
}

// TestFillInOrder fills a small pool on every peer: each hands out every
// usable address once, in order, then reports the pool exhausted; a released
// address is the only one to come back.
func TestFillInOrder(t *testing.T) {
	for _, pool := range []netip.Prefix{netip.MustParsePrefix("10.1.0.0/28"), netip.MustParsePrefix("2001:db8:9::/124")} {
		for _, p := range allPeers() {
			t.Run(p.Name+"/"+pool.String(), func(t *testing.T) {
				a, err := p.New(t.TempDir(), pool)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				first, last := Usable(pool)
				n := UsableCount(pool)
				if pool.Addr().Is6() {
					// Whereabouts keeps the last address of an IPv6 subnet
					// out, as if it were a broadcast address; the
					// workloads never reach it.
					n--
				}
				for k := range n {
					ip, err := a.Allocate(k)
					if err != nil {
						t.Fatalf("allocation %d: %v", k, err)
					}
					if want := Nth(first, uint64(k)); ip != want {
						t.Fatalf("allocation %d: got %s, want %s", k, ip, want)
					}
				}
				if ip, err := a.Allocate(n); pool.Addr().Is4() && err == nil {
					t.Fatalf("allocation past %s: got %s, want an error", last, ip)
				} else if pool.Addr().Is6() {
					if err := a.Release(n); err != nil && p.Name != "whereabouts" {
						t.Fatal(err)
					}
				}
				if err := a.Release(3); err != nil {
					t.Fatal(err)
				}
				ip, err := a.Allocate(n + 1)
				if err != nil {
					t.Fatal(err)
				}
				if want := Nth(first, 3); ip != want {
					t.Fatalf("after release: got %s, want %s", ip, want)
				}
			})
		}
	}
}

// TestClaim checks that Claim leaves each peer where sequential allocations
// would have: the next allocation is the address after the claimed ones.
func TestClaim(t *testing.T) {
	pool := netip.MustParsePrefix("10.2.0.0/26")
	first, _ := Usable(pool)
	for _, p := range allPeers() {
		t.Run(p.Name, func(t *testing.T) {
			a, err := p.New(t.TempDir(), pool)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if _, err := a.Allocate(0); err != nil {
				t.Fatal(err)
			}
			if err := a.Claim([]netip.Addr{Nth(first, 1), Nth(first, 2), Nth(first, 3)}); err != nil {
				t.Fatal(err)
			}
			ip, err := a.Allocate(1)
			if err != nil {
				t.Fatal(err)
			}
			if want := Nth(first, 4); ip != want {
				t.Fatalf("got %s, want %s", ip, want)
			}
		})
	}
}

// TestPair fills a small pool from two goroutines on every peer's shared
// form: no address twice, none outside the pool.
func TestPair(t *testing.T) {
	pool := netip.MustParsePrefix("10.3.0.0/25")
	n := UsableCount(pool)
	for _, p := range allPeers() {
		if p.Pair == nil {
			continue
		}
		t.Run(p.Name, func(t *testing.T) {
			a, b, err := p.Pair(t.TempDir(), pool)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if b != a {
				defer b.Close()
			}
			got := make([][]netip.Addr, 2)
			done := make(chan error, 2)
			for g, h := range []Allocator{a, b} {
				go func() {
					for k := g; k < n; k += 2 {
						ip, err := h.Allocate(k)
						if err != nil {
							done <- fmt.Errorf("goroutine %d, allocation %d: %w", g, k, err)
							return
						}
						got[g] = append(got[g], ip)
					}
					done <- nil
				}()
			}
			for range 2 {
				if err := <-done; err != nil {
					t.Error(err)
				}
			}
			all := slices.Concat(got[0], got[1])
			slices.SortFunc(all, netip.Addr.Compare)
			first, _ := Usable(pool)
			for i, ip := range all {
				if want := Nth(first, uint64(i)); ip != want {
					t.Fatalf("sorted address %d: got %s, want %s (each usable address exactly once)", i, ip, want)
				}
			}
		})
	}
}

// TestWorkloads runs every workload once on every peer at small sizes, with
// the checks the workloads make (every fill in order, no address held or
// outside the pool), and reads their metrics.
func TestWorkloads(t *testing.T) {
	pool26 := netip.MustParsePrefix("10.4.0.0/26")
	for _, p := range append(Peers(), DiskPeers()...) {
		t.Run(p.Name, func(t *testing.T) {
			// 122 timed allocations are two whole fills of the /26; 7 are
			// spread over one fill, the pool brought between them by Claim.
			for _, n := range []string{"122x", "7x"} {
				run(t, n, func(b *testing.B) { benchFill(b, p, pool26, UsableCount(pool26), false) })
			}
			run(t, "130x", func(b *testing.B) { benchHoles(b, p, netip.MustParsePrefix("10.5.0.0/22"), 0.9) })
			run(t, "50x", func(b *testing.B) { benchCycle(b, p, netip.MustParsePrefix("10.6.0.0/24"), 0.5) })
		})
	}
	for _, p := range Peers() {
		t.Run(p.Name+"/ipv6", func(t *testing.T) {
			r := run(t, "3x", func(b *testing.B) { benchFill(b, p, pool64, 300, true) })
			if v := r.Extra["retained-B/alloc"]; v <= 0 {
				t.Errorf("retained-B/alloc = %v, want > 0", v)
			}
		})
	}
	for _, p := range append(Peers()[:1:1], append([]Peer{OursTwoAllocators()}, Peers()[1:]...)...) {
		t.Run(p.Name+"/concurrent", func(t *testing.T) {
			r := run(t, "2x", func(b *testing.B) { benchConcurrentFill(b, p, pool26) })
			dups, errs := r.Extra["dups"], r.Extra["errs"]
			switch {
			case p.Name == "ipam" || p.Name == "ipam-2alloc" || p.Name == "bitmap":
				if dups != 0 || errs != 0 {
					t.Errorf("dups = %v, errs = %v, want 0 and 0", dups, errs)
				}
			case dups != 0:
				// A peer handing out an address twice is a finding, not
				// a broken test: the benchmark reports it.
				t.Logf("FINDING: %s handed out %v addresses twice", p.Name, dups)
			}
		})
	}
}

// run runs f as a benchmark for benchtime ("Nx": N ops) and fails t if f
// failed.
func run(t *testing.T, benchtime string, f func(b *testing.B)) testing.BenchmarkResult {
	t.Helper()
	bt := flag.Lookup("test.benchtime")
	old := bt.Value.String()
	defer bt.Value.Set(old)
	if err := bt.Value.Set(benchtime); err != nil {
		t.Fatal(err)
	}
	r := testing.Benchmark(f)
	if r.N == 0 {
		t.Fatalf("the workload failed: %s", lastFailure())
	}
	return r
}

func TestSweeps(t *testing.T) {
	for _, c := range []struct{ n, count int }{{1, 10}, {7, 10}, {10, 10}, {25, 10}, {3, 4093}} {
		s := newSweeps(c.n, c.count)
		var levels []int
		fresh := 0
		for range c.n {
			l, f := s.next()
			if f {
				fresh++
			}
			if l < 0 || l >= c.count {
				t.Fatalf("%+v: level %d out of range", c, l)
			}
			levels = append(levels, l)
		}
		if want := (c.n + c.count - 1) / c.count; fresh != want {
			t.Errorf("%+v: %d sweeps, want %d", c, fresh, want)
		}
		if c.n%c.count == 0 {
			// Whole sweeps: every level once per sweep.
			for i, l := range levels {
				if l != i%c.count {
					t.Fatalf("%+v: levels %v, want every level in order", c, levels)
				}
			}
		}
	}
}

func TestAddressHelpers(t *testing.T) {
	for _, c := range []struct {
		pool        string
		first, last string
		count       int
	}{
		{"10.0.0.0/20", "10.0.0.2", "10.0.15.254", 4093},
		{"10.0.0.0/16", "10.0.0.2", "10.0.255.254", 65533},
		{"2001:db8::/120", "2001:db8::2", "2001:db8::ff", 254},
	} {
		pool := netip.MustParsePrefix(c.pool)
		first, last := Usable(pool)
		if first.String() != c.first || last.String() != c.last || UsableCount(pool) != c.count {
			t.Errorf("%s: %s-%s (%d), want %s-%s (%d)", c.pool, first, last, UsableCount(pool), c.first, c.last, c.count)
		}
		if got := Nth(first, uint64(c.count-1)); got != last {
			t.Errorf("%s: Nth(first, count-1) = %s, want %s", c.pool, got, last)
		}
		if off, ok := Offset(first, last); !ok || off != uint64(c.count-1) {
			t.Errorf("%s: Offset(first, last) = %d, %v", c.pool, off, ok)
		}
	}
	if _, ok := Offset(netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.4")); ok {
		t.Error("Offset of an address before the base: ok")
	}
}
