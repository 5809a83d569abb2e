// Package memstore is the default store.Store: claims held in memory, in maps
// behind one lock.
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
// A Store also implements store.Cursors.
package memstore
