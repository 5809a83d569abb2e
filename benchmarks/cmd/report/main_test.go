package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `goos: linux
cpu: Test CPU
BenchmarkHoles16/ipam-2        	 1000	       1000 ns/op	     400 B/op	       2 allocs/op
BenchmarkHoles16/ipam-2        	 1000	       3000 ns/op	     400 B/op	       2 allocs/op
BenchmarkHoles16/ipam-2        	 1000	       2000 ns/op	     400 B/op	       2 allocs/op
BenchmarkHoles16/hostlocal-mem-2 	  10	    2000000 ns/op	   16000 B/op	     600 allocs/op
BenchmarkHoles16/hostlocal-index-2 	  100	      30000 ns/op	   15000 B/op	     500 allocs/op
BenchmarkHoles16/bitmap-2      	 9999	         25.5 ns/op	       0 B/op	       0 allocs/op
BenchmarkConcurrentFill20/ipam-2 	 10	       2300 ns/op	         0 dups	         0 errs	    1458 B/op	       2 allocs/op
BenchmarkConcurrentFill20/goipam-2 	  1	     700000 ns/op	         2 dups	         1 errs	  220000 B/op	    2080 allocs/op
BenchmarkEssentials-2 	 1000000	       150 ns/op	      96 B/op	       1 allocs/op
BenchmarkAllocate/v4-24/fill-0%-2 	  200000	       600.0 ns/op	       140.0 floor-ns/op	         4.3 ×floor	     240 B/op	       1 allocs/op
BenchmarkEssentialsAt/v4-24/fill-0%-2 	 1000000	       200 ns/op	      96 B/op	       1 allocs/op
BenchmarkAllocate/v4-12/fill-99.99%-2 	  200000	       1200 ns/op	     240 B/op	       1 allocs/op
2026-11-22T23:07:36Z [debug] Reserving IP: "10.0.15.254"
PASS
`

func TestParse(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if r.cpu != "Test CPU" {
		t.Errorf("cpu %q", r.cpu)
	}
	if m, ok := r.median("Holes16", "ipam", "ns/op"); !ok || m != 2000 {
		t.Errorf("median %v %v, want 2000", m, ok)
	}
	if m, _ := r.median("ConcurrentFill20", "goipam", "dups"); m != 2 {
		t.Errorf("dups %v, want 2", m)
	}
	if _, ok := r.median("Fill20", "ipam", "ns/op"); ok {
		t.Error("a benchmark that did not run has a median")
	}
	if _, err := parse(strings.NewReader("PASS\n")); err == nil {
		t.Error("no results: no error")
	}
}

func TestRender(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	out := render(environment{Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), CPU: "X", NumCPU: 2, Go: "go1.26", Command: "go test", Report: "go run"}, r)
	for _, want := range []string{
		beginMark, endMark,
		"| b allocate the holes of a /16 99 % full | 2.00 µs | 25.5 ns | 2.00 ms | 30.0 µs |",
		"| b allocate the holes of a /16 99 % full | 78 | 1/1,000 | 1/15 |",
		"| host-local (FakeStore) | host-local (owner index) |",
		"b 1/1,000; c not measured | **not met** |",
		"goipam 2 | **not met** |",
		"| ipam Allocate (memstore) within 4× of the floor (`BenchmarkEssentials`) with at most 2 allocations, on every case of `BenchmarkAllocate` | 4.3 to 8.0 × the floor (worst v4-12/fill-99.99%); at most 1 allocations | **not met** (10 cases not measured) |",
		"It took 150 ns per allocation in this run (1 allocation, 96 B).",
		"| v4-24/fill-0% | 600 ns | 1, 240 | 4.0 | 4.3 | 200 ns | 3.0 |\n| v4-12/fill-99.99% | 1.20 µs | 1, 240 | 8.0 | — | — | — |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestFloorTarget checks the verdict on Allocate against the floor: met only
// with every case measured, each within 4× and 2 allocations.
func TestFloorTarget(t *testing.T) {
	out := func(ns, allocs func(c string) float64) string {
		var b strings.Builder
		b.WriteString("BenchmarkEssentials-2 1000 100 ns/op 96 B/op 1 allocs/op\n")
		for _, c := range allocateCases {
			fmt.Fprintf(&b, "BenchmarkAllocate/%s-2 1000 %v ns/op 240 B/op %v allocs/op\n", c, ns(c), allocs(c))
		}
		r, err := parse(strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		return floorTarget(r)
	}
	const worst = "v4-16/fill-50%"
	for _, c := range []struct {
		ns, allocs float64 // of the worst case; the others take 300 ns and 1
		want       string
	}{
		{400, 2, "3.0 to 4.0 × the floor (worst " + worst + "); at most 2 allocations | met |"},
		{401, 2, "(worst " + worst + "); at most 2 allocations | **not met** |"},
		{350, 3, "3.0 to 3.5 × the floor (worst " + worst + "); at most 3 allocations | **not met** |"},
	} {
		got := out(func(k string) float64 {
			if k == worst {
				return c.ns
			}
			return 300
		}, func(k string) float64 {
			if k == worst {
				return c.allocs
			}
			return 1
		})
		if !strings.Contains(got, c.want) {
			t.Errorf("worst %v ns, %v allocs: got %q, want it to contain %q", c.ns, c.allocs, got, c.want)
		}
	}

	// A case within 4× of the floor run apart but not of the floor timed
	// in turns with it fails: the verdict takes the larger ratio.
	var b strings.Builder
	b.WriteString("BenchmarkEssentials-2 1000 100 ns/op 96 B/op 1 allocs/op\n")
	for _, c := range allocateCases {
		turns := 3.0
		if c == worst {
			turns = 4.2
		}
		fmt.Fprintf(&b, "BenchmarkAllocate/%s-2 1000 300 ns/op 80 floor-ns/op %v ×floor 240 B/op 1 allocs/op\n", c, turns)
	}
	r, err := parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := floorTarget(r), "3.0 to 4.2 × the floor (worst "+worst+"); at most 1 allocations | **not met** |"; !strings.Contains(got, want) {
		t.Errorf("with a case at 4.2× the floor timed in turns: got %q, want it to contain %q", got, want)
	}
}

// TestRenderSaved: a report from a saved output names the command the flags
// make, and no file-store directory when no file store ran.
func TestRenderSaved(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	out := render(environment{Saved: true, Files: "`/tmp` (tmpfs)", Command: "cd benchmarks && go test -bench x", Report: "go run ./benchmarks/cmd/report -from f"}, r)
	if want := "- From a saved output of `cd benchmarks && go test -bench x`, through `go run ./benchmarks/cmd/report -from f`."; !strings.Contains(out, want) {
		t.Errorf("report lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "Files of ipam") {
		t.Errorf("report names the file stores' directory although none ran:\n%s", out)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		q    float64
		want string
	}{{0.001, "1/1,000"}, {1.0 / 1234.5, "1/1,230"}, {0.5, "1/2.0"}, {0.79, "1/1.3"}, {0.099, "1/10"}, {2.345, "2.3"}, {66.4, "66"}, {1234, "1,230"}} {
		if got := formatRatio(c.q); got != c.want {
			t.Errorf("formatRatio(%v) = %q, want %q", c.q, got, c.want)
		}
	}
	for _, c := range []struct {
		ns   float64
		want string
	}{{25.5, "25.5 ns"}, {905, "905 ns"}, {2880, "2.88 µs"}, {1.05e6, "1.05 ms"}, {1.7e9, "1.70 s"}} {
		if got := duration(c.ns); got != c.want {
			t.Errorf("duration(%v) = %q, want %q", c.ns, got, c.want)
		}
	}
}

func TestSplice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "README.md")
	before := "# T\n\nhand\n\n" + beginMark + "\nold\n" + endMark + "\n\nafter\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	text := beginMark + "\nnew\n" + endMark + "\n"
	for range 2 { // idempotent
		if err := splice(path, text); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(path)
	if want := "# T\n\nhand\n\n" + beginMark + "\nnew\n" + endMark + "\n\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := splice(path, text); err == nil {
		t.Error("no markers: no error")
	}
}
