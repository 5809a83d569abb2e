package ipam

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/internal/readmap"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// ReservedSource is an optional capability of a PoolSource: the cluster's
// reserved addresses (SpiderReservedIP objects), which no pool hands out.
// Catalog implements it.
type ReservedSource interface {
	// Reserved returns the reserved addresses of family 4 or 6, or nil for
	// none. The Allocator rebuilds a pool's index when the returned pointer
	// changes, so return the same *IPSet while the reservations stay the same.
	Reserved(family int) *netipx.IPSet
}

// Options configure an Allocator. The zero Options, with a PoolSource, is a
// working in-memory allocator.
type Options struct {
	// Pools says which pools exist. Required.
	Pools PoolSource
	// Store holds the claims. Nil means a new, private in-memory store.
	Store store.Store
	// Logger receives debug and warning records. Nil discards them.
	Logger *slog.Logger
	// Quarantine keeps a released address out of reuse for this long after
	// its release, under either strategy, so that a pod whose teardown is
	// still in flight never sees its address handed to another. A request
	// that names the address gets it all the same. The quarantine is kept by
	// each Allocator in memory: it holds back the releases this Allocator
	// made or learnt of. Zero means none.
	Quarantine time.Duration
	// Spread, when not empty (a node's or an agent's name), starts this
	// Allocator's round-robin in each pool at a place worked out from it,
	// instead of after the Store's cursor, and keeps the place as its own:
	// Allocators with different Spread values that share a pool (agents of
	// many nodes on etcd or the Kubernetes API) then claim from different
	// parts of it and seldom race for one address. Empty means host-local's
	// round-robin: from the Store's last reserved address.
	Spread string
	// Observer is told the outcome of every allocation and release (see
	// Observer), for metrics. Nil means none.
	Observer Observer
}

// Validate reports whether the options can make an Allocator.
func (o Options) Validate() error {
	if o.Pools == nil {
		return &FieldError{Object: "options", Field: "Pools", Reason: "required"}
	}
	if o.Quarantine < 0 {
		return &FieldError{Object: "options", Field: "Quarantine", Value: o.Quarantine.String(), Reason: "must not be negative"}
	}
	return nil
}

// Request asks for addresses for one pod or container.
//
// The owner is identified by UID when set, otherwise by ContainerID: asking again
// with the same identity and interface returns what it already holds. The pod's
// labels, node, namespace and annotations feed Spiderpool's pool selection (see
// Select and Filter); a request whose interfaces name their pools directly needs
// none of them. The zero Request is invalid. A Request is read, never written,
// by the Allocator.
type Request struct {
	// Namespace, Name and UID identify the pod; UID is the owner identity.
	Namespace string
	Name      string
	UID       string
	// ContainerID identifies the owner when UID is empty (host-local's identity).
	ContainerID string
	// Stable marks a pod whose addresses belong to its namespace and name, not
	// its UID: a StatefulSet pod (or a KubeVirt VM's). A new pod of the same
	// name gets them back, and the claims are re-pointed to its UID. If the
	// pools chosen for an interface no longer include the pool of the held
	// address, that address is released once the new one is claimed.
	Stable bool

	// Labels and Annotations are the pod's. Annotations carry the
	// ipam.spidernet.io/ippool(s) and subnet(s) pool choices.
	Labels      map[string]string
	Annotations map[string]string
	// Node is the name of the pod's node, NodeLabels its labels.
	Node       string
	NodeLabels map[string]string
	// NamespaceLabels and NamespaceAnnotations are those of the pod's namespace;
	// the annotations carry ipam.spidernet.io/default-ipv4-ippool and -ipv6-.
	NamespaceLabels      map[string]string
	NamespaceAnnotations map[string]string
	// NetConf is the CNI network config's pool defaults.
	NetConf NetConf
	// App is the pod's application: its top controller, such as the
	// Deployment above its ReplicaSet, the CronJob above its Job, or a
	// StatefulSet, DaemonSet or third-party controller that owns it
	// directly. The zero AppRef means the pod has no controller, or the
	// caller did not say. An auto-created pool (IsAutoPool) serves only the
	// pods of its application: its podAffinity is matched against App, not
	// against Labels, as Spiderpool matches it against the pod's top
	// controller; and the SpiderSubnet annotations serve the pool of App
	// (see AppPoolSource). Package k8s fills it from the owner chain.
	App AppRef

	// Interfaces lists the interfaces to serve.
	Interfaces []NIC
}

// Owner returns the owner that req's claims record (without an interface).
func (req Request) Owner() store.Owner {
	return store.Owner{Namespace: req.Namespace, Name: req.Name, UID: req.UID, ContainerID: req.ContainerID, Stable: req.Stable}
}

// NetConf holds the pool-selection fields of a Spiderpool-style CNI network
// config ("ipam" section). The zero NetConf names no pools.
type NetConf struct {
	DefaultIPv4Pools []string `json:"default_ipv4_ippool,omitempty"`
	DefaultIPv6Pools []string `json:"default_ipv6_ippool,omitempty"`
	// CleanGateway drops the default route through the pool gateway, unless an
	// ipam.spidernet.io/ippools entry says otherwise for its interface.
	CleanGateway bool `json:"clean_gateway,omitempty"`
	// DisableIPv4 and DisableIPv6 drop the candidates of that family, as the
	// Spiderpool agent's enableIPv4/enableIPv6 do.
	DisableIPv4 bool `json:"-"`
	DisableIPv6 bool `json:"-"`
	// ClusterNetwork is the Multus cluster network ("ns/name") that serves the
	// first interface when the pod's v1.multus-cni.io/default-network
	// annotation is absent (the agent's MULTUS_CLUSTER_NETWORK).
	ClusterNetwork string `json:"-"`
}

// NIC asks for the addresses of one network interface of the pod (a NIC, such
// as eth0 or a Multus net1): Request.Interfaces lists them. The zero NIC has
// no name and is not valid. A NIC is a plain value.
type NIC struct {
	// Name is the interface name in the pod, such as "eth0". Required.
	Name string
	// Pools names the pools to allocate from: one address from each, in order,
	// all or nothing (host-local's range sets). Empty means: select them from
	// the pod's annotations, its namespace, NetConf and the cluster defaults.
	Pools []string
	// IPs are requested addresses. Each must lie in one of Pools (host-local's
	// Contains rule: in a range, between start and end); each pool serves at
	// most one of them, and the others get a dynamic address.
	IPs []netip.Addr
	// Network is the Multus network ("namespace/name" of the
	// NetworkAttachmentDefinition) behind this interface, matched against a
	// pool's multusName. Empty means: work it out from the pod's Multus
	// annotations and NetConf.ClusterNetwork.
	Network string
}

// Result lists the addresses a request got, with the trace of how they were
// chosen. Interfaces that name their pools come in request order, each in pool
// order; interfaces whose pools were selected come where the first of them is
// in the request, in Select's order (the ippools annotation's order for that
// rule), IPv4 before IPv6. The zero Result holds nothing.
type Result struct {
	IPs   []IPConfig
	Trace []TraceEntry
}

// IPConfig is one address handed to one interface.
type IPConfig struct {
	Interface string
	Pool      string
	// Address carries the range's subnet mask, such as 10.0.0.5/24.
	Address netip.Prefix
	// Gateway is the range's gateway; invalid when the pool has none.
	Gateway netip.Addr
	Vlan    int
	Routes  []Route
	// Reused reports that the owner already held this address before the call.
	Reused bool
}

// Status says what happened to a pool that was considered for an interface.
type Status string

// Statuses of a TraceEntry.
const (
	StatusServed    Status = "served"
	StatusCandidate Status = "candidate"
	StatusFiltered  Status = "filtered"
	StatusExhausted Status = "exhausted"
	StatusFailed    Status = "failed"
	// StatusReleased marks the pool of an address a stable owner held before
	// and gave up, its pools having changed.
	StatusReleased Status = "released"
)

// TraceEntry records one pool considered for one interface and IP family.
// The zero TraceEntry records nothing. It is a plain value.
type TraceEntry struct {
	Interface string
	Family    int
	Pool      string
	// Source is the rule that made the pool a candidate.
	Source Source
	Status Status
	// Reason is the machine-readable cause of a filtered, exhausted or failed
	// pool; empty for served and candidate pools.
	Reason Reason
	// Message says the same for people, such as `node "n2" not in nodeName
	// [n1]` or "exhausted (254/254 used)".
	Message string
	// Rank is the pool's position in the priority order of the pools that
	// passed the filters, from 1; 0 for a filtered pool.
	Rank int
}

// String returns, for example, `eth0 IPv4 blue: filtered: node "n2" not in
// nodeName [n1]` or `eth0 IPv4 green: exhausted (rank 1) (254/254 used)`.
func (e TraceEntry) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s IPv%d %s: %s", e.Interface, e.Family, e.Pool, e.Status)
	if e.Rank > 0 {
		fmt.Fprintf(&b, " (rank %d)", e.Rank)
	}
	if e.Message != "" && !strings.HasPrefix(e.Message, string(e.Status)) {
		b.WriteString(": ")
		b.WriteString(e.Message)
	} else if e.Message != "" {
		b.WriteString(strings.TrimPrefix(e.Message, string(e.Status)))
	}
	return b.String()
}

// Allocator hands out addresses from pools and records them in a Store.
//
// The Store is the one truth: every address is claimed with a conditional
// Create, and what an owner holds is asked of the Store (Store.Owned), never
// taken from this Allocator's memory. So any number of Allocators, in one
// process or in many, may share one Store: a CNI plugin that starts per call,
// agents on many nodes, controller replicas. Each keeps, per pool, a hint of
// which addresses are used and where round-robin resumes, so that its next
// Create almost always succeeds; a Create that finds the address taken only
// teaches it. A new Allocator reads nothing before its first allocation but
// the pool's cursor, and probes forward from it.
//
// An Allocator is safe for concurrent use by multiple goroutines. Its zero value
// is not usable: call NewAllocator.
type Allocator struct {
	source  PoolSource
	static  bool // source is a *Catalog, whose pools never change
	store   store.Store
	plan    storePlan // what the Store offers, settled once
	spread  uint64    // hash of Options.Spread; 0 without
	log     *slog.Logger
	quarant time.Duration
	obs     Observer // nil: none

	pools  readmap.Map[*poolIndex]
	follow atomic.Pointer[follower] // set while Follow runs
	spans  spans                    // of the PoolSource's pools, for the overlap check
}

// NewAllocator returns an Allocator for the options.
func NewAllocator(opts Options) (*Allocator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	a := &Allocator{
		source:  opts.Pools,
		store:   opts.Store,
		log:     opts.Logger,
		quarant: opts.Quarantine,
		obs:     opts.Observer,
	}
	if a.store == nil {
		a.store = memstore.New()
	}
	_, a.static = a.source.(*Catalog)
	if opts.Spread != "" {
		h := fnv.New64a()
		h.Write([]byte(opts.Spread))
		a.spread = mix64(h.Sum64()) | 1 // never 0
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	a.plan = planFor(a.store, a.static, a.log)
	if a.plan.ownedSince == nil {
		a.plan.ownedSince = func(ctx context.Context, q store.OwnerQuery, _ int64) ([]store.Claim, error) { return a.owned(ctx, q) }
	}
	return a, nil
}

// mix64 mixes the bits of h (MurmurHash3's finalizer): FNV-1a alone hardly
// changes the high bits for names that differ in their last characters.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// quarantineUntil returns until when an address released at now stays out of
// reuse; the zero Time if there is no quarantine.
func (a *Allocator) quarantineUntil(now time.Time) time.Time {
	if a.quarant <= 0 {
		return time.Time{}
	}
	return now.Add(a.quarant)
}
