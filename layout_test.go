package ipam

import (
	"math/rand/v2"
	"testing"
)

// TestUsedTreeModel runs random marks, clears and searches on the used-ordinal
// tree and on a plain bitmap side by side, for trees of one to three levels,
// over spans of ordinals narrow enough that leaves and whole subtrees fill up,
// are dropped as full and are rebuilt by a clear. Ops: marks and clears in
// proportions that alternate between filling and draining, and two in
// twelve steps are searches.
func TestUsedTreeModel(t *testing.T) {
	for _, levels := range []int{1, 2, 3} {
		size := 1 << (6 * levels)
		for _, span := range []int{size, 200, 70} {
			span = min(span, size)
			seed := uint64(levels*1000 + span)
			rng := rand.New(rand.NewPCG(seed, 7))
			tree := newUsedTree(levels)
			model := make([]bool, size)
			used := 0
			// Work in a window of span ordinals placed at random, so that
			// a run fills it.
			base := rng.IntN(size - span + 1)
			for step := range 20000 {
				o := base + rng.IntN(span)
				ord := u128{Lo: uint64(o)}
				// Phases of 2,000 steps fill the window (marks only, so
				// that it fills completely) and drain it (2 marks in 10
				// steps that change it) in turn.
				marks := 10
				if step/2000%2 == 1 {
					marks = 2
				}
				switch op := rng.IntN(12); {
				case op < marks:
					if got, want := tree.set(ord), !model[o]; got != want {
						t.Fatalf("levels %d span %d seed %d step %d: set(%d) = %t, want %t", levels, span, seed, step, o, got, want)
					}
					if !model[o] {
						model[o] = true
						used++
					}
				case op < 10:
					if got, want := tree.clear(ord), model[o]; got != want {
						t.Fatalf("levels %d span %d seed %d step %d: clear(%d) = %t, want %t", levels, span, seed, step, o, got, want)
					}
					if model[o] {
						model[o] = false
						used--
					}
				default:
					want, ok := -1, false
					for i := o; i < size; i++ {
						if !model[i] {
							want, ok = i, true
							break
						}
					}
					got, gotOK := tree.nextFree(ord)
					if gotOK != ok || ok && got != (u128{Lo: uint64(want)}) {
						t.Fatalf("levels %d span %d seed %d step %d: nextFree(%d) = %s %t, want %d %t", levels, span, seed, step, o, got, gotOK, want, ok)
					}
				}
				if got := tree.has(ord); got != model[o] {
					t.Fatalf("levels %d span %d seed %d step %d: has(%d) = %t, want %t", levels, span, seed, step, o, got, model[o])
				}
				if tree.used != (u128{Lo: uint64(used)}) {
					t.Fatalf("levels %d span %d seed %d step %d: %s used, want %d", levels, span, seed, step, tree.used, used)
				}
			}
		}
	}
}

// TestUsedTreeFull fills a two-level tree completely, so that every leaf and
// the root are full, then frees one ordinal and finds it again.
func TestUsedTreeFull(t *testing.T) {
	tree := newUsedTree(2)
	for o := range 4096 {
		if !tree.set(u128{Lo: uint64(o)}) {
			t.Fatalf("set(%d) of a free ordinal reported it used", o)
		}
	}
	if _, ok := tree.nextFree(u128{}); ok {
		t.Fatal("a full tree has a free ordinal")
	}
	if !tree.clear(u128{Lo: 1234}) {
		t.Fatal("clear(1234) of a used ordinal reported it free")
	}
	if got, ok := tree.nextFree(u128{}); !ok || got != (u128{Lo: 1234}) {
		t.Fatalf("nextFree(0) = %s %t, want 1234", got, ok)
	}
	if got, ok := tree.nextFree(u128{Lo: 1235}); ok {
		t.Fatalf("nextFree(1235) = %s, want none", got)
	}
}
