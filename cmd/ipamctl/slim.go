package main

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The objects ipamctl keeps hold only the fields it reads: explain (the
// allocation request, through k8s.Request, and the notes), gc (the pod's
// phase, deletion, grace periods, finished containers and addresses, the
// node's readiness, the StatefulSet's ordinals) and validate (annotations).
// What a List of a real cluster mostly holds (container specs, managed fields,
// volumes, node images) is dropped as each object is read.

// lastApplied is the annotation kubectl apply writes: the whole object again.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name:                       m.Name,
		Namespace:                  m.Namespace,
		UID:                        m.UID,
		Labels:                     m.Labels,
		Annotations:                m.Annotations,
		DeletionTimestamp:          m.DeletionTimestamp,
		DeletionGracePeriodSeconds: m.DeletionGracePeriodSeconds,
	}
	if ref := metav1.GetControllerOfNoCopy(m); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	delete(out.Annotations, lastApplied)
	return out
}

func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: slimMeta(&p.ObjectMeta)}
	out.Spec.NodeName = p.Spec.NodeName
	out.Spec.HostNetwork = p.Spec.HostNetwork
	out.Spec.TerminationGracePeriodSeconds = p.Spec.TerminationGracePeriodSeconds
	out.Status.Phase = p.Status.Phase
	out.Status.PodIP = p.Status.PodIP
	out.Status.PodIPs = p.Status.PodIPs
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: t.FinishedAt}},
			})
		}
	}
	return out
}

func slimNamespace(ns *corev1.Namespace) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: slimMeta(&ns.ObjectMeta)}
}

func slimNode(n *corev1.Node) *corev1.Node {
	out := &corev1.Node{ObjectMeta: slimMeta(&n.ObjectMeta)}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			out.Status.Conditions = []corev1.NodeCondition{{Type: cond.Type, Status: cond.Status}}
		}
	}
	return out
}

func slimStatefulSet(s *appsv1.StatefulSet) *appsv1.StatefulSet {
	out := &appsv1.StatefulSet{ObjectMeta: slimMeta(&s.ObjectMeta)}
	out.Spec.Replicas = s.Spec.Replicas
	out.Spec.Ordinals = s.Spec.Ordinals
	return out
}
