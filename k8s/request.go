package k8s

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
)

// DefaultInterface is the interface Request asks for when it is given none:
// the pod's first interface, as CNI names it.
const DefaultInterface = "eth0"

// Request builds the ipam.Request for a pod from the pod, its namespace and
// the node it is scheduled to.
//
// It fills Namespace, Name, UID, Labels and Annotations from pod; Stable
// when the pod is controlled by a StatefulSet (gc.KindStatefulSet: its
// addresses then belong to its namespace and name, and come back to the
// pod that takes the name next); Node from pod.Spec.NodeName; NodeLabels from node; and NamespaceLabels and
// NamespaceAnnotations from ns. A nil pod, ns or node leaves its fields empty.
// Interfaces is ifaces or, when none are given, one interface named
// DefaultInterface whose pools and network are worked out by the allocator.
// ContainerID and NetConf are left for the caller, who knows the CNI call and
// its network config; so is App, the pod's application, which SpiderSubnet's
// auto-pools need and App works out from the pod's owner chain:
//
//	req := k8s.Request(pod, ns, node)
//	req.App, err = k8s.App(pod, replicaSet) // the pod's controller, from a cache
//
// The Request shares no memory with the objects or with ifaces, so objects
// from an informer's cache are safe to pass.
func Request(pod *corev1.Pod, ns *corev1.Namespace, node *corev1.Node, ifaces ...ipam.NIC) ipam.Request {
	var req ipam.Request
	if pod != nil {
		req.Namespace = pod.Namespace
		req.Name = pod.Name
		req.UID = string(pod.UID)
		req.Labels = maps.Clone(pod.Labels)
		req.Annotations = maps.Clone(pod.Annotations)
		req.Node = pod.Spec.NodeName
		req.Stable = ControllerKind(pod) == gc.KindStatefulSet
	}
	if node != nil {
		req.NodeLabels = maps.Clone(node.Labels)
	}
	if ns != nil {
		req.NamespaceLabels = maps.Clone(ns.Labels)
		req.NamespaceAnnotations = maps.Clone(ns.Annotations)
	}
	if len(ifaces) == 0 {
		req.Interfaces = []ipam.NIC{{Name: DefaultInterface}}
	} else {
		req.Interfaces = make([]ipam.NIC, len(ifaces))
		for i, ifc := range ifaces {
			ifc.Pools = slices.Clone(ifc.Pools)
			ifc.IPs = slices.Clone(ifc.IPs)
			req.Interfaces[i] = ifc
		}
	}
	return req
}
