package ipam

// KnownUsed returns how many addresses a's index of pool knows to be used
// (without those in quarantine), and whether it has a view of the whole pool;
// zero and false for a pool not loaded.
func KnownUsed(a *Allocator, pool string) (uint64, bool) {
	idx := a.indexFor(pool)
	if idx == nil || idx.def.Load() == nil {
		return 0, false
	}
	idx.mu.Lock()
	defer idx.mu.Unlock()
	return idx.tree.used.lo - uint64(len(idx.quarUntil)), idx.complete
}
