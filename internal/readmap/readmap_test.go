package readmap

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func TestGetOrAdd(t *testing.T) {
	var m Map[*int]
	if _, ok := m.Get("a"); ok {
		t.Fatal("empty map has a")
	}
	made := 0
	newV := func(string) *int { made++; return new(int) }
	a := m.GetOrAdd("a", newV)
	if got := m.GetOrAdd("a", newV); got != a || made != 1 {
		t.Fatalf("second GetOrAdd made a new value (made %d)", made)
	}
	for i := range 1000 {
		m.GetOrAdd(strconv.Itoa(i), newV)
	}
	for i := range 1000 {
		if _, ok := m.Get(strconv.Itoa(i)); !ok {
			t.Fatalf("lost %d", i)
		}
	}
	n := 0
	m.Range(func(string, *int) bool { n++; return true })
	if n != 1001 {
		t.Fatalf("Range saw %d entries, want 1001", n)
	}
}

// TestConcurrent adds the same names from several goroutines: each name gets
// exactly one value, and every goroutine sees it.
func TestConcurrent(t *testing.T) {
	var m Map[*int]
	const workers, names = 4, 2000
	got := make([][]*int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range names {
				got[w] = append(got[w], m.GetOrAdd(strconv.Itoa(i), func(string) *int { return new(int) }))
			}
		})
	}
	wg.Wait()
	for i := range names {
		for w := 1; w < workers; w++ {
			if got[w][i] != got[0][i] {
				t.Fatalf("name %d has two values", i)
			}
		}
	}
}

// TestRangeDuringMerge checks that Range sees every entry added before it
// started while other entries are added, and the overlay merged, at the same
// time: a merge between reading the settled map and the overlay once hid the
// overlay's entries from Range.
func TestRangeDuringMerge(t *testing.T) {
	for round := range 200 {
		var m Map[int]
		before := 1 + round%7 // leaves some in the overlay
		for i := range before {
			m.GetOrAdd("old-"+strconv.Itoa(i), func(string) int { return i })
		}
		stop := addUntilStopped(&m, "new-")
		for range 50 {
			seen := 0
			m.Range(func(name string, _ int) bool {
				if strings.HasPrefix(name, "old-") {
					seen++
				}
				return true
			})
			if seen != before {
				stop()
				t.Fatalf("round %d: Range saw %d of the %d entries added before it", round, seen, before)
			}
		}
		stop()
	}
}

// addUntilStopped adds entries named prefix followed by a number to m, from
// a goroutine of its own, until the function it returns is called; that
// function returns once the goroutine has.
func addUntilStopped(m *Map[int], prefix string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			m.GetOrAdd(prefix+strconv.Itoa(i), func(string) int { return i })
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// TestGetDuringMerge checks that Get finds an entry added before it while
// other entries are added, and the overlay merged, at the same time: a
// merge between reading the settled map and the overlay once hid the entry
// (memstore then said "claim not found" of a claim just created).
func TestGetDuringMerge(t *testing.T) {
	var m Map[int]
	defer addUntilStopped(&m, "other-")()
	for i := range 20000 {
		name := "mine-" + strconv.Itoa(i)
		m.GetOrAdd(name, func(string) int { return i })
		if _, ok := m.Get(name); !ok {
			t.Fatalf("Get(%q) found nothing right after GetOrAdd added it", name)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = strconv.Itoa(i)
			}
			for b.Loop() {
				var m Map[int]
				for _, s := range names {
					m.GetOrAdd(s, func(string) int { return 0 })
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/add")
		})
	}
}

// BenchmarkGet looks names up in turn among a few, as an allocator serving
// requests that take turns among a handful of pools does, in a Map that
// holds a hundred.
func BenchmarkGet(b *testing.B) {
	for _, turns := range []int{1, 4, 22} {
		b.Run(fmt.Sprint("names=", turns), func(b *testing.B) {
			var m Map[int]
			names := make([]string, 100)
			for i := range names {
				names[i] = fmt.Sprintf("pool-%d", i)
				m.GetOrAdd(names[i], func(string) int { return i })
			}
			i := 0
			for b.Loop() {
				if v, ok := m.Get(names[i]); !ok || v != i {
					b.Fatalf("Get(%q) = %d, %v", names[i], v, ok)
				}
				if i++; i == turns {
					i = 0
				}
			}
		})
	}
}
