package ipam

import "time"

// Observer is told the outcome of every allocation and release an Allocator
// makes through its exported methods, for metrics (see the metrics module)
// or tracing. It is set in Options.Observer; the Allocator has none by
// default. Its methods are called on the caller's goroutine, synchronously,
// possibly from many goroutines at once: they must be safe for concurrent
// use, quick, and must not call back into the Allocator.
//
// The Allocator reads no clock: Start gives the observer's own time when a
// call begins, and the event of its end carries it back, so that the
// observer measures the call's latency with its own clock.
type Observer interface {
	// Start returns the time a call begins at by the observer's clock, to be
	// handed back in the call's event; the zero Time if it measures none.
	Start() time.Time
	// Allocated is told the end of an Allocate or AllocateAt call.
	Allocated(AllocateEvent)
	// Released is told the end of a Release, ReleaseAt, ReleaseClaim,
	// ReleaseClaimAt, ReleaseIP or ReleaseIPAt call.
	Released(ReleaseEvent)
}

// AllocateEvent is the outcome of one allocation.
type AllocateEvent struct {
	// Start is what Observer.Start returned as the call began.
	Start time.Time
	// Result is what the call returned (the zero Result on an error). Its
	// slices are the caller's: read them, never keep or change them.
	Result Result
	// Err is the call's error, nil on success: errors.Is tells
	// ErrExhausted, ErrNoCandidates and the others apart.
	Err error
}

// ReleaseEvent is the outcome of one release call.
type ReleaseEvent struct {
	// Start is what Observer.Start returned as the call began.
	Start time.Time
	// Pool is the pool of a ReleaseClaim or ReleaseIP call; empty for a
	// release by owner, which may span pools.
	Pool string
	// Err is the call's error, nil on success (a release of what is not
	// held is a success for Release and ErrNotFound for the others).
	Err error
}

// start returns the Observer's time for a call that begins; the zero Time
// without an Observer.
func (a *Allocator) start() time.Time {
	if a.obs == nil {
		return time.Time{}
	}
	return a.obs.Start()
}

// allocated tells the Observer, if there is one, of an allocation begun at
// start, and returns err.
func (a *Allocator) allocated(start time.Time, res *Result, err error) error {
	if a.obs != nil {
		a.obs.Allocated(AllocateEvent{Start: start, Result: *res, Err: err})
	}
	return err
}

// released tells the Observer, if there is one, of a release begun at start
// (of pool, or of an owner's claims if pool is empty), and returns err.
func (a *Allocator) released(start time.Time, pool string, err error) error {
	if a.obs != nil {
		a.obs.Released(ReleaseEvent{Start: start, Pool: pool, Err: err})
	}
	return err
}
