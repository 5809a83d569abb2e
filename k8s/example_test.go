package k8s_test

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
)

// A selector from a Kubernetes object keeps its meaning: it matches the label
// sets the Kubernetes selector matches, and one that Kubernetes rejects is
// rejected with every problem named.
func ExampleLabelSelector() {
	sel, err := k8s.LabelSelector(&metav1.LabelSelector{
		MatchLabels: map[string]string{"app": "web"},
		MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"front", "edge"}},
		},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(sel)
	fmt.Println(sel.Matches(map[string]string{"app": "web", "tier": "edge"}))
	fmt.Println(sel.Matches(map[string]string{"app": "web"}))

	_, err = k8s.LabelSelector(&metav1.LabelSelector{
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}},
	})
	fmt.Println(err)
	// Output:
	// app=web,tier in (edge,front)
	// true
	// false
	// matchExpressions[0].values: must be specified when operator is In
}

// ToLabelSelector gives back the Kubernetes form, such as for writing a
// pool's podAffinity to a custom resource.
func ExampleToLabelSelector() {
	sel := &ipam.LabelSelector{MatchExpressions: []ipam.LabelSelectorRequirement{{Key: "gpu", Operator: ipam.Exists}}}
	k := k8s.ToLabelSelector(sel)
	fmt.Println(metav1.FormatLabelSelector(k))
	// Output:
	// gpu
}

// Request gathers what pool selection needs from the pod, its namespace and
// its node; with no interfaces given it asks for eth0.
func ExampleRequest() {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-0", UID: "7d1c",
			Labels: map[string]string{"app": "web"},
		},
		Spec: corev1.PodSpec{NodeName: "node-1"},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "shop", Labels: map[string]string{"team": "retail"},
	}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "node-1", Labels: map[string]string{"zone": "a"},
	}}

	req := k8s.Request(pod, ns, node)
	fmt.Println(req.Namespace, req.Name, req.UID, req.Node)
	fmt.Println(req.Labels, req.NamespaceLabels, req.NodeLabels)
	fmt.Println(req.Interfaces[0].Name)

	req = k8s.Request(pod, ns, node, ipam.NIC{Name: "net1", Network: "shop/macvlan"})
	fmt.Println(req.Interfaces[0].Name, req.Interfaces[0].Network)
	// Output:
	// shop web-0 7d1c node-1
	// map[app:web] map[team:retail] map[zone:a]
	// eth0
	// net1 shop/macvlan
}

// App finds a pod's application, the top of its controller chain: the
// Deployment above its ReplicaSet, which the caller reads from a cache. An
// auto-created pool serves only the pods of its application.
func ExampleApp() {
	yes := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7d9c-x2", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c", UID: "u-rs", Controller: &yes}}}}
	rs := &metav1.ObjectMeta{Namespace: "shop", Name: "web-7d9c", UID: "u-rs", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u-web", Controller: &yes}}}
	req := k8s.Request(pod, nil, nil)
	app, err := k8s.App(pod, rs)
	if err != nil {
		panic(err)
	}
	req.App = app
	fmt.Println(req.App, req.App.UID)

	// Without the ReplicaSet, its application cannot be told: retry once
	// the cache has it.
	_, err = k8s.App(pod, nil)
	fmt.Println(errors.Is(err, ipam.ErrNotReady))
	// Output:
	// Deployment shop/web u-web
	// true
}
