// Package readmap provides a map from names to values that is read far more
// often than it grows and never shrinks, such as a set of pools: lookups of
// settled entries take no lock, and adding n entries one by one copies O(n)
// entries in all.
package readmap

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Map maps names to values. Entries are never removed or replaced. The zero Map
// is empty and ready to use; a Map must not be copied after first use.
//
// Most lookups read an immutable map without a lock. New entries go to a small
// locked overlay, merged into a new immutable map once the overlay holds a
// quarter as many entries, so each entry is copied O(1) times on average
// however many are added one by one.
type Map[V any] struct {
	read  atomic.Pointer[map[string]V]
	mu    sync.Mutex
	dirty map[string]V // entries not yet in read
}

// Get returns the value for name, or the zero V and false.
func (m *Map[V]) Get(name string) (V, bool) {
	if r := m.read.Load(); r != nil {
		if v, ok := (*r)[name]; ok {
			return v, true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A merge since the read above may have moved name out of dirty.
	if r := m.read.Load(); r != nil {
		if v, ok := (*r)[name]; ok {
			return v, true
		}
	}
	v, ok := m.dirty[name]
	return v, ok
}

// GetOrAdd returns the value for name, adding newV(name) first if there is
// none. newV runs with the Map's lock held and must not use the Map.
func (m *Map[V]) GetOrAdd(name string, newV func(string) V) V {
	seen := m.read.Load()
	if seen != nil {
		if v, ok := (*seen)[name]; ok {
			return v
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var read map[string]V
	if r := m.read.Load(); r != nil {
		read = *r
		if r != seen { // merged since it was read above
			if v, ok := read[name]; ok {
				return v
			}
		}
	}
	if v, ok := m.dirty[name]; ok {
		return v
	}
	v := newV(name)
	if m.dirty == nil {
		m.dirty = make(map[string]V)
	}
	m.dirty[name] = v
	if len(m.dirty) >= len(read)/4+1 {
		merged := make(map[string]V, len(read)+len(m.dirty))
		maps.Copy(merged, read)
		maps.Copy(merged, m.dirty)
		m.read.Store(&merged)
		clear(m.dirty)
	}
	return v
}

// Range calls f for every entry, in no particular order, until f returns
// false. Entries added meanwhile may or may not be seen.
func (m *Map[V]) Range(f func(name string, v V) bool) {
	// Read both under the lock: a merge between the two reads would move
	// entries out of dirty into a read map this Range never sees.
	m.mu.Lock()
	r := m.read.Load()
	dirty := maps.Clone(m.dirty)
	m.mu.Unlock()
	if r != nil {
		for k, v := range *r {
			if !f(k, v) {
				return
			}
		}
	}
	for k, v := range dirty {
		if !f(k, v) {
			return
		}
	}
}
