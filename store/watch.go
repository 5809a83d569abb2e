package store

import "context"

// Event is one change to one claim, as a Watcher reports it. It is a plain
// value.
type Event struct {
	// Claim is the claim as it is after the change; for a deletion, as it
	// was last (Pool and IP at least).
	Claim Claim
	// Deleted reports that the claim is gone.
	Deleted bool
}

// WatchHandler receives what a Watcher sees. Its methods are called from one
// goroutine, one at a time, in the order of the Store's changes.
type WatchHandler interface {
	// Reset replaces everything the handler knows with claims: every claim
	// of every pool at one consistent point of the Store's history. It is
	// called first, and again whenever the Watcher could not follow every
	// change (its history was compacted, its connection broke).
	Reset(claims []Claim)
	// Apply reports one change made after the point of the last Reset.
	Apply(e Event)
}

// Watcher is an optional Store capability: it follows every claim as it
// changes, so that a reader's view (an Allocator's indexes) stays current
// without listing pools again. Stores whose backend can stream its changes
// (etcd's watch, a Kubernetes informer, memory) provide it.
type Watcher interface {
	// Watch calls h.Reset with every claim, then h.Apply with each change
	// after that point, until ctx is done; it then returns ctx's error. It
	// returns earlier only with an error it cannot recover from; a lost
	// connection or a compacted history is recovered by calling h.Reset
	// again with a fresh list. The handler's view lags the Store's by the
	// latency of the stream: it is a hint, never a reason to hand out an
	// address without a conditional write.
	Watch(ctx context.Context, h WatchHandler) error
}
