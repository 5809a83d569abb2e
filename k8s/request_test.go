package k8s

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
)

func TestRequest(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   "shop",
			Name:        "web-0",
			UID:         "0b5e-uid",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4":["blue"]}`},
		},
		Spec: corev1.PodSpec{NodeName: "node-1"},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:        "shop",
		Labels:      map[string]string{"team": "retail"},
		Annotations: map[string]string{"ipam.spidernet.io/default-ipv4-ippool": `["green"]`},
	}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   "node-1",
		Labels: map[string]string{"zone": "a"},
	}}
	eth0 := []ipam.NIC{{Name: "eth0"}}
	podOnly := ipam.Request{
		Namespace:   "shop",
		Name:        "web-0",
		UID:         "0b5e-uid",
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4":["blue"]}`},
		Node:        "node-1",
		Interfaces:  eth0,
	}
	full := podOnly
	full.NodeLabels = map[string]string{"zone": "a"}
	full.NamespaceLabels = map[string]string{"team": "retail"}
	full.NamespaceAnnotations = map[string]string{"ipam.spidernet.io/default-ipv4-ippool": `["green"]`}

	twoIfaces := []ipam.NIC{
		{Name: "eth0", Pools: []string{"blue"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
		{Name: "net1", Network: "shop/macvlan"},
	}
	withIfaces := full
	withIfaces.Interfaces = twoIfaces

	for _, c := range []struct {
		name   string
		pod    *corev1.Pod
		ns     *corev1.Namespace
		node   *corev1.Node
		ifaces []ipam.NIC
		want   ipam.Request
	}{
		{"pod, namespace and node", pod, ns, node, nil, full},
		{"no namespace or node", pod, nil, nil, nil, podOnly},
		{"interfaces given", pod, ns, node, twoIfaces, withIfaces},
		{
			"namespace and node only", nil, ns, node, nil,
			ipam.Request{
				NodeLabels:           full.NodeLabels,
				NamespaceLabels:      full.NamespaceLabels,
				NamespaceAnnotations: full.NamespaceAnnotations,
				Interfaces:           eth0,
			},
		},
		{"nothing", nil, nil, nil, nil, ipam.Request{Interfaces: eth0}},
		{
			"unscheduled pod without labels", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"}}, nil, nil, nil,
			ipam.Request{Namespace: "ns", Name: "p", UID: "u", Interfaces: eth0},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Request(c.pod, c.ns, c.node, c.ifaces...)
			if diff := cmp.Diff(c.want, got, cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("Request (-want +got):\n%s", diff)
			}
		})
	}
}

// The Request shares no memory with the objects or the interfaces, so that
// changing it cannot corrupt an informer's cache.
func TestRequestCopies(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"a": "1"},
	}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Labels:      map[string]string{"team": "retail"},
		Annotations: map[string]string{"b": "2"},
	}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"zone": "a"}}}
	ifaces := []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}}

	req := Request(pod, ns, node, ifaces...)
	req.Labels["app"] = "x"
	req.Annotations["a"] = "x"
	req.NamespaceLabels["team"] = "x"
	req.NamespaceAnnotations["b"] = "x"
	req.NodeLabels["zone"] = "x"
	req.Interfaces[0].Name = "x"
	req.Interfaces[0].Pools[0] = "x"
	req.Interfaces[0].IPs[0] = netip.MustParseAddr("10.0.0.9")

	require.Equal(t, "web", pod.Labels["app"])
	require.Equal(t, "1", pod.Annotations["a"])
	require.Equal(t, "retail", ns.Labels["team"])
	require.Equal(t, "2", ns.Annotations["b"])
	require.Equal(t, "a", node.Labels["zone"])
	require.Equal(t, "eth0", ifaces[0].Name)
	require.Equal(t, "blue", ifaces[0].Pools[0])
	require.Equal(t, netip.MustParseAddr("10.0.0.5"), ifaces[0].IPs[0])
}
