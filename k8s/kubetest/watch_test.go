package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ipamkit/ipam/store"
)

// view is a store.WatchHandler that keeps the claims it has been told of,
// by key, and counts the Resets.
type view struct {
	mu      sync.Mutex
	claims  map[string]store.Claim
	resets  int
	changed chan struct{}
}

func newView() *view { return &view{claims: map[string]store.Claim{}, changed: make(chan struct{}, 1)} }

func (v *view) Reset(claims []store.Claim) {
	v.mu.Lock()
	v.claims = map[string]store.Claim{}
	for _, c := range claims {
		v.claims[c.Key()] = c
	}
	v.resets++
	v.mu.Unlock()
	v.notify()
}

func (v *view) Apply(e store.Event) {
	v.mu.Lock()
	if e.Deleted {
		delete(v.claims, e.Claim.Key())
	} else {
		v.claims[e.Claim.Key()] = e.Claim
	}
	v.mu.Unlock()
	v.notify()
}

func (v *view) notify() {
	select {
	case v.changed <- struct{}{}:
	default:
	}
}

// state returns what v holds: each key with its revision.
func (v *view) state() map[string]int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string]int64{}
	for k, c := range v.claims {
		out[k] = c.Revision
	}
	return out
}

// waitFor waits until v holds exactly want (key to revision).
func (v *view) waitFor(t *testing.T, what string, want map[string]int64) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		got := v.state()
		if maps.Equal(got, want) {
			return
		}
		select {
		case <-v.changed:
		case <-deadline:
			t.Fatalf("%s: the watcher holds %v, want %v", what, got, want)
		}
	}
}

func revisions(claims ...store.Claim) map[string]int64 {
	out := map[string]int64{}
	for _, c := range claims {
		out[c.Key()] = c.Revision
	}
	return out
}

// TestWatch follows creates, updates and deletes through another Store,
// skips a bad object, and carries on after the API server restarts.
func TestWatch(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	writer := newStore(t)
	claim := func(ip string, uid string) store.Claim {
		return store.Claim{Pool: "w", IP: netip.MustParseAddr(ip), Owner: store.Owner{UID: uid, Interface: "eth0"}}
	}
	a, err := writer.Create(ctx, claim("10.2.0.1", "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := writer.Create(ctx, claim("2001:db8::2", "b"))
	if err != nil {
		t.Fatal(err)
	}

	v := newView()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newStore(t).Watch(wctx, v) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v after its context was canceled, want context.Canceled", err)
		}
	}()
	v.waitFor(t, "after the first list", revisions(a, b))

	c, err := writer.Create(ctx, claim("10.2.0.3", "c"))
	if err != nil {
		t.Fatal(err)
	}
	moved := a
	moved.Owner.UID = "a2"
	if moved, err = writer.Update(ctx, moved, a.Revision); err != nil {
		t.Fatal(err)
	}
	if err := writer.Delete(ctx, b.Pool, b.IP, b.Revision); err != nil {
		t.Fatal(err)
	}
	createRaw(t, "w.10.2.0.9", nil, map[string]any{"pool": "w", "ip": "not an address", "owner": map[string]any{"uid": "x"}})
	v.waitFor(t, "after create, update, delete", revisions(moved, c))

	// Down and up again: the watcher catches up with what happened while it
	// was away.
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	d, err := writer.Create(ctx, claim("10.2.0.4", "d"))
	if err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "after the restart", revisions(moved, c, d))
	for i := range 20 {
		if _, err := writer.Create(ctx, claim(fmt.Sprintf("10.2.1.%d", i), "e")); err != nil {
			t.Fatal(err)
		}
	}
	all, err := writer.List(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, "after 20 more", revisions(all...))
	if keys := slices.Collect(maps.Keys(v.state())); len(keys) != 23 {
		t.Fatalf("the watcher holds %d claims, want 23", len(keys))
	}
}
