package kubestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/internal/kubeerr"
	"github.com/ipamkit/ipam/store"
)

// ErrUnavailable is returned (wrapped) by every call that could not get an
// answer from the API server: it cannot be reached, it answered that it is
// overloaded or failing (429, 5xx), or the call's context ended before it
// answered (the error then wraps the context's error too). A write that
// fails so may or may not have been applied; a reader finds out with Get or
// Owned once the server is back.
//
// It is the same error as kubeclient.ErrUnavailable, which the module's
// other packages return.
var ErrUnavailable = kubeerr.ErrUnavailable

// Compile-time checks that *Store provides the contract and its capabilities.
var (
	_ store.Store                = (*Store)(nil)
	_ store.Cursors              = (*Store)(nil)
	_ store.CursorCreator        = (*Store)(nil)
	_ store.Watcher              = (*Store)(nil)
	_ store.OwnedAtLeast         = (*Store)(nil)
	_ store.AddressReader        = (*Store)(nil)
	_ store.ClaimLister          = (*Store)(nil)
	_ store.AddressClaimsAtLeast = (*Store)(nil)
	_ store.OrderedRevisions     = (*Store)(nil)
)

// Options configure a Store. The zero Options are the usual ones.
type Options struct {
	// Logger receives what the Store cannot return: objects a Watch skips
	// because they are no valid claims, and the Watch's reconnections.
	// Nil discards them.
	Logger *slog.Logger
}

// Store is a store.Store on IPClaim custom resources; see the package
// documentation.
//
// The zero Store is not usable; create one with New. A *Store is safe for
// concurrent use by multiple goroutines.
type Store struct {
	client *rest.RESTClient
	log    *slog.Logger
	uids   uidCache
	view   view // what a running Watch reported, for OwnedAtLeast
}

// codecs decode the API server's Status objects, which client-go turns into
// the errors of package k8s.io/apimachinery/pkg/api/errors. Objects
// themselves are encoded and decoded with encoding/json.
var codecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return serializer.NewCodecFactory(s)
}()

// New returns a Store that talks to the API server cfg names. It copies cfg
// and keeps its rate limits: client-go's default, when cfg.QPS and
// cfg.Burst are zero, is 5 requests per second with bursts of 10, which
// allows about 1.7 allocations per second after the burst (an allocation
// makes three requests, see the package documentation). Set cfg.QPS and
// cfg.Burst to what the API server can give this client, or cfg.QPS to -1
// for no client-side limit.
//
// New does not contact the server.
func New(cfg *rest.Config, opts Options) (*Store, error) {
	if cfg == nil {
		return nil, errors.New("kubestore: nil *rest.Config")
	}
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Group: Group, Version: Version}
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{client: client, log: log}, nil
}

// Get returns the claim for ip in pool, read from etcd through the API
// server (a quorum read), or an error wrapping store.ErrNotFound. An object
// of that name that is no valid claim gives a *CorruptError.
func (s *Store) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	key := pool + "/" + ip.String()
	name, ok := ClaimName(pool, ip)
	if !ok {
		return store.Claim{}, fmt.Errorf("kubestore: get %s: %w", key, errNoName)
	}
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: get %s: %w", key, err)
	}
	raw, err := s.do(ctx, s.client.Get().Resource(ClaimResource).Name(name))
	if err != nil {
		return store.Claim{}, s.fail(ctx, "get", key, name, err)
	}
	c, o, err := decodeClaim(raw)
	if err != nil {
		return store.Claim{}, err
	}
	if c.Pool != pool {
		// Two pools whose names are hashed to the same value.
		return store.Claim{}, &CorruptError{Name: name, Field: "spec.pool", Value: c.Pool,
			Reason: fmt.Sprintf("the name of pool %q address %s is held by another pool's claim", pool, ip)}
	}
	s.uids.put(name, c.Revision, o.Metadata.UID)
	return c, nil
}

// List returns every claim of pool: a consistent list (served from the API
// server's watch cache once it has caught up with etcd, KEP-2340) of the
// IPClaims labelled with the pool. Objects so labelled that are no valid
// claims are left out, and reported in an error wrapping store.ErrCorrupt
// (each a *CorruptError) returned with the claims that could be read.
func (s *Store) List(ctx context.Context, pool string) ([]store.Claim, error) {
	return s.claimsBy(ctx, "list", pool, LabelPool+"="+labelValue(pool), 0, func(c store.Claim) bool { return c.Pool == pool })
}

// ListAll returns every claim, of every pool, from a consistent list of
// every IPClaim (see List).
func (s *Store) ListAll(ctx context.Context) ([]store.Claim, error) {
	return s.claimsBy(ctx, "list", "every claim", "", 0, func(store.Claim) bool { return true })
}

// Owned returns the claims q matches, from a consistent list of the IPClaims
// labelled with q's identity (see List); it reflects every write that
// completed before it was called, through any client. The API server
// answers from memory, but finds the owner's claims by testing every
// IPClaim's labels (custom resources have no index), so its cost grows with
// the number of claims in the cluster; what travels is the owner's claims
// only.
func (s *Store) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	return s.owned(ctx, q, 0)
}

// OwnedAtLeast returns the claims q matches as they were at some moment
// after the write of revision rev, a revision this Store returned: every
// write up to rev is in the answer, and perhaps later ones.
//
// While a Watch of this Store runs (Allocator.Follow keeps one), the answer
// comes from what the watch has reported, as soon as it has reported
// revision rev, without a request: the watch's events come in revision
// order, so it then has every write up to rev. Otherwise, or if the watch
// does not get there within half a second (it is reconnecting), it is a
// list of the API server's watch cache with resourceVersion rev and
// resourceVersionMatch NotOlderThan, served once that cache has caught up
// with rev. Unlike Owned, neither waits for a cache to catch up with etcd's
// current revision, which the API server's cache learns of from a progress
// notification when the newest writes are to other resources (up to 100
// ms, see the package documentation). A rev of 0 or less asks for what
// Owned gives. Objects that are no valid claims are left out of an answer
// from the watch without an error (the watch logs them).
func (s *Store) OwnedAtLeast(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, error) {
	if rev > 0 && q.Validate() == nil {
		if claims, ok := s.view.owned(ctx, q, rev); ok {
			return claims, nil
		}
	}
	return s.owned(ctx, q, rev)
}

// owned is Owned with a consistent list (rev <= 0), OwnedAtLeast with a
// list not older than rev.
func (s *Store) owned(ctx context.Context, q store.OwnerQuery, rev int64) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	return s.claimsBy(ctx, "owned", q.String(), ownerSelector(q), rev, q.Matches)
}

// AddressClaims returns the claims of ip in every pool, from a consistent
// list (see List) of the IPClaims labelled with the address (LabelIP).
// Objects so labelled that are no valid claims are left out, and reported
// as List reports them.
func (s *Store) AddressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	return s.addressClaims(ctx, ip, 0)
}

// AddressClaimsAtLeast returns the claims of ip as they were at some moment
// after the write of revision rev, a revision this Store returned: from what
// a running Watch has reported, or a list not older than rev, as
// OwnedAtLeast does.
func (s *Store) AddressClaimsAtLeast(ctx context.Context, ip netip.Addr, rev int64) ([]store.Claim, error) {
	if rev > 0 && ip.IsValid() {
		if claims, ok := s.view.addressClaims(ctx, ip, rev); ok {
			return claims, nil
		}
	}
	return s.addressClaims(ctx, ip, rev)
}

// addressClaims is AddressClaims with a consistent list (rev <= 0),
// AddressClaimsAtLeast with a list not older than rev.
func (s *Store) addressClaims(ctx context.Context, ip netip.Addr, rev int64) ([]store.Claim, error) {
	if !ip.IsValid() {
		return nil, fmt.Errorf("kubestore: claims of address %s: %w", ip, errNoName)
	}
	return s.claimsBy(ctx, "claims of address", ip.String(), LabelIP+"="+ipValue(ip), rev, func(c store.Claim) bool { return c.IP == ip })
}

// claimsBy is a read of op (what, for its errors): the claims keep keeps
// among the IPClaims selector selects, from a list not older than rev, or a
// consistent one if rev <= 0; never nil. Unreadable objects are reported
// in an error wrapping store.ErrCorrupt, returned with the others.
func (s *Store) claimsBy(ctx context.Context, op, what, selector string, rev int64, keep func(store.Claim) bool) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kubestore: %s %s: %w", op, what, err)
	}
	claims, err := s.listClaimsAt(ctx, selector, rev, keep)
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		return nil, s.fail(ctx, op, what, "", err)
	}
	if claims == nil {
		claims = []store.Claim{}
	}
	return claims, err
}

// RevisionsOrdered reports true: a claim's Revision is the resourceVersion
// of its object, which the API server's etcd3 storage sets to etcd's
// revision of the write, a counter of every write to the store, so that a
// claim written after another has a higher Revision, whichever client wrote
// them (see the package documentation).
func (s *Store) RevisionsOrdered() bool { return true }

// ownerSelector is the label selector of the claims of q's identity.
func ownerSelector(q store.OwnerQuery) string {
	switch q.Kind {
	case store.KindUID:
		return LabelUID + "=" + labelValue(q.ID)
	case store.KindContainer:
		return LabelContainer + "=" + labelValue(q.ID)
	}
	// KindName: Validate checked there is exactly one "/".
	ns, name, _ := strings.Cut(q.ID, "/")
	return LabelStable + "=" + stableValue(ns, name)
}

// listClaims lists the IPClaims that selector selects and returns those that
// keep selects, with a *CorruptError for each that is no valid claim or
// whose labels disagree with it (errors.Join of them, which wraps
// store.ErrCorrupt). Any other error is the request's.
func (s *Store) listClaims(ctx context.Context, selector string, keep func(store.Claim) bool) ([]store.Claim, error) {
	return s.listClaimsAt(ctx, selector, 0, keep)
}

// listClaimsAt is listClaims from a list not older than revision rev, or a
// consistent one if rev <= 0.
func (s *Store) listClaimsAt(ctx context.Context, selector string, rev int64, keep func(store.Claim) bool) ([]store.Claim, error) {
	list, err := s.list(ctx, ClaimResource, selector, rev)
	if err != nil {
		return nil, err
	}
	var claims []store.Claim
	var bad []error
	for _, raw := range list.Items {
		c, o, err := decodeClaim(raw)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		if err := o.checkLabels(c); err != nil {
			bad = append(bad, err)
		}
		if keep(c) {
			s.uids.put(o.Metadata.Name, c.Revision, o.Metadata.UID)
			claims = append(claims, c)
		}
	}
	return claims, errors.Join(bad...)
}

// list lists resource with a label selector: a consistent list if rev <=
// 0, else one not older than revision rev.
func (s *Store) list(ctx context.Context, resource, selector string, rev int64) (*objectList, error) {
	req := s.client.Get().Resource(resource).Param("labelSelector", selector)
	if rev > 0 {
		req = req.Param("resourceVersion", formatRevision(rev)).Param("resourceVersionMatch", "NotOlderThan")
	}
	raw, err := s.do(ctx, req)
	if err != nil {
		return nil, err
	}
	list := &objectList{}
	if err := json.Unmarshal(raw, list); err != nil {
		return nil, fmt.Errorf("decoding the list of %s: %w", resource, err)
	}
	return list, nil
}

// Create stores c if its address is free, as a new IPClaim, and returns it
// with the object's resourceVersion as Revision. It returns an error
// wrapping store.ErrExists if an object of that name exists, whether or not
// it is a valid claim.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, false)
}

func (s *Store) create(ctx context.Context, c store.Claim, cursor bool) (store.Claim, error) {
	name, err := toWrite(ctx, "create", c)
	if err != nil {
		return store.Claim{}, err
	}
	body, err := json.Marshal(newClaimObject(name, c, cursor))
	if err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: create %s: %w", c.Key(), err)
	}
	raw, err := s.do(ctx, s.client.Post().Resource(ClaimResource).Body(body))
	if err != nil {
		return store.Claim{}, s.fail(ctx, "create", c.Key(), name, err)
	}
	return s.written(c, name, raw)
}

// toWrite checks that c can be written by op, and returns its object's
// name.
func toWrite(ctx context.Context, op string, c store.Claim) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("kubestore: %s: %w", op, err)
	}
	name, ok := ClaimName(c.Pool, c.IP)
	if !ok {
		return "", fmt.Errorf("kubestore: %s %s: %w", op, c.Key(), errNoName)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("kubestore: %s %s: %w", op, c.Key(), err)
	}
	return name, nil
}

// written returns c as the response raw to its write says it was stored:
// with the new resourceVersion as Revision.
func (s *Store) written(c store.Claim, name string, raw []byte) (store.Claim, error) {
	var meta struct {
		Metadata struct {
			ResourceVersion string    `json:"resourceVersion"`
			UID             types.UID `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &meta); err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: %s written, but its response does not decode: %w", c.Key(), err)
	}
	rev, ok := parseRevision(meta.Metadata.ResourceVersion)
	if !ok {
		return store.Claim{}, &CorruptError{Name: name, Field: "metadata.resourceVersion",
			Value: meta.Metadata.ResourceVersion, Reason: "not a positive decimal integer"}
	}
	s.uids.put(name, rev, meta.Metadata.UID)
	c.Revision = rev
	return c, nil
}

// Update replaces the claim for (c.Pool, c.IP) with c if the object's
// resourceVersion is rev: a PUT that carries rev (and the object's UID when
// this Store has seen it at rev), which the API server refuses with a
// conflict (store.ErrConflict) if the object has changed, or was deleted and
// created again, since. It returns an error wrapping store.ErrNotFound if
// there is no such object.
func (s *Store) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	name, err := toWrite(ctx, "update", c)
	if err != nil {
		return store.Claim{}, err
	}
	if rev <= 0 {
		// The API server would refuse the request as invalid rather than
		// as a conflict: say which it is.
		return store.Claim{}, s.noSuchRevision(ctx, "update", c.Key(), name, rev)
	}
	o := newClaimObject(name, c, false)
	o.ResourceVersion = formatRevision(rev)
	o.UID = s.uids.get(name, rev)
	body, err := json.Marshal(o)
	if err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: update %s: %w", c.Key(), err)
	}
	raw, err := s.do(ctx, s.client.Put().Resource(ClaimResource).Name(name).Body(body))
	if err != nil {
		return store.Claim{}, s.fail(ctx, "update", c.Key(), name, err)
	}
	return s.written(c, name, raw)
}

// Delete removes the claim for ip in pool if the object's resourceVersion is
// rev: a DELETE with rev (and the object's UID when this Store has seen it
// at rev) as preconditions.
func (s *Store) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	key := pool + "/" + ip.String()
	name, ok := ClaimName(pool, ip)
	if !ok {
		return fmt.Errorf("kubestore: delete %s: %w", key, errNoName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: delete %s: %w", key, err)
	}
	rv := formatRevision(rev)
	pre := &metav1.Preconditions{ResourceVersion: &rv}
	if uid := s.uids.get(name, rev); uid != "" {
		pre.UID = &uid
	}
	body, err := json.Marshal(&metav1.DeleteOptions{
		TypeMeta:      metav1.TypeMeta{APIVersion: "v1", Kind: "DeleteOptions"},
		Preconditions: pre,
	})
	if err != nil {
		return fmt.Errorf("kubestore: delete %s: %w", key, err)
	}
	if _, err := s.do(ctx, s.client.Delete().Resource(ClaimResource).Name(name).Body(body)); err != nil {
		return s.fail(ctx, "delete", key, name, err)
	}
	s.uids.drop(name)
	return nil
}

// noSuchRevision returns the error of a write at revision rev, which no
// object has: store.ErrNotFound if there is no object, else
// store.ErrConflict.
func (s *Store) noSuchRevision(ctx context.Context, op, key, name string, rev int64) error {
	_, err := s.do(ctx, s.client.Get().Resource(ClaimResource).Name(name))
	if err != nil {
		return s.fail(ctx, op, key, name, err)
	}
	return fmt.Errorf("kubestore: %s %s at revision %d: %w", op, key, rev, store.ErrConflict)
}

// do sends req and returns the response body, or the request's error (an
// API status error when the server gave one).
func (s *Store) do(ctx context.Context, req *rest.Request) ([]byte, error) {
	res := req.Do(ctx)
	if err := res.Error(); err != nil {
		return nil, err
	}
	raw, _ := res.Raw()
	return raw, nil
}

// fail turns the error of a request about key (the object name, if one)
// into the Store's: wrapping the store's sentinel that the API status
// means, or ErrUnavailable when the server gave no usable answer.
func (s *Store) fail(ctx context.Context, op, key, name string, err error) error {
	var sentinel error
	switch {
	case apierrors.IsAlreadyExists(err):
		sentinel = store.ErrExists
	case apierrors.IsConflict(err):
		sentinel = store.ErrConflict
	case name != "" && isObjectNotFound(err, name):
		sentinel = store.ErrNotFound
	case kubeerr.Unavailable(ctx, err):
		sentinel = ErrUnavailable
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
	}
	if sentinel != nil {
		return fmt.Errorf("kubestore: %s %s: %w: %w", op, key, sentinel, err)
	}
	return fmt.Errorf("kubestore: %s %s: %w", op, key, err)
}

// isObjectNotFound reports whether err says that the object name does not
// exist (rather than that the resource is not served: a missing CRD).
func isObjectNotFound(err error, name string) bool { return kubeerr.ObjectNotFound(err, name) }

// uidCache remembers the UID of objects this Store has written or read, at
// the revision it saw, so that an Update or Delete at that revision can name
// the UID too. It is bounded: when full it starts again empty. A miss only
// leaves the UID out; the revision alone already tells an object from one
// deleted and created again under the same name.
type uidCache struct {
	mu sync.Mutex
	m  map[string]uidEntry
}

type uidEntry struct {
	rev int64
	uid types.UID
}

const uidCacheSize = 4096

func (u *uidCache) put(name string, rev int64, uid types.UID) {
	if uid == "" {
		return
	}
	u.mu.Lock()
	if u.m == nil || len(u.m) >= uidCacheSize {
		u.m = make(map[string]uidEntry)
	}
	u.m[name] = uidEntry{rev, uid}
	u.mu.Unlock()
}

func (u *uidCache) get(name string, rev int64) types.UID {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e, ok := u.m[name]; ok && e.rev == rev {
		return e.uid
	}
	return ""
}

func (u *uidCache) drop(name string) {
	u.mu.Lock()
	delete(u.m, name)
	u.mu.Unlock()
}
