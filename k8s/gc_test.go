package k8s

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam/gc"
)

func TestGCPod(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	grace, term := int64(10), int64(45)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "db-1", UID: "u1",
			DeletionTimestamp:          &metav1.Time{Time: at},
			DeletionGracePeriodSeconds: &grace,
			OwnerReferences: []metav1.OwnerReference{
				{Kind: "Node", Name: "n"},
				{Kind: "StatefulSet", Name: "db", Controller: new(true)},
			},
		},
		Spec: corev1.PodSpec{NodeName: "n1", TerminationGracePeriodSeconds: &term},
		Status: corev1.PodStatus{
			Phase:  corev1.PodFailed,
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			ContainerStatuses: []corev1.ContainerStatus{
				{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.Time{Time: at.Add(-time.Minute)}}}},
				{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.Time{Time: at.Add(-time.Second)}}}},
				{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			},
		},
	}
	ready := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
	}}}
	want := gc.Pod{
		Namespace: "shop", Name: "db-1", UID: "u1", Phase: gc.PodFailed,
		DeletionTimestamp: at, DeletionGracePeriod: 10 * time.Second, TerminationGracePeriod: 45 * time.Second,
		FinishedAt: at.Add(-time.Second), NodeReady: true, HasIPs: true, ControllerKind: gc.KindStatefulSet,
	}
	if diff := cmp.Diff(want, GCPod(pod, ready)); diff != "" {
		t.Errorf("GCPod (-want +got):\n%s", diff)
	}

	// Defaults: no grace period set is 30 s; no node, or a node whose Ready
	// condition is not True, is not Ready.
	bare := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "u2"}, Status: corev1.PodStatus{PodIP: "10.0.0.2"}}
	want = gc.Pod{Namespace: "shop", Name: "web", UID: "u2", TerminationGracePeriod: 30 * time.Second, HasIPs: true}
	unknown := &corev1.Node{Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}}}}
	for _, node := range []*corev1.Node{nil, {}, unknown} {
		if diff := cmp.Diff(want, GCPod(bare, node)); diff != "" {
			t.Errorf("GCPod with node %+v (-want +got):\n%s", node, diff)
		}
	}
}

func TestGCStatefulSet(t *testing.T) {
	three := int32(3)
	got := GCStatefulSet(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec: appsv1.StatefulSetSpec{Replicas: &three, Ordinals: &appsv1.StatefulSetOrdinals{Start: 5}}})
	if want := (gc.StatefulSet{Namespace: "shop", Name: "db", Replicas: 3, OrdinalsStart: 5}); got != want {
		t.Errorf("GCStatefulSet = %+v, want %+v", got, want)
	}
	got = GCStatefulSet(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"}})
	if want := (gc.StatefulSet{Namespace: "shop", Name: "db", Replicas: 1}); got != want {
		t.Errorf("GCStatefulSet without replicas = %+v, want %+v", got, want)
	}
}

func TestRequestStable(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-0", UID: "u",
		OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: new(true)}}}}
	if !Request(pod, nil, nil).Stable {
		t.Error("a StatefulSet's pod: Request is not Stable")
	}
	pod.OwnerReferences[0].Kind = "ReplicaSet"
	if Request(pod, nil, nil).Stable {
		t.Error("a ReplicaSet's pod: Request is Stable")
	}
}
