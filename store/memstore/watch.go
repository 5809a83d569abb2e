package memstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/ipamkit/ipam/store"
)

// Compile-time check that *Store can watch.
var _ store.Watcher = (*Store)(nil)

// watchers is the set of Watch calls on one backend.
//
// A write holds mu for reading while it changes a pool and hands the change
// to every watch, under the pool's lock, so that the changes of one claim
// reach a watch in the order they were made. Watch holds mu for writing while
// it copies every pool and joins the set: no write is half done then, so each
// write is either in the copy or handed to the watch after it, never both.
type watchers struct {
	mu   sync.RWMutex
	list []*watch
}

// watch is one Watch call: the changes not yet handed to its handler.
type watch struct {
	mu      sync.Mutex
	pending []store.Event
	wake    chan struct{} // has a value when pending may be non-empty
}

// publish hands e to every watch. Called with mu held for reading and the
// pool's lock held.
func (w *watchers) publish(e store.Event) {
	for _, x := range w.list {
		x.mu.Lock()
		x.pending = append(x.pending, e)
		x.mu.Unlock()
		select {
		case x.wake <- struct{}{}:
		default:
		}
	}
}

// Watch calls h.Reset with every claim of the backend, then h.Apply with each
// later change, in the order of the changes of each claim, until ctx is done;
// it then returns ctx's error. It never needs to start over: nothing is lost
// in memory. A deleted claim's event carries the claim as it was. The
// handler runs in the caller's goroutine; changes wait in memory while it
// is busy, so a handler that never returns holds them all.
func (s *Store) Watch(ctx context.Context, h store.WatchHandler) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: watch: %w", err)
	}
	x := &watch{wake: make(chan struct{}, 1)}
	w := &s.b.watch
	w.mu.Lock()
	var all []store.Claim
	for _, p := range s.b.pools.Range {
		p.mu.Lock()
		all = append(all, p.list()...)
		p.mu.Unlock()
	}
	w.list = append(w.list, x)
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		for i, y := range w.list {
			if y == x {
				w.list = append(w.list[:i:i], w.list[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
	}()

	h.Reset(all)
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("memstore: watch: %w", ctx.Err())
		case <-x.wake:
		}
		x.mu.Lock()
		batch := x.pending
		x.pending = nil
		x.mu.Unlock()
		for _, e := range batch {
			h.Apply(e)
		}
	}
}
