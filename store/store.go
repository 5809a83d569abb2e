// Package store defines where address claims live: the Store contract that the
// allocator in package ipam calls, the Claim record it stores, and the sentinel
// errors every implementation returns.
//
// A claim is one record per allocated address, keyed by (pool, address). Every
// write is conditional: Create succeeds only if the key is absent, Update and
// Delete only if the caller names the revision the record has now. There is no
// read-compare-then-write-unconditionally anywhere in the contract, because that
// is the lost update that hands one address to two pods.
//
// Implementations import this package only, never package ipam, so a backend can
// be written, tested and versioned without the allocator. Every implementation
// should pass the conformance suite in package storetest.
//
// The Store is the one truth about who holds what: besides the claims of an
// address, it answers which claims an owner holds (Owned), by pod UID, by a
// stable owner's namespace and name, or by container ID, so that any number of
// allocators, in one process or many, agree on ownership without sharing
// memory.
//
// Optional capabilities are separate interfaces found by type assertion, as in
// io/fs. An Allocator looks for them once, when it is made, and picks how it
// works from what it finds. They fall in two groups.
//
// Capabilities that only save time (without them the Allocator makes the same
// promises, with more Store calls):
//
//   - Cursors: a per-pool "last reserved address" hint, host-local's
//     last_reserved_ip, from which round-robin resumes in a new process;
//   - CursorCreator: a Create that moves that hint in the same call (one call
//     per new address instead of two);
//   - PoolVersioner: a pool version that confirms "exhausted" without a List;
//   - Watcher: a stream of every change, which keeps an Allocator's hints
//     current (Allocator.Follow);
//   - OwnedAtLeast and AddressClaimsAtLeast: Owned and AddressClaims answered
//     from a cache that has caught up with a given revision;
//   - Counter: the number of claims of a pool without reading them (usage
//     figures);
//   - ClaimPager: every claim of every pool in pages, unreadable records
//     reported at the end in an error wrapping ErrCorrupt: a full pass
//     (garbage collection, the usage of every pool) holds one page at a
//     time and makes one read per page, not one per pool.
//
// Capabilities that change what the Allocator can promise:
//
//   - ExclusiveCreator: a Create that also checks what the owner holds, in the
//     same atomic step: racing calls for one owner never both create;
//   - OrderedRevisions: revisions that follow the order of writes, by which
//     racing creates for one owner always settle on one claim (without it,
//     three or more racing calls may leave the owner a second claim on an
//     interface, released with it);
//   - AddressReader: the claims of one address in every pool, without which
//     an Allocator on a PoolSource whose pools may overlap or move cannot see
//     an address held through another pool;
//   - ClaimLister: every claim of every pool, without which garbage
//     collection does not find the claims of a pool no PoolSource names.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Sentinel errors. Implementations return them (possibly wrapped) so that callers
// can branch with errors.Is.
var (
	// ErrExists is returned by Create when the address is already claimed.
	ErrExists = errors.New("address already claimed")
	// ErrConflict is returned by Update and Delete when the record's revision is
	// not the one the caller named: someone else changed it first.
	ErrConflict = errors.New("revision conflict")
	// ErrNotFound is returned by Get, Update and Delete when no claim exists for
	// the address.
	ErrNotFound = errors.New("claim not found")
	// ErrCorrupt is returned (wrapped) by List when some records of the pool
	// cannot be read, together with the claims that could: the caller keeps
	// those and must treat the unreadable addresses as taken (a Create of one
	// fails with ErrExists). The error names the records.
	ErrCorrupt = errors.New("unreadable claim record")
)

// Owner says who holds a claim. An owner is identified by its pod UID when set,
// otherwise by its container ID (host-local's identity); Interface narrows the
// identity to one interface of that pod or container. A Stable owner (a
// StatefulSet or KubeVirt pod) is identified by its namespace and name instead,
// so that its claims outlive the pod object and go back to the pod of the same
// name; UID then records the pod that holds the claim now. The zero Owner owns
// nothing.
type Owner struct {
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	UID         string `json:"uid,omitempty"`
	ContainerID string `json:"containerID,omitempty"`
	Interface   string `json:"interface,omitempty"`
	Stable      bool   `json:"stable,omitempty"`
}

// IsZero reports whether o identifies nobody (neither a UID nor a container ID).
func (o Owner) IsZero() bool { return o.UID == "" && o.ContainerID == "" }

// String returns a short human form, such as "default/web-0 (uid 1234) eth0" or
// "container abc eth0".
func (o Owner) String() string {
	var s string
	switch {
	case o.Name != "" && o.UID != "":
		s = fmt.Sprintf("%s/%s (uid %s)", o.Namespace, o.Name, o.UID)
	case o.Name != "":
		s = o.Namespace + "/" + o.Name
	case o.UID != "":
		s = "uid " + o.UID
	case o.ContainerID != "":
		s = "container " + o.ContainerID
	default:
		s = "nobody"
	}
	if o.Interface != "" {
		s += " " + o.Interface
	}
	return s
}

// Claim is one allocated address. The zero Claim is not a valid claim.
// A Claim is a plain value and safe to copy.
type Claim struct {
	Pool  string     `json:"pool"`
	IP    netip.Addr `json:"ip"`
	Owner Owner      `json:"owner"`
	// Time is when the address was claimed (or the claim last re-pointed).
	Time time.Time `json:"time,omitzero"`
	// Revision is assigned by the Store on every successful write and names the
	// version of the record for Update and Delete. Callers leave it zero on Create.
	Revision int64 `json:"revision,omitempty"`
}

// Key returns the claim's key, "pool/ip".
func (c Claim) Key() string { return c.Pool + "/" + c.IP.String() }

// Store holds claims. Implementations must be safe for concurrent use by multiple
// goroutines, and every method must honour ctx: a call that cannot complete before
// ctx is done returns ctx.Err() (wrapped) and leaves the record unchanged.
type Store interface {
	// Get returns the claim for ip in pool, or ErrNotFound.
	Get(ctx context.Context, pool string, ip netip.Addr) (Claim, error)
	// List returns every claim of pool, in no particular order. The slice is the
	// caller's to keep and modify. An unknown pool has no claims. If some
	// records cannot be read, List returns the others with an error wrapping
	// ErrCorrupt.
	List(ctx context.Context, pool string) ([]Claim, error)
	// Create stores c if no claim exists for (c.Pool, c.IP), atomically, and
	// returns it with its new Revision. It returns ErrExists if the address is
	// already claimed, whoever holds it. A Store may claim an address in one
	// pool at a time, across pools (k8s/kubestore, whose objects are named
	// by address): it then returns ErrExists too while another pool holds
	// the address, and Get, Update and Delete in the other pool find no
	// claim (storetest's Config.AddressesUnique).
	Create(ctx context.Context, c Claim) (Claim, error)
	// Update replaces the claim for (c.Pool, c.IP) with c if its current revision
	// is rev, and returns it with its new Revision. It returns ErrNotFound if
	// there is no claim and ErrConflict if the revision differs.
	Update(ctx context.Context, c Claim, rev int64) (Claim, error)
	// Delete removes the claim for ip in pool if its current revision is rev. It
	// returns ErrNotFound if there is no claim and ErrConflict if the revision
	// differs.
	Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error
	// Owned returns every claim that q matches (see OwnerQuery.Matches), in
	// every pool, in no particular order; an empty result is not an error.
	// The slice is the caller's to keep and modify. It reflects every write
	// that completed before it was called, through any Store on the same
	// backend, as Get does: it is the answer an allocator hands out and
	// releases addresses by, not a cache. Its cost must not grow with the
	// number of claims of other owners. It returns an error if q is not
	// valid (OwnerQuery.Validate). As List, it returns the claims it could
	// read with an error wrapping ErrCorrupt if some records cannot be read.
	Owned(ctx context.Context, q OwnerQuery) ([]Claim, error)
}

// Cursors is an optional Store capability: a per-pool "last reserved address"
// hint, host-local's last_reserved_ip. It is a hint only, never a lock: a lost or
// stale cursor changes which free address is tried first, never whether an
// address can be handed out twice.
type Cursors interface {
	// Cursor returns the last address recorded for pool, or the zero Addr if
	// there is none.
	Cursor(ctx context.Context, pool string) (netip.Addr, error)
	// SetCursor records ip as the last address reserved in pool.
	SetCursor(ctx context.Context, pool string, ip netip.Addr) error
}

// CursorCreator is an optional capability of a Store that has Cursors: one
// call that creates a claim and, only if that succeeds, records its address as
// the pool's cursor, as host-local's Reserve writes an address's file and
// last_reserved_ip together. It has Create's semantics in every other respect.
// An allocator that finds it makes one Store call per new address instead of
// two.
//
// As with io/fs's optional interfaces, a wrapper that embeds a Store with this
// capability and overrides Create must override CreateAndSetCursor too (or not
// embed it), or callers that find the capability bypass its Create.
type CursorCreator interface {
	Cursors
	// CreateAndSetCursor is Create followed, if Create succeeded, by
	// SetCursor(c.Pool, c.IP), done as one operation. A failure to record the
	// cursor after the claim was created is not an error: the cursor is a hint.
	CreateAndSetCursor(ctx context.Context, c Claim) (Claim, error)
}

// CreateAndSetCursor creates c in s and moves its pool's cursor to it: in one
// call if s is a CursorCreator; else Create, then, if it succeeded and s has
// Cursors, SetCursor, whose failure (a hint's) is passed to cursorFailed when
// that is not nil. It is what a caller, or a wrapper implementing
// CursorCreator over any Store, does.
func CreateAndSetCursor(ctx context.Context, s Store, c Claim, cursorFailed func(error)) (Claim, error) {
	if cc, ok := s.(CursorCreator); ok {
		return cc.CreateAndSetCursor(ctx, c)
	}
	c, err := s.Create(ctx, c)
	if cs, ok := s.(Cursors); ok && err == nil {
		if err := cs.SetCursor(ctx, c.Pool, c.IP); err != nil && cursorFailed != nil {
			cursorFailed(err)
		}
	}
	return c, err
}

// Validate reports whether c is fit to be stored: a pool name, a valid address,
// an owner, and a time (if any) within years 0 to 9999.
func (c Claim) Validate() error {
	var errs []error
	if c.Pool == "" {
		errs = append(errs, errors.New("claim: pool is empty"))
	}
	if !c.IP.IsValid() {
		errs = append(errs, errors.New("claim: ip is not a valid address"))
	}
	if c.Owner.IsZero() {
		errs = append(errs, fmt.Errorf("claim %s: owner has neither uid nor container id", c.IP))
	}
	if c.Owner.Stable && c.Owner.Name == "" {
		errs = append(errs, fmt.Errorf("claim %s: a stable owner needs a name", c.IP))
	}
	if c.Time.Before(firstTime) || !c.Time.Before(pastLastTime) {
		// RFC 3339, JSON and the files' times have no room for it: a Store
		// would fail to write it, or keep a time it cannot read back.
		errs = append(errs, fmt.Errorf("claim %s: time %s is outside years 0 to 9999 (UTC)", c.IP, c.Time.UTC().Format(time.RFC3339Nano)))
	}
	return errors.Join(errs...)
}

// firstTime and pastLastTime bound the times a claim may have: from the
// start of year 0 to the end of year 9999, UTC. (Two comparisons cost less
// than working out the year, on every Create.)
var (
	firstTime    = time.Date(0, time.January, 1, 0, 0, 0, 0, time.UTC)
	pastLastTime = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// PoolVersioner is an optional Store capability: a cheap number that tells
// whether a pool's claims changed. An Allocator that listed a pool and found
// it full asks it before listing the pool again to confirm that it still is:
// an unchanged version is the Store's confirmation without the List.
type PoolVersioner interface {
	// PoolVersion returns a number that changes whenever a claim of pool
	// is created, updated or deleted, through any Store on the backend:
	// equal numbers read at two moments mean no claim of the pool changed
	// in between. An unknown pool has a version too.
	PoolVersion(ctx context.Context, pool string) (uint64, error)
}

// OrderedRevisions is an optional Store capability: the Store's revisions
// follow the order of its writes across the backend, so that a claim written
// after another has a higher revision, through any Store instance (etcd's
// store-wide revision, Kubernetes' resourceVersion on etcd, memstore's
// counter). An Allocator that cannot check an owner's claims in the same step
// as its create (no ExclusiveCreator) settles two creates for one owner made
// at the same moment by keeping the claim of the lower revision.
type OrderedRevisions interface {
	// RevisionsOrdered reports whether revisions are ordered as above.
	RevisionsOrdered() bool
}

// AddressReader is an optional Store capability: the claims of one address
// in every pool. An Allocator whose pools may change under it (a PoolSource
// that is not a Catalog) asks it after a create: a pool redefined away from
// an address its owners still hold, and another pool redefined onto it, must
// not hand the address out again, and claims are keyed by pool and address.
// A Store that refuses to claim one address in two pools needs it not.
type AddressReader interface {
	// AddressClaims returns every claim of ip, whatever its pool, in no
	// particular order, as current as Get.
	AddressClaims(ctx context.Context, ip netip.Addr) ([]Claim, error)
}

// ClaimLister is an optional Store capability: every claim the Store holds,
// in every pool, those of pools that no PoolSource names any more included
// (a deleted SpiderIPPool's, a pool dropped from a configuration).
// Allocator.Claims, and so garbage collection, lists with it, so that such
// claims are found and released instead of holding their addresses for good,
// which an AddressReader makes them do in every pool.
type ClaimLister interface {
	// ListAll returns every claim, in no particular order. Claims it cannot
	// read are left out and reported as List reports them.
	ListAll(ctx context.Context) ([]Claim, error)
}

// AddressClaimsAtLeast is an optional capability of an AddressReader whose
// revisions order every write of the backend, as OwnedAtLeast is of an
// owner's claims: AddressClaims reflecting at least every write up to
// revision rev, which may be served from a cache that has caught up that
// far. The Allocator's check after its create needs every write up to its
// own, not later ones.
type AddressClaimsAtLeast interface {
	// AddressClaimsAtLeast returns what AddressClaims(ctx, ip) would have
	// returned at some moment after the write of revision rev.
	AddressClaimsAtLeast(ctx context.Context, ip netip.Addr, rev int64) ([]Claim, error)
}
