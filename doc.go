// Package ipam decides which address a pod interface gets, from which pool, and
// records the claim in a pluggable Store. Its behaviour follows two systems that
// Kubernetes users already run, so that switching is free of surprises:
//
//   - CNI host-local: range sets over disjoint subnets with host-local's defaults
//     (start = network+1, the gateway skipped, the IPv4 broadcast excluded),
//     round-robin from the last reserved address, requested addresses, and one
//     address per range set.
//   - Spiderpool: SpiderIPPool specs (subnet, ips, excludeIPs, gateway, routes,
//     vlan, affinities), the lowest-free address choice, and its admission rules.
//
// # Using it
//
// Describe pools (ParsePool accepts a SpiderIPPool spec or a host-local range
// set), put them in a PoolSource such as a Catalog, and make an Allocator:
//
//	cat, err := ipam.NewCatalog(pools...)
//	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat})
//	res, err := alloc.Allocate(ctx, ipam.Request{
//		Namespace: "default", Name: "web-0", UID: uid,
//		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}},
//	})
//	...
//	err = alloc.Release(ctx, store.Owner{UID: uid})
//
// Without a Store the Allocator keeps claims in memory (package
// store/memstore). Claims are one record per address, written only by
// create-if-absent and revision-checked updates, so any number of Allocators,
// in one process or many, can share a Store and never hand one address to two
// owners.
//
// SpiderSubnet, the pools Spiderpool creates per application from a subnet
// (auto-pools), lives in package github.com/ipamkit/ipam/subnet: its Manager
// is the PoolSource (and AppPoolSource) an Allocator serves them from. This
// package keeps what selection needs of them: the pod's application
// (Request.App, AppRef) and how an auto-pool admits it (IsAutoPool).
//
// # The Store is the one truth
//
// An Allocator remembers nothing an answer depends on. Which addresses an
// owner holds is asked of the Store (store.Store's Owned) on every Allocate,
// Release and Lookup, so a pod served by one Allocator is found by any other:
// a CNI plugin that starts per call, the agents of many nodes, the replicas of
// a controller. What an Allocator keeps per pool is a hint: which addresses it
// knows to be used and where round-robin resumes. A new Allocator reads only
// the pool's cursor and probes forward from it with conditional creates, so
// its first allocation costs O(1) Store calls with round-robin (lowest-free
// needs the whole pool once: one List); a create that finds the address taken
// teaches the hint, a few in a row make it List the pool, and ErrExhausted is
// said only after a List taken during the call agrees. Follow keeps the hints
// current from a Store that can watch. A pool that shares addresses with
// another pool of its PoolSource is refused (ErrOverlap): claims are keyed by
// pool and address, and the refusal is what keeps one address from two
// owners whatever a PoolSource returns.
//
// # The caller's duties
//
//   - Treat a *Pool as immutable once a PoolSource returns it; publish a new
//     value to change a pool, and keep the same value while it does not
//     change. The Allocator starts its hint for the pool afresh when the
//     pointer changes; the claims stay in the Store.
//   - Give Allocators that share a Store PoolSources that agree: an
//     Allocator refuses a pool that overlaps another pool of its own source,
//     not one that only another Allocator's source holds.
//   - Identify owners consistently: by pod UID, or by container ID when there is
//     no pod (host-local). Asking again with the same identity and interface
//     returns the same addresses.
//   - Release what you allocate (CNI DEL), or run garbage collection: the library
//     never guesses that an owner is gone.
//
// # Reading one Allocate
//
// The files, in the order one Allocate walks through them:
//
//  1. ipam.go: Request, Result, Options; NewAllocator, which settles once
//     how the Allocator uses its Store from the capabilities the Store offers
//     (storeplan.go).
//  2. allocate.go: Allocate validates the request and makes one task per
//     interface and pool named, or per interface and family selected.
//  3. selector.go, filter.go, sort.go: for an interface that names no pools,
//     the candidate chain (Select), the filters (Filter) and the priority
//     order (Sort); pool.go and labels.go hold the pools and selectors they
//     read, catalog.go the PoolSource they come from.
//  4. holdings.go: what the owner holds already (Store.Owned), reused when it
//     serves a task.
//  5. allocate.go's claim: for each task, pick an address, create its claim,
//     check that it stands; settle (holdings.go) a race with another call for
//     the same owner.
//  6. poolindex.go: each pool's hint, which picks the address (reserve), and
//     learns from the Store (fill, a List) when it is stale or full;
//     layout.go numbers a pool's addresses and keeps the used ones in a
//     64-ary tree; addr.go names the 128-bit arithmetic (internal/u128) under both.
//  7. release.go: Release, Lookup and what a failed call gives back;
//     follow.go keeps the hints current from a Store's watch.
//
// errors.go lists the errors each step returns.
//
// # Determinism
//
// Every time-dependent method has a form that takes the time as an argument
// (AllocateAt, ReleaseAt); the short forms call time.Now. The package starts no
// goroutines and keeps no package-level state: Follow blocks in the caller's
// goroutine.
//
// # Speed
//
// Finding a free address never walks a range one address at a time: used
// addresses sit in a 64-ary tree, so the cost per allocation stays flat as a
// pool grows and fills, and IPv6 ranges of any size are never enumerated.
package ipam
