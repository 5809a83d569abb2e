package memstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/ipamkit/ipam/internal/readmap"
	"github.com/ipamkit/ipam/store"
)

// errInvalidIP is returned, wrapped, by Get and Delete when asked about an
// address that is not valid (the zero netip.Addr).
var errInvalidIP = errors.New("ip is not a valid address")

// Compile-time checks that *Store provides the contract and its capabilities.
var (
	_ store.Store            = (*Store)(nil)
	_ store.Cursors          = (*Store)(nil)
	_ store.CursorCreator    = (*Store)(nil)
	_ store.ExclusiveCreator = (*Store)(nil)
	_ store.PoolVersioner    = (*Store)(nil)
	_ store.OrderedRevisions = (*Store)(nil)
	_ store.AddressReader    = (*Store)(nil)
	_ store.ClaimLister      = (*Store)(nil)
)

// RevisionsOrdered reports true: revisions come from one counter per backend,
// and a claim's revision is handed out as it becomes visible to Owned by its
// owner's primary identity.
func (s *Store) RevisionsOrdered() bool { return true }

// Store is an in-memory store.Store that also implements store.Cursors and
// store.CursorCreator.
//
// The zero Store is not usable; create one with New, or with Open from another.
// A *Store is safe for concurrent use by multiple goroutines.
type Store struct {
	b *backend
}

// backend is the data that Stores opened from one New share. Each pool has its
// own lock, so writes to different pools do not wait for each other, and finding
// a known pool takes no lock at all (see readmap): pools are never removed.
type backend struct {
	pools  readmap.Map[*poolClaims]
	rev    atomic.Int64 // last revision handed out; 0 before the first write
	owners *owners
	watch  watchers
}

// New returns an empty Store on a fresh backend of its own.
func New() *Store {
	return &Store{b: &backend{owners: newOwners()}}
}

// Open returns a new, separate Store on the same backend as s: claims, cursors
// and revisions written through either are seen by both.
func (s *Store) Open() *Store {
	return &Store{b: s.b}
}

// pool returns the named pool, or nil if it has never been written.
func (b *backend) pool(name string) *poolClaims {
	p, _ := b.pools.Get(name)
	return p
}

// poolForWrite returns the named pool, adding it if it is new.
func (b *backend) poolForWrite(name string) *poolClaims {
	if p := b.pool(name); p != nil {
		return p
	}
	return b.pools.GetOrAdd(name, func(name string) *poolClaims {
		// A new pool starts with every watch there is (see watchers).
		return &poolClaims{name: name, chunks: make(map[blockKey]*chunk), watchers: b.watch.current()}
	})
}

// Get returns the claim for ip in pool, or an error wrapping store.ErrNotFound.
// The claim is a copy.
func (s *Store) Get(ctx context.Context, pool string, ip netip.Addr) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: get %s/%s: %w", pool, ip, err)
	}
	if !ip.IsValid() {
		return store.Claim{}, fmt.Errorf("memstore: get %s/%s: %w", pool, ip, errInvalidIP)
	}
	if p := s.b.pool(pool); p != nil {
		p.mu.Lock()
		r := p.get(ip)
		var c store.Claim
		if r != nil {
			c = p.claim(ip, r)
		}
		p.mu.Unlock()
		if r != nil {
			return c, nil
		}
	}
	return store.Claim{}, fmt.Errorf("memstore: get %s/%s: %w", pool, ip, store.ErrNotFound)
}

// ListAll returns every claim of every pool, in no particular order, in a
// new slice the caller owns; each pool's claims as they were at one moment.
func (s *Store) ListAll(ctx context.Context) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: list every claim: %w", err)
	}
	out := []store.Claim{}
	s.b.pools.Range(func(_ string, p *poolClaims) bool {
		p.mu.Lock()
		out = append(out, p.list()...)
		p.mu.Unlock()
		return true
	})
	return out, nil
}

// List returns every claim of pool, in no particular order, in a new slice the
// caller owns. An unknown pool has no claims: List returns an empty slice and no
// error.
func (s *Store) List(ctx context.Context, pool string) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: list %s: %w", pool, err)
	}
	p := s.b.pool(pool)
	if p == nil {
		return []store.Claim{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.list(), nil
}

// Create stores c if no claim exists for (c.Pool, c.IP) and returns it with its
// new Revision; c.Revision is ignored. It returns an error wrapping
// store.ErrExists if the address is already claimed, and the error of
// c.Validate, wrapped, if c is not a valid claim.
//
// Create allocates only to add a pool, to add a block of 64 addresses or a
// chunk of 8 blocks when the pool has no emptied one to reuse, to grow a
// block or the pool's map of chunks, and for the record of an address with a
// zone; see the package documentation.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, false)
}

// CreateAndSetCursor is Create followed, if Create succeeded, by
// SetCursor(c.Pool, c.IP), under one acquisition of the pool's lock: no reader
// sees the claim without the cursor, and a failed Create leaves the cursor as it
// was.
func (s *Store) CreateAndSetCursor(ctx context.Context, c store.Claim) (store.Claim, error) {
	return s.create(ctx, c, true)
}

// create is Create, and with cursor also sets the pool's cursor to c.IP if it
// succeeds.
func (s *Store) create(ctx context.Context, c store.Claim, cursor bool) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := c.Validate(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	// The claim's revision is handed out and its entry under the owner's
	// primary identity made under that identity's lock, so that revisions
	// order what Owned shows: a claim of the owner with a lower revision is
	// in the index before one with a higher revision is made
	// (RevisionsOrdered).
	id := s.b.owners.ident(c.Owner.Query())
	sh := s.b.owners.shard(id)
	p := s.b.poolForWrite(c.Pool)
	sh.mu.Lock()
	err := s.insert(p, &c, cursor)
	if err != nil {
		sh.mu.Unlock()
		return store.Claim{}, err
	}
	sh.addLocked(id, ref{p, c.IP})
	sh.mu.Unlock()
	if c.Owner.UID != "" && c.Owner.ContainerID != "" || c.Owner.Stable {
		s.b.owners.add(c.Owner, p, c.IP, id) // its other identities
	}
	return c, nil
}

// insert adds c to p, setting its new revision, and moves p's cursor to it
// if cursor is set. The caller indexes its owner.
func (s *Store) insert(p *poolClaims, c *store.Claim, cursor bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.add(c.IP)
	if r == nil {
		return fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, store.ErrExists)
	}
	c.Revision = s.b.rev.Add(1)
	*r = record{owner: c.Owner, time: c.Time, rev: c.Revision}
	p.version++
	if cursor {
		p.cursor = c.IP
	}
	if len(p.watchers) > 0 {
		p.publish(store.Event{Claim: *c})
	}
	return nil
}

// CreateExclusive is CreateAndSetCursor, unless c's owner already holds a
// claim of c.IP's family on c's interface or on none (store.Conflicts): it
// then returns a *store.HeldError with those claims and creates nothing. The
// check and the create are one atomic step with respect to every other write
// that gives the owner's primary identity a claim.
func (s *Store) CreateExclusive(ctx context.Context, c store.Claim) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := c.Validate(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	q := c.Owner.Query()
	id := s.b.owners.ident(q)
	sh := s.b.owners.shard(id)
	sh.mu.Lock()
	at := sh.lookup(id)
	if at.found {
		var buf [2]store.Claim
		held := sh.collect(at, id, q, buf[:0])
		held = slices.DeleteFunc(held, func(h store.Claim) bool { return !store.Conflicts(c, h) })
		if len(held) > 0 {
			sh.mu.Unlock()
			return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP,
				&store.HeldError{Claim: c, Held: slices.Clone(held)})
		}
		at = sh.lookup(id) // collect may have dropped stale entries
	}
	p := s.b.poolForWrite(c.Pool)
	err := s.insert(p, &c, true)
	if err != nil {
		sh.mu.Unlock()
		return store.Claim{}, err
	}
	rs := at.refs()
	rs.add(ref{p, c.IP})
	sh.store(id, at, rs)
	sh.mu.Unlock()
	if c.Owner.UID != "" && c.Owner.ContainerID != "" || c.Owner.Stable {
		s.b.owners.add(c.Owner, p, c.IP, id) // its other identities
	}
	return c, nil
}

// Owned returns every claim that q matches, in no particular order, in a new
// slice the caller owns (nil if there is none). Its cost is that of the
// claims of q's identity.
func (s *Store) Owned(ctx context.Context, q store.OwnerQuery) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: owned %s: %w", q, err)
	}
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: %w", err)
	}
	id := s.b.owners.ident(q)
	sh := s.b.owners.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.collect(sh.lookup(id), id, q, nil), nil
}

// Update replaces the claim for (c.Pool, c.IP) with c if its current revision is
// rev, and returns it with its new Revision; c.Revision is ignored. It returns an
// error wrapping store.ErrNotFound if there is no claim, store.ErrConflict if the
// revision differs, and the error of c.Validate, wrapped, if c is not a valid
// claim.
func (s *Store) Update(ctx context.Context, c store.Claim, rev int64) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := c.Validate(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s: %w", c.Pool, c.IP, err)
	}
	p := s.b.pool(c.Pool)
	if p == nil {
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s: %w", c.Pool, c.IP, store.ErrNotFound)
	}
	p.mu.Lock()
	r := p.get(c.IP)
	if r == nil {
		p.mu.Unlock()
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s: %w", c.Pool, c.IP, store.ErrNotFound)
	}
	if r.rev != rev {
		cur := r.rev
		p.mu.Unlock()
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s at revision %d (current %d): %w",
			c.Pool, c.IP, rev, cur, store.ErrConflict)
	}
	old := r.owner
	c.Revision = s.b.rev.Add(1)
	*r = record{owner: c.Owner, time: c.Time, rev: c.Revision}
	p.version++
	if len(p.watchers) > 0 {
		p.publish(store.Event{Claim: c})
	}
	p.mu.Unlock()
	s.b.owners.add(c.Owner, p, c.IP, ident{})
	s.b.owners.remove(old, p, c.IP)
	return c, nil
}

// Delete removes the claim for ip in pool if its current revision is rev. It
// returns an error wrapping store.ErrNotFound if there is no claim and
// store.ErrConflict if the revision differs.
func (s *Store) Delete(ctx context.Context, pool string, ip netip.Addr, rev int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: delete %s/%s: %w", pool, ip, err)
	}
	if !ip.IsValid() {
		return fmt.Errorf("memstore: delete %s/%s: %w", pool, ip, errInvalidIP)
	}
	p := s.b.pool(pool)
	if p == nil {
		return fmt.Errorf("memstore: delete %s/%s: %w", pool, ip, store.ErrNotFound)
	}
	p.mu.Lock()
	r := p.get(ip)
	if r == nil {
		p.mu.Unlock()
		return fmt.Errorf("memstore: delete %s/%s: %w", pool, ip, store.ErrNotFound)
	}
	if r.rev != rev {
		cur := r.rev
		p.mu.Unlock()
		return fmt.Errorf("memstore: delete %s/%s at revision %d (current %d): %w",
			pool, ip, rev, cur, store.ErrConflict)
	}
	old := r.owner
	if len(p.watchers) > 0 {
		p.publish(store.Event{Claim: p.claim(ip, r), Deleted: true})
	}
	s.b.rev.Add(1)
	p.remove(ip)
	p.version++
	p.mu.Unlock()
	s.b.owners.remove(old, p, ip)
	return nil
}

// AddressClaims returns the claims of ip in every pool. It looks in each pool
// of the backend: its cost grows with the number of pools.
func (s *Store) AddressClaims(ctx context.Context, ip netip.Addr) ([]store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: claims of %s: %w", ip, err)
	}
	if !ip.IsValid() {
		return nil, fmt.Errorf("memstore: claims of %s: %w", ip, errInvalidIP)
	}
	var out []store.Claim
	for _, p := range s.b.pools.Range {
		p.mu.Lock()
		if r := p.get(ip); r != nil {
			out = append(out, p.claim(ip, r))
		}
		p.mu.Unlock()
	}
	return out, nil
}

// PoolVersion returns the number of changes made to pool's claims so far
// (zero for a pool never written): it changes with every Create, Update and
// Delete of the pool.
func (s *Store) PoolVersion(ctx context.Context, pool string) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memstore: pool version %s: %w", pool, err)
	}
	p := s.b.pool(pool)
	if p == nil {
		return 0, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.version, nil
}

// Cursor returns the last address recorded for pool with SetCursor or
// CreateAndSetCursor, or the zero Addr if there is none.
func (s *Store) Cursor(ctx context.Context, pool string) (netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return netip.Addr{}, fmt.Errorf("memstore: cursor %s: %w", pool, err)
	}
	p := s.b.pool(pool)
	if p == nil {
		return netip.Addr{}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cursor, nil
}

// SetCursor records ip as the last address reserved in pool. Setting the zero
// Addr forgets the cursor. A cursor is a hint, not a claim: setting it does not
// change the revision.
func (s *Store) SetCursor(ctx context.Context, pool string, ip netip.Addr) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: set cursor %s to %s: %w", pool, ip, err)
	}
	p := s.b.poolForWrite(pool)
	p.mu.Lock()
	p.cursor = ip
	p.mu.Unlock()
	return nil
}
