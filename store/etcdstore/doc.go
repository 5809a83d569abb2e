// Package etcdstore is a store.Store on etcd v3: address claims shared by
// every node, agent and controller that reaches the cluster, one key per
// claim, every write a transaction that etcd checks, so that no address is
// ever handed to two owners however many writers there are.
//
// It imports only the etcd client (go.etcd.io/etcd/client/v3). Its tests,
// which run real etcd members in process, live in a module of their own,
// etcdtest, so that users of this package never compile the etcd server.
//
// # Keys
//
// Every key starts with the Store's prefix (Options.Prefix, "/ipam/" by
// default), so that several clusters or tenants share one etcd. Under it:
//
//	claims/<pool>/<family>/<address>                          a claim, as JSON (store.Claim without its revision)
//	owners/<kind>/<id>/<family>/<interface>/<pool>/<address>  a copy of a claim, under one identity of its owner
//	pools/<pool>                                              the pool's record: its cursor (store.Cursors) as text, empty if none;
//	                                                          its ModRevision is the pool's version (store.PoolVersioner)
//
// <family> is 4 or 6; <address> is the address in fixed-width lower-case
// hex, 8 digits for IPv4 and 32 for IPv6, so that the keys of a pool's
// family sort in address order; <kind> is uid, name or container
// (store.IdentityKind); <id> is the pod UID, the stable owner's
// "namespace/name" or the container ID. In <pool>, <id> and <interface>,
// "%" is written "%25" and "/" is written "%2F", so that no segment holds a
// "/": pool p1 never lists the claims of pool p10, nor of p1/x. An empty
// interface is an empty segment. For example, with the default prefix, pod
// UID 1234's claim of 10.0.0.7 in pool blue on eth0 is
// /ipam/claims/blue/4/0a000007, copied at /ipam/owners/uid/1234/4/eth0/blue/0a000007.
// Addresses with an IPv6 zone are refused: no pool hands them out.
//
// # Writes
//
// Every write is one etcd transaction of the claim, a copy of it under each
// identity of its owner (store.Owner.Identities) and the pool's record: a
// pod's claim is three keys. CreateAndSetCursor and CreateExclusive put the
// new address in the pool's record; the other writes put it with its value
// kept, so that its ModRevision moves and its cursor stays. Create puts them
// if the claim key has no version; CreateExclusive also compares, in the same
// transaction, the key ranges of its owner's primary identity that would
// conflict (its family, on its interface and on none), so that checking what
// the owner holds costs no extra round trip. The pool's record is put without
// a comparison, so it never causes a conflict, and never deleted, so that the
// records name every pool that has had a claim. Update and Delete replace or remove the claim and its copies if
// the claim's ModRevision is the revision the caller names. To remove the
// copies of the owner it replaces, an Update or Delete needs that owner: it
// knows it without asking when the same Store read or wrote the claim at that
// revision lately (it keeps the last few thousand), and reads the claim first
// otherwise. A claim's Revision is its key's ModRevision: etcd's revision,
// cluster-wide and never reused, so a stale Delete never removes a claim
// created again at the same address.
//
// No key has a lease: a claim outlives its writer, so an agent that restarts,
// or is cut off from etcd, never frees a running pod's address.
//
// # Reads
//
// Get, Owned, Cursor, PoolVersion and Count (store.Counter: a count-only range over the
// pool's claim keys, which sends no key) are one linearizable read each: they see every write
// that completed before they were called, through any client. AddressClaims
// (store.AddressReader) gets the claim key of the address in every pool that
// has a record, in read-only transactions of up to 128 keys, etcd's default
// limit; the Store remembers the pools it has read the records of, and each
// transaction checks that no record was created since (and reads them again
// if one was), so that a pool's first claim is never missed. Owned reads the
// copies under the owner's identity, so its cost is that of the owner's claims.
// List reads a pool in pages of Options.ListPageSize keys, every page at the
// revision of the first, so that a pool of any size is listed as it was at
// one instant; if etcd compacts that revision away meanwhile, List starts
// over, at most three times.
//
// # Watch
//
// Watch (store.Watcher) lists every claim under the prefix as List does, then
// follows etcd's watch from the next revision. When the stream breaks, it
// resumes from the revision after the last change it passed on; only when
// that revision has been compacted does it list again and Reset its handler.
// The handler's view is a hint: claims are still made with conditional
// writes.
//
// # Unavailability
//
// Every request to etcd is bounded by Options.Timeout, and by its context's
// deadline when that comes sooner. A cluster without quorum does not refuse
// requests, it leaves them waiting: such a request fails when its time runs
// out, with an error wrapping ErrUnavailable and the cause
// (context.DeadlineExceeded, etcd's "no leader", a refused connection). A
// CNI plugin maps ErrUnavailable to its code 11, "try again later". A write
// that fails so may have been applied all the same, even some time after
// the failure: a member that took the request before the client gave up
// commits it once the cluster has a leader again. An owner that asks again
// finds what it holds (store.Store.Owned), and a release finds it once it is
// applied; a release made at once, while the cluster recovers, may come
// before it, and the claim then stays until the owner is released again or
// a GC finds it (TestFaults of etcdtest saw this on a loaded machine). When a
// member refuses the client's TLS certificate, the error says which
// authorities it accepts.
//
// # Corrupt records
//
// A key under the prefix that does not hold what its name says (a value that
// is not a claim, a claim of another address, a key outside the layout) is
// reported by List and Owned with the claims they could read, in an error
// that joins a *CorruptError for each, naming the key and its revision; Get
// returns its *CorruptError. Its address stays taken (Create of it fails with
// store.ErrExists) until a repair tool Updates or Deletes it at that revision.
//
// # Configuration
//
// Options configure a Store from Go; Config is the same as JSON, for a
// configuration file such as a CNI network config's "etcd" section, with TLS
// as file names; NewFromConfig makes a Store from it. New does not wait for a
// connection, so a program that starts per request (a CNI plugin) pays for
// connecting once, with its first request.
package etcdstore
