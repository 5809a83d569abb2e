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
//		Interfaces: []ipam.Interface{{Name: "eth0", Pools: []string{"blue"}}},
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
// # The caller's duties
//
//   - Treat a *Pool as immutable once a PoolSource returns it; publish a new
//     value to change a pool. The Allocator rebuilds its index when the pointer
//     changes and keeps every claim.
//   - Identify owners consistently: by pod UID, or by container ID when there is
//     no pod (host-local). Asking again with the same identity and interface
//     returns the same addresses.
//   - Release what you allocate (CNI DEL), or run garbage collection: the library
//     never guesses that an owner is gone.
//
// # Determinism
//
// Every time-dependent method has a form that takes the time as an argument
// (AllocateAt, ReleaseAt); the short forms call time.Now. The package starts no
// goroutines and keeps no package-level state.
//
// # Speed
//
// Finding a free address never walks a range one address at a time: used
// addresses sit in a 64-ary tree, so the cost per allocation stays flat as a
// pool grows and fills, and IPv6 ranges of any size are never enumerated.
package ipam
