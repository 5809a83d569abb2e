// Package kubesubnet runs Spiderpool's SpiderSubnet on a live cluster: a
// Runner creates, resizes and deletes the auto-pools of applications as
// SpiderIPPool objects (spiderpool.spidernet.io/v2beta1), and Pools finds an
// application's auto-pool for an allocator at CNI ADD, at once.
//
// # The Runner (a controller)
//
// A Runner follows, with informers, the applications (Deployments,
// ReplicaSets, StatefulSets, DaemonSets, Jobs and CronJobs, read by
// k8s.Application), the deletions of pods, and the SpiderSubnets,
// SpiderIPPools written by hand and SpiderReservedIPs. The decisions are the
// library's: a subnet.Manager built from consistent lists of those
// objects decides each application's pools (subnet.Decide's rules) and
// calls the Runner to write each change before it serves it
// (subnet.ManagerOptions.Apply). Applications of other kinds (third-party
// controllers, whose replica count only their scale subresource tells) are
// given to Runner.SetApplication by the caller. The writes:
//
//   - create: a SpiderIPPool as Spiderpool's subnet controller writes one
//     (PoolObject: spec, labels, the ippool-ip-number annotation, the
//     spiderpool.spidernet.io finalizer, a controller owner reference to the
//     SpiderSubnet);
//   - grow, shrink, update: an Update at the resourceVersion the Runner last
//     wrote or read (on a conflict it reads the object again, once);
//   - terminate (reclaimed while pods hold addresses): a Delete, which the
//     finalizer turns into a deletionTimestamp, so allocators stop using the
//     pool; delete: the finalizer removed and the object deleted.
//
// A shrink or a deletion first checks, in the allocators' Store
// (Options.Claims, a kubestore.Store), that no pod claimed one of the
// addresses it gives back since the decision; only then is the SpiderIPPool
// written. No claim is written per address (the check reads the pool's
// claims, and the addresses go by range), so a pool of 16,777,216 addresses
// shrinks or goes as cheaply as one of ten. An agent that claims such an
// address in the old pool after the check, or whose informer has not yet
// seen the change, does so for the few milliseconds until its informer
// catches up; every Allocator on a PoolSource that is not a Catalog checks
// each new claim against the address's claims in every pool (kubestore's
// AddressClaimsAtLeast, from its watch when it follows one), so of two
// claims of one address in two pools the later one is given back.
//
// No object holds every pool's addresses: each SpiderIPPool holds its own,
// and a subnet's free addresses are kept by the Runner in memory, read again
// from the pools whenever a subnet, a pool written by hand or a reserved
// address changes (a rebuild). The SpiderSubnet's status is not written
// (Status computes it): Spiderpool's controlledIPPools, one JSON map of every
// pool's addresses rewritten on each change, is the hot object this package
// avoids. Changes of different subnets are written in parallel
// (Options.Workers), those of one subnet in order.
//
// # Replicas
//
// Several Runners may run: Options.Lock elects one (client-go's leader
// election, with a resourceVersion-checked lock: a coordination.k8s.io Lease
// through resourcelock.LeaseLock, or an AnnotationLock on any object), and
// only the leader reads the cluster and writes pools; the others stand by
// and take over when its lease expires, reading the cluster afresh. As with
// every lease, a leader stopped for longer than LeaseDuration (a paused
// process) may finish one write after another has taken over: keep
// LeaseDuration well above the longest pause you expect.
//
// # Shared informers, Events
//
// Options.Informers and Options.DynamicInformers give the Runner a
// program's shared informer factories instead of informers of its own per
// term of leading (cmd/ipam-controller shares them with garbage collection
// and the pool source). Options.Events records a Warning Event on an
// application whose auto-pool must wait (EventAutoPoolWaiting, the reason in
// its note) or cannot be made (EventAutoPoolFailed).
//
// # Pools (the allocators' side)
//
// Pools serves an allocator the pools of a PoolSource that follows the
// SpiderIPPools (kubepools.Source), and finds the auto-pool of the pod's
// application (ipam.Request.App, from k8s.App) by the SpiderIPPools' labels in
// a metadata-only informer: a lookup in memory, no request to the server and
// no waiting. A pool the Runner has not written yet is an error wrapping
// ipam.ErrNotReady, returned at once: the CNI ADD fails and the kubelet
// retries it, instead of Spiderpool's agent polling LIST for up to 50 s.
// Because the Runner creates an application's pools when it sees the
// application, before its pods are scheduled, the pool is normally there when
// the first ADD arrives.
package kubesubnet
