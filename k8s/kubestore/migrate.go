package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/ipamkit/ipam/store"
)

// This file is the layout of the objects: claims named by their address
// alone, with owner indexes (layout 2), and Migrate, which moves the claims
// of layout 1 (named by pool and address, without owner indexes) to it.

// MigrateCommand is the command that runs Migrate on a cluster, which the
// errors of a Store on a cluster with claims of the old layout name.
const MigrateCommand = "ipamctl kube migrate"

// ErrLegacyLayout is returned (wrapped) by Create and Update while the
// cluster holds IPClaims named the old way (pool and address, see
// LegacyClaimName): a Store of this version does not see them, so it could
// hand their addresses out again. Run Migrate (MigrateCommand) first.
var ErrLegacyLayout = errors.New("the cluster holds IPClaims named by pool and address (the layout before claims were named by address): run " + MigrateCommand + " first")

// LayoutMarker is the name of the IPOwner object that says the cluster's
// IPClaims are all named by address: a Store checks for it before its first
// write, and, without it, lists the IPClaims once to see whether any is
// named the old way.
const LayoutMarker = "layout"

// layoutCheck is a Store's check, before its first write, that the cluster
// holds no claim of the old layout.
type layoutCheck struct {
	ok atomic.Bool
	mu sync.Mutex
}

// check returns nil once the layout marker exists, writing it if no IPClaim
// is named the old way, or an error wrapping ErrLegacyLayout.
func (l *layoutCheck) check(ctx context.Context, s *Store) error {
	if l.ok.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ok.Load() {
		return nil
	}
	_, err := s.do(ctx, s.client.Get().Resource(OwnerResource).Name(LayoutMarker))
	switch {
	case err == nil:
		l.ok.Store(true)
		return nil
	case !isObjectNotFound(err, LayoutMarker):
		return s.fail(ctx, "read", "the layout marker", LayoutMarker, err)
	}
	legacy, err := s.legacyNames(ctx, 3)
	if err != nil {
		return s.fail(ctx, "list", "every claim", "", err)
	}
	if len(legacy) > 0 {
		return fmt.Errorf("%w (such as %q)", ErrLegacyLayout, legacy)
	}
	if err := s.writeMarker(ctx); err != nil {
		return err
	}
	l.ok.Store(true)
	return nil
}

// writeMarker creates the layout marker (one that exists is as good).
func (s *Store) writeMarker(ctx context.Context) error {
	_, err := s.writeIndex(ctx, s.client.Post().Resource(OwnerResource), LayoutMarker, "",
		ownerIndex{Kind: "layout", ID: "2"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return s.fail(ctx, "write", "the layout marker", LayoutMarker, err)
	}
	return nil
}

// legacyNames returns the names of up to max IPClaims not named by
// ClaimName, from a list of every IPClaim (in pages).
func (s *Store) legacyNames(ctx context.Context, max int) ([]string, error) {
	var names []string
	_, err := s.eachClaim(ctx, func(raw json.RawMessage) bool {
		if name, ok := legacyName(raw); ok {
			names = append(names, name)
		}
		return len(names) < max
	})
	return names, err
}

// legacyName returns the name of the IPClaim raw and whether it is not one
// ClaimName gives: an object of the old layout (or one written by hand).
func legacyName(raw json.RawMessage) (string, bool) {
	var o struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return "", false
	}
	_, ok := ParseClaimName(o.Metadata.Name)
	return o.Metadata.Name, !ok
}

// eachClaim calls f with every IPClaim, from a list in pages of 500, until
// f returns false, and returns the list's resourceVersion.
func (s *Store) eachClaim(ctx context.Context, f func(json.RawMessage) bool) (string, error) {
	var rv, cont string
	for {
		req := s.client.Get().Resource(ClaimResource).Param("limit", strconv.Itoa(watchPage))
		if cont != "" {
			req = req.Param("continue", cont)
		}
		raw, err := s.do(ctx, req)
		if err != nil {
			return "", err
		}
		list := &objectList{}
		if err := json.Unmarshal(raw, list); err != nil {
			return "", fmt.Errorf("decoding the list of %s: %w", ClaimResource, err)
		}
		if rv == "" {
			rv = list.Metadata.ResourceVersion
		}
		for _, item := range list.Items {
			if !f(item) {
				return rv, nil
			}
		}
		if cont = list.Metadata.Continue; cont == "" {
			return rv, nil
		}
	}
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	// Moved counts the claims renamed to the address's name and indexed.
	Moved int
	// Left are the objects named the old way that Migrate left as they
	// were, each error naming the object and why: no valid claim (a
	// *CorruptError), an address claimed in two pools (only one can keep
	// it: release the other with ipamctl or kubectl delete), or an object
	// that changed while it was being moved (run Migrate again).
	Left []error
	// Marked says the layout marker was written (or was there): no IPClaim
	// is named the old way any more, and Stores may write.
	Marked bool
}

// Migrate moves the IPClaims of the old layout, named by pool and address
// (LegacyClaimName) and without owner indexes, to the current one: for each,
// it creates the claim under its address's name with the same spec, in its
// owner indexes, then deletes the old object, conditional on its
// resourceVersion and UID. An address claimed in two pools cannot be moved
// twice: the second is reported in Left, not overwritten. When no object
// named the old way remains, Migrate writes the layout marker, after which
// Stores write again. It lists every IPClaim (in pages), once, and again
// before it writes the marker.
//
// Run it once, after every writer (plugin, controller) runs this version:
// a writer of the old version would go on creating objects of the old
// layout. Running it again is harmless: an object already moved (its
// address's claim has the same pool and owner) is only deleted.
func (s *Store) Migrate(ctx context.Context) (MigrateResult, error) {
	var res MigrateResult
	var legacy []json.RawMessage
	_, err := s.eachClaim(ctx, func(raw json.RawMessage) bool {
		if _, ok := legacyName(raw); ok {
			legacy = append(legacy, raw)
		}
		return true
	})
	if err != nil {
		return res, s.fail(ctx, "list", "every claim", "", err)
	}
	for _, raw := range legacy {
		moved, err := s.migrateOne(ctx, raw)
		var left *leftError
		switch {
		case errors.As(err, &left), errors.Is(err, store.ErrCorrupt):
			res.Left = append(res.Left, err)
		case err != nil:
			return res, err
		case moved:
			res.Moved++
		}
	}
	if len(res.Left) > 0 {
		return res, nil
	}
	names, err := s.legacyNames(ctx, 1)
	if err != nil {
		return res, s.fail(ctx, "list", "every claim", "", err)
	}
	if len(names) > 0 {
		res.Left = append(res.Left, &leftError{name: names[0], reason: "created while Migrate ran (a writer of the old version is still running): run it again"})
		return res, nil
	}
	if err := s.writeMarker(ctx); err != nil {
		return res, err
	}
	s.layout.ok.Store(true)
	res.Marked = true
	return res, nil
}

// leftError says why Migrate left an object as it was.
type leftError struct {
	name, reason string
}

func (e *leftError) Error() string {
	return fmt.Sprintf("kubestore: %s %q left as it was: %s", claimKind, e.name, e.reason)
}

// migrateOne moves one object of the old layout, raw. It reports whether
// it moved it; a *leftError or *CorruptError says why not.
func (s *Store) migrateOne(ctx context.Context, raw json.RawMessage) (bool, error) {
	c, o, err := decodeClaimNamed(raw, LegacyClaimName)
	if err != nil {
		return false, err
	}
	name := o.Metadata.Name
	c.Revision = 0
	switch _, err := s.create(ctx, c, false); {
	case errors.Is(err, store.ErrExists):
		cur, gerr := s.read(ctx, "migrate", c.Key(), c.IP)
		if gerr != nil {
			return false, gerr
		}
		if cur.Pool != c.Pool {
			return false, &leftError{name: name, reason: fmt.Sprintf("address %s is claimed in pool %q too (by %s); one address is claimed in one pool at a time: release one of them and run %s again",
				c.IP, cur.Pool, cur.Owner, MigrateCommand)}
		}
		if cur.Owner != c.Owner {
			return false, &leftError{name: name, reason: fmt.Sprintf("address %s of pool %q is claimed by %s under its new name, not by %s", c.IP, c.Pool, cur.Owner, c.Owner)}
		}
		// Moved before, by a Migrate that stopped before the delete.
	case err != nil:
		return false, err
	}
	body, err := deleteBody(o.Metadata.ResourceVersion, string(o.Metadata.UID))
	if err != nil {
		return false, err
	}
	_, err = s.do(ctx, s.client.Delete().Resource(ClaimResource).Name(name).Body(body))
	switch {
	case err == nil, isObjectNotFound(err, name):
		return true, nil
	case apierrors.IsConflict(err):
		return false, &leftError{name: name, reason: "changed while it was being moved: run " + MigrateCommand + " again"}
	}
	return false, s.fail(ctx, "migrate", c.Key(), name, err)
}
