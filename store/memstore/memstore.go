package memstore

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipamkit/ipam/store"
)

// errInvalidIP is returned, wrapped, by Get and Delete when asked about an
// address that is not valid (the zero netip.Addr).
var errInvalidIP = errors.New("ip is not a valid address")

// Compile-time checks that *Store provides the contract and its capability.
var (
	_ store.Store   = (*Store)(nil)
	_ store.Cursors = (*Store)(nil)
)

// Store is an in-memory store.Store that also implements store.Cursors.
//
// The zero Store is not usable; create one with New, or with Open from another.
// A *Store is safe for concurrent use by multiple goroutines.
type Store struct {
	b *backend
}

// backend is the data that Stores opened from one New share. Its lock guards
// only the set of pools; each pool has its own lock, so writes to different
// pools do not wait for each other.
type backend struct {
	mu    sync.RWMutex
	pools map[string]*poolClaims
	rev   atomic.Int64 // last revision handed out; 0 before the first write
}

// poolClaims holds the claims and the cursor of one pool, keyed by address.
// Pools are never removed once created, so that the map keeps its capacity and
// a pool that is drained and refilled does not allocate again.
type poolClaims struct {
	name   string
	mu     sync.Mutex
	claims map[netip.Addr]record
	cursor netip.Addr
}

// record is a stored claim without its pool and address, which are its keys.
// Leaving them out keeps a record at 112 bytes: a Go map stores values of more
// than 128 bytes (as a whole store.Claim is) out of line, one allocation each,
// and a record is stored inline.
type record struct {
	owner store.Owner
	time  time.Time
	rev   int64
}

// claim returns the claim that r records for ip in p.
func (p *poolClaims) claim(ip netip.Addr, r record) store.Claim {
	return store.Claim{Pool: p.name, IP: ip, Owner: r.owner, Time: r.time, Revision: r.rev}
}

// pool returns the named pool, or nil if it has never been written.
func (b *backend) pool(name string) *poolClaims {
	b.mu.RLock()
	p := b.pools[name]
	b.mu.RUnlock()
	return p
}

// poolForWrite returns the named pool, adding it if it is new.
func (b *backend) poolForWrite(name string) *poolClaims {
	if p := b.pool(name); p != nil {
		return p
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.pools[name]
	if p == nil {
		p = &poolClaims{name: name, claims: make(map[netip.Addr]record)}
		b.pools[name] = p
	}
	return p
}

// New returns an empty Store on a fresh backend of its own.
func New() *Store {
	return &Store{b: &backend{pools: make(map[string]*poolClaims)}}
}

// Open returns a new, separate Store on the same backend as s: claims, cursors
// and revisions written through either are seen by both.
func (s *Store) Open() *Store {
	return &Store{b: s.b}
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
		r, ok := p.claims[ip]
		p.mu.Unlock()
		if ok {
			return p.claim(ip, r), nil
		}
	}
	return store.Claim{}, fmt.Errorf("memstore: get %s/%s: %w", pool, ip, store.ErrNotFound)
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
	out := make([]store.Claim, 0, len(p.claims))
	for ip, r := range p.claims {
		out = append(out, p.claim(ip, r))
	}
	return out, nil
}

// Create stores c if no claim exists for (c.Pool, c.IP) and returns it with its
// new Revision; c.Revision is ignored. It returns an error wrapping
// store.ErrExists if the address is already claimed, and the error of
// c.Validate, wrapped, if c is not a valid claim.
//
// Create does not allocate, except to grow a pool's map or to add a pool.
func (s *Store) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	if err := ctx.Err(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	if err := c.Validate(); err != nil {
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, err)
	}
	p := s.b.poolForWrite(c.Pool)
	p.mu.Lock()
	if _, ok := p.claims[c.IP]; ok {
		p.mu.Unlock()
		return store.Claim{}, fmt.Errorf("memstore: create %s/%s: %w", c.Pool, c.IP, store.ErrExists)
	}
	c.Revision = s.b.rev.Add(1)
	p.claims[c.IP] = record{owner: c.Owner, time: c.Time, rev: c.Revision}
	p.mu.Unlock()
	return c, nil
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
	defer p.mu.Unlock()
	cur, ok := p.claims[c.IP]
	if !ok {
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s: %w", c.Pool, c.IP, store.ErrNotFound)
	}
	if cur.rev != rev {
		return store.Claim{}, fmt.Errorf("memstore: update %s/%s at revision %d (current %d): %w",
			c.Pool, c.IP, rev, cur.rev, store.ErrConflict)
	}
	c.Revision = s.b.rev.Add(1)
	p.claims[c.IP] = record{owner: c.Owner, time: c.Time, rev: c.Revision}
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
	defer p.mu.Unlock()
	cur, ok := p.claims[ip]
	if !ok {
		return fmt.Errorf("memstore: delete %s/%s: %w", pool, ip, store.ErrNotFound)
	}
	if cur.rev != rev {
		return fmt.Errorf("memstore: delete %s/%s at revision %d (current %d): %w",
			pool, ip, rev, cur.rev, store.ErrConflict)
	}
	s.b.rev.Add(1)
	delete(p.claims, ip)
	return nil
}

// Cursor returns the last address recorded for pool with SetCursor, or the zero
// Addr if there is none.
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
