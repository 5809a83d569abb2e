// Package kubegc runs the library's garbage collection of pod claims against
// a live cluster: informers follow the cluster's pods, StatefulSets and
// nodes; the claims of the pods that events name are judged as the events
// come, and every claim on a period; gc.Decide decides, and each release
// goes through the Allocator's Store at the revision the claim was
// inspected at (Allocator.ReleaseClaimAt, as gc.Collect
// does).
//
// # Passes
//
// A pass lists claims (every claim of the Allocator's pools in a full pass,
// Allocator.Claims; the claims of some pod UIDs in an event pass,
// Allocator.Lookup), builds a snapshot of the pods and StatefulSets those
// claims name from the informers' caches, and judges them with gc.Decide.
// With Options.Claims (IPClaimPages for a kubestore.Store), a full pass
// lists the claims in pages of Options.PageSize and judges, confirms and
// releases one page at a time, keeping only the decisions that release: its
// memory is then a page of claims and the releases, not every claim of the
// cluster (measured by k8s/kubetest's BenchmarkGCScale; figures in the
// repository's README).
// Full passes run when the Runner starts, every Options.Period after, and
// when a StatefulSet's replicas or ordinals change or one is deleted (and a
// node's readiness, when the node options of gc.Options are set). Event
// passes run, at most one per Options.MinInterval, for pods deleted, that
// start terminating, finish, lose their addresses, or are replaced by a pod
// of another UID, and again when a terminating or finished pod's deadline
// comes.
//
// # Confirmation
//
// An informer's cache may lag behind the API server by any amount (a watch
// that is reconnecting, a slow consumer) and says nothing about how far
// behind it is, so a pod missing from it, or shown in an old state, does
// not prove the pod is gone. A release decided from the cache is therefore
// confirmed before it is applied: the Runner reads the claim's pod, its
// StatefulSet and its node from the API server (quorum reads), judges the
// claim again against what it read, and releases it only if that judgement
// releases it too. Releases are rare, so this costs a few reads per released
// claim; a claim is never released on the strength of the cache alone. A
// claim that records no pod name is confirmed by a consistent list of every
// pod (such claims are not made by the CNI plugin or by Allocators that are
// given pods).
//
// # Several replicas
//
// Replicas need no leader election: every release is a Delete with the
// claim's resourceVersion (and UID) as preconditions, so when two replicas
// release one claim, the first succeeds and the second gets a conflict or
// not-found, which the pass records on the decision (gc.Decision.Err) and
// ignores; and a claim that changed since a replica listed it (a
// StatefulSet pod's new incarnation took it over, the address was released
// and claimed again) is never released by that replica. A decision is made
// from facts read after the claim was listed, so no replica releases a
// claim that every replica would keep. What extra replicas cost is reads:
// each lists claims on its own period and confirms its own candidates.
// Run one replica per failure domain, or add leader election (a Lease, as
// k8s.io/client-go/tools/leaderelection provides) around Run if those reads
// matter, as cmd/ipam-controller does; correctness does not depend on it.
//
// # Sharing informers, Events
//
// Options.Informers gives the Runner a caller's shared informer factory
// instead of informers of its own, so that a program keeps one cache of
// pods (SlimPod as the factory's transform keeps it small); Options.Events
// records an Event (reason EventReleased) on the pod of each claim released.
//
// # What it does not judge
//
// Claims whose owner has no pod UID (host-local's container-ID claims) are
// kept, as gc.Decide keeps them. Claims of pools the Allocator's PoolSource
// no longer has are not listed by Allocator.Claims, so full passes do not
// see them; event passes do, as Lookup finds an owner's claims in every
// pool.
package kubegc
