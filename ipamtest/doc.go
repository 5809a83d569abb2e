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
//     that nothing but its agents writes: the simulator's model of who
//     holds what is compared with the Store after every step, and a write
//     from elsewhere is reported as a violation. In the many-writers mode,
//     call Close when done: it closes the Store instances the Sim opened.
//   - To reproduce a failure, run the same seed with the same SimOptions (and
//     a new, empty Store): a Violation names the seed and the step, and
//     Replay returns the whole history up to it. RandomOptions(seed) gives
//     the options TestSim uses.
//   - An Allocate that ends in ipam.ErrExhausted or ipam.ErrNoCandidates is a
//     legitimate outcome in a simulation (pools are kept small so that they
//     fill up), and so is ipam.ErrUnavailable for a pod that requests an
//     address another holds, ipam.ErrOverlap for a pool that overlapped
//     another, and, for a call another agent's operation on the same owner
//     was interleaved with, ipam.ErrConflict; any other error from the
//     library is a violation, and so is any failure of a repeated ADD of a
//     pod whose addresses are all still valid.
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
// Settle, it compares the whole Store with its model. Its checks are per
// interface (each address from a pool among that interface's candidates,
// as many as the interface asks for, one address never returned for two
// interfaces) and per address across pools: the Store keys claims by pool
// and address, so the same address claimed in two pools is two claims it
// accepts, and an address held twice.
//
// # Many writers
//
// With SimOptions.Writers (WritersOptions draws such options from a seed),
// the Sim plays a cluster where any number of Allocators share one Store,
// as per-call CNI plugins, node agents and controller replicas do, and the
// Store alone knows who holds what:
//
//   - every operation (CNI ADD, each CNI DEL, Lookup, garbage collection)
//     goes through an agent drawn at random; each agent has a Store
//     instance of its own (SimOptions.OpenStore), and is replaced by a
//     fresh one, which knows nothing but what the Store holds, as the run
//     goes (EventAgentRestart);
//   - some agents may be other processes (SimOptions.Remote): RemoteAgent
//     sends them every operation, and ServeAgent, run by the other process
//     (a test binary that re-executes itself), opens its own Store
//     instance on the shared backend (SimOptions.Backend);
//   - some of an agent's Store calls are interleaved with other agents'
//     operations on the same claims (SimOptions.Interleave): a DEL retried
//     through another agent, and a new pod that takes the address, between
//     the DEL's read of what the owner holds and its deletes; another
//     replica's garbage collection between a collection's list and its
//     deletes; the DEL of a pod's old sandbox before its ADD adopts an
//     imported claim; the same ADD through another agent before an ADD's
//     first create. Runs stay deterministic: the interleavings are drawn
//     from the seed too;
//   - the Store also holds what real stores hold: claims that record no
//     interface (Spiderpool's, imported: EventImport), which the pod's next
//     ADD must give to an interface whose candidate pools include the
//     claim's pool; host-local's legacy claims, which record a container ID
//     only; and containers, owners known by container ID alone
//     (SimOptions.Containers), that name their pools and are released
//     interface by interface;
//   - pools are served through a PoolSource that is not an ipam.Catalog,
//     and are redefined onto each other's addresses, put back, and shifted
//     within their subnets: a pool that overlaps another must be refused
//     (ipam.ErrOverlap) by every Allocator that checked it against the
//     other, and one address may never be held in two pools;
//   - every Lookup, through any agent, must equal what the Store's Owned
//     answers (InvariantLookup), and Run ends with Drain: every pod and
//     container deleted, every lost DEL retried, garbage collected, after
//     which the Store must hold no claim at all.
//
// A Store that keeps only container IDs (store/filestore, host-local's
// format) runs HostLocalOptions: containers only, every pool in its own
// subnet, as one host-local directory gives every address one file.
//
// # Running the many-writers mode on another Store
//
// The mode runs on any Store whose instances share a backend. A backend's
// test (etcdstore's, say, on the embedded etcd its TestMain starts) gives
// each history an empty backend (a new key prefix), the checks an instance
// of their own, and each agent a new one, as an agent process would open
// it:
//
//	o := ipamtest.WritersOptions(seed)
//	prefix := fmt.Sprintf("/sim/%d/", seed)
//	o.Store = etcdstore.New(checkClient, prefix) // what the checks read
//	o.OpenStore = func() (store.Store, error) {
//		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//		if err != nil {
//			return nil, err
//		}
//		return etcdstore.New(c, prefix), nil // closed by the Sim if an io.Closer
//	}
//	s, err := ipamtest.NewSim(seed, o)
//	...
//	defer s.Close()
//	err = s.Run(steps) // a *Violation names the seed and the step
//
// For agents in other processes too, the test binary serves as one when an
// environment variable it sets says so: its TestMain calls
//
//	ipamtest.ServeAgent(os.Stdin, os.Stdout, func(backend string) (store.Store, error) {
//		return openEtcdStore(backend) // endpoints and prefix, as the test encoded them
//	})
//
// and the test starts copies of itself with StartRemoteAgent, once, and
// passes them in SimOptions.Remote with SimOptions.Backend naming the
// history's backend. TestManyWriters, in this package's tests, does so over
// store/filestore.
package ipamtest
