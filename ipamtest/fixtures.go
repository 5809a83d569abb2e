package ipamtest

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// PoolOption changes a pool that V4Pool or V6Pool is building.
//
// A PoolOption is a plain function value, safe to share; the zero (nil)
// PoolOption must not be passed.
type PoolOption func(*ipam.Pool)

// V4Pool returns a validated IPv4 pool named name: a host-local range set of
// one range over cidr, with host-local's defaults (the gateway is the first
// address, the first and last addresses are not handed out), changed by opts
// in order. It panics if cidr is not an IPv4 prefix or the pool does not
// validate: it is for tests and literals, as ipam.MustParsePool is.
func V4Pool(name, cidr string, opts ...PoolOption) *ipam.Pool {
	return buildPool(4, name, cidr, opts)
}

// V6Pool is V4Pool for IPv6.
func V6Pool(name, cidr string, opts ...PoolOption) *ipam.Pool {
	return buildPool(6, name, cidr, opts)
}

func buildPool(family int, name, cidr string, opts []PoolOption) *ipam.Pool {
	pfx, err := netip.ParsePrefix(cidr)
	if err != nil {
		panic(fmt.Sprintf("ipamtest: pool %q: %v", name, err))
	}
	if pfx.Addr().Is4() != (family == 4) {
		panic(fmt.Sprintf("ipamtest: pool %q: %s is not an IPv%d prefix", name, cidr, family))
	}
	p := &ipam.Pool{Name: name, Ranges: []ipam.Range{{Subnet: pfx}}}
	for _, o := range opts {
		o(p)
	}
	if err := p.Validate(); err != nil {
		panic(fmt.Sprintf("ipamtest: %v", err))
	}
	return p
}

// Span limits the pool's range to the addresses from start to end, such as
// Span("10.0.0.10", "10.0.0.19"). It panics on an address that does not parse.
func Span(start, end string) PoolOption {
	s, e := mustAddr(start), mustAddr(end)
	return func(p *ipam.Pool) {
		p.Ranges[0].Start, p.Ranges[0].End = s, e
	}
}

// Gateway sets the range's gateway, which is never handed out.
func Gateway(addr string) PoolOption {
	a := mustAddr(addr)
	return func(p *ipam.Pool) { p.Ranges[0].Gateway = a }
}

// Exclude keeps addresses out of the pool; each argument is an address or a
// range "a-b". It panics on one that does not parse.
func Exclude(addrs ...string) PoolOption {
	var rs []netipx.IPRange
	for _, s := range addrs {
		if from, to, ok := strings.Cut(s, "-"); ok {
			rs = append(rs, netipx.IPRangeFrom(mustAddr(from), mustAddr(to)))
		} else {
			a := mustAddr(s)
			rs = append(rs, netipx.IPRangeFrom(a, a))
		}
	}
	return func(p *ipam.Pool) { p.ExcludeIPs = append(p.ExcludeIPs, rs...) }
}

// Strategy sets how the pool picks its next free address.
func Strategy(s ipam.Strategy) PoolOption {
	return func(p *ipam.Pool) { p.Strategy = s }
}

// Default makes the pool a cluster default pool.
func Default() PoolOption {
	return func(p *ipam.Pool) { p.Default = true }
}

// Disabled stops the pool from serving new allocations.
func Disabled() PoolOption {
	return func(p *ipam.Pool) { p.Disable = true }
}

// OnNodes restricts the pool to pods on the named nodes (nodeName).
func OnNodes(names ...string) PoolOption {
	names = slices.Clone(names)
	return func(p *ipam.Pool) { p.NodeName = names }
}

// NodeAffinity restricts the pool to pods on nodes with the labels given as
// key, value pairs (a nodeAffinity of matchLabels). It panics on an odd
// number of arguments.
func NodeAffinity(kv ...string) PoolOption {
	sel := matchLabels(kv)
	return func(p *ipam.Pool) { p.NodeAffinity = sel }
}

// InNamespaces restricts the pool to pods of the named namespaces
// (namespaceName).
func InNamespaces(names ...string) PoolOption {
	names = slices.Clone(names)
	return func(p *ipam.Pool) { p.NamespaceName = names }
}

// NamespaceAffinity restricts the pool to pods of namespaces with the labels
// given as key, value pairs. It panics on an odd number of arguments.
func NamespaceAffinity(kv ...string) PoolOption {
	sel := matchLabels(kv)
	return func(p *ipam.Pool) { p.NamespaceAffinity = sel }
}

// PodAffinity restricts the pool to pods with the labels given as key, value
// pairs. It panics on an odd number of arguments.
func PodAffinity(kv ...string) PoolOption {
	sel := matchLabels(kv)
	return func(p *ipam.Pool) { p.PodAffinity = sel }
}

// MultusNames restricts the pool to interfaces of the named Multus networks.
func MultusNames(names ...string) PoolOption {
	names = slices.Clone(names)
	return func(p *ipam.Pool) { p.MultusName = names }
}

func matchLabels(kv []string) *ipam.LabelSelector {
	return &ipam.LabelSelector{MatchLabels: pairs(kv)}
}

// pairs turns key, value arguments into a map; it panics on an odd count.
func pairs(kv []string) map[string]string {
	if len(kv)%2 != 0 {
		panic(fmt.Sprintf("ipamtest: odd number of label arguments %q: want key, value pairs", kv))
	}
	m := make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func mustAddr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		panic(fmt.Sprintf("ipamtest: %v", err))
	}
	return a
}

// Node is a cluster node as pool selection sees it: a name and labels.
//
// The zero Node is a pod without a node. A Node is a plain value; treat its
// Labels as read-only once it is in use.
type Node struct {
	Name   string
	Labels map[string]string
}

// Namespace is a namespace as pool selection sees it. Its annotations carry
// the namespace's default pools (ipam.AnnotationNSDefaultIPv4 and -IPv6).
//
// The zero Namespace is the unnamed namespace, without labels. A Namespace is
// a plain value; treat its maps as read-only once it is in use.
type Namespace struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// PodBuilder builds the ipam.Request of one pod, one call per property:
//
//	req := ipamtest.NewPod("default", "web-0").StatefulSet().Node("n1").Request()
//
// Each method changes the builder and returns it. Request returns a copy that
// shares nothing with the builder, so one builder can make several requests.
//
// The zero PodBuilder builds a request without identity, which
// Allocator.AllocateAt rejects: start from NewPod. A PodBuilder is not safe
// for concurrent use; the Requests it returns are independent values.
type PodBuilder struct {
	req    ipam.Request
	uidSet bool
}

// NewPod starts a pod named name in namespace ns. Its UID is "uid-<ns>-<name>"
// until UID sets another; it asks for interface "eth0" with pools selected by
// Spiderpool's rules unless Interface adds interfaces.
func NewPod(ns, name string) *PodBuilder {
	return &PodBuilder{req: ipam.Request{Namespace: ns, Name: name}}
}

// UID sets the pod's UID, its identity as an owner.
func (b *PodBuilder) UID(uid string) *PodBuilder {
	b.req.UID, b.uidSet = uid, true
	return b
}

// ContainerID sets the container ID (host-local's owner identity, used when
// the UID is empty).
func (b *PodBuilder) ContainerID(id string) *PodBuilder {
	b.req.ContainerID = id
	return b
}

// StatefulSet marks the pod as a StatefulSet pod: a stable owner whose
// addresses belong to its namespace and name.
func (b *PodBuilder) StatefulSet() *PodBuilder {
	b.req.Stable = true
	return b
}

// Node puts the pod on the named node, without labels.
func (b *PodBuilder) Node(name string) *PodBuilder {
	b.req.Node, b.req.NodeLabels = name, nil
	return b
}

// OnNode puts the pod on node n, with its labels.
func (b *PodBuilder) OnNode(n Node) *PodBuilder {
	b.req.Node, b.req.NodeLabels = n.Name, n.Labels
	return b
}

// InNamespace moves the pod to namespace ns, with its labels and annotations.
func (b *PodBuilder) InNamespace(ns Namespace) *PodBuilder {
	b.req.Namespace, b.req.NamespaceLabels, b.req.NamespaceAnnotations = ns.Name, ns.Labels, ns.Annotations
	return b
}

// Label adds a pod label.
func (b *PodBuilder) Label(key, value string) *PodBuilder {
	if b.req.Labels == nil {
		b.req.Labels = make(map[string]string)
	}
	b.req.Labels[key] = value
	return b
}

// Annotation adds a pod annotation, such as ipam.AnnotationIPPool.
func (b *PodBuilder) Annotation(key, value string) *PodBuilder {
	if b.req.Annotations == nil {
		b.req.Annotations = make(map[string]string)
	}
	b.req.Annotations[key] = value
	return b
}

// NetConf sets the CNI network config's pool defaults.
func (b *PodBuilder) NetConf(nc ipam.NetConf) *PodBuilder {
	b.req.NetConf = nc
	return b
}

// Interface adds an interface; with no pools, its pools are selected by
// Spiderpool's rules, else it gets one address from each, in order.
func (b *PodBuilder) Interface(name string, pools ...string) *PodBuilder {
	b.req.Interfaces = append(b.req.Interfaces, ipam.NIC{Name: name, Pools: slices.Clone(pools)})
	return b
}

// Request returns the pod's request, sharing no memory with the builder.
func (b *PodBuilder) Request() ipam.Request {
	r := b.req
	if !b.uidSet && r.UID == "" && r.ContainerID == "" {
		r.UID = "uid-" + r.Namespace + "-" + r.Name
	}
	r.Labels = maps.Clone(r.Labels)
	r.Annotations = maps.Clone(r.Annotations)
	r.NodeLabels = maps.Clone(r.NodeLabels)
	r.NamespaceLabels = maps.Clone(r.NamespaceLabels)
	r.NamespaceAnnotations = maps.Clone(r.NamespaceAnnotations)
	r.NetConf.DefaultIPv4Pools = slices.Clone(r.NetConf.DefaultIPv4Pools)
	r.NetConf.DefaultIPv6Pools = slices.Clone(r.NetConf.DefaultIPv6Pools)
	if len(r.Interfaces) == 0 {
		r.Interfaces = []ipam.NIC{{Name: "eth0"}}
	} else {
		r.Interfaces = slices.Clone(r.Interfaces)
		for i := range r.Interfaces {
			r.Interfaces[i].Pools = slices.Clone(r.Interfaces[i].Pools)
			r.Interfaces[i].IPs = slices.Clone(r.Interfaces[i].IPs)
		}
	}
	return r
}

// Owner returns the owner that releases what the pod's request allocated,
// for Allocator.ReleaseAt and Lookup.
func (b *PodBuilder) Owner() store.Owner {
	r := b.Request()
	return store.Owner{Namespace: r.Namespace, Name: r.Name, UID: r.UID, ContainerID: r.ContainerID, Stable: r.Stable}
}

// NewAllocator returns an Allocator over a catalog of pools and the in-memory
// Store it writes to. It fails the test (t.Fatalf) if the pools do not make a
// catalog (ipam.NewCatalog) or the Allocator cannot be made.
func NewAllocator(t testing.TB, pools ...*ipam.Pool) (*ipam.Allocator, *memstore.Store) {
	t.Helper()
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		t.Fatalf("ipamtest: pools: %v", err)
	}
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		t.Fatalf("ipamtest: allocator: %v", err)
	}
	return a, st
}
