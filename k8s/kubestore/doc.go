// Package kubestore is a store.Store on the Kubernetes API: each claim is a
// cluster-scoped custom resource, an IPClaim (ipam.ipamkit.io/v1alpha1), so
// the API server, and the etcd behind it, decides which of two allocators
// gets an address. It is the shared store for clusters whose etcd is out of
// reach, as on managed Kubernetes.
//
// Apply the CustomResourceDefinitions in the repository's k8s/config/crd
// (IPClaim, IPOwner and IPCursor; package crd embeds them) before using a
// Store.
//
// # Objects
//
// One IPClaim per claimed address, named by the address alone (ClaimName:
// "10.0.0.1", an IPv6 address as eight dash-joined groups of four hex
// digits), as Kubernetes names its own IPAddress objects for Service IPs
// (KEP-1880): the API server's uniqueness of names is the uniqueness of
// claims, so a second Create of an address, in any pool, gets
// AlreadyExists, store.ErrExists. An address is therefore claimed in one
// pool at a time, cluster-wide (as Calico and Spiderpool refuse overlapping
// pools, and an Allocator refuses overlapping dynamic pools); the pool is
// in spec.pool and in LabelPool. Get, Update and Delete of an address
// claimed in another pool find no claim (store.ErrNotFound: there is no
// claim of that address in the pool asked for; the other pool's is not
// the caller's to change). The objects are cluster-scoped because names
// are unique only within one scope.
//
// Labels find a pool's claims (LabelPool, for List) and an owner's by each
// of its identities: pod UID (LabelUID), a stable owner's namespace and
// name (LabelStable) and container ID (LabelContainer). A value that is not
// a valid label value (container IDs are 64 hex digits, over the limit of
// 63) is replaced by its hash; readers check the spec of what they find,
// so a hash collision costs a skipped object, never a wrong answer.
//
// # Owner indexes
//
// An owner's claims are found by name, not by a label selector: for each
// identity a claim is indexed under (its pod UID, and its namespace/name
// when Stable), an IPOwner object named from the identity (OwnerIndexName:
// "uid.<uid>", "name.<ns>.<name>", hashed when no valid name) lists the
// claims the identity may hold, as Calico's IPAMHandle does. Create and Update first
// add an entry for the claim to the index of each of its identities (a PUT
// conditional on the index's resourceVersion, or a POST when there is none;
// a conflict reads it again and retries, with no server-side patch), then
// write the claim. So every completed write of a claim is in its owner's
// index, and Owned reads the index and GETs each claim it lists, keeping
// those the query matches: a listed claim that is gone or held by another
// owner is a stale entry, skipped. Every read is a quorum GET: Owned
// reflects every write completed before it, through any client, as Get
// does, and OwnedAtLeast and AddressClaimsAtLeast are Owned and
// AddressClaims.
//
// Each entry carries a token, also in the claim's AnnotationToken. Delete,
// and an Update that moves a claim to another owner, prune the entries of
// the old claim's token (a Delete reads the claim first unless this Store
// saw it at that revision, to know its owner, pool and token), and delete
// an index left empty, conditional on its resourceVersion. An entry added
// for a create of the same address that is under way has another token and
// stays: pruning by address alone could drop it between its write and the
// claim's, and lose the claim from its owner's index. A write the server
// refused (ErrExists, a conflict) removes the entries it added; one that
// got no answer keeps them (the claim may exist). A failed prune leaves a
// stale entry, which costs readers a GET. Each Store remembers the
// resourceVersion of the indexes it read or wrote, so that a dual-stack
// allocation writes its second entry with one PUT.
//
// A query by container ID is the slow path: claims that have a pod UID are
// indexed by their UID only (a second index per claim would double the
// index writes), so Owned by container ID is a consistent list of the
// IPClaims labelled with it, as is Owned of an owner whose index lists more
// than 16 claims. Claims without a pod UID (host-local's identity, a
// container ID alone) are therefore in no index: an index of container IDs
// would be written and never read, as a query by container ID must find
// the claims that have a UID too. The CNI plugin asks by pod UID
// (K8S_POD_UID), so neither is on its ADD or DEL path.
//
// # Cost per call
//
// No request on the allocate and release paths grows with the number of
// claims in the cluster: each is a GET, POST, PUT or DELETE of one object
// by name. The API server finds an object by name in its storage; a
// label-selector list, by contrast, tests every IPClaim in its cache
// (custom resources have no index), whatever it returns. The requests of
// a cold allocation of a dual-stack pod (a fresh Allocator and Store, as
// the CNI plugin makes per call) and of its release, counted by
// TestFlatRequests in k8s/kubetest, the same with no other claim and with
// 2,000 of other owners:
//
//	Allocate, 14 requests: GET ipcursors/<pool>.<node> of each pool when
//	  the Allocator first loads it; GET ipowners/layout (the layout check,
//	  once per Store); then per family POST ipowners (the pod's index, a
//	  PUT of it for the second family), POST ipclaims, PATCH
//	  ipcursors/<pool>.<node>, and the check that the owner holds no other
//	  claim: GET ipowners/uid.<uid> and GET ipclaims/<address> of each
//	  claim it lists. With a PoolSource whose pools may change (the CNI
//	  plugin's SpiderIPPools), GET ipclaims/<address> after each create
//	  too (store.AddressReader: no other pool holds it), 16 in all.
//	Release, 7 requests: GET ipowners/uid.<uid>, GET ipclaims/<address> of
//	  each claim it lists, then per claim DELETE ipclaims/<address> and a
//	  PUT of the index, DELETE of it for the last claim.
//
// An address found taken when it was thought free (a create refused with
// AlreadyExists: another node claimed it since this node's cursor) costs
// three requests: the index entry written, the POST refused, the entry
// removed.
//
// BenchmarkColdAllocate (k8s/kubetest) measures the pair: on the test
// machine, 62 ms with no other claim, 64 ms with 2,000.
//
// The lists left are off those paths: List of a pool (when round-robin
// probing from the cursor keeps finding taken addresses, and for
// lowest-free pools), ListAll (garbage collection), Watch, Owned by
// container ID, and the layout check (below), once per cluster.
//
// # Revisions
//
// A Claim's Revision is the object's metadata.resourceVersion, which Update
// and Delete send back as their precondition, with the object's UID. The
// API declares resourceVersion an opaque string; the Store reads it as a
// decimal int64, which is what it is: the API server's etcd3 storage writes
// etcd's revision in decimal, and its own versioner parses it back with
// strconv.ParseUint. etcd's revision counts the writes of the whole store,
// so a resourceVersion is never given to two versions of an object, nor to
// an object deleted and created again under the same name: a Delete or
// Update at a stale revision gets a conflict (store.ErrConflict), never the
// new holder's claim. The conversion is exact both ways, so equality, the
// only thing the contract asks of revisions, is preserved. An object whose
// resourceVersion is not a positive decimal is reported as corrupt (a
// *CorruptError naming metadata.resourceVersion) rather than given a
// made-up revision. The Store is a store.OrderedRevisions: those revisions
// order every write, which an Allocator uses to settle two creates for one
// owner made at the same moment.
//
// The Store is not a store.ExclusiveCreator: Kubernetes cannot create an
// object on the condition that other objects (the owner's other claims) do
// not exist. The client's rate limits are the caller's: New keeps those of
// the *rest.Config it is given (client-go's default is 5 requests per
// second with bursts of 10).
//
// # Cursors
//
// The round-robin cursor (store.Cursors) is an IPCursor per pool and node
// when the Store knows its node (Options.Node, or SetNode: the CNI plugin
// passes the pod's node), else per pool: Cursor is a GET of it, and
// CreateAndSetCursor a Create followed by a server-side apply of it. Per
// node, no object is written by the allocations of every node; each node
// resumes round-robin from its own last address, across processes.
//
// # Layout and migration
//
// Before this layout, IPClaims were named by pool and address
// (LegacyClaimName, "blue.10.0.0.1") and had no owner indexes: a Store of
// this version neither sees them nor keeps their addresses from being
// claimed again. So before its first write a Store GETs the layout marker
// (the IPOwner named LayoutMarker); without it, it lists the IPClaims once
// and, if none is named the old way, writes the marker; if some are,
// Create and Update fail with ErrLegacyLayout, naming MigrateCommand.
// Migrate (ipamctl kube migrate) moves each old object to its address's
// name with its owner indexes, deletes it (conditional on its
// resourceVersion and UID), reports rather than overwrites an address
// claimed in two pools, and writes the marker once no old object remains.
//
// # Watch
//
// Watch lists every IPClaim (in pages) and follows the changes; garbage
// collection and long-lived allocators use it. The Store no longer answers
// Owned from a watch: its reads by name cost as little.
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
// Create of it fails with store.ErrExists. An old-layout object is reported
// so, with a reason that names MigrateCommand.
package kubestore
