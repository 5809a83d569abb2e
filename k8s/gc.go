package k8s

import (
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam/gc"
)

// defaultTerminationGracePeriod is what Kubernetes fills in for a pod whose
// spec.terminationGracePeriodSeconds is unset.
const defaultTerminationGracePeriod = 30 * time.Second

// GCPod describes a pod as garbage collection (gc.Decide) sees it. node
// is the pod's node, or nil if it is unknown or gone, which counts as not
// Ready. An unset spec.terminationGracePeriodSeconds counts as 30 seconds,
// Kubernetes' default. The result shares no memory with the objects.
func GCPod(pod *corev1.Pod, node *corev1.Node) gc.Pod {
	p := gc.Pod{
		Namespace:              pod.Namespace,
		Name:                   pod.Name,
		UID:                    string(pod.UID),
		Phase:                  gc.PodPhase(pod.Status.Phase),
		HostNetwork:            pod.Spec.HostNetwork,
		HasIPs:                 len(pod.Status.PodIPs) > 0 || pod.Status.PodIP != "",
		ControllerKind:         ControllerKind(pod),
		NodeReady:              NodeReady(node),
		TerminationGracePeriod: defaultTerminationGracePeriod,
	}
	if t := pod.DeletionTimestamp; t != nil {
		p.DeletionTimestamp = t.Time
	}
	if s := pod.DeletionGracePeriodSeconds; s != nil {
		p.DeletionGracePeriod = time.Duration(*s) * time.Second
	}
	if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
		p.TerminationGracePeriod = time.Duration(*s) * time.Second
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(p.FinishedAt) {
			p.FinishedAt = t.FinishedAt.Time
		}
	}
	return p
}

// GCStatefulSet describes a StatefulSet as garbage collection sees it: an
// unset spec.replicas counts as 1, Kubernetes' default.
func GCStatefulSet(s *appsv1.StatefulSet) gc.StatefulSet {
	out := gc.StatefulSet{Namespace: s.Namespace, Name: s.Name, Replicas: 1}
	if s.Spec.Replicas != nil {
		out.Replicas = int(*s.Spec.Replicas)
	}
	if s.Spec.Ordinals != nil {
		out.OrdinalsStart = int(s.Spec.Ordinals.Start)
	}
	return out
}

// NodeReady reports whether node exists and its Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	if node == nil {
		return false
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ControllerKind returns the kind of the pod's controlling owner reference
// (controller: true), such as "StatefulSet" or "ReplicaSet", or "" if it
// has none.
func ControllerKind(pod *corev1.Pod) string {
	if ref := metav1.GetControllerOf(pod); ref != nil {
		return ref.Kind
	}
	return ""
}
