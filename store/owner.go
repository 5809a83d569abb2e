package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// IdentityKind says which field of an Owner an OwnerQuery matches.
type IdentityKind uint8

// The kinds of owner identity.
const (
	// KindUID matches claims whose Owner.UID is the query's ID, whether
	// the owner is Stable or not.
	KindUID IdentityKind = iota + 1
	// KindName matches the claims of a Stable owner by "namespace/name".
	KindName
	// KindContainer matches claims whose Owner.ContainerID is the query's
	// ID: host-local's identity.
	KindContainer
)

// String returns "uid", "name" or "container".
func (k IdentityKind) String() string {
	switch k {
	case KindUID:
		return "uid"
	case KindName:
		return "name"
	case KindContainer:
		return "container"
	}
	return fmt.Sprintf("IdentityKind(%d)", uint8(k))
}

// OwnerQuery selects the claims of one owner, across every pool, for
// Store.Owned. Build one with ByUID, ByName, ByContainer or Owner.Query, and
// narrow it to an interface with On.
//
// The zero OwnerQuery matches nothing. An OwnerQuery is a plain value.
type OwnerQuery struct {
	Kind IdentityKind
	// ID is the pod UID, the stable owner's "namespace/name", or the
	// container ID, as Kind says.
	ID string
	// Interface, when not empty, keeps only the claims of that interface
	// and the claims that record no interface (host-local's legacy
	// id-only claims, and claims imported from Spiderpool).
	Interface string
}

// ByUID returns the query for the claims that name pod UID uid.
func ByUID(uid string) OwnerQuery { return OwnerQuery{Kind: KindUID, ID: uid} }

// ByName returns the query for the claims of the stable owner (a
// StatefulSet or KubeVirt pod) namespace/name.
func ByName(namespace, name string) OwnerQuery {
	return OwnerQuery{Kind: KindName, ID: namespace + "/" + name}
}

// ByContainer returns the query for the claims of container id.
func ByContainer(id string) OwnerQuery { return OwnerQuery{Kind: KindContainer, ID: id} }

// On returns q narrowed to interface iface (and to claims that record none).
func (q OwnerQuery) On(iface string) OwnerQuery {
	q.Interface = iface
	return q
}

// IsZero reports whether q matches nothing: it has no kind or no ID.
func (q OwnerQuery) IsZero() bool { return q.Kind == 0 || q.ID == "" }

// Matches reports whether q selects claim c.
func (q OwnerQuery) Matches(c Claim) bool {
	if q.Interface != "" && c.Owner.Interface != "" && c.Owner.Interface != q.Interface {
		return false
	}
	return c.Owner.Has(q)
}

// String returns a short form, such as `uid "1234" on eth0`.
func (q OwnerQuery) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", q.Kind, q.ID)
	if q.Interface != "" {
		b.WriteString(" on ")
		b.WriteString(q.Interface)
	}
	return b.String()
}

// Validate reports why q cannot be asked.
func (q OwnerQuery) Validate() error {
	switch {
	case q.Kind < KindUID || q.Kind > KindContainer:
		return fmt.Errorf("owner query: kind %d is not uid, name or container", q.Kind)
	case q.ID == "":
		return fmt.Errorf("owner query: %s is empty", q.Kind)
	case q.Kind == KindName && strings.Count(q.ID, "/") != 1:
		return fmt.Errorf("owner query: name %q is not namespace/name", q.ID)
	}
	return nil
}

// Query returns the query for o's primary identity, narrowed to
// o.Interface if set: its namespace and name if o is Stable, else its UID
// if set, else its container ID. The zero Owner gives the zero query.
func (o Owner) Query() OwnerQuery {
	var q OwnerQuery
	switch {
	case o.Stable:
		q = ByName(o.Namespace, o.Name)
	case o.UID != "":
		q = ByUID(o.UID)
	case o.ContainerID != "":
		q = ByContainer(o.ContainerID)
	}
	q.Interface = o.Interface
	return q
}

// Has reports whether o has the identity q names (q's Interface aside): its
// UID, its namespace/name while Stable, or its container ID.
func (o Owner) Has(q OwnerQuery) bool {
	if q.ID == "" {
		return false
	}
	switch q.Kind {
	case KindUID:
		return o.UID == q.ID
	case KindContainer:
		return o.ContainerID == q.ID
	case KindName:
		if !o.Stable {
			return false
		}
		ns, name, ok := strings.Cut(q.ID, "/")
		return ok && o.Namespace == ns && o.Name == name
	}
	return false
}

// Identities yields the queries, without interface, that match a claim of
// o: a Store indexes each claim under each of them. It yields nothing for the
// zero Owner.
func (o Owner) Identities(yield func(OwnerQuery) bool) {
	if o.UID != "" && !yield(ByUID(o.UID)) {
		return
	}
	if o.Stable && o.Name != "" && !yield(ByName(o.Namespace, o.Name)) {
		return
	}
	if o.ContainerID != "" {
		yield(ByContainer(o.ContainerID))
	}
}

// ErrHeld is returned (inside a *HeldError) by ExclusiveCreator's
// CreateExclusive when the owner already holds a claim that would conflict
// with the new one.
var ErrHeld = errors.New("owner already holds a claim")

// HeldError is returned by CreateExclusive when it refuses to create a claim
// because the owner holds others. It unwraps to ErrHeld.
type HeldError struct {
	// Claim is the claim that was not created.
	Claim Claim
	// Held are the owner's claims that stood in the way, as the Store has
	// them: of the new claim's IP family, on its interface or on none.
	Held []Claim
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s already holds", e.Claim.Key(), e.Claim.Owner)
	for i, c := range e.Held {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(" ")
		b.WriteString(c.Key())
	}
	return b.String()
}

// Unwrap returns ErrHeld.
func (e *HeldError) Unwrap() error { return ErrHeld }

// ExclusiveCreator is an optional Store capability: a Create that also
// checks, in the same atomic step, that the owner holds nothing that the new
// claim would duplicate. An Allocator that finds it serves a new owner with
// one Store call, instead of asking Owned before and after Create to catch
// another Allocator serving the same owner at the same time.
//
// As with CursorCreator, a wrapper that embeds a Store with this capability
// and overrides Create must override CreateExclusive too (or not embed it).
type ExclusiveCreator interface {
	// CreateExclusive creates c as Create does, and also moves c.Pool's
	// cursor to c.IP as CreateAndSetCursor does if the Store keeps cursors,
	// unless the owner already holds a conflicting claim: one that
	// c.Owner.Query() matches (the same primary identity, on c's interface
	// or on none) whose address is of c.IP's family, in any pool. It then
	// creates nothing and returns a *HeldError listing those claims,
	// whether or not c.IP is free. Otherwise it fails as Create fails
	// (ErrExists when the address is taken).
	//
	// The check is deliberately broad: an owner may hold two claims of one
	// family on one interface (two host-local range sets of one family);
	// the caller then decides from the HeldError and falls back to Create.
	CreateExclusive(ctx context.Context, c Claim) (Claim, error)
}

// Conflicts reports whether held would make CreateExclusive refuse c: the
// same primary identity as c's owner, on c's interface or on none, an
// address of the same family. It is the check every implementation makes.
func Conflicts(c, held Claim) bool {
	return c.Owner.Query().Matches(held) && held.IP.Is4() == c.IP.Is4()
}

// OwnedAtLeast is an optional Store capability for a Store whose revisions
// order every write of the backend (a store-wide revision, as etcd's and
// Kubernetes' resourceVersion are): an Owned that reflects at least every
// write up to revision rev, a revision the Store returned, and may be served
// from a cache that has caught up that far instead of waiting to be as current
// as Owned must be. An Allocator checks with it, after its own create, that
// no other claim serves the same owner: it needs every write up to its own,
// not later ones.
type OwnedAtLeast interface {
	// OwnedAtLeast returns what Owned(ctx, q) would have returned at some
	// moment after the write of revision rev.
	OwnedAtLeast(ctx context.Context, q OwnerQuery, rev int64) ([]Claim, error)
}
