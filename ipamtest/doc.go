// Package ipamtest helps test code that uses package ipam: fixtures that
// build pools, pod requests and in-memory allocators in one line, and Sim, a
// deterministic cluster simulator that drives Allocators through pod
// lifecycles, StatefulSet scaling, node failures, lost CNI DELs and garbage
// collection, and checks after every step that no address is handed out
// twice, that no live pod loses its address and, once settled, that nothing
// leaks.
//
// It is to package ipam what rafttest is to raft: a harness other
// repositories import. Nothing in it reads the wall clock or a global random
// source; time and randomness are arguments (a seed, a start time), so a run
// is reproduced exactly from its seed and options.
//
// # The caller's duties
//
//   - The pool builders (V4Pool, V6Pool and their PoolOptions) and
//     PodBuilder are for literals in tests: they panic on input that does
//     not parse or validate, as ipam.MustParsePool does.
//   - NewAllocator takes a testing.TB and fails the test, with t.Fatalf, when
//     the pools do not make a catalog; call it from the test's goroutine.
//   - A Sim is driven from one goroutine. Give it a Store of its own, empty,
//     that nothing else writes: the simulator's model of who holds what is
//     compared with the Store after every step, and a write from elsewhere is
//     reported as a violation.
//   - To reproduce a failure, run the same seed with the same SimOptions (and
//     a new, empty Store): a Violation names the seed and the step, and
//     Replay returns the whole history up to it. RandomOptions(seed) gives
//     the options TestSim uses.
//   - An Allocate that ends in ipam.ErrExhausted or ipam.ErrNoCandidates is a
//     legitimate outcome in a simulation (pools are kept small so that they
//     fill up), and so is ipam.ErrUnavailable for a pod that requests an
//     address another holds; any other error from the library is a
//     violation.
//
// # What the simulator models
//
// A Sim plays the CNI plugin and the controllers of a small cluster (see
// Event for the events). Pods of Deployments get a new name and UID each;
// pods of StatefulSets are named <set>-<ordinal> and ask as stable owners
// (ipam.Request.Stable). Each workload names its pools in one of four ways,
// drawn from the seed: explicit Interface.Pools, the ippool annotation, its
// namespace's default pools, or the cluster default pools; some of those
// that name their pools (in the request or with the ippools annotation) give
// their pods a second interface, net1 (SimOptions.SecondNIC), and the model
// checks each address against the interface it serves; and some
// Deployments' pods request one address (SimOptions.Requested), competing
// for it. The plugin calls
// AllocateAt on CNI ADD, and on CNI DEL calls ReleaseAt, except for a
// StatefulSet pod that is still a valid member of its set, whose addresses
// are kept for its next incarnation (Spiderpool's agent skips that release).
// A Deployment pod may also finish (EventFinish): Failed or Succeeded, it
// stays as an object while its Deployment replaces it. A lost DEL leaves the
// claims for garbage collection, which the simulator
// runs with a snapshot of its own pod model (phases, deletion timestamps,
// grace periods, node readiness, HasIPs, controller kind, replicas). Pools
// may be redefined as the run goes (EventRedefine: disabled, terminating, a
// nodeName), served then through a PoolSource that changes rather than a
// Catalog, and new addresses must follow the definition of the moment. With
// SimOptions.Agents above one, several Allocators share the Store, one per
// group of nodes, as the agents of a cluster's nodes do.
//
// After every step the Sim checks the invariants (see Invariant) on the
// claims the step touched, keeping an index of who holds what so that no
// step scans the whole Store; every SimOptions.CheckEvery steps, and at
// Settle, it compares the whole Store with its model.
package ipamtest
