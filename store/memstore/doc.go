// Package memstore is the default store.Store: claims held in memory, each pool's
// behind a lock of its own.
//
// A Store is safe for concurrent use by multiple goroutines. Its data lives only as
// long as the process: nothing is written to disk, and a restarted process starts
// with no claims. Use it for a single process that owns its pools, for tests, and as
// the reference against which other implementations are compared (it passes the
// conformance suite in package storetest).
//
// New creates a store with its own backend. Open returns another, separate Store
// on the same backend, sharing claims, cursors and revisions, the way two clients
// share one etcd cluster; tests use it to race two Store instances for one address.
//
// Revisions come from one counter per backend, incremented by every successful
// Create, Update and Delete, as etcd's revision is. A revision is therefore never
// reused, not even for a claim deleted and created again, so a stale Delete or
// Update can never touch the new holder's claim.
//
// A Store also implements store.Cursors and store.CursorCreator (its
// CreateAndSetCursor creates a claim and moves the pool's cursor under one
// acquisition of the pool's lock), store.ExclusiveCreator (the owner's check
// and the create under the lock of the owner's identity, then the pool's) and
// store.Watcher. Owned finds an owner's claims through an index by identity
// (pod UID, stable namespace/name, container ID), split into shards with a
// lock each, so its cost is that of the owner's claims.
//
// # Cost
//
// A pool keeps its claims in blocks of 64 consecutive addresses, so an allocator
// that claims addresses in order, as a round-robin through a range does, finds
// the claim or the free slot it wants in a block it used a moment ago: Create,
// Get and Delete cost about the same with a million claims in the pool as with a
// hundred. Blocks are found through chunks of eight, in a map small enough to
// stay in the processor's caches for a pool of a million addresses; addresses
// in no order cost one lookup in that map each, as they would in a plain map.
// Finding a pool by name takes no lock.
//
// A claim costs its record, about 120 bytes on a 64-bit platform (plus its
// owner's strings, which are the caller's), the share of its block, which is
// small when the block is full, and its owner's entries in the owner index:
// about 320 bytes a claim in all for consecutive addresses each held by a pod of
// its own, about 610 for a claim alone in its block and chunk, as a scattered
// IPv6 address is. An owner holding more than a few claims (a reservation, a VM)
// gets an index of them, about 100 bytes a claim, so that creating and
// deleting one of its claims costs the same whether it holds ten or a million.
// Memory grows with the number of claims, never with the span of
// addresses they are scattered over, and is not given back: the blocks that
// Deletes empty are kept, with the room they had grown, and reused for later
// claims of the same pool. Pools are never removed; adding one copies the set of
// pools, which is cheap for the tens or hundreds of pools a deployment has.
//
// Create allocates only to add a pool, to add a block or a chunk when the
// pool has no emptied one to reuse, to grow a block's records (by doubling)
// and to grow the pool's map of chunks. A pool that is drained and refilled, or an
// allocator claiming and releasing addresses at a steady rate, does not allocate.
// Get, Update and Delete do not allocate, except for the error they return.
//
// Addresses with an IPv6 zone (fe80::1%eth0), which no pool's prefix contains,
// are stored too, apart from the others, one hash-map entry and one allocated
// record each, and are distinct from the same address without a zone or with
// another.
package memstore
