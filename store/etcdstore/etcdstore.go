package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/ipamkit/ipam/store"
)

// Compile-time checks that *Store provides the contract and its capabilities.
var (
	_ store.Store            = (*Store)(nil)
	_ store.Cursors          = (*Store)(nil)
	_ store.CursorCreator    = (*Store)(nil)
	_ store.ExclusiveCreator = (*Store)(nil)
	_ store.Watcher          = (*Store)(nil)
	_ store.PoolVersioner    = (*Store)(nil)
	_ store.OrderedRevisions = (*Store)(nil)
	_ store.AddressReader    = (*Store)(nil)
	_ store.ClaimLister      = (*Store)(nil)
)

// RevisionsOrdered reports true: a claim's Revision is its key's ModRevision,
// etcd's store-wide revision, which grows with every write of the cluster and
// which a linearizable read sees up to.
func (s *Store) RevisionsOrdered() bool { return true }

// Store is a store.Store on etcd. It also implements store.Cursors,
// store.CursorCreator, store.ExclusiveCreator, store.Watcher and
// store.PoolVersioner.
//
// The zero Store is not usable; create one with New or NewFromConfig. A
// *Store is safe for concurrent use by multiple goroutines.
type Store struct {
	cli      *clientv3.Client
	own      bool // whether Close closes cli
	keys     keys
	timeout  time.Duration
	pageSize int
	log      *slog.Logger
	recent   recent
	pools    poolNames
	note     certNote
}

// keepAlive is how often an idle connection is probed (etcd refuses probes
// more often than every 5 s), and how long a probe may go unanswered before
// the connection is dropped and another member tried.
const (
	keepAliveTime    = 10 * time.Second
	keepAliveTimeout = 5 * time.Second
)

// New returns a Store for the options. It connects in the background: an
// unreachable cluster makes the first calls fail with ErrUnavailable, not
// New. It fails if the options are not valid or a TLS file cannot be read.
// Close the Store when done.
func New(opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	s := &Store{
		cli:      opts.Client,
		keys:     keys{prefix: opts.prefix()},
		timeout:  cmpOr(opts.Timeout, DefaultTimeout),
		pageSize: cmpOr(opts.ListPageSize, DefaultListPageSize),
		log:      opts.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.cli != nil {
		return s, nil
	}
	tc, err := opts.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	if tc != nil {
		s.note.watch(tc)
	}
	dial := cmpOr(opts.DialTimeout, DefaultDialTimeout)
	reconnect := backoff.DefaultConfig
	reconnect.MaxDelay = 2 * time.Second // a restarted member is found again soon
	s.cli, err = clientv3.New(clientv3.Config{
		Endpoints:            opts.Endpoints,
		TLS:                  tc,
		DialTimeout:          dial,
		DialKeepAliveTime:    keepAliveTime,
		DialKeepAliveTimeout: keepAliveTimeout,
		Logger:               zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnect, MinConnectTimeout: dial}),
			grpc.WithChainUnaryInterceptor(keepDetail),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("etcdstore: endpoints %q: %w", opts.Endpoints, err)
	}
	s.own = true
	return s, nil
}

// NewFromConfig returns a Store for the configuration: New(c.Options()).
func NewFromConfig(c Config) (*Store, error) { return New(c.Options()) }

// Close closes the Store's connection to etcd, unless it was given one in
// Options.Client. Calls after Close fail.
func (s *Store) Close() error {
	if !s.own {
		return nil
	}
	return s.cli.Close()
}

// Prefix returns the prefix of the Store's keys, ending in "/".
func (s *Store) Prefix() string { return s.keys.prefix }

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// detailKey is the context key under which a Store's call leaves a
// *detailSlot for keepDetail.
type detailKey struct{}

// detailSlot receives the last error gRPC returned for a call.
type detailSlot struct{ err error }

// keepDetail is a gRPC interceptor that puts each call's error, as gRPC
// returns it, in the call's detailSlot: the etcd client replaces an error
// that names the cause of a timeout (a refused TLS handshake) by the bare
// context error.
func keepDetail(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if slot, ok := ctx.Value(detailKey{}).(*detailSlot); ok && err != nil {
		slot.err = err
	}
	return err
}

// do runs one request to etcd, f, with ctx bounded by the Store's timeout
// (or by ctx's deadline if that comes sooner), and returns f's error as
// callError makes it. A context that is done already fails without a
// request.
func (s *Store) do(ctx context.Context, f func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return callError(err, nil, "")
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	slot := new(detailSlot)
	if err := f(context.WithValue(ctx, detailKey{}, slot)); err != nil {
		return callError(err, slot.err, s.note.get())
	}
	return nil
}

// txn runs one transaction.
func (s *Store) txn(ctx context.Context, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	var resp *clientv3.TxnResponse
	err := s.do(ctx, func(ctx context.Context) (err error) {
		resp, err = s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		return err
	})
	return resp, err
}

// get runs one range read.
func (s *Store) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	var resp *clientv3.GetResponse
	err := s.do(ctx, func(ctx context.Context) (err error) {
		resp, err = s.cli.Get(ctx, key, opts...)
		return err
	})
	return resp, err
}

// claimError returns the error of operation op on the claim of ip in pool,
// at key, naming all three.
func claimError(op, pool string, ip netip.Addr, key string, err error) error {
	if key == "" {
		return fmt.Errorf("etcdstore: %s %s/%s: %w", op, pool, ip, err)
	}
	return fmt.Errorf("etcdstore: %s %s/%s (key %q): %w", op, pool, ip, key, err)
}

// errZone is returned, wrapped, for an address with an IPv6 zone, which no
// pool hands out and the key layout has no room for.
var errZone = errors.New("ip has a zone; etcdstore keeps addresses without one")

// checkAddr reports why ip cannot be a claim's address.
func checkAddr(ip netip.Addr) error {
	switch {
	case !ip.IsValid():
		return errors.New("ip is not a valid address")
	case ip.Zone() != "":
		return errZone
	}
	return nil
}

// checkClaim reports why c cannot be stored.
func checkClaim(c store.Claim) error {
	if err := c.Validate(); err != nil {
		return err
	}
	return checkAddr(c.IP)
}

// encode returns the value of c's keys: c as JSON, without its revision.
// Every field of a Claim marshals, and a valid Claim's time is within
// JSON's years, so the error is there only for what Validate may miss.
func encode(c store.Claim) (string, error) {
	c.Revision = 0
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encoding the claim as JSON: %w", err)
	}
	return string(b), nil
}

// decode returns the claim that kv holds, which its key names as the claim
// of ip in pool, with kv's ModRevision, or a *CorruptError.
func decode(kv *mvccpb.KeyValue, pool string, ip netip.Addr) (store.Claim, error) {
	var c store.Claim
	err := json.Unmarshal(kv.Value, &c)
	var reason string
	switch {
	case err != nil:
		reason = err.Error()
	case c.Pool != pool || c.IP != ip:
		reason = fmt.Sprintf("holds the claim of %s/%s, not %s/%s", c.Pool, c.IP, pool, ip)
	case c.Owner.IsZero():
		reason = "no owner"
	default:
		c.Revision = kv.ModRevision
		return c, nil
	}
	return store.Claim{}, &CorruptError{Key: string(kv.Key), Revision: kv.ModRevision, Reason: reason}
}

// decodeClaimKV returns the claim of a claim key.
func (s *Store) decodeClaimKV(kv *mvccpb.KeyValue) (store.Claim, error) {
	pool, ip, err := s.keys.parseClaimKey(string(kv.Key))
	if err != nil {
		return store.Claim{}, &CorruptError{Key: string(kv.Key), Revision: kv.ModRevision, Reason: err.Error()}
	}
	return decode(kv, pool, ip)
}

// decodeOwnerKV returns the claim an owner key holds a copy of.
func (s *Store) decodeOwnerKV(kv *mvccpb.KeyValue) (store.Claim, error) {
	pool, ip, err := s.keys.parseOwnerKey(string(kv.Key))
	if err != nil {
		return store.Claim{}, &CorruptError{Key: string(kv.Key), Revision: kv.ModRevision, Reason: err.Error()}
	}
	return decode(kv, pool, ip)
}

// Get returns the claim for ip in pool, or an error wrapping
// store.ErrNotFound. It is a linearizable read: it sees every write that
// completed before it was called, through any client.
func (s *Store) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	if err := checkAddr(ip); err != nil {
		return store.Claim{}, claimError("get", pool, ip, "", err)
	}
	key := s.keys.claim(pool, ip)
	resp, err := s.get(ctx, key)
	if err != nil {
		return store.Claim{}, claimError("get", pool, ip, key, err)
	}
	if len(resp.Kvs) == 0 {
		return store.Claim{}, claimError("get", pool, ip, key, store.ErrNotFound)
	}
	c, err := decode(resp.Kvs[0], pool, ip)
	if err != nil {
		return store.Claim{}, claimError("get", pool, ip, key, err)
	}
	s.recent.put(key, c)
	return c, nil
}

// ListAll returns every claim under the Store's prefix, in every pool, as
// List reads a pool: in pages, all at one revision.
func (s *Store) ListAll(ctx context.Context) ([]store.Claim, error) {
	return s.listClaims(ctx, "every claim", s.keys.claimsPrefix())
}

// List returns every claim of pool, in address order (IPv4 first), in a new
// slice the caller owns, read in pages of Options.ListPageSize keys, all at
// one revision: a consistent snapshot of the pool however large. If some keys
// cannot be read, List returns the others with an error that joins a
// *CorruptError for each.
func (s *Store) List(ctx context.Context, pool string) ([]store.Claim, error) {
	return s.listClaims(ctx, pool, s.keys.poolPrefix(pool))
}

// listClaims is List of what (for its errors), the claim keys under prefix:
// never nil, and with the keys it cannot read reported in an error wrapping
// ErrCorrupt, returned with the others.
func (s *Store) listClaims(ctx context.Context, what, prefix string) ([]store.Claim, error) {
	claims, _, err := s.list(ctx, prefix)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return nil, fmt.Errorf("etcdstore: list %s (keys %q): %w", what, prefix, err)
	}
	if err != nil {
		err = fmt.Errorf("etcdstore: list %s: %w", what, err)
	}
	if claims == nil {
		claims = []store.Claim{}
	}
	return claims, err
}

// listRetries is how many times list starts again when etcd compacted the
// revision it was reading at before it got to the last page.
const listRetries = 3

// list reads every claim key under prefix at one revision, in pages, and
// returns the claims, the revision, and for keys it cannot read an error
// joining their *CorruptErrors.
func (s *Store) list(ctx context.Context, prefix string) ([]store.Claim, int64, error) {
	for attempt := 0; ; attempt++ {
		claims, rev, err := s.listAt(ctx, prefix)
		if isCompacted(err) && attempt < listRetries {
			continue
		}
		return claims, rev, err
	}
}

// listAt is one attempt of list.
func (s *Store) listAt(ctx context.Context, prefix string) ([]store.Claim, int64, error) {
	var (
		claims  []store.Claim
		corrupt []error
		rev     int64
	)
	start, end := prefix, prefixEnd(prefix)
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(s.pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.get(ctx, start, opts...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			c, err := s.decodeClaimKV(kv)
			if err != nil {
				corrupt = append(corrupt, err)
				continue
			}
			claims = append(claims, c)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return claims, rev, errors.Join(corrupt...)
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Create stores c if no claim exists for (c.Pool, c.IP), in one transaction
// with its owner records, and returns it with its new Revision; c.Revision is
// ignored. It returns an error wrapping store.ErrExists if the address is
// already claimed, and the error of c.Validate, wrapped, if c is not a valid
// claim.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, false, false)
}

// CreateAndSetCursor is Create, with the pool's cursor moved to c.IP in the
// same transaction if the claim is created.
func (s *Store) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, true, false)
}

// CreateExclusive is CreateAndSetCursor, unless c's owner already holds a
// claim of c.IP's family on c's interface or on none (store.Conflicts): it
// then returns a *store.HeldError with those claims and creates nothing. The
// check and the create are one transaction: the check compares the key
// ranges of the owner records that would conflict, so it costs one round
// trip, as Create does.
func (s *Store) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, true, true)
}

// create is Create, CreateAndSetCursor (cursor) or CreateExclusive
// (cursor, exclusive).
func (s *Store) create(ctx context.Context, c store.Claim, cursor, exclusive bool) (store.Claim, error) {
	if err := checkClaim(c); err != nil {
		return store.Claim{}, claimError("create", c.Pool, c.IP, "", err)
	}
	key := s.keys.claim(c.Pool, c.IP)
	val, err := encode(c)
	if err != nil {
		return store.Claim{}, claimError("create", c.Pool, c.IP, key, err)
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", 0)}
	then := []clientv3.Op{clientv3.OpPut(key, val)}
	for _, k := range s.keys.owners(c) {
		then = append(then, clientv3.OpPut(k, val))
	}
	if cursor {
		then = append(then, clientv3.OpPut(s.keys.pool(c.Pool), c.IP.String()))
	} else {
		then = append(then, s.touch(c.Pool))
	}
	var els []clientv3.Op
	if exclusive {
		for _, r := range s.keys.heldRanges(c) {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(r[0]), "=", 0).WithRange(r[1]))
			els = append(els, clientv3.OpGet(r[0], clientv3.WithRange(r[1])))
		}
	}
	resp, err := s.txn(ctx, cmps, then, els)
	if err != nil {
		return store.Claim{}, claimError("create", c.Pool, c.IP, key, err)
	}
	if !resp.Succeeded {
		if exclusive {
			if err := s.held(c, resp); err != nil {
				return store.Claim{}, claimError("create", c.Pool, c.IP, key, err)
			}
		}
		return store.Claim{}, claimError("create", c.Pool, c.IP, key, store.ErrExists)
	}
	c.Revision = resp.Header.Revision
	s.recent.put(key, c)
	return c, nil
}

// held returns the error of a CreateExclusive of c that failed, from the
// owner records its Else branch read: a *store.HeldError with the claims
// that stand in its way, an error wrapping ErrCorrupt if only records it
// cannot read do, or nil if there are none (the address is taken).
func (s *Store) held(c store.Claim, resp *clientv3.TxnResponse) error {
	var held []store.Claim
	var corrupt []error
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			h, err := s.decodeOwnerKV(kv)
			if err != nil {
				corrupt = append(corrupt, err)
				continue
			}
			if store.Conflicts(c, h) {
				held = append(held, h)
			}
		}
	}
	if len(held) > 0 {
		return &store.HeldError{Claim: c, Held: held}
	}
	return errors.Join(corrupt...)
}

// Update replaces the claim for (c.Pool, c.IP) with c if its current revision
// is rev, with its owner records, in one transaction, and returns it with its
// new Revision; c.Revision is ignored. It returns an error wrapping
// store.ErrNotFound if there is no claim, store.ErrConflict if the revision
// differs, and the error of c.Validate, wrapped, if c is not a valid claim.
//
// Update needs the owner of the claim it replaces, to remove its owner
// records: it knows it without asking when this Store read or wrote the claim
// at rev lately, and reads it first otherwise.
func (s *Store) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	if err := checkClaim(c); err != nil {
		return store.Claim{}, claimError("update", c.Pool, c.IP, "", err)
	}
	key := s.keys.claim(c.Pool, c.IP)
	val, err := encode(c)
	if err != nil {
		return store.Claim{}, claimError("update", c.Pool, c.IP, key, err)
	}
	old, err := s.at(ctx, key, c.Pool, c.IP, rev)
	if err != nil {
		return store.Claim{}, claimError("update", c.Pool, c.IP, key, err)
	}
	then := []clientv3.Op{clientv3.OpPut(key, val), s.touch(c.Pool)}
	puts := s.keys.owners(c)
	for _, k := range puts {
		then = append(then, clientv3.OpPut(k, val))
	}
	for _, k := range s.keys.owners(old) {
		if !slices.Contains(puts, k) {
			then = append(then, clientv3.OpDelete(k))
		}
	}
	c.Revision, err = s.write(ctx, key, rev, then)
	if err != nil {
		return store.Claim{}, claimError("update", c.Pool, c.IP, key, err)
	}
	s.recent.put(key, c)
	return c, nil
}

// Delete removes the claim for ip in pool, with its owner records, if its
// current revision is rev. It returns an error wrapping store.ErrNotFound if
// there is no claim and store.ErrConflict if the revision differs. As Update,
// it reads the claim first unless this Store read or wrote it at rev lately.
func (s *Store) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	if err := checkAddr(ip); err != nil {
		return claimError("delete", pool, ip, "", err)
	}
	key := s.keys.claim(pool, ip)
	old, err := s.at(ctx, key, pool, ip, rev)
	if err != nil {
		return claimError("delete", pool, ip, key, err)
	}
	then := []clientv3.Op{clientv3.OpDelete(key), s.touch(pool)}
	for _, k := range s.keys.owners(old) {
		then = append(then, clientv3.OpDelete(k))
	}
	if _, err := s.write(ctx, key, rev, then); err != nil {
		return claimError("delete", pool, ip, key, err)
	}
	s.recent.drop(key)
	return nil
}

// at returns the claim at key if its revision is rev: from the claims this
// Store has seen lately, or read from etcd. It returns an error wrapping
// store.ErrNotFound or store.ErrConflict if there is no claim or it has
// another revision. A claim whose value cannot be read is returned as a
// Claim without owner: it has no owner records to remove.
func (s *Store) at(ctx context.Context, key, pool string, ip netip.Addr, rev int64) (store.Claim, error) {
	if c, ok := s.recent.get(key, rev); ok {
		return c, nil
	}
	resp, err := s.get(ctx, key)
	if err != nil {
		return store.Claim{}, err
	}
	if len(resp.Kvs) == 0 {
		return store.Claim{}, store.ErrNotFound
	}
	kv := resp.Kvs[0]
	if kv.ModRevision != rev {
		return store.Claim{}, fmt.Errorf("at revision %d (current %d): %w", rev, kv.ModRevision, store.ErrConflict)
	}
	c, err := decode(kv, pool, ip)
	if err != nil {
		s.log.Warn("etcdstore: replacing an unreadable claim", "err", err)
		return store.Claim{Pool: pool, IP: ip, Revision: rev}, nil
	}
	s.recent.put(key, c)
	return c, nil
}

// write runs then if the claim at key has revision rev, and returns the new
// revision, or an error wrapping store.ErrNotFound or store.ErrConflict if
// the claim is gone or has another revision.
func (s *Store) write(ctx context.Context, key string, rev int64, then []clientv3.Op) (int64, error) {
	resp, err := s.txn(ctx,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)},
		then,
		[]clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())})
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		s.recent.drop(key)
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return 0, store.ErrNotFound
		}
		return 0, fmt.Errorf("at revision %d (current %d): %w", rev, kvs[0].ModRevision, store.ErrConflict)
	}
	return resp.Header.Revision, nil
}

// Owned returns every claim that q matches, in no particular order, in a new
// slice the caller owns (nil if there is none), with one linearizable range
// read of the owner records of q's identity: its cost is that of the claims
// of that identity. If some records cannot be read, it returns the others
// with an error that joins a *CorruptError for each.
func (s *Store) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("etcdstore: %w", err)
	}
	prefix := s.keys.identity(q)
	resp, err := s.get(ctx, prefix, clientv3.WithRange(prefixEnd(prefix)))
	if err != nil {
		return nil, fmt.Errorf("etcdstore: owned %s (keys %q): %w", q, prefix, err)
	}
	var out []store.Claim
	var corrupt []error
	for _, kv := range resp.Kvs {
		c, err := s.decodeOwnerKV(kv)
		if err != nil {
			corrupt = append(corrupt, err)
			continue
		}
		if q.Matches(c) {
			out = append(out, c)
			s.recent.put(s.keys.claim(c.Pool, c.IP), c)
		}
	}
	if err := errors.Join(corrupt...); err != nil {
		return out, fmt.Errorf("etcdstore: owned %s: %w", q, err)
	}
	return out, nil
}

// touch returns the write that changes pool's version and keeps its cursor:
// a put of the pool's record with its value as it is, or empty if there is no
// record yet, in every transaction that writes a claim of the pool without
// moving the cursor. It is a transaction of its own, nested in the write's,
// since etcd refuses to keep the value of a key that does not exist; its
// comparison never makes the write fail.
func (s *Store) touch(pool string) clientv3.Op {
	key := s.keys.pool(pool)
	return clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)},
		[]clientv3.Op{clientv3.OpPut(key, "", clientv3.WithIgnoreValue())},
		[]clientv3.Op{clientv3.OpPut(key, "")})
}

// maxTxnOps is the most operations etcd takes in one branch of a
// transaction by default (its --max-txn-ops).
const maxTxnOps = 128

// AddressClaims returns the claims of ip in every pool that has had a claim
// (each has a record under pools/, put in its claims' transactions): one
// linearizable read-only transaction that gets the claim key of ip in each
// pool, for every 128 pools. The Store remembers the pools it knows and the
// revision it read them at; each transaction also checks that no pool
// record was created since, and when one was, reads them again.
func (s *Store) AddressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	if err := checkAddr(ip); err != nil {
		return nil, claimError("claims of address", "", ip, "", err)
	}
	out, err := s.addressClaims(ctx, ip)
	if err != nil {
		return out, claimError("claims of address", "", ip, s.keys.poolsPrefix(), err)
	}
	return out, nil
}

func (s *Store) addressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	pools, rev := s.pools.get()
	for range 8 {
		out, fresh, err := s.claimsIn(ctx, pools, rev, ip)
		if err != nil || fresh == nil {
			return out, err
		}
		s.pools.set(*fresh)
		pools, rev = fresh.names, fresh.rev
	}
	return nil, errors.New("pools kept getting their first claims while their claims were read; try again")
}

// claimsIn returns the claims of ip in pools, the pools known at revision
// rev: with a read-only transaction for every maxTxnOps of them, each
// checking that no pool record was created after rev. If one was, it
// returns every pool record instead, read at once.
func (s *Store) claimsIn(ctx context.Context, pools []string, rev int64, ip netip.Addr) ([]store.Claim, *poolList, error) {
	prefix := s.keys.poolsPrefix()
	var out []store.Claim
	var corrupt []error
	for start := 0; start == 0 || start < len(pools); start += maxTxnOps {
		chunk := pools[start:min(start+maxTxnOps, len(pools))]
		gets := make([]clientv3.Op, len(chunk))
		for i, p := range chunk {
			gets[i] = clientv3.OpGet(s.keys.claim(p, ip))
		}
		resp, err := s.txn(ctx,
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(prefix), "<", rev+1).WithRange(prefixEnd(prefix))},
			gets,
			[]clientv3.Op{clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())})
		if err != nil {
			return nil, nil, err
		}
		if !resp.Succeeded {
			// A pool has had its first claim since rev.
			return nil, &poolList{s.poolsNamed(resp.Responses[0].GetResponseRange().GetKvs()), resp.Header.Revision}, nil
		}
		for i, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().GetKvs() {
				c, err := decode(kv, chunk[i], ip)
				if err != nil {
					corrupt = append(corrupt, err)
					continue
				}
				out = append(out, c)
			}
		}
	}
	return out, nil, errors.Join(corrupt...)
}

// poolsNamed returns the pools named by pool record keys, skipping keys that
// name none.
func (s *Store) poolsNamed(kvs []*mvccpb.KeyValue) []string {
	var names []string
	for _, kv := range kvs {
		p, err := s.keys.parsePoolKey(string(kv.Key))
		if err != nil {
			s.log.Warn("etcdstore: ignoring a key under pools/ that names no pool", "key", string(kv.Key), "err", err)
			continue
		}
		names = append(names, p)
	}
	return names
}

// poolList is a list of the pools that have a record, read at revision rev.
type poolList struct {
	names []string
	rev   int64
}

// poolNames holds the newest poolList a Store has read.
type poolNames struct {
	mu   sync.Mutex
	list poolList
}

func (p *poolNames) get() ([]string, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list.names, p.list.rev
}

// set keeps l unless a newer list is kept already.
func (p *poolNames) set(l poolList) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l.rev > p.list.rev {
		p.list = l
	}
}

// PoolVersion returns the version of pool's claims: the revision of the last
// transaction that created, updated or deleted one of them, or set its
// cursor, through any client (0 if none did), with one linearizable read.
func (s *Store) PoolVersion(ctx context.Context, pool string) (uint64, error) {
	key := s.keys.pool(pool)
	resp, err := s.get(ctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return 0, fmt.Errorf("etcdstore: pool version %s (key %q): %w", pool, key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return uint64(resp.Kvs[0].ModRevision), nil
}

// Cursor returns the last address recorded for pool, or the zero Addr if
// there is none. A cursor that is not an address is reported with an error
// wrapping ErrCorrupt.
func (s *Store) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	key := s.keys.pool(pool)
	resp, err := s.get(ctx, key)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("etcdstore: cursor %s (key %q): %w", pool, key, err)
	}
	if len(resp.Kvs) == 0 || len(resp.Kvs[0].Value) == 0 {
		return netip.Addr{}, nil
	}
	kv := resp.Kvs[0]
	ip, err := netip.ParseAddr(string(kv.Value))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("etcdstore: cursor %s: %w", pool,
			&CorruptError{Key: key, Revision: kv.ModRevision, Reason: err.Error()})
	}
	return ip, nil
}

// SetCursor records ip as the last address reserved in pool. Setting the zero
// Addr forgets the cursor. Either changes the pool's version too: the cursor
// is kept in the pool's record, which is never deleted.
func (s *Store) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	key := s.keys.pool(pool)
	val := ""
	if ip.IsValid() {
		val = ip.String()
	}
	err := s.do(ctx, func(ctx context.Context) error {
		_, err := s.cli.Put(ctx, key, val)
		return err
	})
	if err != nil {
		return fmt.Errorf("etcdstore: set cursor %s to %s (key %q): %w", pool, ip, key, err)
	}
	return nil
}

// recent holds the claims a Store read or wrote lately, by key, so that
// Update and Delete know the owner records to remove without reading the
// claim first. A claim's value at one revision never changes, so an entry
// is right for as long as the claim keeps that revision, and the
// transaction checks that it does.
type recent struct {
	mu sync.Mutex
	m  map[string]store.Claim
}

// recentMax bounds the claims a Store remembers; past it, adding one drops
// another at random.
const recentMax = 4096

func (r *recent) put(key string, c store.Claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[string]store.Claim)
	}
	if _, ok := r.m[key]; !ok && len(r.m) >= recentMax {
		for k := range r.m {
			delete(r.m, k)
			break
		}
	}
	r.m[key] = c
}

func (r *recent) get(key string, rev int64) (store.Claim, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.m[key]
	return c, ok && c.Revision == rev
}

func (r *recent) drop(key string) {
	r.mu.Lock()
	delete(r.m, key)
	r.mu.Unlock()
}
