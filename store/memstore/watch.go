package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ipamkit/ipam/store"
)

// Compile-time check that *Store can watch.
var _ store.Watcher = (*Store)(nil)

// watchers is the set of Watch calls on one backend.
//
// Each pool keeps the watches that follow it (poolClaims.watchers), and a
// write hands its change to them under the pool's lock, which it holds
// anyway: the changes of one claim reach a watch in the order they were
// made, and writes take no lock of the backend's. Watch joins list first,
// which every pool made from then on copies as it is made, and then joins
// every pool that exists, copying its claims under its lock: a pool it
// finds joined already was made since, and has handed it every claim it
// has. So each write is either in the copy or handed to the watch after it,
// never both.
type watchers struct {
	mu   sync.Mutex
	list []*watch
}

// current returns the watches that a pool made now starts with.
func (w *watchers) current() []*watch {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.list)
}

// watch is one Watch call: the changes not yet handed to its handler.
type watch struct {
	mu      sync.Mutex
	pending []store.Event
	wake    chan struct{} // has a value when pending may be non-empty
	done    atomic.Bool   // the Watch call has returned: hand it nothing more
}

// publish hands e to every watch of p, and drops the watches that have
// ended. Called with p's lock held.
func (p *poolClaims) publish(e store.Event) {
	live := p.watchers[:0]
	for _, x := range p.watchers {
		if x.done.Load() {
			continue
		}
		live = append(live, x)
		x.mu.Lock()
		x.pending = append(x.pending, e)
		x.mu.Unlock()
		select {
		case x.wake <- struct{}{}:
		default:
		}
	}
	clear(p.watchers[len(live):])
	p.watchers = live
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
	w.list = append(w.list, x)
	w.mu.Unlock()
	var all []store.Claim
	for _, p := range s.b.pools.Range {
		p.mu.Lock()
		if !slices.Contains(p.watchers, x) {
			all = append(all, p.list()...)
			p.watchers = append(p.watchers, x)
		}
		p.mu.Unlock()
	}
	defer func() {
		// Leave the backend's list, then every pool; a pool made
		// meanwhile, which Range may miss, drops x as it next publishes.
		x.done.Store(true)
		w.mu.Lock()
		if i := slices.Index(w.list, x); i >= 0 {
			w.list = slices.Delete(w.list, i, i+1)
		}
		w.mu.Unlock()
		for _, p := range s.b.pools.Range {
			p.mu.Lock()
			if i := slices.Index(p.watchers, x); i >= 0 {
				p.watchers = slices.Delete(p.watchers, i, i+1)
			}
			p.mu.Unlock()
		}
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
