package ipam

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"time"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/store"
)

// This file reports how full pools are: per pool, its capacity and how much
// of it is reserved, allocated, quarantined and free, from the Store's count
// of claims and the pool's definition.

// Size is a number of addresses, from 0 to 2^128-1: an IPv6 pool's capacity
// exceeds every Go integer type (a /64 has 2^64 addresses, one more than
// uint64 holds), so Size keeps 128 bits and converts on demand. A number of
// addresses beyond 2^128-1 (only ::/0 has more) is kept as 2^128-1.
//
// The zero Size is 0. A Size is a plain value, safe to copy and compare
// with ==.
type Size struct{ u u128 }

// sizeFrom returns the Size n.
func sizeFrom(n uint64) Size { return Size{u128{Lo: n}} }

// Uint64 returns s as a uint64, and false if s exceeds math.MaxUint64 (the
// value is then math.MaxUint64).
func (s Size) Uint64() (uint64, bool) {
	if s.u.Hi != 0 {
		return math.MaxUint64, false
	}
	return s.u.Lo, true
}

// Float64 returns s as the nearest float64, as a metric reports it.
func (s Size) Float64() float64 {
	return float64(s.u.Hi)*(1<<64) + float64(s.u.Lo)
}

// Big returns s as a new big.Int.
func (s Size) Big() *big.Int {
	b := new(big.Int).SetUint64(s.u.Hi)
	return b.Lsh(b, 64).Or(b, new(big.Int).SetUint64(s.u.Lo))
}

// IsZero reports whether s is 0.
func (s Size) IsZero() bool { return s.u.IsZero() }

// Compare returns -1, 0 or +1 as s is less than, equal to or greater than t.
func (s Size) Compare(t Size) int { return s.u.Cmp(t.u) }

// String returns s in decimal.
func (s Size) String() string { return s.u.String() }

// Add returns s+n, kept at 2^128-1 if it would exceed it. From the zero
// Size, it makes one of a count: ipam.Size{}.Add(254).
func (s Size) Add(n uint64) Size { return s.plus(sizeFrom(n)) }

// minus returns s-n, or 0 if n exceeds s.
func (s Size) minus(n Size) Size {
	if s.u.Less(n.u) {
		return Size{}
	}
	return Size{s.u.Sub(n.u)}
}

// plus returns s+n, kept at 2^128-1 if it would exceed it.
func (s Size) plus(n Size) Size {
	r := s.u.Add(n.u)
	if r.Less(s.u) {
		return Size{u128Max}
	}
	return Size{r}
}

// addrCount returns the number of addresses of set.
func addrCount(set *netipx.IPSet) Size {
	var n Size
	for _, r := range set.Ranges() {
		n = n.plus(Size{rangeSpan(r.From(), r.To())}).plus(sizeFrom(1))
	}
	return n
}

// Usage is how one pool's addresses are used. The figures are:
//
//   - Capacity: the addresses the pool's range set (host-local's ranges, or
//     a SpiderIPPool's ips) can hand out, without its excludeIPs and its
//     gateways, which are never handed out and never counted. This is the
//     "total" a user compares the other figures with.
//   - Reserved: the addresses of Capacity that the cluster reserves
//     (SpiderReservedIP objects, a ReservedSource): not handed out while
//     the reservation lasts.
//   - Allocated: the pool's claims in the Store, counted by the Store
//     (store.Count). It counts every claim, including one on an address
//     reserved after it was claimed or one the pool's range set no longer
//     covers (the pool was redefined), until it is released.
//   - Quarantined: the addresses of Capacity, not reserved, that the
//     Allocator reporting the usage holds back after a release
//     (Options.Quarantine). The quarantine is each Allocator's own, so
//     another Allocator on the same Store may report another number; one
//     without a quarantine reports 0.
//   - Free: Capacity - Reserved - Allocated - Quarantined, or 0 if that is
//     negative: the addresses a new owner could get. A claim counted in
//     Allocated that is also reserved or outside Capacity makes Free lower
//     than the truth by one until it is released.
//
// The zero Usage is an unnamed pool with nothing. A Usage is a plain value.
type Usage struct {
	Pool string
	// Family is 4 or 6.
	Family int
	// Subnet is the pool's subnet (a SpiderIPPool's, or the first range's
	// for a host-local range set).
	Subnet      netip.Prefix
	Capacity    Size
	Reserved    Size
	Allocated   int
	Quarantined int
	Free        Size
}

// UsageOf returns the usage of pool p, with the cluster's reserved addresses
// of its family (nil for none), and the numbers of allocated and quarantined
// addresses counted elsewhere (see Usage for what each counts). It returns
// the pool's validation error if p is not valid.
func UsageOf(p *Pool, reserved *netipx.IPSet, allocated, quarantined int) (Usage, error) {
	if p == nil {
		return Usage{}, &FieldError{Object: "usage", Field: "pool", Reason: "nil pool"}
	}
	if err := p.Validate(); err != nil {
		return Usage{}, err
	}
	if allocated < 0 {
		return Usage{}, &FieldError{Object: p.object(), Field: "allocated", Value: fmt.Sprint(allocated), Reason: "must not be negative"}
	}
	if quarantined < 0 {
		return Usage{}, &FieldError{Object: p.object(), Field: "quarantined", Value: fmt.Sprint(quarantined), Reason: "must not be negative"}
	}
	capSet := capacitySet(p)
	u := usageOf(p, capSet, reserved)
	u.Allocated, u.Quarantined = allocated, quarantined
	u.Free = u.free()
	return u, nil
}

// capacitySet returns the addresses of Capacity: the range set less each
// range's gateway and the excluded addresses, as the Allocator's layout has
// them. p must be valid.
func capacitySet(p *Pool) *netipx.IPSet {
	rs, _ := p.RangeSet()
	var b netipx.IPSetBuilder
	for _, r := range rs {
		var rb netipx.IPSetBuilder
		rb.AddRange(r.IPRange())
		rb.Remove(r.Gateway)
		s, _ := rb.IPSet()
		b.AddSet(s)
	}
	for _, r := range p.ExcludeIPs {
		b.RemoveRange(r)
	}
	s, _ := b.IPSet()
	return s
}

// usageOf returns the usage of p without the counts: its name, family,
// subnet, Capacity (of capSet) and Reserved.
func usageOf(p *Pool, capSet, reserved *netipx.IPSet) Usage {
	u := Usage{Pool: p.Name, Family: p.Family(), Subnet: p.Subnet, Capacity: addrCount(capSet)}
	if !u.Subnet.IsValid() && len(p.Ranges) > 0 {
		u.Subnet = p.Ranges[0].Subnet
	}
	if reserved != nil {
		var b netipx.IPSetBuilder
		b.AddSet(capSet)
		b.Intersect(reserved)
		r, _ := b.IPSet()
		u.Reserved = addrCount(r)
	}
	return u
}

// free returns Capacity - Reserved - Allocated - Quarantined, or 0.
func (u Usage) free() Size {
	return u.Capacity.minus(u.Reserved).minus(sizeFrom(uint64(u.Allocated))).minus(sizeFrom(uint64(u.Quarantined)))
}

// PoolUsage returns the usage of the named pool at time now (which ends
// quarantines): its definition from the PoolSource, its claims counted by
// the Store (one Count where the Store is a store.Counter, else a List),
// and this Allocator's quarantine. It returns an error wrapping ErrNotFound
// if the PoolSource has no such pool, and the Store's error if it cannot
// count (a List that finds unreadable records among them).
func (a *Allocator) PoolUsage(ctx context.Context, name string, now time.Time) (Usage, error) {
	if ctx == nil {
		return Usage{}, errNilContext
	}
	p, ok := a.source.Pool(name)
	if !ok {
		return Usage{}, fmt.Errorf("pool %q: %w", name, ErrNotFound)
	}
	return a.poolUsage(ctx, p, now, nil)
}

// usagePage is the page size of Usage's one pass over every claim of a
// Store that is a store.ClaimPager and no store.Counter: kubectl's.
const usagePage = 500

// Usage returns the usage of every pool of the PoolSource at time now, in
// the order the PoolSource yields them (see PoolUsage). A pool that is not
// valid is left out; a Store that cannot count a pool fails the call.
//
// A Store that is a store.Counter counts each pool. One that is no Counter
// but a store.ClaimPager (a *kubestore.Store) has every pool's claims
// counted in one paged pass over every claim of the Store, rather than a
// List of each pool (on Kubernetes, a label-selector list that costs the
// API server every IPClaim of the cluster, once per pool); an unreadable
// record anywhere in the Store then fails the call, as a List of its pool
// does. Other Stores have each pool listed.
func (a *Allocator) Usage(ctx context.Context, now time.Time) ([]Usage, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	var counts map[string]int
	if pager, ok := a.store.(store.ClaimPager); ok {
		if _, counter := a.store.(store.Counter); !counter {
			var err error
			if counts, err = countPages(ctx, pager); err != nil {
				return nil, fmt.Errorf("usage: %w", err)
			}
		}
	}
	var out []Usage
	for p := range a.source.Pools() {
		if p.Validate() != nil {
			continue
		}
		u, err := a.poolUsage(ctx, p, now, counts)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// countPages returns the number of claims of each pool of pager's Store, in
// one pass over its claims in pages of usagePage, or pager's error (with
// unreadable records, wrapping store.ErrCorrupt). A pool without claims is
// absent from the map.
func countPages(ctx context.Context, pager store.ClaimPager) (map[string]int, error) {
	counts := make(map[string]int)
	err := pager.ClaimPages(ctx, usagePage, func(page []store.Claim) error {
		for _, c := range page {
			counts[c.Pool]++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting the claims of every pool: %w", err)
	}
	return counts, nil
}

// poolUsage returns the usage of p at now, its claims counted from counts
// if it is not nil (a pool absent from it has none), else by the Store.
func (a *Allocator) poolUsage(ctx context.Context, p *Pool, now time.Time, counts map[string]int) (Usage, error) {
	if err := p.Validate(); err != nil {
		return Usage{}, err
	}
	var reserved *netipx.IPSet
	if rs, ok := a.source.(ReservedSource); ok {
		reserved = rs.Reserved(p.Family())
	}
	capSet := capacitySet(p)
	u := usageOf(p, capSet, reserved)
	if counts != nil {
		u.Allocated = counts[p.Name]
	} else {
		n, err := store.Count(ctx, a.store, p.Name)
		if err != nil {
			return Usage{}, fmt.Errorf("pool %q: usage: %w", p.Name, err)
		}
		u.Allocated = n
	}
	if idx := a.indexFor(p.Name); idx != nil {
		u.Quarantined = idx.quarantinedAt(now, capSet, reserved)
	}
	u.Free = u.free()
	return u, nil
}

// quarantinedAt returns how many addresses of capSet, not in reserved (which
// may be nil), idx keeps in quarantine at now.
func (idx *poolIndex) quarantinedAt(now time.Time, capSet, reserved *netipx.IPSet) int {
	idx.mu.Lock()
	defer idx.mu.Unlock()
	n := 0
	for ip, until := range idx.quarUntil {
		if until.After(now) && capSet.Contains(ip) && (reserved == nil || !reserved.Contains(ip)) {
			n++
		}
	}
	return n
}
