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
// however many are added one by one. The entries found last are
// remembered, in a few slots picked by a name's length and a few of its
// bytes: its users look a few names up many times over (an allocator
// serving one pool, or taking turns among a handful), and comparing a name
// costs less than hashing it and probing a map.
type Map[V any] struct {
	read   atomic.Pointer[map[string]*entry[V]]
	recent [recentSlots]atomic.Pointer[entry[V]]
	mu     sync.Mutex
	dirty  map[string]*entry[V] // entries not yet in read
}

// recentSlots is the number of entries Map remembers; a power of 2.
const recentSlots = 16

// slot returns the slot of Map.recent that remembers name. It reads at most
// three bytes: names that differ only elsewhere share a slot, and take turns.
func slot(name string) int {
	n := len(name)
	if n == 0 {
		return 0
	}
	h := uint(n)*0x9e37 ^ uint(name[n-1])*0x85eb ^ uint(name[n/2])*0xc2b3 ^ uint(name[0])
	return int(h^h>>7) & (recentSlots - 1)
}

// entry is one name and its value, made once by GetOrAdd.
type entry[V any] struct {
	name string
	v    V
}

// settled returns the entry of name if its slot of recent remembers it or
// the settled map holds it, or nil.
func (m *Map[V]) settled(name string) *entry[V] {
	last := &m.recent[slot(name)]
	if e := last.Load(); e != nil && e.name == name {
		return e
	}
	if r := m.read.Load(); r != nil {
		if e := (*r)[name]; e != nil {
			last.Store(e)
			return e
		}
	}
	return nil
}

// Get returns the value for name, or the zero V and false.
func (m *Map[V]) Get(name string) (V, bool) {
	if e := m.settled(name); e != nil {
		return e.v, true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// A merge since the read above may have moved name out of dirty.
	if r := m.read.Load(); r != nil {
		if e := (*r)[name]; e != nil {
			return e.v, true
		}
	}
	if e := m.dirty[name]; e != nil {
		return e.v, true
	}
	var zero V
	return zero, false
}

// GetOrAdd returns the value for name, adding newV(name) first if there is
// none. newV runs with the Map's lock held and must not use the Map.
func (m *Map[V]) GetOrAdd(name string, newV func(string) V) V {
	if e := m.settled(name); e != nil {
		return e.v
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var read map[string]*entry[V]
	if r := m.read.Load(); r != nil {
		read = *r
		if e := read[name]; e != nil { // merged since it was read above
			return e.v
		}
	}
	if e := m.dirty[name]; e != nil {
		return e.v
	}
	e := &entry[V]{name: name, v: newV(name)}
	if m.dirty == nil {
		m.dirty = make(map[string]*entry[V])
	}
	m.dirty[name] = e
	if len(m.dirty) >= len(read)/4+1 {
		merged := make(map[string]*entry[V], len(read)+len(m.dirty))
		maps.Copy(merged, read)
		maps.Copy(merged, m.dirty)
		m.read.Store(&merged)
		clear(m.dirty)
	}
	return e.v
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
		for k, e := range *r {
			if !f(k, e.v) {
				return
			}
		}
	}
	for k, e := range dirty {
		if !f(k, e.v) {
			return
		}
	}
}
