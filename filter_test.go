package ipam_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/internal/k8slabel"
)

// filterPool builds a valid IPv4 pool named name; fields is a JSON fragment
// of further spec fields, such as `"nodeName":["node1"]`.
func filterPool(name, fields string) *ipam.Pool {
	doc := `{"name":"` + name + `","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]`
	if fields != "" {
		doc += "," + fields
	}
	return ipam.MustParsePool(doc + "}")
}

// filterSubject is eth0 of pod ns1/web-0 on node1, on network kube-system/macvlan.
func filterSubject() ipam.Subject {
	return ipam.Subject{
		Namespace:       "ns1",
		Pod:             "web-0",
		Node:            "node1",
		NodeLabels:      map[string]string{"zone": "a"},
		PodLabels:       map[string]string{"app": "web"},
		NamespaceLabels: map[string]string{"team": "x"},
		Interface:       "eth0",
		Network:         "kube-system/macvlan",
	}
}

// autoAffinity is the podAffinity of an auto-created pool of Deployment
// ns1/web (filterApp).
const autoAffinity = `"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-api-group":"apps","ipam.spidernet.io/app-api-version":"v1",` +
	`"ipam.spidernet.io/app-kind":"Deployment","ipam.spidernet.io/app-namespace":"ns1","ipam.spidernet.io/app-name":"web"}}`

func filterApp() ipam.AppRef {
	return ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns1", Name: "web", UID: "u-web-0000a"}
}

// longAppName is longer than a label value may be.
var longAppName = strings.Repeat("w", 70)

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		pool    *ipam.Pool
		subject func(*ipam.Subject) // changes to filterSubject; nil for none
		family  int
		want    ipam.Rejection // zero: the pool passes
	}{
		{
			name:   "no rules",
			pool:   filterPool("p1", ""),
			family: 4,
		},
		{
			name: "every rule holds",
			pool: filterPool("p1", `"nodeName":["node0","node1"],"nodeAffinity":{"matchLabels":{"zone":"b"}},`+
				`"namespaceName":["ns1"],"namespaceAffinity":{"matchLabels":{"team":"y"}},`+
				`"podAffinity":{"matchExpressions":[{"key":"app","operator":"In","values":["web","db"]}]},`+
				`"multusName":["kube-system/ipvlan","kube-system/macvlan"]`),
			family: 4,
		},
		{
			name:   "family 0 takes either family",
			pool:   ipam.MustParsePool(`{"name":"v6","subnet":"fd00::/64","ips":["fd00::10-fd00::20"]}`),
			family: 0,
		},
		{
			name:   "terminating",
			pool:   filterPool("term", `"terminating":true`),
			family: 4,
			want:   ipam.Rejection{Pool: "term", Reason: ipam.ReasonTerminating, Message: "terminating"},
		},
		{
			name: "terminating wins over every other rule",
			pool: filterPool("term", `"terminating":true,"disable":true,"nodeName":["other"],"namespaceName":["other"],`+
				`"podAffinity":{"matchLabels":{"app":"other"}},"multusName":["other/other"]`),
			family: 6,
			want:   ipam.Rejection{Pool: "term", Reason: ipam.ReasonTerminating, Message: "terminating"},
		},
		{
			name:   "disabled",
			pool:   filterPool("dis", `"disable":true`),
			family: 4,
			want:   ipam.Rejection{Pool: "dis", Reason: ipam.ReasonDisabled, Message: "disabled"},
		},
		{
			name:   "disabled wins over the family",
			pool:   filterPool("dis", `"disable":true,"nodeName":["other"]`),
			family: 6,
			want:   ipam.Rejection{Pool: "dis", Reason: ipam.ReasonDisabled, Message: "disabled"},
		},
		{
			name:   "SP-20 IPv6 pool listed under ipv4",
			pool:   ipam.MustParsePool(`{"name":"v6pool","ipVersion":6,"subnet":"fd00::/64"}`),
			family: 4,
			want:   ipam.Rejection{Pool: "v6pool", Reason: ipam.ReasonFamily, Message: "IPv6 pool, IPv4 wanted"},
		},
		{
			name:   "IPv4 pool for IPv6, before the node rule",
			pool:   filterPool("v4pool", `"nodeName":["other"]`),
			family: 6,
			want:   ipam.Rejection{Pool: "v4pool", Reason: ipam.ReasonFamily, Message: "IPv4 pool, IPv6 wanted"},
		},
		{
			name:    "SP-13 nodeName mismatch",
			pool:    filterPool("p1", `"nodeName":["node1"]`),
			subject: func(s *ipam.Subject) { s.Node = "node2" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeName, Message: `node "node2" not in nodeName [node1]`},
		},
		{
			name:    "nodeName lists every name",
			pool:    filterPool("p1", `"nodeName":["node1","node3"]`),
			subject: func(s *ipam.Subject) { s.Node = "node2" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeName, Message: `node "node2" not in nodeName [node1 node3]`},
		},
		{
			name:    "SP-14 nodeName set: a node it lists passes though nodeAffinity would not",
			pool:    filterPool("p1", `"nodeName":["node1"],"nodeAffinity":{"matchLabels":{"zone":"b"}}`),
			subject: func(s *ipam.Subject) { s.Node, s.NodeLabels = "node1", map[string]string{"zone": "a"} },
			family:  4,
		},
		{
			name:    "SP-14 nodeName set: a node it does not list fails though nodeAffinity would pass",
			pool:    filterPool("p1", `"nodeName":["node1"],"nodeAffinity":{"matchLabels":{"zone":"b"}}`),
			subject: func(s *ipam.Subject) { s.Node, s.NodeLabels = "node2", map[string]string{"zone": "b"} },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeName, Message: `node "node2" not in nodeName [node1]`},
		},
		{
			name:    "nodeAffinity mismatch",
			pool:    filterPool("p1", `"nodeAffinity":{"matchLabels":{"zone":"b"}}`),
			subject: func(s *ipam.Subject) { s.Node = "n2" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeAffinity, Message: `node "n2" labels do not match nodeAffinity zone=b`},
		},
		{
			name:    "nodeAffinity against a node without labels",
			pool:    filterPool("p1", `"nodeAffinity":{"matchExpressions":[{"key":"zone","operator":"Exists"}]}`),
			subject: func(s *ipam.Subject) { s.NodeLabels = nil },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeAffinity, Message: `node "node1" labels do not match nodeAffinity zone`},
		},
		{
			name:    "the node rule comes before the namespace rule",
			pool:    filterPool("p1", `"nodeName":["node1"],"namespaceName":["ns1"]`),
			subject: func(s *ipam.Subject) { s.Node, s.Namespace = "node2", "ns2" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeName, Message: `node "node2" not in nodeName [node1]`},
		},
		{
			name:    "namespaceName mismatch",
			pool:    filterPool("p1", `"namespaceName":["ns1"]`),
			subject: func(s *ipam.Subject) { s.Namespace = "ns2" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNamespaceName, Message: `namespace "ns2" not in namespaceName [ns1]`},
		},
		{
			name:    "SP-16 namespaceName set: a namespace it lists passes though namespaceAffinity would not",
			pool:    filterPool("p1", `"namespaceName":["ns1"],"namespaceAffinity":{"matchLabels":{"team":"y"}}`),
			subject: func(s *ipam.Subject) { s.Namespace, s.NamespaceLabels = "ns1", map[string]string{"team": "x"} },
			family:  4,
		},
		{
			name:    "SP-16 namespaceName set: a namespace it does not list fails though namespaceAffinity would pass",
			pool:    filterPool("p1", `"namespaceName":["ns1"],"namespaceAffinity":{"matchLabels":{"team":"y"}}`),
			subject: func(s *ipam.Subject) { s.Namespace, s.NamespaceLabels = "ns2", map[string]string{"team": "y"} },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNamespaceName, Message: `namespace "ns2" not in namespaceName [ns1]`},
		},
		{
			name: "SP-17 namespaceAffinity match",
			pool: ipam.MustParsePool(`{"name":"test-ns1-ippool","subnet":"10.6.0.0/16","ips":["10.6.168.111-10.6.168.120"],` +
				`"namespaceAffinity":{"matchLabels":{"kubernetes.io/metadata.name":"test-ns1"}}}`),
			subject: func(s *ipam.Subject) {
				s.Namespace, s.NamespaceLabels = "test-ns1", map[string]string{"kubernetes.io/metadata.name": "test-ns1"}
			},
			family: 4,
		},
		{
			name: "SP-17 namespaceAffinity mismatch",
			pool: ipam.MustParsePool(`{"name":"test-ns1-ippool","subnet":"10.6.0.0/16","ips":["10.6.168.111-10.6.168.120"],` +
				`"namespaceAffinity":{"matchLabels":{"kubernetes.io/metadata.name":"test-ns1"}}}`),
			subject: func(s *ipam.Subject) {
				s.Namespace, s.NamespaceLabels = "test-ns2", map[string]string{"kubernetes.io/metadata.name": "test-ns2"}
			},
			family: 4,
			want: ipam.Rejection{Pool: "test-ns1-ippool", Reason: ipam.ReasonNamespaceAffinity,
				Message: `namespace "test-ns2" labels do not match namespaceAffinity kubernetes.io/metadata.name=test-ns1`},
		},
		{
			name:    "the namespace rule comes before the pod rule",
			pool:    filterPool("p1", `"namespaceAffinity":{"matchLabels":{"team":"y"}},"podAffinity":{"matchLabels":{"app":"db"}}`),
			subject: nil,
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNamespaceAffinity, Message: `namespace "ns1" labels do not match namespaceAffinity team=y`},
		},
		{
			name:    "podAffinity mismatch",
			pool:    filterPool("p1", `"podAffinity":{"matchLabels":{"app":"web"}}`),
			subject: func(s *ipam.Subject) { s.PodLabels = map[string]string{"app": "db"} },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonPodAffinity, Message: "pod labels do not match podAffinity app=web"},
		},
		{
			name:   "podAffinity with expressions",
			pool:   filterPool("p1", `"podAffinity":{"matchExpressions":[{"key":"tier","operator":"In","values":["b","a"]}]}`),
			family: 4,
			want:   ipam.Rejection{Pool: "p1", Reason: ipam.ReasonPodAffinity, Message: "pod labels do not match podAffinity tier in (a,b)"},
		},
		{
			name:    "the pod rule comes before the Multus rule",
			pool:    filterPool("p1", `"podAffinity":{"matchLabels":{"app":"db"}},"multusName":["kube-system/ipvlan"]`),
			subject: func(s *ipam.Subject) { s.Network = "" },
			family:  4,
			want:    ipam.Rejection{Pool: "p1", Reason: ipam.ReasonPodAffinity, Message: "pod labels do not match podAffinity app=db"},
		},
		{
			name:    "auto-created pool: the pod's application matches",
			pool:    filterPool("auto4-web-eth0-a5bd3", autoAffinity),
			subject: func(s *ipam.Subject) { s.App = filterApp() },
			family:  4,
		},
		{
			name: "auto-created pool: the pod's labels do not count",
			pool: filterPool("auto4-web-eth0-a5bd3", autoAffinity),
			subject: func(s *ipam.Subject) {
				s.PodLabels = map[string]string{"ipam.spidernet.io/app-api-group": "apps", "ipam.spidernet.io/app-api-version": "v1",
					"ipam.spidernet.io/app-kind": "Deployment", "ipam.spidernet.io/app-namespace": "ns1", "ipam.spidernet.io/app-name": "web"}
			},
			family: 4,
			want: ipam.Rejection{Pool: "auto4-web-eth0-a5bd3", Reason: ipam.ReasonPodAffinity,
				Message: "pod has no application (no controller, or none given), and an auto-created pool serves only the pods of its own: Deployment ns1/web (apps/v1)"},
		},
		{
			name:    "auto-created pool: another application",
			pool:    filterPool("auto4-web-eth0-a5bd3", autoAffinity),
			subject: func(s *ipam.Subject) { s.App = filterApp(); s.App.Name = "db" },
			family:  4,
			want: ipam.Rejection{Pool: "auto4-web-eth0-a5bd3", Reason: ipam.ReasonPodAffinity,
				Message: "pod's application Deployment ns1/db (apps/v1) does not match the podAffinity of an auto-created pool, which serves the pods of Deployment ns1/web (apps/v1)"},
		},
		{
			name:    "auto-created pool: another API version of the same kind and name",
			pool:    filterPool("auto4-web-eth0-a5bd3", autoAffinity),
			subject: func(s *ipam.Subject) { s.App = filterApp(); s.App.APIVersion = "apps/v1beta2" },
			family:  4,
			want: ipam.Rejection{Pool: "auto4-web-eth0-a5bd3", Reason: ipam.ReasonPodAffinity,
				Message: "pod's application Deployment ns1/web (apps/v1beta2) does not match the podAffinity of an auto-created pool, which serves the pods of Deployment ns1/web (apps/v1)"},
		},
		{
			name: "auto-created pool: a long application name, as its labels shorten it",
			pool: filterPool("p1", `"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-api-group":"apps","ipam.spidernet.io/app-api-version":"v1",`+
				`"ipam.spidernet.io/app-kind":"Deployment","ipam.spidernet.io/app-namespace":"ns1","ipam.spidernet.io/app-name":"`+
				k8slabel.Value(longAppName)+`"}}`),
			subject: func(s *ipam.Subject) { s.App = filterApp(); s.App.Name = longAppName },
			family:  4,
		},
		{
			name:    "auto-created pool: as in Spiderpool, multusName is not checked once the application matches",
			pool:    filterPool("auto4-web-eth0-a5bd3", autoAffinity+`,"multusName":["kube-system/ipvlan"]`),
			subject: func(s *ipam.Subject) { s.App = filterApp() },
			family:  4,
		},
		{
			name:    "four of the five application keys: a label selector on the pod's labels",
			pool:    filterPool("p1", `"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-kind":"Deployment","ipam.spidernet.io/app-namespace":"ns1","ipam.spidernet.io/app-name":"web","ipam.spidernet.io/app-api-version":"v1"}}`),
			subject: func(s *ipam.Subject) { s.App = filterApp() },
			family:  4,
			want: ipam.Rejection{Pool: "p1", Reason: ipam.ReasonPodAffinity,
				Message: "pod labels do not match podAffinity ipam.spidernet.io/app-api-version=v1,ipam.spidernet.io/app-kind=Deployment,ipam.spidernet.io/app-name=web,ipam.spidernet.io/app-namespace=ns1"},
		},
		{
			name:    "multusName mismatch",
			pool:    filterPool("p1", `"multusName":["kube-system/ipvlan"]`),
			subject: func(s *ipam.Subject) { s.Interface, s.Network = "net1", "kube-system/macvlan" },
			family:  4,
			want: ipam.Rejection{Pool: "p1", Reason: ipam.ReasonMultusName,
				Message: `interface net1 network "kube-system/macvlan" not in multusName [kube-system/ipvlan]`},
		},
		{
			name:    "multusName with an unknown network",
			pool:    filterPool("p1", `"multusName":["kube-system/ipvlan"]`),
			subject: func(s *ipam.Subject) { s.Network = "" },
			family:  4,
			want: ipam.Rejection{Pool: "p1", Reason: ipam.ReasonMultusName,
				Message: "interface eth0 network unknown, multusName [kube-system/ipvlan] wanted"},
		},
		{
			name:    "SP-22 (deliberate difference) no multusName, network unknown: kept",
			pool:    filterPool("p", ""),
			subject: func(s *ipam.Subject) { s.Network = "" },
			family:  4,
		},
		{
			name:    "a bare multusName matches a bare network",
			pool:    filterPool("p1", `"multusName":["calico"]`),
			subject: func(s *ipam.Subject) { s.Network = "calico" },
			family:  4,
		},
		{
			name:    "a bare multusName does not match a network with a namespace",
			pool:    filterPool("p1", `"multusName":["macvlan"]`),
			subject: func(s *ipam.Subject) { s.Interface, s.Network = "net1", "ns1/macvlan" },
			family:  4,
			want: ipam.Rejection{Pool: "p1", Reason: ipam.ReasonMultusName,
				Message: `interface net1 network "ns1/macvlan" not in multusName [macvlan]`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := filterSubject()
			if tt.subject != nil {
				tt.subject(&s)
			}
			got, rejected := s.Check(tt.pool, tt.family)
			require.Equal(t, tt.want != ipam.Rejection{}, rejected, "rejected; rejection %+v", got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Check() rejection (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckNilPool(t *testing.T) {
	s := filterSubject()
	got, rejected := s.Check(nil, 4)
	require.True(t, rejected)
	require.Equal(t, ipam.ReasonNotFound, got.Reason)
}

func TestCheckZeroSubject(t *testing.T) {
	var s ipam.Subject
	for _, tt := range []struct {
		fields   string
		rejected bool
	}{
		{"", false},
		{`"nodeName":["node1"]`, true},
		{`"nodeAffinity":{}`, false}, // an empty selector matches every label set
		{`"nodeAffinity":{"matchLabels":{"zone":"a"}}`, true},
		{`"namespaceName":["ns1"]`, true},
		{`"podAffinity":{"matchExpressions":[{"key":"app","operator":"DoesNotExist"}]}`, false},
		{`"podAffinity":{"matchExpressions":[{"key":"app","operator":"Exists"}]}`, true},
		{`"multusName":["kube-system/macvlan"]`, true},
	} {
		_, rejected := s.Check(filterPool("p", tt.fields), 4)
		require.Equal(t, tt.rejected, rejected, "pool with %s", tt.fields)
	}
}

// TestCheckPassDoesNotAllocate pins the pass path of Check, which runs for
// every candidate of every request, at zero allocations.
func TestCheckPassDoesNotAllocate(t *testing.T) {
	p := filterPool("p1", `"nodeName":["node0","node1"],"namespaceAffinity":{"matchLabels":{"team":"x"}},`+
		`"podAffinity":{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"tier","operator":"NotIn","values":["db"]}]},`+
		`"multusName":["kube-system/ipvlan","kube-system/macvlan"]`)
	p2 := filterPool("p2", `"nodeAffinity":{"matchExpressions":[{"key":"zone","operator":"In","values":["a","b"]}]},"namespaceName":["ns1"]`)
	auto := filterPool("auto4-web-eth0-a5bd3", autoAffinity)
	s := filterSubject()
	s.App = filterApp()
	allocs := testing.AllocsPerRun(200, func() {
		if _, bad := s.Check(p, 4); bad {
			panic("p1 rejected")
		}
		if _, bad := s.Check(p2, 4); bad {
			panic("p2 rejected")
		}
		if _, bad := s.Check(auto, 4); bad {
			panic("auto-pool rejected")
		}
	})
	require.Zero(t, allocs)
}

func TestRejectionString(t *testing.T) {
	r := ipam.Rejection{Pool: "p1", Reason: ipam.ReasonNodeName, Message: `node "n2" not in nodeName [n1]`}
	require.Equal(t, `p1: node "n2" not in nodeName [n1]`, r.String())
}

// TestFilterSP19 is scenario SP-19: a disabled and a terminating pool are
// filtered with their reasons; the remaining pool serves.
func TestFilterSP19(t *testing.T) {
	dis := filterPool("dis", `"disable":true`)
	term := filterPool("term", `"terminating":true`)
	ok := filterPool("ok", "")
	s := filterSubject()
	kept, rejected := s.Filter([]*ipam.Pool{dis, term, ok}, 4)
	require.Equal(t, []*ipam.Pool{ok}, kept)
	want := []ipam.Rejection{
		{Pool: "dis", Reason: ipam.ReasonDisabled, Message: "disabled"},
		{Pool: "term", Reason: ipam.ReasonTerminating, Message: "terminating"},
	}
	if diff := cmp.Diff(want, rejected); diff != "" {
		t.Errorf("rejected (-want +got):\n%s", diff)
	}
}

func TestFilterKeepsOrder(t *testing.T) {
	var pools []*ipam.Pool
	for _, p := range []struct{ name, fields string }{
		{"e", ""},
		{"d", `"nodeName":["node1"]`},
		{"x1", `"nodeName":["node9"]`},
		{"c", `"podAffinity":{"matchLabels":{"app":"web"}}`},
		{"x2", `"namespaceName":["ns9"]`},
		{"b", ""},
		{"x3", `"disable":true`},
		{"a", `"multusName":["kube-system/macvlan"]`},
	} {
		pools = append(pools, filterPool(p.name, p.fields))
	}
	in := append([]*ipam.Pool(nil), pools...)
	s := filterSubject()
	kept, rejected := s.Filter(pools, 4)
	var names, rejectedNames []string
	for _, p := range kept {
		names = append(names, p.Name)
	}
	for _, r := range rejected {
		rejectedNames = append(rejectedNames, r.Pool)
	}
	require.Equal(t, []string{"e", "d", "c", "b", "a"}, names)
	require.Equal(t, []string{"x1", "x2", "x3"}, rejectedNames)
	require.Equal(t, in, pools, "Filter must not modify its input")
}

func TestFilterSP20NothingLeft(t *testing.T) {
	s := filterSubject()
	kept, rejected := s.Filter([]*ipam.Pool{ipam.MustParsePool(`{"name":"v6pool","ipVersion":6,"subnet":"fd00::/64"}`)}, 4)
	require.Empty(t, kept)
	require.Equal(t, []ipam.Rejection{{Pool: "v6pool", Reason: ipam.ReasonFamily, Message: "IPv6 pool, IPv4 wanted"}}, rejected)
}

func TestSubjectOf(t *testing.T) {
	pod := func(annotations map[string]string) *ipam.Request {
		return &ipam.Request{
			Namespace:       "ns1",
			Name:            "web-0",
			UID:             "uid-1",
			Labels:          map[string]string{"app": "web"},
			Annotations:     annotations,
			Node:            "node1",
			NodeLabels:      map[string]string{"zone": "a"},
			NamespaceLabels: map[string]string{"team": "x"},
		}
	}
	networks := func(v string) map[string]string { return map[string]string{ipam.AnnotationMultusNetworks: v} }
	tests := []struct {
		name  string
		req   *ipam.Request
		iface ipam.NIC
		want  string // Subject.Network
	}{
		{"interface network given", pod(networks("a/b/c")), ipam.NIC{Name: "net1", Network: "x/y"}, "x/y"},
		{"first interface, default-network annotation", pod(map[string]string{ipam.AnnotationMultusDefault: "kube-system/macvlan"}),
			ipam.NIC{Name: "eth0"}, "kube-system/macvlan"},
		{"first interface, bare default-network kept bare", pod(map[string]string{ipam.AnnotationMultusDefault: "macvlan"}),
			ipam.NIC{Name: "eth0"}, "macvlan"},
		{"first interface, default-network with spaces", pod(map[string]string{ipam.AnnotationMultusDefault: " kube-system / calico "}),
			ipam.NIC{Name: "eth0"}, "kube-system/calico"},
		{"first interface, default-network in JSON", pod(map[string]string{ipam.AnnotationMultusDefault: `[{"name":"calico","namespace":"kube-system"}]`}),
			ipam.NIC{Name: "eth0"}, "kube-system/calico"},
		{"first interface named 0", pod(map[string]string{ipam.AnnotationMultusDefault: "kube-system/macvlan"}),
			ipam.NIC{Name: "0"}, "kube-system/macvlan"},
		{"first interface, cluster network", withClusterNetwork(pod(nil), "kube-system/calico"),
			ipam.NIC{Name: "eth0"}, "kube-system/calico"},
		{"first interface, the annotation wins over the cluster network",
			withClusterNetwork(pod(map[string]string{ipam.AnnotationMultusDefault: "kube-system/macvlan"}), "kube-system/calico"),
			ipam.NIC{Name: "eth0"}, "kube-system/macvlan"},
		{"first interface, blank annotation falls back to the cluster network",
			withClusterNetwork(pod(map[string]string{ipam.AnnotationMultusDefault: " "}), "kube-system/calico"),
			ipam.NIC{Name: "eth0"}, "kube-system/calico"},
		{"first interface, nothing configured", pod(nil), ipam.NIC{Name: "eth0"}, ""},
		{"first interface ignores the networks annotation", pod(networks("kube-system/macvlan@eth0")), ipam.NIC{Name: "eth0"}, ""},
		{"first interface ignores a malformed networks annotation",
			pod(map[string]string{ipam.AnnotationMultusNetworks: "a/b/c", ipam.AnnotationMultusDefault: "kube-system/calico"}),
			ipam.NIC{Name: "eth0"}, "kube-system/calico"},
		{"text: first entry is net1", pod(networks("kube-system/macvlan,ipvlan")), ipam.NIC{Name: "net1"}, "kube-system/macvlan"},
		{"text: second entry is net2, in the pod namespace", pod(networks("kube-system/macvlan,ipvlan")), ipam.NIC{Name: "net2"}, "ns1/ipvlan"},
		{"text: explicit interface", pod(networks("kube-system/macvlan@eth1, ipvlan")), ipam.NIC{Name: "eth1"}, "kube-system/macvlan"},
		{"text: default name counts positions with explicit names", pod(networks("kube-system/macvlan@eth1, ipvlan")), ipam.NIC{Name: "net2"}, "ns1/ipvlan"},
		{"text: a position whose entry is named otherwise", pod(networks("kube-system/macvlan@eth1, ipvlan")), ipam.NIC{Name: "net1"}, ""},
		{"text: interface named by index", pod(networks("kube-system/macvlan@eth1, ipvlan")), ipam.NIC{Name: "2"}, "ns1/ipvlan"},
		{"text: index names match entries named otherwise", pod(networks("kube-system/macvlan@eth1, ipvlan")), ipam.NIC{Name: "1"}, "kube-system/macvlan"},
		{"text: the first match wins", pod(networks("a/one@net2,b/two")), ipam.NIC{Name: "net2"}, "a/one"},
		{"text: beyond the last entry", pod(networks("kube-system/macvlan")), ipam.NIC{Name: "net2"}, ""},
		{"json: by interface", pod(networks(`[{"name":"macvlan","namespace":"kube-system","interface":"eth1"},{"name":"ipvlan","interface":"eth2"}]`)),
			ipam.NIC{Name: "eth2"}, "ns1/ipvlan"},
		{"json: by position", pod(networks(`[{"name":"macvlan","namespace":"kube-system","ips":["10.0.0.5/24"]},{"name":"ipvlan"}]`)),
			ipam.NIC{Name: "net1"}, "kube-system/macvlan"},
		{"json: empty list", pod(networks(`[]`)), ipam.NIC{Name: "net1"}, ""},
		{"no networks annotation", pod(nil), ipam.NIC{Name: "net1"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ipam.SubjectOf(tt.req, tt.iface)
			require.NoError(t, err)
			want := ipam.Subject{
				Namespace:       tt.req.Namespace,
				Pod:             tt.req.Name,
				Node:            tt.req.Node,
				NodeLabels:      tt.req.NodeLabels,
				PodLabels:       tt.req.Labels,
				NamespaceLabels: tt.req.NamespaceLabels,
				Interface:       tt.iface.Name,
				Network:         tt.want,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("SubjectOf() (-want +got):\n%s", diff)
			}
		})
	}
}

func withClusterNetwork(req *ipam.Request, network string) *ipam.Request {
	req.NetConf.ClusterNetwork = network
	return req
}

func TestSubjectOfNilRequest(t *testing.T) {
	got, err := ipam.SubjectOf(nil, ipam.NIC{Name: "net1"})
	require.NoError(t, err)
	require.Equal(t, ipam.Subject{Interface: "net1"}, got)
}

func TestSubjectOfErrors(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		cluster     string
		iface       string
		key, value  string // of the *MultusError; key "" for a *FieldError
		reason      string
	}{
		{"malformed networks", map[string]string{ipam.AnnotationMultusNetworks: "a/b/c"}, "", "net1",
			ipam.AnnotationMultusNetworks, "a/b/c", `more than one "/"`},
		{"malformed networks JSON", map[string]string{ipam.AnnotationMultusNetworks: `[{"name":"a"}`}, "", "net2",
			ipam.AnnotationMultusNetworks, `[{"name":"a"}`, "want a JSON list"},
		{"malformed default network", map[string]string{ipam.AnnotationMultusDefault: "Calico"}, "", "eth0",
			ipam.AnnotationMultusDefault, "Calico", `name "Calico" is not a DNS-1123 label`},
		{"two default networks", map[string]string{ipam.AnnotationMultusDefault: "a,b"}, "", "eth0",
			ipam.AnnotationMultusDefault, "a,b", "want exactly one network, got 2"},
		{"malformed cluster network", nil, "/etc/cni/net.d/calico.conf", "eth0",
			"", "/etc/cni/net.d/calico.conf", `more than one "/"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &ipam.Request{Namespace: "ns1", Name: "web-0", Annotations: tt.annotations}
			req.NetConf.ClusterNetwork = tt.cluster
			_, err := ipam.SubjectOf(req, ipam.NIC{Name: tt.iface})
			require.Error(t, err)
			require.ErrorIs(t, err, ipam.ErrInvalid)
			require.Contains(t, err.Error(), tt.reason)
			if tt.key == "" {
				var fe *ipam.FieldError
				require.ErrorAs(t, err, &fe)
				require.Equal(t, "clusterNetwork", fe.Field)
				require.Equal(t, tt.value, fe.Value)
				return
			}
			var me *ipam.MultusError
			require.ErrorAs(t, err, &me)
			require.Equal(t, tt.key, me.Key)
			require.Equal(t, tt.value, me.Value)
			require.Contains(t, me.Reason, tt.reason)
		})
	}
}

func TestParseNetworksAnnotation(t *testing.T) {
	tests := []struct {
		in   string
		want []ipam.NetworkSelection
	}{
		{"", nil},
		{"  ", nil},
		{"macvlan", []ipam.NetworkSelection{{Name: "macvlan"}}},
		{"kube-system/macvlan@net5", []ipam.NetworkSelection{{Namespace: "kube-system", Name: "macvlan", Interface: "net5"}}},
		{" a , b/c@d ,e@f", []ipam.NetworkSelection{{Name: "a"}, {Namespace: "b", Name: "c", Interface: "d"}, {Name: "e", Interface: "f"}}},
		{"ns / name @ eth1", []ipam.NetworkSelection{{Namespace: "ns", Name: "name", Interface: "eth1"}}},
		{"a,a", []ipam.NetworkSelection{{Name: "a"}, {Name: "a"}}},
		// Multus accepts an empty namespace or interface in the text form.
		{"/name", []ipam.NetworkSelection{{Name: "name"}}},
		{"name@", []ipam.NetworkSelection{{Name: "name"}}},
		{"0net-1", []ipam.NetworkSelection{{Name: "0net-1"}}},
		{`[{"name":"macvlan","namespace":"kube-system","interface":"eth1","ips":["10.0.0.5/24"],"mac":"02:00:00:00:00:01","default-route":["10.0.0.1"]}]`,
			[]ipam.NetworkSelection{{Namespace: "kube-system", Name: "macvlan", Interface: "eth1"}}},
		{`[ {"name":"a"}, {"name":"my.net","interface":"eth1.100"} ]`,
			[]ipam.NetworkSelection{{Name: "a"}, {Name: "my.net", Interface: "eth1.100"}}},
		{`[]`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ipam.ParseNetworksAnnotation(tt.in)
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseNetworksAnnotation(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseNetworksAnnotationErrors(t *testing.T) {
	tests := []struct{ in, reason string }{
		{"a/b/c", `entry 0 "a/b/c": more than one "/"`},
		{"ok, a@b@c", `entry 1 "a@b@c": more than one "@"`},
		{"a,,b", "entry 1 is empty"},
		{"a,", "entry 1 is empty"},
		{",a", "entry 0 is empty"},
		{"ns/", `entry 0 "ns/": the network name is empty`},
		{"ns/@eth1", `entry 0 "ns/@eth1": the network name is empty`},
		{"Macvlan", `entry 0 "Macvlan": name "Macvlan" is not a DNS-1123 label`},
		{"ns_x/a", `entry 0 "ns_x/a": namespace "ns_x" is not a DNS-1123 label`},
		{"a@eth1.100", `entry 0 "a@eth1.100": interface "eth1.100" is not a DNS-1123 label`},
		{"-a", `entry 0 "-a": name "-a" is not a DNS-1123 label`},
		{"a b", `entry 0 "a b": name "a b" is not a DNS-1123 label`},
		{`{"name":"a"}`, "want a JSON list of objects with name, namespace and interface"},
		{`[{"name":"a"}] x`, "want a JSON list"},
		{`["a"]`, "want a JSON list"},
		{`[{"name":5}]`, "want a JSON list"},
		{`[{"name":""}]`, "entry 0: name is required"},
		{`[{"name":"a"},{"namespace":"x"}]`, "entry 1: name is required"},
		{`[{"name":"a"},null]`, "entry 1: name is required"},
		{`[{"name":"a/b"}]`, `entry 0: name "a/b" contains "/"`},
		{`[{"name":"a","namespace":"x/y"}]`, `entry 0: namespace "x/y" contains "/"`},
		{`"a"`, "want a JSON list"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ipam.ParseNetworksAnnotation(tt.in)
			require.Error(t, err)
			require.Nil(t, got)
			require.ErrorIs(t, err, ipam.ErrInvalid)
			var me *ipam.MultusError
			require.ErrorAs(t, err, &me)
			require.Equal(t, ipam.AnnotationMultusNetworks, me.Key)
			require.Equal(t, tt.in, me.Value)
			require.Contains(t, me.Reason, tt.reason)
			require.Contains(t, err.Error(), ipam.AnnotationMultusNetworks)
		})
	}
}

func TestMultusErrorMessage(t *testing.T) {
	_, err := ipam.ParseNetworksAnnotation("a/b/c")
	require.EqualError(t, err, `pod annotation k8s.v1.cni.cncf.io/networks "a/b/c": entry 0 "a/b/c": more than one "/"`)
	_, err = ipam.ParseNetworksAnnotation(`[{"name":""}]`)
	require.EqualError(t, err, "pod annotation k8s.v1.cni.cncf.io/networks `[{\"name\":\"\"}]`: entry 0: name is required")
}

func filterReserved(t *testing.T, docs ...string) []*ipam.ReservedIP {
	t.Helper()
	var out []*ipam.ReservedIP
	for _, d := range docs {
		r := new(ipam.ReservedIP)
		require.NoError(t, json.Unmarshal([]byte(d), r), d)
		out = append(out, r)
	}
	return out
}

func TestReservedSet(t *testing.T) {
	rs := filterReserved(t,
		`{"name":"r1","ips":["10.0.0.1-10.0.0.3"]}`,
		`{"name":"r2","ips":["fd00::1","fd00::5-fd00::6"]}`,
		`{"name":"r3","ips":["10.0.0.9"],"terminating":true}`,
		`{"name":"r4","ipVersion":4,"ips":["10.0.1.0-10.0.1.1","10.0.0.4"]}`,
		`{"name":"r5","ipVersion":6,"ips":[]}`,
	)
	rs = append(rs, nil)
	ranges := func(s *netipx.IPSet) []string {
		require.NotNil(t, s)
		var out []string
		for _, r := range s.Ranges() {
			out = append(out, r.String())
		}
		return out
	}
	if diff := cmp.Diff([]string{"10.0.0.1-10.0.0.4", "10.0.1.0-10.0.1.1"}, ranges(ipam.ReservedSet(4, rs))); diff != "" {
		t.Errorf("IPv4 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"fd00::1-fd00::1", "fd00::5-fd00::6"}, ranges(ipam.ReservedSet(6, rs))); diff != "" {
		t.Errorf("IPv6 (-want +got):\n%s", diff)
	}
	require.Empty(t, ranges(ipam.ReservedSet(4, nil)))
}

func TestFullyExcludedAndReserved(t *testing.T) {
	sp28 := `{"name":"test-ippool","subnet":"10.6.0.0/16","ips":["10.6.168.131-10.6.168.133"]}`
	tests := []struct {
		name     string
		pool     string
		reserved []string // ReservedIP documents
		excluded bool
		fully    bool // FullyReserved
	}{
		{"SP-28 two of three reserved", sp28, []string{`{"ips":["10.6.168.131-10.6.168.132"]}`}, false, false},
		{"SP-28 all three reserved", sp28, []string{`{"ips":["10.6.168.131-10.6.168.132"]}`, `{"ipVersion":4,"ips":["10.6.168.133"]}`}, false, true},
		{"SP-28 terminating reservation ignored", sp28, []string{`{"ips":["10.6.168.131-10.6.168.133"],"terminating":true}`}, false, false},
		{"SP-28 no reservation", sp28, nil, false, false},
		{"reservation of the other family", sp28, []string{`{"ips":["fd00::1"]}`}, false, false},
		{"every address excluded", `{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"],"excludeIPs":["10.0.0.10-10.0.0.20"]}`,
			[]string{`{"ips":["10.0.0.0-10.0.0.255"]}`}, true, false},
		{"all but one excluded, that one reserved", `{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"],"excludeIPs":["10.0.0.10-10.0.0.19"]}`,
			[]string{`{"ips":["10.0.0.20"]}`}, false, true},
		{"only the gateway, excluded", `{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.1"],"gateway":"10.0.0.1","excludeIPs":["10.0.0.1"]}`,
			nil, true, false},
		{"no ips at all", `{"name":"p","subnet":"10.0.0.0/24"}`, nil, true, false},
		{"range set: the only address excluded", `{"name":"p","ranges":[{"subnet":"10.1.0.0/30"}],"excludeIPs":["10.1.0.2"]}`,
			nil, true, false},
		{"range set: one range left", `{"name":"p","ranges":[{"subnet":"10.1.0.0/30"},{"subnet":"10.2.0.0/30"}],"excludeIPs":["10.1.0.2"]}`,
			[]string{`{"ips":["10.2.0.2"]}`}, false, true},
		{"range set: the gateway is not allocatable", `{"name":"p","ranges":[{"subnet":"10.1.0.0/30","gateway":"10.1.0.2"}]}`,
			[]string{`{"ips":["10.1.0.1"]}`}, false, true},
		{"IPv6 range set", `{"name":"p","ranges":[{"subnet":"fd00::/120"}]}`, []string{`{"ips":["fd00::2-fd00::fe"]}`}, false, false},
		{"IPv6 range set fully reserved", `{"name":"p","ranges":[{"subnet":"fd00::/120"}]}`, []string{`{"ips":["fd00::2-fd00::ff"]}`}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := ipam.MustParsePool(tt.pool)
			reserved := ipam.ReservedSet(p.Family(), filterReserved(t, tt.reserved...))
			require.Equal(t, tt.excluded, ipam.FullyExcluded(p), "FullyExcluded")
			require.Equal(t, tt.fully, ipam.FullyReserved(p, reserved), "FullyReserved")
			require.False(t, ipam.FullyReserved(p, nil), "FullyReserved with no reserved set")
		})
	}
}

func TestMultusErrorIsErrInvalid(t *testing.T) {
	err := error(&ipam.MultusError{Key: "k", Value: "v", Reason: "r"})
	require.True(t, errors.Is(err, ipam.ErrInvalid))
	require.Equal(t, `pod annotation k "v": r`, err.Error())
}
