package kubegc

import (
	"slices"
	"testing"
	"time"
)

// TestDue: UIDs asked for now are due at the next pass, UIDs asked for at a
// time from that time on, the earliest time asked for a UID wins, and a
// full pass takes the UIDs due with it.
func TestDue(t *testing.T) {
	r := &Runner{now: map[string]struct{}{}, deadlines: map[string]time.Time{}, wake: make(chan struct{}, 1)}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	far := t0.Add(time.Hour) // the next full pass
	r.judgeNow("a")
	r.judgeAt("b", t0.Add(2*time.Second))
	r.judgeAt("b", t0.Add(time.Second)) // earlier: wins
	r.judgeAt("c", t0.Add(3*time.Second))
	select {
	case <-r.wake:
	default:
		t.Fatal("no wake-up")
	}

	full, uids, next := r.due(t0, far)
	if full || !slices.Equal(uids, []string{"a"}) || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("due at t0 = %v, %v, %v; want a, next at t0+1s", full, uids, next)
	}
	full, uids, next = r.due(t0.Add(time.Second), far)
	if full || !slices.Equal(uids, []string{"b"}) || !next.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("due at t0+1s = %v, %v, %v; want b, next at t0+3s", full, uids, next)
	}
	r.judgeNow("d")
	full, uids, next = r.due(t0.Add(4*time.Second), t0.Add(4*time.Second))
	if !full || uids != nil || !next.IsZero() {
		t.Fatalf("due at the full pass = %v, %v, %v; want a full pass and nothing left", full, uids, next)
	}
	if full, uids, _ = r.due(t0.Add(5*time.Second), far); full || len(uids) != 0 {
		t.Fatalf("due after the full pass = %v, %v; want nothing", full, uids)
	}
	r.judgeAll()
	if full, _, _ = r.due(t0.Add(6*time.Second), far); !full {
		t.Fatal("judgeAll did not ask for a full pass")
	}
}
