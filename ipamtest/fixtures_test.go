package ipamtest_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
	"github.com/ipamkit/ipam/store"
)

func TestPoolBuilders(t *testing.T) {
	p := ipamtest.V4Pool("blue", "10.0.0.0/24",
		ipamtest.Span("10.0.0.10", "10.0.0.20"), ipamtest.Gateway("10.0.0.254"), ipamtest.Exclude("10.0.0.12", "10.0.0.15-10.0.0.16"),
		ipamtest.Strategy(ipam.LowestFree), ipamtest.Default(), ipamtest.OnNodes("n1"), ipamtest.NodeAffinity("zone", "a"),
		ipamtest.InNamespaces("default"), ipamtest.NamespaceAffinity("team", "a"), ipamtest.PodAffinity("app", "web"),
		ipamtest.MultusNames("kube-system/macvlan"))
	want := &ipam.Pool{
		Name: "blue",
		Ranges: []ipam.Range{{
			Subnet: netip.MustParsePrefix("10.0.0.0/24"), Start: netip.MustParseAddr("10.0.0.10"),
			End: netip.MustParseAddr("10.0.0.20"), Gateway: netip.MustParseAddr("10.0.0.254"),
		}},
		ExcludeIPs: []netipx.IPRange{
			netipx.MustParseIPRange("10.0.0.12-10.0.0.12"), netipx.MustParseIPRange("10.0.0.15-10.0.0.16"),
		},
		Strategy:          ipam.LowestFree,
		Default:           true,
		NodeName:          []string{"n1"},
		NodeAffinity:      &ipam.LabelSelector{MatchLabels: map[string]string{"zone": "a"}},
		NamespaceName:     []string{"default"},
		NamespaceAffinity: &ipam.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		PodAffinity:       &ipam.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		MultusName:        []string{"kube-system/macvlan"},
	}
	if d := cmp.Diff(want, p, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
		cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netipx.IPRange) bool { return a == b })); d != "" {
		t.Errorf("V4Pool (-want +got):\n%s", d)
	}
	require.Equal(t, 6, ipamtest.V6Pool("six", "fd00::/120").Family())
	require.True(t, ipamtest.V4Pool("off", "10.9.0.0/24", ipamtest.Disabled()).Disable)

	for name, f := range map[string]func(){
		"bad cidr":       func() { ipamtest.V4Pool("x", "10.0.0.0/33") },
		"wrong family":   func() { ipamtest.V4Pool("x", "fd00::/64") },
		"v4 for v6":      func() { ipamtest.V6Pool("x", "10.0.0.0/24") },
		"invalid pool":   func() { ipamtest.V4Pool("x", "10.0.0.0/24", ipamtest.Span("10.0.0.20", "10.0.0.10")) },
		"bad address":    func() { ipamtest.Exclude("10.0.0.300") },
		"odd label args": func() { ipamtest.NodeAffinity("zone") },
	} {
		require.Panics(t, f, name)
	}
}

func TestPodBuilder(t *testing.T) {
	ns := ipamtest.Namespace{Name: "team", Labels: map[string]string{"team": "a"}, Annotations: map[string]string{ipam.AnnotationNSDefaultIPv4: `["blue"]`}}
	n := ipamtest.Node{Name: "n1", Labels: map[string]string{"zone": "a"}}
	b := ipamtest.NewPod("default", "db-0").StatefulSet().InNamespace(ns).OnNode(n).
		Label("app", "db").Annotation(ipam.AnnotationIPPool, `{"ipv4":["blue"]}`).
		NetConf(ipam.NetConf{DefaultIPv4Pools: []string{"green"}}).Interface("eth0").Interface("net1", "green")
	got := b.Request()
	want := ipam.Request{
		Namespace: "team", Name: "db-0", UID: "uid-team-db-0", Stable: true,
		Labels:      map[string]string{"app": "db"},
		Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["blue"]}`},
		Node:        "n1", NodeLabels: map[string]string{"zone": "a"},
		NamespaceLabels: ns.Labels, NamespaceAnnotations: ns.Annotations,
		NetConf:    ipam.NetConf{DefaultIPv4Pools: []string{"green"}},
		Interfaces: []ipam.NIC{{Name: "eth0"}, {Name: "net1", Pools: []string{"green"}}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Request (-want +got):\n%s", d)
	}
	require.Equal(t, store.Owner{Namespace: "team", Name: "db-0", UID: "uid-team-db-0", Stable: true}, b.Owner())

	// A Request shares nothing with the builder.
	got.Labels["app"] = "changed"
	got.Interfaces[1].Pools[0] = "changed"
	again := b.UID("uid-2").Request()
	require.Equal(t, "db", again.Labels["app"])
	require.Equal(t, "green", again.Interfaces[1].Pools[0])
	require.Equal(t, "uid-2", again.UID)

	// The default interface is eth0, left to selection.
	require.Equal(t, []ipam.NIC{{Name: "eth0"}}, ipamtest.NewPod("default", "web").Request().Interfaces)
	require.Equal(t, "c0ffee", ipamtest.NewPod("", "").ContainerID("c0ffee").Request().ContainerID)
}

func TestNewAllocator(t *testing.T) {
	ctx := context.Background()
	a, st := ipamtest.NewAllocator(t, ipamtest.V4Pool("blue", "10.0.0.0/29"))
	web := ipamtest.NewPod("default", "web").Interface("eth0", "blue")
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := a.AllocateAt(ctx, web.Request(), now)
	require.NoError(t, err)
	c, err := st.Get(ctx, "blue", res.IPs[0].Address.Addr())
	require.NoError(t, err)
	require.Equal(t, "uid-default-web", c.Owner.UID)
	require.NoError(t, a.ReleaseAt(ctx, web.Owner(), now))
	cs, err := st.List(ctx, "blue")
	require.NoError(t, err)
	require.Empty(t, cs)
}
