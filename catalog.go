package ipam

import (
	"errors"
	"fmt"
	"iter"
	"slices"

	"go4.org/netipx"
)

// PoolSource tells the Allocator which pools exist. A static list, a
// controller's informer cache or a CNI config can each provide one.
//
// Implementations must be safe for concurrent use. To change a pool, return a
// new *Pool value for its name: the Allocator notices the new pointer and
// rebuilds its index for that pool, keeping the claims.
type PoolSource interface {
	// Pool returns the pool with that name, or false.
	Pool(name string) (*Pool, bool)
	// Pools yields every pool, in a stable order.
	Pools() iter.Seq[*Pool]
}

// DefaultPoolSource is a PoolSource that lists its cluster default pools
// (those with Default set) without a scan of every pool, as an informer
// cache's index can. Select finds it by type assertion and, without it, scans
// Pools. Implementations must be safe for concurrent use, as for PoolSource.
type DefaultPoolSource interface {
	PoolSource
	// DefaultPools yields the pools with Default set, in the order Pools
	// yields them.
	DefaultPools() iter.Seq[*Pool]
}

// Catalog is a fixed set of validated pools: the simplest PoolSource. It is a
// DefaultPoolSource.
//
// The zero Catalog has no pools. A Catalog is immutable after NewCatalog and
// safe for concurrent use.
type Catalog struct {
	byName   map[string]*Pool
	order    []*Pool
	defaults []*Pool // the pools with Default set, in order
	// reserved4 and reserved6 are the addresses of WithReserved; nil if none.
	reserved4, reserved6 *netipx.IPSet
}

// NewCatalog validates the pools, alone and against each other (see
// ValidatePools), and returns a catalog of them in the order given. It returns
// every problem at once.
func NewCatalog(pools ...*Pool) (*Catalog, error) {
	if err := ValidatePools(pools); err != nil {
		return nil, err
	}
	c := &Catalog{byName: make(map[string]*Pool, len(pools)), order: slices.Clone(pools)}
	for _, p := range pools {
		c.byName[p.Name] = p
		if p.Default {
			c.defaults = append(c.defaults, p)
		}
	}
	return c, nil
}

// WithReserved returns a catalog with the same pools that also reserves the
// addresses of rs (SpiderReservedIP objects) in every pool of their family: no
// Allocator using it hands them out, and a requested reserved address is
// refused. Terminating objects reserve nothing. It returns every problem with
// rs at once. c is not changed.
func (c *Catalog) WithReserved(rs ...*ReservedIP) (*Catalog, error) {
	var errs []error
	for i, r := range rs {
		if r == nil {
			errs = append(errs, &FieldError{Object: "reservedIPs", Field: fmt.Sprintf("[%d]", i), Reason: "nil reservedIP"})
			continue
		}
		if err := r.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	d := *c
	d.reserved4, d.reserved6 = nonEmpty(ReservedSet(4, rs)), nonEmpty(ReservedSet(6, rs))
	return &d, nil
}

func nonEmpty(s *netipx.IPSet) *netipx.IPSet {
	if len(s.Ranges()) == 0 {
		return nil
	}
	return s
}

// Reserved returns the addresses WithReserved reserves in family 4 or 6, or
// nil. It makes a Catalog a ReservedSource.
func (c *Catalog) Reserved(family int) *netipx.IPSet {
	if family == 4 {
		return c.reserved4
	}
	if family == 6 {
		return c.reserved6
	}
	return nil
}

// Pool returns the named pool.
func (c *Catalog) Pool(name string) (*Pool, bool) {
	p, ok := c.byName[name]
	return p, ok
}

// Pools yields the pools in the order they were given.
func (c *Catalog) Pools() iter.Seq[*Pool] {
	return func(yield func(*Pool) bool) {
		for _, p := range c.order {
			if !yield(p) {
				return
			}
		}
	}
}

// DefaultPools yields the pools with Default set, in the order they were
// given, from an index built by NewCatalog.
func (c *Catalog) DefaultPools() iter.Seq[*Pool] {
	return func(yield func(*Pool) bool) {
		for _, p := range c.defaults {
			if !yield(p) {
				return
			}
		}
	}
}

// Len returns the number of pools.
func (c *Catalog) Len() int { return len(c.order) }
