package ipamtest

import (
	"iter"
	"slices"
	"sync"

	"github.com/ipamkit/ipam"
)

// Source is an ipam.PoolSource that is not an *ipam.Catalog: its pools may
// overlap, and may be redefined, added and removed at any time, as
// SpiderIPPools are. An Allocator on it checks each new claim against the
// address's claims in the other pools (store.AddressReader). It is safe for
// concurrent use.
type Source struct {
	mu    sync.Mutex
	pools []*ipam.Pool
}

// NewSource returns a Source of pools, in that order.
func NewSource(pools ...*ipam.Pool) *Source {
	return &Source{pools: slices.Clone(pools)}
}

// Pool returns the pool named name, or false.
func (s *Source) Pool(name string) (*ipam.Pool, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.index(name); i >= 0 {
		return s.pools[i], true
	}
	return nil, false
}

// Pools yields the pools as they are when it is called.
func (s *Source) Pools() iter.Seq[*ipam.Pool] {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Values(slices.Clone(s.pools))
}

// Set replaces the pool of p's name with p, or adds p at the end.
func (s *Source) Set(p *ipam.Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.index(p.Name); i >= 0 {
		s.pools[i] = p
		return
	}
	s.pools = append(s.pools, p)
}

// Remove drops the pool named name, if there is one.
func (s *Source) Remove(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.index(name); i >= 0 {
		s.pools = slices.Delete(s.pools, i, i+1)
	}
}

// index returns the position of the pool named name, or -1. Called with mu
// held.
func (s *Source) index(name string) int {
	return slices.IndexFunc(s.pools, func(p *ipam.Pool) bool { return p.Name == name })
}
