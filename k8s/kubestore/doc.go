// Package kubestore is a store.Store on the Kubernetes API: each claim is a
// cluster-scoped custom resource, an IPClaim (ipam.ipamkit.io/v1alpha1), so
// the API server, and the etcd behind it, decides which of two allocators
// gets an address. It is the shared store for clusters whose etcd is out of
// reach, as on managed Kubernetes.
//
// Apply the CustomResourceDefinitions in the repository's k8s/config/crd
// (IPClaim and IPCursor; package crd embeds them) before using a Store.
//
// # Objects
//
// One IPClaim per claimed address, with no shared object on the write path:
// a Create is one POST, and two allocators race only when they want the same
// address, as with Kubernetes' own IPAddress objects for Service IPs. The
// name is made from the pool and the address (ClaimName: "blue.10.0.0.1", an
// IPv6 address as eight dash-joined groups of four hex digits), so the API
// server's uniqueness of names is the uniqueness of claims: a second Create
// of an address gets AlreadyExists, store.ErrExists. A pool name that is not
// a DNS-1123 subdomain, or too long, is replaced by its hash in the name; the
// real name is always in spec.pool. The objects are cluster-scoped because
// names are unique only within one scope.
//
// Labels find a pool's claims (LabelPool), an address's claims in every pool
// (LabelIP, for store.AddressReader) and an owner's, by each of its
// identities: pod UID (LabelUID), a stable owner's namespace and name
// (LabelStable) and container ID (LabelContainer). A value that is not a
// valid label value (container IDs are 64 hex digits, over the limit of 63)
// is replaced by its hash; readers check the spec of what they find, so a
// hash collision costs a skipped object, never a wrong answer.
//
// # Revisions
//
// A Claim's Revision is the object's metadata.resourceVersion, which Update
// and Delete send back as their precondition (Delete also names the object's
// UID when this Store has seen it at that revision). The API declares
// resourceVersion an opaque string; the Store reads it as a decimal int64,
// which is what it is: the API server's etcd3 storage writes etcd's revision
// in decimal, and its own versioner parses it back with strconv.ParseUint.
// etcd's revision counts the writes of the whole store, so a
// resourceVersion is never given to two versions of an object, nor to an
// object deleted and created again under the same name: a Delete or Update at a stale revision
// gets a conflict (store.ErrConflict), never the new holder's claim. The
// conversion is exact both ways (the Store formats the int64 back to the
// same decimal string), so equality, the only thing the contract asks of
// revisions, is preserved. An object whose resourceVersion is not a positive
// decimal is reported as corrupt (a *CorruptError naming
// metadata.resourceVersion) rather than given a made-up revision, so a
// storage that breaks this assumption fails loudly. Widening Revision to an
// opaque string in package store would change every store and the allocator
// for no storage that exists today.
//
// # Reads
//
// Every answer that decides ownership reflects every write completed before
// the call, through any client. Get reads the object from etcd (a quorum
// read). List, Owned, AddressClaims and Cursor make consistent lists with a label selector,
// which the API server serves from its watch cache once the cache has caught
// up with etcd's current revision (consistent reads from cache, KEP-2340, GA
// in Kubernetes 1.34).
//
// OwnedAtLeast and AddressClaimsAtLeast, which an Allocator asks after its
// own create, need less: every write up to the create's revision. While a
// Watch of the Store runs (Allocator.Follow keeps one), the Store keeps what
// the watch reported, indexed by owner and by address, and answers from it without a request as soon as the
// watch has brought that revision: its events come in revision order.
// Without a running Watch, it lists with resourceVersionMatch NotOlderThan,
// which the API server's cache serves as soon as it holds the revision.
//
// A cache in the client cannot give what Owned must: without asking the
// server it cannot know whether it has seen the writes another client has
// just made (the server sends watch bookmarks about once a minute), and
// asking costs the same round trip as the consistent list.
//
// Consistency has a price in latency on a busy cluster. The watch cache of
// IPClaims learns etcd's current revision from IPClaim events; when the
// newest write in etcd is to another resource (leases, events, pods), it
// learns it from a progress notification that the API server asks etcd for
// every 100 ms while reads wait. On the test server an Owned took 1–2 ms
// when quiet and 100 ms right after a write to a namespace, and OwnedAtLeast
// 1 ms in that case (BenchmarkOwned in k8s/kubetest). On a cluster with
// frequent writes elsewhere, expect Owned, List and Cursor to wait tens of
// milliseconds on average (concurrent calls share the wait), unless IPClaim
// writes are frequent enough to carry the cache forward themselves.
//
// The API server finds an owner's (or a pool's) claims by testing the labels
// of every IPClaim in its cache, as custom resources have no index: the
// server's cost of Owned grows with the number of claims in the cluster
// (KEP-2340 measured about half a second for a selector over 300,000
// objects), while what travels over the wire is the owner's claims only.
//
// # Cost per allocation and rate limits
//
// The Store is a store.OrderedRevisions: resourceVersions on the API
// server's etcd3 storage are etcd revisions, which order every write. An
// Allocator on it creates a claim and then checks with OwnedAtLeast that the
// owner holds no other (of two racing claims, the one of the lower revision
// stays); at this commit it also asks Owned before the create, so a new
// allocation is a create, a consistent list and a check that costs no
// request while the Allocator follows the Store (see benchmarks/README.md
// for what that gives). The client's rate limits are the caller's: New
// keeps those of the *rest.Config it is given, and client-go's default (QPS
// 5, burst 10) allows about 2.5 allocations per second after the first
// few. An agent on a node should raise them to what the API server's
// priority and fairness gives it; Spiderpool, Whereabouts and kube-ovn all
// do.
//
// The Store is not a store.ExclusiveCreator: Kubernetes cannot create an
// object on the condition that other objects (the owner's other claims) do
// not exist, and a second object per owner to make that check atomic would
// double the writes.
//
// # Cursors
//
// The round-robin cursor (store.Cursors) costs no write of its own.
// CreateAndSetCursor marks its claim with LabelCursor, and the cursor is the
// address of the newest marked claim of the pool (by revision) unless
// SetCursor, which writes the pool's IPCursor object, was called later. An
// Update drops the mark, so re-pointing an old claim does not move the
// cursor back; deleting the newest marked claim moves the cursor back to the
// one before, a hint lost, never an address given twice. Cursor lists the
// pool's marked claims, so it costs about what List does; an Allocator asks
// for it when it first loads a pool.
//
// # Errors
//
// Besides the sentinels of package store, every call that gets no usable
// answer (the server cannot be reached, answers 429 or 5xx, does not serve
// IPClaims, as for a moment after it starts or when the CRD is not
// installed, or the context ends first) returns an error wrapping
// ErrUnavailable, within the context's deadline; the same Store works again
// when the server is back. The module's other packages return the same
// error (kubeclient.ErrUnavailable). An object
// that is no valid claim (written by hand, or by another program) is
// reported as a *CorruptError, which wraps store.ErrCorrupt and names the
// object, the field and its value: List and Owned return the valid claims
// with those errors, and the object's name keeps its address taken, as
// Create of it fails with store.ErrExists.
package kubestore
