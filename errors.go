package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/store"
)

// Sentinel errors. Callers branch on them with errors.Is; details ride in the
// typed errors below, which unwrap to one of these.
var (
	// ErrInvalid is returned (inside a *FieldError) by parsing and validation of
	// pools, ranges, label selectors and requests.
	ErrInvalid = errors.New("invalid")
	// ErrNotFound is store.ErrNotFound, one value for "no such thing": it is
	// returned by Allocate when a request names a pool its PoolSource does not
	// have, by ReleaseIP and ReleaseClaim when nothing is claimed, and by every
	// Store's Get, Update and Delete.
	ErrNotFound = store.ErrNotFound
	// ErrExhausted is returned (inside an *AllocationError) by Allocate when a
	// pool has no free address left: the pool an interface names, or, for
	// pools the candidate chain selected, when every candidate failed and one
	// was full (the error then also wraps ErrNoCandidates).
	ErrExhausted = errors.New("no free address")
	// ErrUnavailable is returned (inside an *AllocationError) by Allocate when a
	// requested address is claimed by someone else, excluded, reserved or the
	// gateway.
	ErrUnavailable = errors.New("address not available")
	// ErrNotInRange is returned by Allocate when a requested address lies in no
	// pool of the interface that asked for it.
	ErrNotInRange = errors.New("address not in any requested pool")
	// ErrOwnerConflict is returned by Allocate when the owner already holds a
	// different address in a pool than the one it now requests there.
	ErrOwnerConflict = errors.New("owner already holds another address")
	// ErrNoCandidates is returned (inside an *AllocationError) by Allocate when
	// no rule of the candidate chain names a pool for an interface, or every
	// candidate was filtered out or exhausted (with ErrExhausted as well when
	// one was).
	ErrNoCandidates = errors.New("no pool can serve")
	// ErrNotSupported is returned by Select for the SpiderSubnet annotations
	// when its PoolSource serves no auto-pools (is not an AppPoolSource:
	// Spiderpool's auto-pool feature off), and for a pod without a controller
	// that asks for one; inside a *subnet.Error, for auto-pool requests
	// Spiderpool does not honour either (changing the subnet of a running
	// application); and by Follow when the Store cannot watch.
	ErrNotSupported = errors.New("not supported")
	// ErrNotReady is returned (inside a *subnet.Error) when an auto-pool
	// cannot be served or changed yet: its subnet has too few free addresses,
	// a shrink or a deletion waits for pods to release theirs, or the
	// application is not known yet. Retry later; a CNI plugin says "try again
	// later" (CNI error code 11).
	ErrNotReady = errors.New("not ready, retry later")
	// ErrConflict is store.ErrConflict: a revision-checked write lost a race. It
	// is returned by ReleaseIP when the claim changed under it, and by Allocate
	// when allocations for one owner through several Allocators at once did
	// not settle (try again).
	ErrConflict = store.ErrConflict
	// ErrOverlap is returned (inside an *OverlapError) by Allocate for a pool
	// that shares addresses with another pool of the PoolSource: such a pool
	// hands out no new address while the overlap lasts.
	ErrOverlap = errors.New("pool overlaps another")
)

// errCandidatesFull is the error of a selected interface whose candidates
// all failed, one of them full: both ErrNoCandidates and ErrExhausted.
var errCandidatesFull = fmt.Errorf("%w: %w", ErrNoCandidates, ErrExhausted)

// OverlapError says that two pools can hand out the same addresses. It
// unwraps to ErrOverlap.
type OverlapError struct {
	// Pool is the pool refused, Other the pool it overlaps.
	Pool, Other string
	// Addresses is the first range of addresses they share.
	Addresses netipx.IPRange
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("pool %q overlaps pool %q at %s", e.Pool, e.Other, e.Addresses)
}

// Unwrap returns ErrOverlap.
func (e *OverlapError) Unwrap() error { return ErrOverlap }

// FieldError is one problem with one field of some input: a pool, a range, a
// label selector, a request. Validation joins several of them with errors.Join so
// that every problem is reported at once. It unwraps to ErrInvalid.
//
// The zero FieldError is not useful; build one with a field path and value.
type FieldError struct {
	// Object names what the field belongs to, such as `pool "blue"`; may be empty.
	Object string
	// Field is the field path, such as "ranges[1].rangeEnd".
	Field string
	// Value is the offending input as the user wrote it.
	Value string
	// Reason says what is wrong, in lower case.
	Reason string
}

// Error returns, for example,
// `pool "blue": ranges[1].rangeEnd "10.0.1.300": invalid IP address`.
func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Object != "" {
		b.WriteString(e.Object)
		b.WriteString(": ")
	}
	b.WriteString(e.Field)
	if e.Value != "" {
		b.WriteString(" ")
		if strings.Contains(e.Value, `"`) && !strings.ContainsAny(e.Value, "`\n") {
			b.WriteString("`" + e.Value + "`") // JSON text reads better unescaped
		} else {
			b.WriteString(strconv.Quote(e.Value))
		}
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// fieldErrors collects FieldErrors for one object.
type fieldErrors struct {
	object string
	errs   []error
}

func (fe *fieldErrors) add(field, value, reason string, args ...any) {
	if len(args) > 0 {
		reason = fmt.Sprintf(reason, args...)
	}
	fe.errs = append(fe.errs, &FieldError{Object: fe.object, Field: field, Value: value, Reason: reason})
}

func (fe *fieldErrors) err() error { return errors.Join(fe.errs...) }

// AllocationError says why one pool could not serve one interface of a request.
// It unwraps to ErrExhausted, ErrUnavailable, ErrOwnerConflict, ErrNotFound, or a
// Store error.
type AllocationError struct {
	// Interface is the interface being served, such as "eth0".
	Interface string
	// Family is the IP family being served, 4 or 6: of the pools selected
	// per family, or of the pool the interface names; 0 when no pool was
	// involved.
	Family int
	// Pool is the pool that failed; empty when no pool was involved.
	Pool string
	// IP is the address concerned, when there is one (a requested address).
	IP netip.Addr
	// Reason is a human sentence without the pool and interface, such as
	// "no free address in 10.0.0.2-10.0.0.254 (253/253 used)".
	Reason string
	// Err is the sentinel or underlying error.
	Err error
	// Trace is what happened to every pool the request considered, up to the
	// failure.
	Trace []TraceEntry

	familyImplied bool // Family is the named pool's: Error leaves it out
}

// Error returns, for example,
// `eth0: pool "blue": no free address in 10.0.0.2-10.0.0.254 (253/253 used)`.
func (e *AllocationError) Error() string {
	var b strings.Builder
	if e.Interface != "" {
		b.WriteString(e.Interface)
		if e.Family != 0 && !e.familyImplied {
			fmt.Fprintf(&b, " IPv%d", e.Family)
		}
		b.WriteString(": ")
	}
	if e.Pool != "" {
		fmt.Fprintf(&b, "pool %q: ", e.Pool)
	}
	if e.Reason != "" {
		b.WriteString(e.Reason)
	} else if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *AllocationError) Unwrap() error { return e.Err }
