package ipam

import "go4.org/netipx"

// Test-only views of unexported functions, for the black-box tests.
var (
	SizeFrom                = sizeFrom
	Rank                    = priorityRank
	ComparePriority         = comparePriority
	Expand                  = expand
	FullyExcluded           = fullyExcluded
	FullyReserved           = fullyReserved
	ParseNetworksAnnotation = parseNetworksAnnotation
)

// ParseIPRange parses a single address ("10.0.0.5") or an inclusive range
// ("10.0.0.5-10.0.0.9"), the forms SpiderIPPool's ips and excludeIPs take.
func ParseIPRange(s string) (netipx.IPRange, error) {
	r, reason := parseIPRange(s)
	if reason != "" {
		return netipx.IPRange{}, &FieldError{Field: "ip range", Value: s, Reason: reason}
	}
	return r, nil
}

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
	return idx.tree.used.Lo - uint64(len(idx.quarUntil)), idx.complete
}
