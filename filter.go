package ipam

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam/internal/k8slabel"
)

// This file holds Spiderpool's pool filters: the rules that take a candidate
// pool out of the running for one interface of one pod, each with a reason a
// program can branch on and a sentence a person can read. It also works out
// which Multus network an interface belongs to, which the multusName rule
// needs, and the allocatable-address predicates (fully excluded, fully
// reserved) that the Allocator caches per pool definition.

// Reason is the machine-readable cause of a filtered pool.
type Reason string

// Reasons a pool is not used for an interface, in the order they are found.
// ReasonNotFound is for a pool name the PoolSource does not know (a nil pool
// for Check); the next eight are Check's rules, in its order; ReasonExcluded,
// ReasonReserved and ReasonExhausted are found when allocating, not by Check
// (see fullyExcluded and fullyReserved).
const (
	ReasonNotFound          Reason = "not-found"
	ReasonTerminating       Reason = "terminating"
	ReasonDisabled          Reason = "disabled"
	ReasonFamily            Reason = "ip-family"
	ReasonNodeName          Reason = "node-name"
	ReasonNodeAffinity      Reason = "node-affinity"
	ReasonNamespaceName     Reason = "namespace-name"
	ReasonNamespaceAffinity Reason = "namespace-affinity"
	ReasonPodAffinity       Reason = "pod-affinity"
	ReasonMultusName        Reason = "multus-name"
	ReasonExcluded          Reason = "fully-excluded"
	ReasonReserved          Reason = "fully-reserved"
	ReasonExhausted         Reason = "exhausted"
	// ReasonOverlap is for a pool that shares addresses with another pool
	// of the PoolSource (see ErrOverlap).
	ReasonOverlap Reason = "overlap"
)

// Subject is what the filters test a pool against: one interface of one pod,
// with the labels of the pod, its node and its namespace, and the Multus
// network behind the interface.
//
// The zero Subject is an unlabelled pod, in no namespace, on no node, whose
// network is unknown. A Subject is safe for concurrent reads; Check and
// Filter read it and the pools and write neither.
type Subject struct {
	// Namespace and Pod name the pod.
	Namespace, Pod string
	// Node is the name of the pod's node.
	Node string
	// NodeLabels, PodLabels and NamespaceLabels are matched against the
	// pool's nodeAffinity, podAffinity and namespaceAffinity.
	NodeLabels, PodLabels, NamespaceLabels map[string]string
	// App is the pod's application (its top controller), matched against
	// the podAffinity of an auto-created pool (IsAutoPool); the zero AppRef
	// is a pod without a controller, or one whose controller is not known.
	App AppRef
	// Interface is the interface being served, such as "eth0" or "net1".
	Interface string
	// Network is the Multus network behind the interface, as "namespace/name",
	// or a bare "name" when it was written without a namespace (see
	// SubjectOf); "" means unknown.
	Network string
}

// SubjectOf returns the subject for interface ifc of the pod req describes.
//
// When ifc.Network is empty, the Multus network is worked out as Spiderpool
// does:
//
//   - The first interface, named "eth0" (or "0", Spiderpool's name for the
//     first of unnamed interfaces), is served by the network in the pod
//     annotation v1.multus-cni.io/default-network ("name" or "namespace/name"),
//     or else by req.NetConf.ClusterNetwork. A name without a namespace is
//     kept bare: Multus and Spiderpool put it in their own namespace, which
//     this library does not know, so it matches a pool multusName entry
//     written bare in the same way.
//   - Any other interface is looked up in the pod annotation
//     k8s.v1.cni.cncf.io/networks, in either form Multus accepts (see
//     parseNetworksAnnotation): entry i serves the interface it names, or, when
//     it names none, Multus's default name "net<i+1>"; an interface named
//     "<i+1>" (Spiderpool's unnamed multi-interface mode) is served by entry i
//     too. The first match wins. An entry without a namespace is in the pod's
//     namespace.
//
// An interface that nothing names gets Network "" (unknown), which only pools
// with a multusName care about. A malformed value of the annotation consulted
// for ifc is an error (a *MultusError), even if no pool has a multusName; a
// malformed NetConf.ClusterNetwork, when consulted, is a *FieldError. Both
// unwrap to ErrInvalid.
func SubjectOf(req *Request, ifc NIC) (Subject, error) {
	if req == nil {
		req = &Request{}
	}
	s := Subject{
		Namespace:       req.Namespace,
		Pod:             req.Name,
		Node:            req.Node,
		NodeLabels:      req.NodeLabels,
		PodLabels:       req.Labels,
		NamespaceLabels: req.NamespaceLabels,
		App:             req.App,
		Interface:       ifc.Name,
		Network:         ifc.Network,
	}
	if s.Network != "" {
		return s, nil
	}
	var err error
	if ifc.Name == "eth0" || ifc.Name == "0" {
		s.Network, err = defaultNetwork(req)
	} else {
		s.Network, err = extraNetwork(req, ifc.Name)
	}
	if err != nil {
		return Subject{}, err
	}
	return s, nil
}

// defaultNetwork resolves the network of the pod's first interface.
func defaultNetwork(req *Request) (string, error) {
	if v := req.Annotations[AnnotationMultusDefault]; strings.TrimSpace(v) != "" {
		sel, err := parseOneNetwork(AnnotationMultusDefault, v)
		if err != nil {
			return "", err
		}
		return sel.network(""), nil
	}
	if v := req.NetConf.ClusterNetwork; strings.TrimSpace(v) != "" {
		sel, err := parseOneNetwork("clusterNetwork", v)
		if err != nil {
			return "", &FieldError{Object: "netconf", Field: "clusterNetwork", Value: v, Reason: err.Reason}
		}
		return sel.network(""), nil
	}
	return "", nil
}

// parseOneNetwork parses a value that must name exactly one network.
func parseOneNetwork(key, v string) (NetworkSelection, *MultusError) {
	sels, err := parseNetworks(key, v)
	if err != nil {
		return NetworkSelection{}, err
	}
	if len(sels) != 1 {
		return NetworkSelection{}, &MultusError{Key: key, Value: v,
			Reason: fmt.Sprintf("want exactly one network, got %d", len(sels))}
	}
	return sels[0], nil
}

// extraNetwork resolves the network of a pod interface other than the first.
func extraNetwork(req *Request, iface string) (string, error) {
	v, ok := req.Annotations[AnnotationMultusNetworks]
	if !ok {
		return "", nil
	}
	sels, err := parseNetworksAnnotation(v)
	if err != nil {
		return "", err
	}
	for i, sel := range sels {
		name := sel.Interface
		if name == "" {
			name = "net" + strconv.Itoa(i+1)
		}
		if iface == name || iface == strconv.Itoa(i+1) {
			return sel.network(req.Namespace), nil
		}
	}
	return "", nil
}

// NetworkSelection is one entry of the Multus annotation
// k8s.v1.cni.cncf.io/networks: a NetworkAttachmentDefinition and,
// optionally, the interface name it gets in the pod.
//
// The zero NetworkSelection names no network. It is a plain value, safe to
// copy and share.
type NetworkSelection struct {
	// Namespace is the definition's namespace; empty when the annotation does
	// not say (Multus then uses the pod's namespace).
	Namespace string `json:"namespace,omitempty"`
	// Name is the definition's name; never empty in a parsed selection.
	Name string `json:"name"`
	// Interface is the interface name asked for; empty when the annotation
	// does not say (Multus then names it "net<i+1>" for the i-th entry).
	Interface string `json:"interface,omitempty"`
}

// network returns "namespace/name", with ns when the selection has no
// namespace, or the bare name when neither has one.
func (n NetworkSelection) network(ns string) string {
	if n.Namespace != "" {
		ns = n.Namespace
	}
	if ns == "" {
		return n.Name
	}
	return ns + "/" + n.Name
}

// parseNetworksAnnotation parses the value of the Multus pod annotation
// k8s.v1.cni.cncf.io/networks. As Multus does, it takes a value that contains
// '[', '{' or '"' for JSON, a list of objects with "name", "namespace" and
// "interface" (other fields, such as "ips" or "mac", are ignored); and any
// other value for the text form, a comma-separated list of
// "[namespace/]name[@interface]", each part a lower-case DNS-1123 label,
// spaces around parts ignored.
//
// Every entry must have a name, and in the JSON form neither name nor
// namespace may contain '/'. A blank value, or an empty JSON list, names no
// network. Missing namespaces and interfaces are left empty. An error is a
// *MultusError that unwraps to ErrInvalid.
func parseNetworksAnnotation(s string) ([]NetworkSelection, error) {
	sels, err := parseNetworks(AnnotationMultusNetworks, s)
	if err != nil {
		return nil, err
	}
	return sels, nil
}

// parseNetworks parses a value of the networks annotation's form, reporting
// problems under annotation key.
func parseNetworks(key, s string) ([]NetworkSelection, *MultusError) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	fail := func(format string, args ...any) ([]NetworkSelection, *MultusError) {
		return nil, &MultusError{Key: key, Value: s, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.ContainsAny(s, `[{"`) {
		var raw []NetworkSelection
		if err := json.Unmarshal([]byte(s), &raw); err != nil {
			return fail("want a JSON list of objects with name, namespace and interface: %v", err)
		}
		for i, n := range raw {
			switch {
			case n.Name == "":
				return fail("entry %d: name is required", i)
			case strings.Contains(n.Name, "/"):
				return fail("entry %d: name %q contains \"/\"", i, n.Name)
			case strings.Contains(n.Namespace, "/"):
				return fail("entry %d: namespace %q contains \"/\"", i, n.Namespace)
			}
		}
		if len(raw) == 0 {
			return nil, nil
		}
		return raw, nil
	}
	var out []NetworkSelection
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return fail("entry %d is empty", i)
		}
		var n NetworkSelection
		rest := item
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			if strings.Contains(name, "/") {
				return fail("entry %d %q: more than one \"/\"", i, item)
			}
			n.Namespace, rest = strings.TrimSpace(ns), name
		}
		if name, iface, ok := strings.Cut(rest, "@"); ok {
			if strings.Contains(iface, "@") {
				return fail("entry %d %q: more than one \"@\"", i, item)
			}
			n.Interface, rest = strings.TrimSpace(iface), name
		}
		n.Name = strings.TrimSpace(rest)
		if n.Name == "" {
			return fail("entry %d %q: the network name is empty", i, item)
		}
		for _, part := range [...]struct{ what, v string }{
			{"namespace", n.Namespace}, {"name", n.Name}, {"interface", n.Interface},
		} {
			if part.v != "" && !isDNSLabel(part.v) {
				return fail("entry %d %q: %s %q is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)",
					i, item, part.what, part.v)
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// isDNSLabel reports whether s matches [a-z0-9]([-a-z0-9]*[a-z0-9])?, the
// pattern Multus requires of each part of its text form (length not checked).
func isDNSLabel(s string) bool {
	return !strings.Contains(s, ".") && k8slabel.IsDNSSubdomain(s)
}

// MultusError reports a malformed Multus network annotation (or value of the
// same form). It unwraps to ErrInvalid.
//
// The zero MultusError is not useful; the parser fills every field.
// A MultusError is never modified after it is returned: safe for concurrent reads.
type MultusError struct {
	// Key is the annotation key, such as "k8s.v1.cni.cncf.io/networks".
	Key string
	// Value is the annotation value as written.
	Value string
	// Reason says what is wrong, in lower case.
	Reason string
}

// Error returns, for example,
// `pod annotation k8s.v1.cni.cncf.io/networks "a/b/c": entry 0 "a/b/c": more than one "/"`.
func (e *MultusError) Error() string {
	v := strconv.Quote(e.Value)
	if strings.Contains(e.Value, `"`) && !strings.ContainsAny(e.Value, "`\n") {
		v = "`" + e.Value + "`" // JSON reads better unescaped
	}
	return "pod annotation " + e.Key + " " + v + ": " + e.Reason
}

// Unwrap returns ErrInvalid.
func (e *MultusError) Unwrap() error { return ErrInvalid }

// Rejection says why one pool cannot serve a subject.
//
// The zero Rejection rejects nothing: Check returns it for a pool that passes.
// A Rejection is a plain value, safe to copy and share.
type Rejection struct {
	// Pool is the name of the rejected pool.
	Pool string
	// Reason is the rule that rejected it.
	Reason Reason
	// Message is a lower-case sentence with the facts, such as
	// `node "n2" not in nodeName [n1]`.
	Message string
}

// String returns "<pool>: <message>".
func (r Rejection) String() string { return r.Pool + ": " + r.Message }

// Check tests pool p against the subject for an address of the given family
// (4 or 6; 0 accepts either). It reports whether p is rejected and, if so,
// why. The rules, in Spiderpool's order, the first failure winning:
//
//  1. p is terminating;
//  2. p is disabled;
//  3. p is of the other IP family;
//  4. the node: if p lists nodeName, the subject's node must be listed;
//     otherwise, if p has a nodeAffinity, it must match the node's labels;
//  5. the namespace: namespaceName, else namespaceAffinity, likewise;
//  6. p's podAffinity, if set, must match the pod's labels; but an
//     auto-created pool's (IsAutoPool) must match the pod's application,
//     Subject.App, as Spiderpool matches it against the pod's top
//     controller: its five application keys must hold the application's
//     API group, version, kind, namespace and name. A pod without an
//     application matches no auto-created pool. As in Spiderpool, an
//     auto-created pool that passes is not checked further (rule 7);
//  7. if p lists multusName, the subject's network must be one of them,
//     compared as written (an unknown network matches none).
//
// A pool without multusName is never rejected for Multus reasons, although
// Spiderpool rejects every pool on the first interface when it knows no
// default network (a deliberate difference). A nil p is rejected with
// ReasonNotFound.
//
// Check does not allocate when p passes.
func (s *Subject) Check(p *Pool, family int) (Rejection, bool) {
	if p == nil {
		return Rejection{Reason: ReasonNotFound, Message: "no such pool"}, true
	}
	// Messages are built by concatenation, not fmt: with many pools filtered
	// per request (one pool per node, say), building them is most of the cost.
	reject := func(r Reason, msg string) (Rejection, bool) {
		return Rejection{Pool: p.Name, Reason: r, Message: msg}, true
	}
	switch {
	case p.Terminating:
		return reject(ReasonTerminating, "terminating")
	case p.Disable:
		return reject(ReasonDisabled, "disabled")
	}
	if pf := p.Family(); family != 0 && pf != family {
		if pf == 0 {
			return reject(ReasonFamily, "pool of unknown IP family, IPv"+strconv.Itoa(family)+" wanted")
		}
		return reject(ReasonFamily, "IPv"+strconv.Itoa(pf)+" pool, IPv"+strconv.Itoa(family)+" wanted")
	}
	if len(p.NodeName) > 0 {
		if !slices.Contains(p.NodeName, s.Node) {
			return reject(ReasonNodeName, "node "+strconv.Quote(s.Node)+" not in nodeName "+bracketed(p.NodeName))
		}
	} else if p.NodeAffinity != nil && !p.NodeAffinity.Matches(s.NodeLabels) {
		return reject(ReasonNodeAffinity, "node "+strconv.Quote(s.Node)+" labels do not match nodeAffinity "+p.NodeAffinity.String())
	}
	if len(p.NamespaceName) > 0 {
		if !slices.Contains(p.NamespaceName, s.Namespace) {
			return reject(ReasonNamespaceName, "namespace "+strconv.Quote(s.Namespace)+" not in namespaceName "+bracketed(p.NamespaceName))
		}
	} else if p.NamespaceAffinity != nil && !p.NamespaceAffinity.Matches(s.NamespaceLabels) {
		return reject(ReasonNamespaceAffinity, "namespace "+strconv.Quote(s.Namespace)+" labels do not match namespaceAffinity "+p.NamespaceAffinity.String())
	}
	if p.PodAffinity != nil {
		switch {
		case !IsAutoPool(p):
			if !p.PodAffinity.Matches(s.PodLabels) {
				return reject(ReasonPodAffinity, "pod labels do not match podAffinity "+p.PodAffinity.String())
			}
		case s.App.IsZero():
			return reject(ReasonPodAffinity, "pod has no application (no controller, or none given), and an auto-created pool serves only the pods of its own: "+
				affinityApp(p.PodAffinity))
		case !admitsApp(p.PodAffinity, s.App):
			return reject(ReasonPodAffinity, "pod's application "+s.App.String()+" ("+s.App.APIVersion+
				") does not match the podAffinity of an auto-created pool, which serves the pods of "+affinityApp(p.PodAffinity))
		default:
			return Rejection{}, false
		}
	}
	if len(p.MultusName) > 0 {
		if s.Network == "" {
			return reject(ReasonMultusName, "interface "+s.Interface+" network unknown, multusName "+bracketed(p.MultusName)+" wanted")
		}
		if !slices.Contains(p.MultusName, s.Network) {
			return reject(ReasonMultusName, "interface "+s.Interface+" network "+strconv.Quote(s.Network)+" not in multusName "+bracketed(p.MultusName))
		}
	}
	return Rejection{}, false
}

// bracketed formats a list as fmt's %v does: "[a b c]".
func bracketed(xs []string) string { return "[" + strings.Join(xs, " ") + "]" }

// Filter checks every pool (see Check) and returns, in their input order, the
// pools that pass in a new slice, and the rejections of the others.
func (s *Subject) Filter(pools []*Pool, family int) (kept []*Pool, rejected []Rejection) {
	kept = make([]*Pool, 0, len(pools))
	for _, p := range pools {
		if r, bad := s.Check(p, family); bad {
			rejected = append(rejected, r)
			continue
		}
		kept = append(kept, p)
	}
	return kept, rejected
}

// fullyExcluded reports whether p has no allocatable address at all: its
// addresses (ips, or the ranges of a range set) minus its excludeIPs and
// gateways leave nothing. A pool that lists no addresses counts. Such a pool
// can serve no one; as in Spiderpool, it is found when allocating (see
// ReasonExcluded). The pool must be valid. The result depends only on the
// pool's definition, so callers may cache it per *Pool.
func fullyExcluded(p *Pool) bool {
	return len(p.usable(nil).Ranges()) == 0
}

// fullyReserved reports whether p has allocatable addresses (see
// fullyExcluded) and reserved holds every one of them. A nil reserved set
// reserves nothing. The pool must be valid.
func fullyReserved(p *Pool, reserved *netipx.IPSet) bool {
	if reserved == nil {
		return false
	}
	free := p.usable(nil).Ranges()
	if len(free) == 0 {
		return false
	}
	for _, r := range free {
		if !reserved.ContainsRange(r) {
			return false
		}
	}
	return true
}

// ReservedSet returns the addresses the ReservedIP objects rs reserve in the
// given family (4 or 6): the union of the ranges of those that are not
// terminating and are of that family. A ReservedIP without IPVersion takes the
// family of its first range; ranges of the other family are ignored. nil
// entries are skipped. The result is never nil.
func ReservedSet(family int, rs []*ReservedIP) *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, r := range rs {
		if r == nil || r.Terminating || len(r.IPs) == 0 {
			continue
		}
		fam := r.IPVersion
		if fam == 0 {
			fam = familyOf(r.IPs[0].From())
		}
		if fam != family {
			continue
		}
		for _, x := range r.IPs {
			if x.IsValid() && familyOf(x.From()) == family {
				b.AddRange(x)
			}
		}
	}
	set, _ := b.IPSet()
	return set
}
