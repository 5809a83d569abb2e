package ipamtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// Event is one kind of step a Sim takes.
//
// The zero Event is EventCreate. An Event is a plain value.
type Event uint8

// The events of a Sim. Each step draws one, weighted by the Mix; an event
// that cannot happen in the current state (no pod to delete, no failed node
// to recover) becomes EventAdvance.
const (
	// EventCreate creates a pod of a Deployment (a new name and UID) that has
	// fewer pods than it wants, or the missing member of a StatefulSet (an
	// ordinal below its replicas), on a Ready node, and runs its CNI ADD.
	EventCreate Event = iota
	// EventDelete deletes a pod on a Ready node; its CNI DEL runs.
	EventDelete
	// EventDeleteLost deletes a pod on a Ready node; its CNI DEL is lost, so
	// its claims stay for garbage collection.
	EventDeleteLost
	// EventRestart restarts a pod's sandbox: CNI ADD again for the same pod
	// UID, which must return the addresses the pod holds (or, for a pod
	// still Pending, retries its allocation).
	EventRestart
	// EventRecreate deletes a running StatefulSet pod and creates it again
	// with a new UID, maybe on another node; it must get its addresses back.
	EventRecreate
	// EventScaleUp adds a replica to a StatefulSet.
	EventScaleUp
	// EventScaleDown removes a replica from a StatefulSet: the pod of the
	// highest ordinal is deleted, its DEL sometimes lost, and its claims
	// become garbage.
	EventScaleDown
	// EventNodeFail makes a node NotReady: its pods get deletion timestamps
	// (now plus their grace period) but cannot finish terminating; about a
	// third of them are force-deleted, their DEL lost.
	EventNodeFail
	// EventNodeRecover makes a NotReady node Ready: its terminating pods
	// finish, most with a CNI DEL, some with the DEL lost.
	EventNodeRecover
	// EventAgentRestart replaces the plugin's Allocator with a new one on the
	// same Store, as a restarted agent process would (its quarantine is lost).
	EventAgentRestart
	// EventAdvance moves the clock forward by one second to a minute.
	EventAdvance
	// EventGC runs gc.Collect with a snapshot of the pod model.
	EventGC
	// EventFinish ends a running Deployment pod on a Ready node: its
	// containers exit, it turns Failed or Succeeded and stays as an object,
	// its CNI DEL runs (sometimes lost), and its Deployment replaces it.
	// Garbage collection may release what it still holds once its
	// termination grace period has passed since it finished.
	EventFinish
	// EventRedefine replaces one pool's definition, as an edit of a
	// SpiderIPPool does: it is disabled or enabled, starts or stops
	// terminating, or gets or loses a nodeName. Addresses it has handed out
	// stay; new ones follow the new definition.
	EventRedefine
	// EventLookup asks an agent what a pod or container holds
	// (Allocator.Lookup), as ipamctl or a controller does, and compares the
	// answer with the Store's (Store.Owned) and with the model. It is drawn
	// only in the many-writers mode (SimOptions.Writers).
	EventLookup
	// EventImport starts a pod or container whose claims are written into
	// the Store directly, as a migration writes them: a pod's claims record
	// its namespace, name and UID but no interface (Spiderpool's records),
	// and a host-local container's record only its container ID
	// (host-local's legacy files, from before it wrote interface names).
	// The pod runs with those addresses; its next CNI ADD must return each
	// to an interface whose candidate pools include the claim's pool. It is
	// drawn only in the many-writers mode.
	EventImport

	numEvents
)

var eventNames = [numEvents]string{
	"create", "delete", "delete-lost-del", "restart", "recreate", "scale-up", "scale-down",
	"node-fail", "node-recover", "agent-restart", "advance", "gc", "finish", "redefine",
	"lookup", "import",
}

// String returns the event's name, such as "delete-lost-del".
func (e Event) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("Event(%d)", uint8(e))
}

// Mix weighs the events a Sim draws: an event of weight w is drawn w times
// in sum-of-weights draws, on average (an event that cannot happen is drawn
// again). A weight of zero turns an event off.
//
// The zero Mix means DefaultMix. A Mix is a plain value.
type Mix struct {
	Create, Delete, DeleteLost, Restart, Recreate int
	ScaleUp, ScaleDown, NodeFail, NodeRecover     int
	AgentRestart, Advance, GC, Finish, Redefine   int
	Lookup, Import                                int
}

// DefaultMix returns the weights a Sim uses when SimOptions.Mix is zero and
// the many-writers mode is off. Lookup and Import are zero.
func DefaultMix() Mix {
	return Mix{
		Create: 24, Delete: 10, DeleteLost: 4, Restart: 12, Recreate: 8,
		ScaleUp: 4, ScaleDown: 4, NodeFail: 1, NodeRecover: 2,
		AgentRestart: 1, Advance: 8, GC: 4, Finish: 3, Redefine: 2,
	}
}

func (m Mix) weights() [numEvents]int {
	return [numEvents]int{
		m.Create, m.Delete, m.DeleteLost, m.Restart, m.Recreate, m.ScaleUp, m.ScaleDown,
		m.NodeFail, m.NodeRecover, m.AgentRestart, m.Advance, m.GC, m.Finish, m.Redefine,
		m.Lookup, m.Import,
	}
}

// WritersMix returns the weights a Sim uses in the many-writers mode when
// SimOptions.Mix is zero: DefaultMix with lookups and imports, and agents
// replaced six times as often.
func WritersMix() Mix {
	m := DefaultMix()
	m.Lookup, m.Import, m.AgentRestart = 10, 3, 6
	return m
}

// SimOptions configure a Sim. Every field has a useful zero value.
//
// The zero SimOptions simulates DefaultPools on DefaultNodes with two
// Deployments and one StatefulSet. A SimOptions is a plain value; NewSim
// does not modify it, nor the pools and nodes it names.
type SimOptions struct {
	// Pools are the cluster's pools; they must be valid and disjoint
	// (ipam.NewCatalog). Nil means DefaultPools(). Keep them small: a pool
	// that never fills up tests little.
	Pools []*ipam.Pool
	// Nodes are the cluster's nodes, all Ready at the start. Nil means
	// DefaultNodes().
	Nodes []Node
	// Deployments and StatefulSets are how many of each the cluster runs;
	// zero means 2 and 1, negative means none.
	Deployments, StatefulSets int
	// MaxPods is how many pods, not counting terminating ones, a Deployment
	// runs at most; zero means 4.
	MaxPods int
	// MaxReplicas bounds a StatefulSet's replicas; zero means 4. Each starts
	// at a random count up to it.
	MaxReplicas int
	// SecondNIC is the share, in percent, of the Deployments and StatefulSets
	// that name their pools (in the request, or with the ippools annotation)
	// whose pods have a second interface, net1, with pools of its own (maybe
	// the same as eth0's: two addresses of one pool). Zero means 30, negative
	// means none.
	SecondNIC int
	// Requested is the share, in percent, of the Deployments that name their
	// pools in the request whose pods also request one address of the first
	// of them (ipam.NIC.IPs), so that they compete for it. Zero means 25,
	// negative means none.
	Requested int
	// Mix weighs the events; the zero Mix means DefaultMix().
	Mix Mix
	// Quarantine is the Allocator's quarantine (ipam.Options.Quarantine).
	Quarantine time.Duration
	// GC are the options of every garbage collection. With
	// GC.DisableStatefulSet, StatefulSet pods ask as ordinary owners and
	// their DEL releases, as with Spiderpool's StatefulSet support off.
	GC gc.Options
	// Start is the simulated time at the first step; zero means
	// 2026-01-01T00:00:00Z.
	Start time.Time
	// Store holds the claims; nil means a new memstore. It must be empty,
	// and no one else may write to it.
	Store store.Store
	// Agents is how many Allocators in this process share the Store, as
	// the agents of a cluster's nodes do: node i's pods are served by agent
	// i mod Agents, and agent 0 also collects garbage; in the many-writers
	// mode, each operation goes through an agent drawn at random. Zero
	// means one, or 4 in the many-writers mode. The quarantine is checked
	// only for an address handed out by the agent that released it, since
	// each Allocator keeps its own.
	Agents int
	// CheckEvery is how many steps pass between two full comparisons of the
	// Store with the model; zero means 32, negative means only at Settle.
	// The claims a step touches are compared after every step regardless.
	CheckEvery int
	// HistoryLen is how many of the last events a Violation reports; zero
	// means 20, negative means every event since the start.
	HistoryLen int

	// Writers turns on the many-writers mode (see the package
	// documentation): every operation goes through an agent drawn at
	// random, each agent writes through a Store instance of its own
	// (OpenStore), agents are replaced by fresh ones as the run goes, some
	// of an agent's Store writes are interleaved with other agents'
	// operations on the same claims (Interleave), pools are served through a
	// PoolSource that is not an ipam.Catalog and may be redefined onto each
	// other's addresses (unless the cluster runs only containers, whose
	// Store may keep host-local's format: see HostLocalOptions),
	// EventLookup and EventImport are drawn (the zero Mix means
	// WritersMix), and Run ends with Drain. Agents defaults to 4.
	Writers bool
	// OpenStore opens a new instance of the shared Store for an agent: a
	// new client of the same backend, as a new agent process would open.
	// The Sim calls it once per agent and again for each fresh agent that
	// replaces one, and closes the instances it opened that implement
	// io.Closer (on replacement, and in Close). Store, which the checks
	// read, must be an instance of the same backend. Nil means: Store's
	// Open method if it has one (memstore's), else Store itself.
	OpenStore func() (store.Store, error)
	// Remote are agents served by other processes (see RemoteAgent and
	// ServeAgent), in addition to Agents in-process ones: each is opened on
	// Backend, and again when it is replaced. They must run the same
	// version of package ipam. The Sim does not close them.
	Remote []*RemoteAgent
	// Backend names the shared backend to the Remote agents; their
	// ServeAgent's open function receives it (a directory, an endpoint).
	Backend string
	// Containers is how many host-local style workloads the cluster runs:
	// containers known by container ID only, no pod UID, namespace or
	// name, that name their pools in the request and release per
	// interface. Zero means 1 in the many-writers mode and none otherwise;
	// negative means none.
	Containers int
	// Interleave is the share, in percent, of the Store writes an agent
	// makes for a CNI ADD, a CNI DEL or a garbage collection, where another
	// agent's operation can change the same claim, before which the Sim
	// runs that operation through other agents (see the package
	// documentation). Only in-process agents are interleaved. Zero means 15
	// in the many-writers mode; negative means none.
	Interleave int
}

// Validate reports whether the options can make a Sim.
func (o SimOptions) Validate() error {
	var errs []error
	for i, w := range o.Mix.weights() {
		if w < 0 {
			errs = append(errs, fmt.Errorf("ipamtest: sim options: mix weight of %s is negative: %d", Event(i), w))
		}
	}
	if o.Quarantine < 0 {
		errs = append(errs, fmt.Errorf("ipamtest: sim options: quarantine is negative: %v", o.Quarantine))
	}
	if err := o.GC.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.SecondNIC > 100 || o.Requested > 100 {
		errs = append(errs, fmt.Errorf("ipamtest: sim options: SecondNIC %d or Requested %d is over 100 percent", o.SecondNIC, o.Requested))
	}
	if o.MaxPods < 0 || o.MaxReplicas < 0 {
		errs = append(errs, fmt.Errorf("ipamtest: sim options: negative MaxPods %d or MaxReplicas %d", o.MaxPods, o.MaxReplicas))
	}
	if o.Interleave > 100 {
		errs = append(errs, fmt.Errorf("ipamtest: sim options: Interleave %d is over 100 percent", o.Interleave))
	}
	for i, r := range o.Remote {
		if r == nil {
			errs = append(errs, fmt.Errorf("ipamtest: sim options: remote[%d] is nil", i))
		}
	}
	if !o.Writers && (o.OpenStore != nil || len(o.Remote) > 0) {
		errs = append(errs, errors.New("ipamtest: sim options: OpenStore and Remote need the many-writers mode (Writers)"))
	}
	for i, n := range o.Nodes {
		if n.Name == "" {
			errs = append(errs, fmt.Errorf("ipamtest: sim options: nodes[%d] has no name", i))
		}
	}
	return errors.Join(errs...)
}

// DefaultPools returns the pools of the zero SimOptions: three small IPv4
// pools and one IPv6 pool, all cluster defaults, one only for nodes n0 and n1
// and lowest-free, one only for nodes in zone b.
func DefaultPools() []*ipam.Pool {
	return []*ipam.Pool{
		V4Pool("v4-a", "10.0.0.0/24", Span("10.0.0.10", "10.0.0.17"), Default()),
		V4Pool("v4-b", "10.0.1.0/24", Span("10.0.1.10", "10.0.1.15"), Default(), OnNodes("n0", "n1"), Strategy(ipam.LowestFree)),
		V4Pool("v4-c", "10.0.2.0/24", Span("10.0.2.10", "10.0.2.13"), Default(), NodeAffinity("zone", "b")),
		V6Pool("v6-a", "fd00:0:0:1::/120", Span("fd00:0:0:1::10", "fd00:0:0:1::17"), Default()),
	}
}

// DefaultNodes returns the nodes of the zero SimOptions: n0 and n1 in zone
// a, n2 and n3 in zone b.
func DefaultNodes() []Node {
	return []Node{
		{Name: "n0", Labels: map[string]string{"zone": "a"}},
		{Name: "n1", Labels: map[string]string{"zone": "a"}},
		{Name: "n2", Labels: map[string]string{"zone": "b"}},
		{Name: "n3", Labels: map[string]string{"zone": "b"}},
	}
}

// RandomOptions returns options drawn from seed, as TestSim uses them: two
// to four IPv4 pools and up to two IPv6 pools of 2 to 10 addresses each, with
// random strategies, some cluster defaults, some with node affinity; one to
// three Deployments and one or two StatefulSets; a quarantine in about a
// third of the seeds; and varied garbage collection options. The same seed
// gives the same options.
func RandomOptions(seed uint64) SimOptions {
	r := rand.New(rand.NewPCG(seed, 0x6f7074696f6e73))
	var pools []*ipam.Pool
	n4 := 2 + r.IntN(3)
	for i := range n4 {
		size := 2 + r.IntN(9)
		opts := []PoolOption{
			Span(fmt.Sprintf("10.%d.0.10", i), fmt.Sprintf("10.%d.0.%d", i, 10+size-1)),
			Strategy(ipam.Strategy(r.IntN(2))),
		}
		switch {
		case i == 0:
			opts = append(opts, Default())
		case i == 1 && r.IntN(2) == 0:
			opts = append(opts, Default(), OnNodes("n0", "n1"))
		case i == 2 && r.IntN(2) == 0:
			opts = append(opts, Default(), NodeAffinity("zone", "b"))
		case r.IntN(2) == 0:
			opts = append(opts, Default())
		}
		pools = append(pools, V4Pool(fmt.Sprintf("v4-%d", i), fmt.Sprintf("10.%d.0.0/24", i), opts...))
	}
	for i := range r.IntN(3) {
		size := 2 + r.IntN(9)
		opts := []PoolOption{
			Span(fmt.Sprintf("fd00:0:0:%d::10", i), fmt.Sprintf("fd00:0:0:%d::%x", i, 16+size-1)),
			Strategy(ipam.Strategy(r.IntN(2))),
		}
		if i == 0 || r.IntN(2) == 0 {
			opts = append(opts, Default())
		}
		pools = append(pools, V6Pool(fmt.Sprintf("v6-%d", i), fmt.Sprintf("fd00:0:0:%d::/120", i), opts...))
	}
	o := SimOptions{
		Pools:        pools,
		Deployments:  1 + r.IntN(3),
		StatefulSets: 1 + r.IntN(2),
		MaxPods:      2 + r.IntN(5),
		MaxReplicas:  2 + r.IntN(4),
	}
	if r.IntN(3) == 0 {
		o.Quarantine = [...]time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}[r.IntN(3)]
	}
	o.GC.AdditionalGraceDelay = [...]time.Duration{0, 0, 5 * time.Second, 30 * time.Second}[r.IntN(4)]
	o.GC.DisableTerminatingOnNotReadyNode = r.IntN(6) == 0
	if r.IntN(4) == 0 {
		o.GC.ClockSkew = [...]time.Duration{time.Second, 10 * time.Second}[r.IntN(2)]
	}
	o.GC.DisableStatefulSet = r.IntN(10) == 0
	if r.IntN(2) == 0 {
		// Half the seeds never redefine a pool, so that the Allocators
		// serve a Catalog, which never changes, rather than a PoolSource
		// that may.
		o.Mix = DefaultMix()
		o.Mix.Redefine = 0
	}
	return o
}

// WritersOptions returns the options of a many-writers history drawn from
// seed, as TestManyWriters uses them: RandomOptions(seed), in the
// many-writers mode (SimOptions.Writers), with two to four agents, one or
// two host-local style container workloads, WritersMix, pools redefined in
// every seed, and more pods with a second interface. The Store is left nil
// (a memstore). The same seed gives the same options.
func WritersOptions(seed uint64) SimOptions {
	o := RandomOptions(seed)
	r := rand.New(rand.NewPCG(seed, 0x7772697465727300))
	o.Writers = true
	o.Agents = 2 + r.IntN(3)
	o.Containers = 1 + r.IntN(2)
	o.SecondNIC = 50
	o.Mix = WritersMix()
	return o
}

// HostLocalOptions returns the options of a many-writers history of
// host-local style workloads only, drawn from seed: WritersOptions(seed)
// without Deployments and StatefulSets, with two to four container
// workloads, so that every owner is a container ID and every request names
// its pools, as a Store in host-local's format (store/filestore) requires.
// The caller sets Store, OpenStore and, for agents in other processes,
// Remote and Backend.
func HostLocalOptions(seed uint64) SimOptions {
	o := WritersOptions(seed)
	r := rand.New(rand.NewPCG(seed, 0x686f73746c6f63))
	o.Deployments, o.StatefulSets = -1, -1
	o.Containers = 2 + r.IntN(3)
	return o
}
