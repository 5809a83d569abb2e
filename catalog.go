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

// Catalog is a fixed set of validated pools: the simplest PoolSource.
//
// The zero Catalog has no pools. A Catalog is immutable after NewCatalog and
// safe for concurrent use.
type Catalog struct {
	byName map[string]*Pool
	order  []*Pool
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

// Len returns the number of pools.
func (c *Catalog) Len() int { return len(c.order) }
