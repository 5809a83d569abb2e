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
	"sync/atomic"

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
	_ store.ClaimPager           = (*Store)(nil)
)

// Options configure a Store. The zero Options are the usual ones.
type Options struct {
	// Logger receives what the Store cannot return: objects a Watch skips
	// because they are no valid claims, and the Watch's reconnections.
	// Nil discards them.
	Logger *slog.Logger
	// Node, when set, is the name of the node the Store allocates for: the
	// round-robin cursors are then per pool and node (an IPCursor named
	// from both), so that no object is written by the allocations of every
	// node. Empty means one cursor per pool.
	Node string
}

// Store is a store.Store on IPClaim custom resources; see the package
// documentation.
//
// The zero Store is not usable; create one with New. A *Store is safe for
// concurrent use by multiple goroutines.
type Store struct {
	client *rest.RESTClient
	log    *slog.Logger
	node   atomic.Pointer[string] // Options.Node, or SetNode's
	seen   seenCache              // the claims this Store read or wrote, by name
	index  indexMemo              // the owner indexes it read or wrote, by name
	layout layoutCheck
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
// cfg.Burst are zero, is 5 requests per second with bursts of 10, below
// what one allocation makes (about 7 requests per address, see the package
// documentation). Set cfg.QPS and cfg.Burst to what the API server can
// give this client, or cfg.QPS to -1 for no client-side limit.
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
	s := &Store{client: client, log: log}
	s.node.Store(&opts.Node)
	return s, nil
}

// SetNode sets the node whose cursors the Store reads and writes from now
// on, as Options.Node does, for a caller that learns it after New (the CNI
// plugin reads it from the pod). Call it before the Store is used.
func (s *Store) SetNode(node string) { s.node.Store(&node) }

// nodeName returns Options.Node, or what SetNode set.
func (s *Store) nodeName() string { return *s.node.Load() }

// Get returns the claim for ip in pool, read from etcd through the API
// server (a quorum read of the object ClaimName names), or an error
// wrapping store.ErrNotFound, also when the address is claimed in another
// pool. An object of that name that is no valid claim gives a
// *CorruptError.
func (s *Store) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	key := pool + "/" + ip.String()
	c, err := s.read(ctx, "get", key, ip)
	if err != nil {
		return store.Claim{}, err
	}
	if c.Pool != pool {
		return store.Claim{}, fmt.Errorf("kubestore: get %s: %w (the address is claimed in pool %q)", key, store.ErrNotFound, c.Pool)
	}
	return c, nil
}

// read GETs the claim of ip, whatever its pool, for op on key.
func (s *Store) read(ctx context.Context, op, key string, ip netip.Addr) (store.Claim, error) {
	e, err := s.readEntry(ctx, op, key, ip)
	return e.claim, err
}

// readEntry is read, with what Update and Delete need of the object.
func (s *Store) readEntry(ctx context.Context, op, key string, ip netip.Addr) (seenEntry, error) {
	name, ok := ClaimName(ip)
	if !ok {
		return seenEntry{}, fmt.Errorf("kubestore: %s %s: %w", op, key, errNoName)
	}
	if err := ctx.Err(); err != nil {
		return seenEntry{}, fmt.Errorf("kubestore: %s %s: %w", op, key, err)
	}
	raw, err := s.do(ctx, s.client.Get().Resource(ClaimResource).Name(name))
	if err != nil {
		return seenEntry{}, s.fail(ctx, op, key, name, err)
	}
	c, o, err := decodeClaim(raw)
	if err != nil {
		return seenEntry{}, err
	}
	e := seenEntry{claim: c, uid: o.Metadata.UID, token: o.Metadata.Annotations.Token}
	s.seen.putEntry(name, e)
	return e, nil
}

// List returns every claim of pool: a consistent list (served from the API
// server's watch cache once it has caught up with etcd, KEP-2340) of the
// IPClaims labelled with the pool. Objects so labelled that are no valid
// claims are left out, and reported in an error wrapping store.ErrCorrupt
// (each a *CorruptError) returned with the claims that could be read.
func (s *Store) List(ctx context.Context, pool string) ([]store.Claim, error) {
	return s.claimsBy(ctx, "list", pool, LabelPool+"="+labelValue(pool), func(c store.Claim) bool { return c.Pool == pool })
}

// ListAll returns every claim, of every pool, from a consistent list of
// every IPClaim (see List).
func (s *Store) ListAll(ctx context.Context) ([]store.Claim, error) {
	return s.claimsBy(ctx, "list", "every claim", "", func(store.Claim) bool { return true })
}

// Owned returns the claims q matches. By pod UID or by a stable owner's
// name it reads q's owner index (an IPOwner, OwnerIndexName) and each claim
// the index lists, keeping those q matches: GETs by name, quorum reads,
// whose cost does not grow with the claims of other owners. Every claim
// is in the index of its identities before it is written, so the answer
// reflects every write completed before the call, through any client.
//
// By container ID, or for an owner whose index lists more than 16 claims,
// it is a consistent list of the IPClaims labelled with q's identity: the
// slow path, whose cost on the API server grows with the number of claims
// in the cluster (see the package documentation). Claims that have a pod
// UID are indexed by it, not by their container ID.
func (s *Store) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("kubestore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kubestore: owned %s: %w", q, err)
	}
	if indexedBy(q) {
		claims, ok, err := s.ownedIndexed(ctx, q)
		if ok {
			return claims, err
		}
	}
	return s.claimsBy(ctx, "owned", q.String(), ownerSelector(q), q.Matches)
}

// OwnedAtLeast returns what Owned returns: its reads are quorum reads,
// never older than a write this Store completed.
func (s *Store) OwnedAtLeast(ctx context.Context, q store.OwnerQuery, _ int64) ([]store.Claim, error) {
	return s.Owned(ctx, q)
}

// AddressClaims returns the claim of ip, in whichever pool holds it (an
// address is claimed in one pool at a time), or none: one GET by name.
func (s *Store) AddressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	c, err := s.read(ctx, "claims of address", ip.String(), ip)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return []store.Claim{}, nil
	case err != nil:
		return nil, err
	}
	return []store.Claim{c}, nil
}

// AddressClaimsAtLeast returns what AddressClaims returns, a quorum read.
func (s *Store) AddressClaimsAtLeast(ctx context.Context, ip netip.Addr, _ int64) ([]store.Claim, error) {
	return s.AddressClaims(ctx, ip)
}

// claimsBy is a read of op (what, for its errors): the claims keep keeps
// among the IPClaims selector selects, from a consistent list; never nil.
// Unreadable objects are reported in an error wrapping store.ErrCorrupt,
// returned with the others.
func (s *Store) claimsBy(ctx context.Context, op, what, selector string, keep func(store.Claim) bool) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("kubestore: %s %s: %w", op, what, err)
	}
	claims, err := s.listClaims(ctx, selector, keep)
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
	list, err := s.list(ctx, ClaimResource, selector)
	if err != nil {
		return nil, err
	}
	claims, bad := s.decodeClaims(list.Items, keep, nil, nil)
	return claims, errors.Join(bad...)
}

// list makes a consistent list of resource with a label selector.
func (s *Store) list(ctx context.Context, resource, selector string) (*objectList, error) {
	req := s.client.Get().Resource(resource)
	if selector != "" {
		req = req.Param("labelSelector", selector)
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

// Create stores c if its address is free in every pool, as a new IPClaim,
// and returns it with the object's resourceVersion as Revision. It first
// adds an entry for c to the owner index of each identity c is indexed
// under (see Owned), then POSTs the claim; if the POST is refused, it
// removes the entries again. It returns an error wrapping store.ErrExists
// if an object of the address's name exists, of any pool, whether or not
// it is a valid claim.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, true)
}

// create is Create; checked says to refuse the write while the cluster
// holds claims named the old way (see Migrate).
func (s *Store) create(ctx context.Context, c store.Claim, checked bool) (store.Claim, error) {
	name, err := toWrite(ctx, "create", c)
	if err != nil {
		return store.Claim{}, err
	}
	if checked {
		if err := s.layout.check(ctx, s); err != nil {
			return store.Claim{}, fmt.Errorf("kubestore: create %s: %w", c.Key(), err)
		}
	}
	token := newToken()
	ids := indexed(c.Owner)
	if err := s.addEntries(ctx, ids, c.Pool, c.IP, token); err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: create %s: %w", c.Key(), err)
	}
	o := newClaimObject(name, c, token)
	body, err := json.Marshal(o)
	if err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: create %s: %w", c.Key(), err)
	}
	raw, err := s.do(ctx, s.client.Post().Resource(ClaimResource).Body(body))
	if err != nil {
		if refused(ctx, err) {
			s.dropEntries(context.WithoutCancel(ctx), ids, c.Pool, c.IP, token)
		}
		return store.Claim{}, s.fail(ctx, "create", c.Key(), name, err)
	}
	return s.written(c, name, token, raw)
}

// refused reports whether err says that the API server did not apply a
// write: an answer in 4xx other than 429. A write that got no answer, or a
// 429 or 5xx, may have been applied.
func refused(ctx context.Context, err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || kubeerr.Unavailable(ctx, err) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != 429
}

// toWrite checks that c can be written by op, and returns its object's
// name.
func toWrite(ctx context.Context, op string, c store.Claim) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("kubestore: %s: %w", op, err)
	}
	name, ok := ClaimName(c.IP)
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
func (s *Store) written(c store.Claim, name, token string, raw []byte) (store.Claim, error) {
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
	c.Revision = rev
	s.seen.putEntry(name, seenEntry{claim: c, uid: meta.Metadata.UID, token: token})
	return c, nil
}

// current returns the claim of ip as this Store last saw it at revision
// rev, or reads it if it saw it at another revision or not at all.
func (s *Store) current(ctx context.Context, op, key string, ip netip.Addr, rev int64) (seenEntry, error) {
	name, ok := ClaimName(ip)
	if !ok {
		return seenEntry{}, fmt.Errorf("kubestore: %s %s: %w", op, key, errNoName)
	}
	if e, ok := s.seen.get(name, rev); ok {
		return e, nil
	}
	return s.readEntry(ctx, op, key, ip)
}

// Update replaces the claim for (c.Pool, c.IP) with c if the object's
// resourceVersion is rev: a PUT that carries rev (and the object's UID),
// which the API server refuses with a conflict (store.ErrConflict) if the
// object has changed, or was deleted and created again, since. Before the
// PUT it reads the claim unless this Store saw it at rev (to know its pool
// and its owner index entries), and adds entries for c to the owner
// indexes of c's identities; after it, it prunes the old claim's entries.
// It returns an error wrapping store.ErrNotFound if there is no such
// object or the address is claimed in another pool: that pool's claim is
// not c's to replace.
func (s *Store) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	name, err := toWrite(ctx, "update", c)
	if err != nil {
		return store.Claim{}, err
	}
	old, err := s.current(ctx, "update", c.Key(), c.IP, rev)
	switch {
	case err != nil:
		return store.Claim{}, err
	case old.claim.Pool != c.Pool:
		return store.Claim{}, fmt.Errorf("kubestore: update %s: %w (the address is claimed in pool %q)", c.Key(), store.ErrNotFound, old.claim.Pool)
	case rev <= 0 || old.claim.Revision != rev:
		return store.Claim{}, fmt.Errorf("kubestore: update %s at revision %d: %w", c.Key(), rev, store.ErrConflict)
	}
	if err := s.layout.check(ctx, s); err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: update %s: %w", c.Key(), err)
	}
	token := newToken()
	ids := indexed(c.Owner)
	if err := s.addEntries(ctx, ids, c.Pool, c.IP, token); err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: update %s: %w", c.Key(), err)
	}
	o := newClaimObject(name, c, token)
	o.ResourceVersion = formatRevision(rev)
	o.UID = old.uid
	body, err := json.Marshal(o)
	if err != nil {
		return store.Claim{}, fmt.Errorf("kubestore: update %s: %w", c.Key(), err)
	}
	raw, err := s.do(ctx, s.client.Put().Resource(ClaimResource).Name(name).Body(body))
	if err != nil {
		if refused(ctx, err) {
			s.dropEntries(context.WithoutCancel(ctx), ids, c.Pool, c.IP, token)
		}
		return store.Claim{}, s.fail(ctx, "update", c.Key(), name, err)
	}
	s.dropEntries(ctx, indexed(old.claim.Owner), old.claim.Pool, old.claim.IP, old.token)
	return s.written(c, name, token, raw)
}

// Delete removes the claim for ip in pool if the object's resourceVersion is
// rev: a DELETE with rev (and the object's UID) as preconditions, after a
// read of the claim unless this Store saw it at rev. It then prunes the
// claim's entries from its owner indexes. It returns an error wrapping
// store.ErrNotFound if there is no such object or the address is claimed in
// another pool, and store.ErrConflict if the claim is at another revision.
func (s *Store) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	key := pool + "/" + ip.String()
	name, ok := ClaimName(ip)
	if !ok {
		return fmt.Errorf("kubestore: delete %s: %w", key, errNoName)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kubestore: delete %s: %w", key, err)
	}
	old, err := s.current(ctx, "delete", key, ip, rev)
	switch {
	case err != nil:
		return err
	case old.claim.Pool != pool:
		return fmt.Errorf("kubestore: delete %s: %w (the address is claimed in pool %q)", key, store.ErrNotFound, old.claim.Pool)
	case old.claim.Revision != rev:
		return fmt.Errorf("kubestore: delete %s at revision %d: %w", key, rev, store.ErrConflict)
	}
	body, err := deleteBody(formatRevision(rev), string(old.uid))
	if err != nil {
		return fmt.Errorf("kubestore: delete %s: %w", key, err)
	}
	if _, err := s.do(ctx, s.client.Delete().Resource(ClaimResource).Name(name).Body(body)); err != nil {
		return s.fail(ctx, "delete", key, name, err)
	}
	s.seen.drop(name)
	s.dropEntries(ctx, indexed(old.claim.Owner), pool, ip, old.token)
	return nil
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

// seenCache remembers the claims this Store has read or written, by object
// name, with the object's UID and index token, so that an Update or Delete
// at the revision seen needs no read first. It is bounded: when full it
// starts again empty. A miss costs a GET.
type seenCache struct {
	mu sync.Mutex
	m  map[string]seenEntry
}

// seenEntry is one claim as seen: at claim.Revision.
type seenEntry struct {
	claim store.Claim
	uid   types.UID
	token string
}

const uidCacheSize = 4096

func (u *seenCache) put(name string, c store.Claim, o *storedClaim) {
	u.putEntry(name, seenEntry{claim: c, uid: o.Metadata.UID, token: o.Metadata.Annotations.Token})
}

func (u *seenCache) putEntry(name string, e seenEntry) {
	u.mu.Lock()
	if u.m == nil || len(u.m) >= uidCacheSize {
		u.m = make(map[string]seenEntry)
	}
	u.m[name] = e
	u.mu.Unlock()
}

// get returns the claim name as seen at revision rev.
func (u *seenCache) get(name string, rev int64) (seenEntry, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.m[name]
	return e, ok && e.claim.Revision == rev
}

func (u *seenCache) drop(name string) {
	u.mu.Lock()
	delete(u.m, name)
	u.mu.Unlock()
}
