package kubestore

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/store"
)

// This file is the owner index: one IPOwner object per owner identity
// (OwnerIndexName), listing the claims that identity may hold, written
// before the claim itself, so that Owned is a GET of the index and a GET of
// each claim it lists, whatever the number of claims in the cluster.

// ownerObject is an IPOwner: the claims one owner identity may hold.
type ownerObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ownerIndex `json:"spec"`
}

// ownerIndex is an IPOwner's spec.
type ownerIndex struct {
	// Kind and ID are the identity (store.IdentityKind's String, and the
	// OwnerQuery's ID), for people: readers check every claim listed.
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Claims are the entries: one per write of a claim under the identity.
	Claims []indexEntry `json:"claims,omitempty"`
}

// indexEntry names a claim the identity may hold, and the token of the
// write that added it: a claim object carries the token of its entries
// (AnnotationToken), and a Delete prunes the entries of the deleted
// object's token only, so that an entry added for a create of the same
// address that is under way stays.
type indexEntry struct {
	Pool  string `json:"pool"`
	IP    string `json:"ip"`
	Token string `json:"token"`
}

// maxIndexedReads bounds the claims Owned reads one by one from an index;
// an owner listed with more is read with a label-selector list (the slow
// path, see the package documentation). A pod holds a few.
const maxIndexedReads = 16

// indexed returns the identities a claim of o is indexed under: its pod
// UID, if it has one, and its namespace/name when Stable. Not its container
// ID: a query by container ID must find the claims that have a UID too,
// which are not in a container's index, so it lists (the slow path), and
// such an index would be written and never read.
func indexed(o store.Owner) []store.OwnerQuery {
	ids := make([]store.OwnerQuery, 0, 2)
	if o.UID != "" {
		ids = append(ids, store.ByUID(o.UID))
	}
	if o.Stable && o.Name != "" {
		ids = append(ids, store.ByName(o.Namespace, o.Name))
	}
	return ids
}

// indexedBy reports whether the claims q matches are all in q's index: a
// query by UID or stable name always; by container ID never, as claims
// that have a pod UID are indexed by their UID only.
func indexedBy(q store.OwnerQuery) bool { return q.Kind == store.KindUID || q.Kind == store.KindName }

// newToken returns a fresh token for the index entries of one write.
func newToken() string {
	var b [8]byte
	_, _ = crand.Read(b[:]) // never fails (crypto/rand's documentation)
	return hex.EncodeToString(b[:])
}

// indexState is what the Store last saw of an IPOwner: its resourceVersion
// and spec, so that its next write is a PUT at that version without a GET
// first (a conflict then reads it again).
type indexState struct {
	rv   string
	spec ownerIndex
}

// indexMemo remembers indexState by object name. It is bounded: when full
// it starts again empty; a miss costs a GET or a failed POST.
type indexMemo struct {
	mu sync.Mutex
	m  map[string]indexState
}

func (m *indexMemo) get(name string) (indexState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.m[name]
	return st, ok
}

func (m *indexMemo) put(name string, st indexState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil || len(m.m) >= uidCacheSize {
		m.m = make(map[string]indexState)
	}
	m.m[name] = st
}

func (m *indexMemo) drop(name string) {
	m.mu.Lock()
	delete(m.m, name)
	m.mu.Unlock()
}

// addEntries adds an entry for (pool, ip) with token to the index of each of
// ids.
func (s *Store) addEntries(ctx context.Context, ids []store.OwnerQuery, pool string, ip netip.Addr, token string) error {
	e := indexEntry{Pool: pool, IP: ip.String(), Token: token}
	for _, q := range ids {
		err := s.editIndex(ctx, q, true, func(x *ownerIndex) bool {
			x.Claims = append(x.Claims, e)
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// dropEntries removes the entries of (pool, ip) with token from the index
// of each of ids; a failure is logged, as it leaves an entry whose claim
// readers skip. An empty token drops nothing.
func (s *Store) dropEntries(ctx context.Context, ids []store.OwnerQuery, pool string, ip netip.Addr, token string) {
	if token == "" {
		return
	}
	e := indexEntry{Pool: pool, IP: ip.String(), Token: token}
	for _, q := range ids {
		err := s.editIndex(ctx, q, false, func(x *ownerIndex) bool {
			n := len(x.Claims)
			x.Claims = slices.DeleteFunc(x.Claims, func(y indexEntry) bool { return y == e })
			return len(x.Claims) != n
		})
		if err != nil {
			s.log.Warn("kubestore: cannot prune an owner index entry", "index", OwnerIndexName(q), "pool", pool, "ip", ip, "err", err)
		}
	}
}

// editIndex applies edit to q's index and writes the result, conditional
// on the resourceVersion it read (a POST when there is no index, a DELETE
// when edit leaves no entry), until a write succeeds: a conflict reads the
// index again and edits that. edit reports whether it changed anything. It
// starts from what this Store last saw of the index, if anything, or else,
// when adding (an edit that adds entries), tries a POST first for a pod UID
// (usually a new pod), and otherwise reads the index first.
func (s *Store) editIndex(ctx context.Context, q store.OwnerQuery, adding bool, edit func(*ownerIndex) bool) error {
	name := OwnerIndexName(q)
	cur, known := s.index.get(name)
	absent := !known && adding && q.Kind == store.KindUID
	if !known && !absent {
		var err error
		if cur, absent, err = s.readIndex(ctx, name); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("kubestore: index %s: %w", name, err)
		}
		if attempt > 1 {
			// Writers of one index take turns: spread them out.
			t := time.NewTimer(time.Duration(rand.Int64N(int64(min(attempt, 20)) * int64(time.Millisecond))))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("kubestore: index %s: %w", name, ctx.Err())
			}
		}
		x := ownerIndex{Kind: q.Kind.String(), ID: q.ID}
		if !absent {
			x = cur.spec
			x.Claims = slices.Clone(x.Claims)
		}
		if !edit(&x) {
			return nil
		}
		var (
			raw []byte
			err error
		)
		switch {
		case absent:
			raw, err = s.writeIndex(ctx, s.client.Post().Resource(OwnerResource), name, "", x)
		case len(x.Claims) == 0:
			err = s.deleteIndex(ctx, name, cur.rv)
			if err == nil || apierrors.IsNotFound(err) {
				s.index.drop(name)
				return nil
			}
		default:
			raw, err = s.writeIndex(ctx, s.client.Put().Resource(OwnerResource).Name(name), name, cur.rv, x)
		}
		if err == nil {
			rv, derr := resourceVersionOf(raw)
			if derr != nil {
				s.index.drop(name)
				return fmt.Errorf("kubestore: index %s: %w", name, derr)
			}
			s.index.put(name, indexState{rv: rv, spec: x})
			return nil
		}
		switch {
		case apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), isObjectNotFound(err, name):
			// Someone else wrote it first, or deleted it: read it again.
			if cur, absent, err = s.readIndex(ctx, name); err != nil {
				return err
			}
		default:
			s.index.drop(name)
			return s.fail(ctx, "write index", name, name, err)
		}
	}
}

// readIndex GETs the index name: its state, or absent when there is none.
func (s *Store) readIndex(ctx context.Context, name string) (st indexState, absent bool, err error) {
	raw, err := s.do(ctx, s.client.Get().Resource(OwnerResource).Name(name))
	if err != nil {
		if isObjectNotFound(err, name) {
			s.index.drop(name)
			return indexState{}, true, nil
		}
		return indexState{}, false, s.fail(ctx, "read index", name, name, err)
	}
	o := &ownerObject{}
	if err := json.Unmarshal(raw, o); err != nil {
		return indexState{}, false, &CorruptError{Name: name, Field: "(object)", Value: truncate(string(raw)), Reason: err.Error()}
	}
	st = indexState{rv: o.ResourceVersion, spec: o.Spec}
	s.index.put(name, st)
	return st, false, nil
}

// writeIndex sends x as index name with req (a POST, or a PUT at
// resourceVersion rv).
func (s *Store) writeIndex(ctx context.Context, req *rest.Request, name, rv string, x ownerIndex) ([]byte, error) {
	body, err := json.Marshal(&ownerObject{
		TypeMeta:   metav1.TypeMeta{APIVersion: groupAPIVersion, Kind: ownerKind},
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv},
		Spec:       x,
	})
	if err != nil {
		return nil, err
	}
	return s.do(ctx, req.Body(body))
}

// deleteIndex deletes index name at resourceVersion rv.
func (s *Store) deleteIndex(ctx context.Context, name, rv string) error {
	body, err := deleteBody(rv, "")
	if err != nil {
		return err
	}
	_, err = s.do(ctx, s.client.Delete().Resource(OwnerResource).Name(name).Body(body))
	return err
}

// deleteBody is the DeleteOptions of a delete conditional on
// resourceVersion rv and, if not empty, UID uid.
func deleteBody(rv string, uid string) ([]byte, error) {
	pre := &metav1.Preconditions{ResourceVersion: &rv}
	if uid != "" {
		u := types.UID(uid)
		pre.UID = &u
	}
	return json.Marshal(&metav1.DeleteOptions{
		TypeMeta:      metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		Preconditions: pre,
	})
}

// resourceVersionOf returns the resourceVersion of the object raw.
func resourceVersionOf(raw []byte) (string, error) {
	var meta struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return "", fmt.Errorf("the response does not decode: %w", err)
	}
	if meta.Metadata.ResourceVersion == "" {
		return "", errors.New("the response has no resourceVersion")
	}
	return meta.Metadata.ResourceVersion, nil
}

// ownedIndexed returns the claims q matches, read through q's index: a GET
// of the index and one of each claim it lists. ok is false when the index
// lists more than maxIndexedReads claims: the caller lists instead.
func (s *Store) ownedIndexed(ctx context.Context, q store.OwnerQuery) (claims []store.Claim, ok bool, err error) {
	name := OwnerIndexName(q)
	st, absent, err := s.readIndex(ctx, name)
	if err != nil {
		return nil, true, err
	}
	claims = []store.Claim{}
	if absent {
		return claims, true, nil
	}
	type key struct {
		pool string
		ip   netip.Addr
	}
	var keys []key
	for _, e := range st.spec.Claims {
		ip, err := netip.ParseAddr(e.IP)
		if err != nil || e.Pool == "" {
			continue // no claim's entry: written by hand
		}
		if k := (key{e.Pool, ip}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) > maxIndexedReads {
		return nil, false, nil
	}
	var bad []error
	for _, k := range keys {
		c, err := s.Get(ctx, k.pool, k.ip)
		switch {
		case err == nil:
			if q.Matches(c) {
				claims = append(claims, c)
			}
		case errors.Is(err, store.ErrNotFound):
			// A stale entry: the claim is gone, or is another pool's.
		case errors.Is(err, store.ErrCorrupt):
			bad = append(bad, err)
		default:
			return nil, true, err
		}
	}
	return claims, true, errors.Join(bad...)
}
