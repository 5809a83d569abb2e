package ipam

import (
	"iter"
	"slices"
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
