package ipam_test

import (
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
)

// selCatalog builds a catalog from specs "name/family" or
// "name/family/default", each pool in a subnet of its own.
func selCatalog(t testing.TB, specs ...string) *ipam.Catalog {
	t.Helper()
	pools := make([]*ipam.Pool, 0, len(specs))
	for i, spec := range specs {
		parts := strings.Split(spec, "/")
		require.GreaterOrEqual(t, len(parts), 2, "spec %q", spec)
		def := len(parts) > 2 && parts[2] == "default"
		var doc string
		switch parts[1] {
		case "4":
			doc = fmt.Sprintf(`{"name":%q,"ipVersion":4,"subnet":"10.%d.0.0/24","ips":["10.%d.0.10-10.%d.0.20"],"default":%t}`,
				parts[0], i, i, i, def)
		case "6":
			doc = fmt.Sprintf(`{"name":%q,"ipVersion":6,"subnet":"fd00:%x::/120","ips":["fd00:%x::10-fd00:%x::20"],"default":%t}`,
				parts[0], i, i, i, def)
		default:
			t.Fatalf("spec %q: family must be 4 or 6", spec)
		}
		pools = append(pools, ipam.MustParsePool(doc))
	}
	c, err := ipam.NewCatalog(pools...)
	require.NoError(t, err)
	return c
}

// selScanOnly is a PoolSource without the DefaultPoolSource capability.
type selScanOnly struct{ c *ipam.Catalog }

func (s selScanOnly) Pool(name string) (*ipam.Pool, bool) { return s.c.Pool(name) }
func (s selScanOnly) Pools() iter.Seq[*ipam.Pool]         { return s.c.Pools() }

// selNoScan is a DefaultPoolSource whose Pools fails the test: Select must not
// scan every pool unless a wildcard asks for it.
type selNoScan struct {
	t testing.TB
	c *ipam.Catalog
}

func (s selNoScan) Pool(name string) (*ipam.Pool, bool) { return s.c.Pool(name) }
func (s selNoScan) Pools() iter.Seq[*ipam.Pool] {
	s.t.Errorf("Select scanned every pool")
	return s.c.Pools()
}
func (s selNoScan) DefaultPools() iter.Seq[*ipam.Pool] { return s.c.DefaultPools() }

func selIfaces(names ...string) []ipam.NIC {
	out := make([]ipam.NIC, len(names))
	for i, n := range names {
		out[i] = ipam.NIC{Name: n}
	}
	return out
}

func selCand(iface string, family int, src ipam.Source, pools ...string) ipam.Candidates {
	return ipam.Candidates{Interface: iface, Family: family, Source: src, Pools: pools}
}

func selCleanGW(c ipam.Candidates) ipam.Candidates {
	c.CleanGateway = true
	return c
}

type selectCase struct {
	name    string
	pools   []string   // catalog specs for selCatalog
	ifaces  []ipam.NIC // nil means eth0 only
	pod     map[string]string
	ns      map[string]string
	netconf ipam.NetConf
	want    []ipam.Candidates
	err     error    // the sentinel the error must unwrap to
	errHas  []string // substrings of the error text
}

func (tc selectCase) request() ipam.Request {
	req := ipam.Request{
		Namespace: "default", Name: "web-0", UID: "uid-1",
		Annotations:          tc.pod,
		NamespaceAnnotations: tc.ns,
		NetConf:              tc.netconf,
		Interfaces:           tc.ifaces,
	}
	if req.Interfaces == nil {
		req.Interfaces = selIfaces("eth0")
	}
	return req
}

func runSelectCases(t *testing.T, cases []selectCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cat := selCatalog(t, tc.pools...)
			req := tc.request()
			got, err := ipam.Select(&req, cat)
			if tc.err != nil {
				require.Error(t, err)
				require.ErrorIs(t, err, tc.err)
				for _, s := range tc.errHas {
					require.Contains(t, err.Error(), s)
				}
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			require.Empty(t, tc.errHas, "errHas set on a case that wants no error")
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("Select (-want +got):\n%s", d)
			}
		})
	}
}

func TestSelectPrecedence(t *testing.T) {
	all := []string{"pod-v4/4", "pod-v6/6", "ns-v4/4", "ns-v6/6", "cni-v4-a/4", "cni-v4-b/4", "cni-v6/6",
		"multi-pool-v4/4", "anno-pool-v4/4", "cluster-v4/4/default", "cluster-v6/6/default"}
	nsAnn := map[string]string{ipam.AnnotationNSDefaultIPv4: `["ns-v4"]`}
	netconf := ipam.NetConf{DefaultIPv4Pools: []string{"cni-v4-a", "cni-v4-b"}}
	runSelectCases(t, []selectCase{
		{
			name:  "SP-01 ippools beats ippool",
			pools: all,
			pod: map[string]string{
				ipam.AnnotationIPPool:  `{"ipv4":["anno-pool-v4"]}`,
				ipam.AnnotationIPPools: `[{"interface":"eth0","ipv4":["multi-pool-v4"],"cleangateway":false}]`,
			},
			ns: nsAnn, netconf: netconf,
			want: []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPools, "multi-pool-v4")},
		},
		{
			name:  "SP-02 pod ippool beats namespace and cluster default",
			pools: all,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["pod-v4"]}`},
			ns:    nsAnn, netconf: netconf,
			want: []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "pod-v4")},
		},
		{
			name:    "namespace beats CNI config and cluster default",
			pools:   all,
			ns:      map[string]string{ipam.AnnotationNSDefaultIPv4: `["ns-v4"]`, ipam.AnnotationNSDefaultIPv6: `["ns-v6"]`},
			netconf: netconf,
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourceNamespace, "ns-v4"),
				selCand("eth0", 6, ipam.SourceNamespace, "ns-v6"),
			},
		},
		{
			name:    "SP-04 CNI config beats cluster default",
			pools:   all,
			netconf: netconf,
			want:    []ipam.Candidates{selCand("eth0", 4, ipam.SourceNetConf, "cni-v4-a", "cni-v4-b")},
		},
		{
			name:  "SP-05 cluster defaults last, split by family, in catalogue order",
			pools: []string{"x4/4", "d4a/4/default", "d6/6/default", "d4b/4/default"},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourceClusterDefault, "d4a", "d4b"),
				selCand("eth0", 6, ipam.SourceClusterDefault, "d6"),
			},
		},
		{
			name:    "SP-34 per rule not per family: an IPv4-only annotation gives no IPv6",
			pools:   all,
			pod:     map[string]string{ipam.AnnotationIPPool: `{"ipv4":["pod-v4"]}`},
			ns:      map[string]string{ipam.AnnotationNSDefaultIPv6: `["ns-v6"]`},
			netconf: ipam.NetConf{DefaultIPv6Pools: []string{"cni-v6"}},
			want:    []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "pod-v4")},
		},
		{
			name:    "one namespace family triggers the rule; CNI config does not fill the other",
			pools:   all,
			ns:      map[string]string{ipam.AnnotationNSDefaultIPv6: `["ns-v6"]`},
			netconf: netconf,
			want:    []ipam.Candidates{selCand("eth0", 6, ipam.SourceNamespace, "ns-v6")},
		},
		{
			name:    "empty namespace lists fall through to the CNI config",
			pools:   all,
			ns:      map[string]string{ipam.AnnotationNSDefaultIPv4: `[]`, ipam.AnnotationNSDefaultIPv6: `null`},
			netconf: netconf,
			want:    []ipam.Candidates{selCand("eth0", 4, ipam.SourceNetConf, "cni-v4-a", "cni-v4-b")},
		},
		{
			name:  "unrelated annotations are ignored",
			pools: all,
			pod:   map[string]string{"example.com/ippool": `{"ipv4":["pod-v4"]}`},
			ns:    map[string]string{"ipam.spidernet.io/default-ippool": `["ns-v4"]`},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourceClusterDefault, "cluster-v4"),
				selCand("eth0", 6, ipam.SourceClusterDefault, "cluster-v6"),
			},
		},
		{
			name:   "no rule names a pool",
			pools:  []string{"x4/4", "x6/6"},
			err:    ipam.ErrNoCandidates,
			errHas: []string{"eth0", "no pool selection rule of any kind names a pool"},
		},
		{
			name:   "no rule names a pool, for each interface",
			pools:  []string{"x4/4"},
			ifaces: selIfaces("eth0", "net1"),
			err:    ipam.ErrNoCandidates,
			errHas: []string{"eth0: no pool selection rule", "net1: no pool selection rule"},
		},
		{
			name:  "CNI config clean_gateway is carried",
			pools: all,
			netconf: ipam.NetConf{DefaultIPv4Pools: []string{"cni-v4-a"}, DefaultIPv6Pools: []string{"cni-v6"},
				CleanGateway: true},
			want: []ipam.Candidates{
				selCleanGW(selCand("eth0", 4, ipam.SourceNetConf, "cni-v4-a")),
				selCleanGW(selCand("eth0", 6, ipam.SourceNetConf, "cni-v6")),
			},
		},
		{
			name:  "names are not looked up",
			pools: all,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["no-such-pool"],"ipv6":["pod-v4"]}`},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPool, "no-such-pool"),
				selCand("eth0", 6, ipam.SourcePodIPPool, "pod-v4"),
			},
		},
	})
}

func TestSelectWildcards(t *testing.T) {
	sp07 := []string{"demo-v4-ippool1/4", "backup-ipv4-a/4", "backup-ipv4-b/4", "backup-ipv4-c/6"}
	ab := []string{"pool-a/4", "pool-b/4", "pool-c/6"}
	runSelectCases(t, []selectCase{
		{
			name:  "SP-07 a wildcard expands to pools of its family, in catalogue order",
			pools: sp07,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["demo-v4-ippool1","backup-ipv4*"]}`},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPool, "demo-v4-ippool1", "backup-ipv4-a", "backup-ipv4-b"),
			},
		},
		{
			name:  "SP-07 the IPv6 list matches only the IPv6 pool",
			pools: sp07,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv6":["backup-ipv4-?"]}`},
			want:  []ipam.Candidates{selCand("eth0", 6, ipam.SourcePodIPPool, "backup-ipv4-c")},
		},
		{
			name:  "SP-07 a wildcard matching nothing contributes nothing",
			pools: sp07,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["nothing-*","demo-v4-ippool1"]}`},
			want:  []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "demo-v4-ippool1")},
		},
		{
			name:   "SP-07 an invalid pattern is an error",
			pools:  sp07,
			pod:    map[string]string{ipam.AnnotationIPPool: `{"ipv4":["[ippool]["]}`},
			err:    ipam.ErrInvalid,
			errHas: []string{`pod default/web-0: annotation "ipam.spidernet.io/ippool"`, `ipv4[0] "[ippool]["`, "invalid wildcard pattern"},
		},
		{
			name:   "a family whose wildcards match nothing is absent; nothing left is an error",
			pools:  sp07,
			pod:    map[string]string{ipam.AnnotationIPPool: `{"ipv4":["nothing-*"],"ipv6":["nothing-*"]}`},
			err:    ipam.ErrNoCandidates,
			errHas: []string{"eth0", string(ipam.SourcePodIPPool), "leaves no pool"},
		},
		{
			name:  "brackets make a pattern",
			pools: sp07,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["backup-ipv4-[bc]"]}`},
			want:  []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "backup-ipv4-b")},
		},
		{
			name:  "SP-08 deliberate difference 3: explicit plus a wildcard matching it is deduplicated",
			pools: ab,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["pool-a","pool-*"]}`},
			want:  []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "pool-a", "pool-b")},
		},
		{
			name:  "a duplicate keeps its first position",
			pools: ab,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["pool-*","pool-a"]}`},
			want:  []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "pool-a", "pool-b")},
		},
		{
			name:  "two wildcards matching one pool",
			pools: ab,
			pod:   map[string]string{ipam.AnnotationIPPool: `{"ipv4":["*-b","pool-*"]}`},
			want:  []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "pool-b", "pool-a")},
		},
		{
			name:   "an explicit name written twice is an error",
			pools:  ab,
			pod:    map[string]string{ipam.AnnotationIPPool: `{"ipv4":["pool-a","pool-b","pool-a"]}`},
			err:    ipam.ErrInvalid,
			errHas: []string{`ipv4[2] "pool-a": pool named twice (also at [0])`},
		},
		{
			name:  "namespace wildcards",
			pools: ab,
			ns:    map[string]string{ipam.AnnotationNSDefaultIPv4: `["pool-?"]`, ipam.AnnotationNSDefaultIPv6: `["pool-*"]`},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourceNamespace, "pool-a", "pool-b"),
				selCand("eth0", 6, ipam.SourceNamespace, "pool-c"),
			},
		},
		{
			name:    "CNI config wildcards",
			pools:   ab,
			netconf: ipam.NetConf{DefaultIPv4Pools: []string{"pool-b", "pool-*"}},
			want:    []ipam.Candidates{selCand("eth0", 4, ipam.SourceNetConf, "pool-b", "pool-a")},
		},
		{
			name:    "CNI config duplicate",
			pools:   ab,
			netconf: ipam.NetConf{DefaultIPv4Pools: []string{"pool-a", "pool-a"}},
			err:     ipam.ErrInvalid,
			errHas:  []string{`CNI network config: default_ipv4_ippool[1] "pool-a": pool named twice`},
		},
		{
			name:    "CNI config invalid pattern",
			pools:   ab,
			netconf: ipam.NetConf{DefaultIPv6Pools: []string{"ok", "[x]["}},
			err:     ipam.ErrInvalid,
			errHas:  []string{`default_ipv6_ippool[1] "[x]["`, "invalid wildcard pattern"},
		},
		{
			name:    "CNI config empty name",
			pools:   ab,
			netconf: ipam.NetConf{DefaultIPv4Pools: []string{""}},
			err:     ipam.ErrInvalid,
			errHas:  []string{"default_ipv4_ippool[0]: empty pool name"},
		},
		{
			name:  "ippools wildcards per entry",
			pools: ab,
			pod:   map[string]string{ipam.AnnotationIPPools: `[{"interface":"eth0","ipv4":["pool-*"],"ipv6":["*"]}]`},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "pool-a", "pool-b"),
				selCand("eth0", 6, ipam.SourcePodIPPools, "pool-c"),
			},
		},
	})
}

func TestSelectMalformed(t *testing.T) {
	pools := []string{"p4/4", "p6/6", "d4/4/default"}
	ippool := func(v string) map[string]string { return map[string]string{ipam.AnnotationIPPool: v} }
	ippools := func(v string) map[string]string { return map[string]string{ipam.AnnotationIPPools: v} }
	runSelectCases(t, []selectCase{
		{
			name: "SP-10 malformed ippool JSON", pools: pools, pod: ippool("{ipv4: bad"),
			err:    ipam.ErrInvalid,
			errHas: []string{`pod default/web-0: annotation "ipam.spidernet.io/ippool" "{ipv4: bad": invalid JSON`},
		},
		{
			name: "an empty annotation is not absent", pools: pools, pod: ippool(""),
			err: ipam.ErrInvalid, errHas: []string{"empty value"},
		},
		{
			name: "ippool names no pool", pools: pools, pod: ippool(`{"ipv4":[],"ipv6":null}`),
			err: ipam.ErrInvalid, errHas: []string{"names no pool"},
		},
		{
			name: "ippool wrong JSON type", pools: pools, pod: ippool(`{"ipv4":"p4"}`),
			err: ipam.ErrInvalid, errHas: []string{`ipv4 "p4": wrong JSON type`},
		},
		{
			name: "ippool empty name", pools: pools, pod: ippool(`{"ipv6":["p6",""]}`),
			err: ipam.ErrInvalid, errHas: []string{"ipv6[1]: empty pool name"},
		},
		{
			name: "ippools not an array", pools: pools, pod: ippools(`{"interface":"eth0","ipv4":["p4"]}`),
			err: ipam.ErrInvalid, errHas: []string{"wrong JSON type", "an object where array is wanted"},
		},
		{
			name: "ippools empty", pools: pools, pod: ippools(`[]`),
			err: ipam.ErrInvalid, errHas: []string{"value requires at least one item"},
		},
		{
			name: "ippools JSON path of a type error", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"]},{"interface":"net1","ipv4":"p4"}]`),
			err: ipam.ErrInvalid, errHas: []string{`[1].ipv4 "p4": wrong JSON type`},
		},
		{
			name: "ippools mixed named and unnamed", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"]},{"ipv6":["p6"]}]`),
			err: ipam.ErrInvalid, errHas: []string{"[1].interface: set on some entries and not on others"},
		},
		{
			name: "ippools duplicate interface", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"]},{"interface":"eth0","ipv6":["p6"]}]`),
			err: ipam.ErrInvalid, errHas: []string{`[1].interface "eth0": duplicate interface`},
		},
		{
			name: "ippools entry without pools", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"]},{"interface":"net1","cleangateway":true}]`),
			err: ipam.ErrInvalid, errHas: []string{"[1]: entry names no pool"},
		},
		{
			name: "ippools duplicate pool in one entry", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4","p4"]}]`),
			err: ipam.ErrInvalid, errHas: []string{`[0].ipv4[1] "p4": pool named twice`},
		},
		{
			name: "ippools invalid wildcard", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv6":["p*["]}]`),
			err: ipam.ErrInvalid, errHas: []string{`[0].ipv6[0] "p*["`, "invalid wildcard pattern"},
		},
		{
			name: "ippools cleangateway wrong type", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"],"cleangateway":"yes"}]`),
			err: ipam.ErrInvalid, errHas: []string{`[0].cleangateway "yes"`},
		},
		{
			name: "ippools trailing data", pools: pools,
			pod: ippools(`[{"interface":"eth0","ipv4":["p4"]}] []`),
			err: ipam.ErrInvalid, errHas: []string{"invalid JSON: trailing data"},
		},
		{
			name: "namespace annotation malformed", pools: pools,
			ns:  map[string]string{ipam.AnnotationNSDefaultIPv4: `["p4"`},
			err: ipam.ErrInvalid, errHas: []string{`namespace default: annotation "ipam.spidernet.io/default-ipv4-ippool"`, "invalid JSON"},
		},
		{
			name: "namespace annotation wrong type", pools: pools,
			ns:  map[string]string{ipam.AnnotationNSDefaultIPv6: `"p6"`},
			err: ipam.ErrInvalid, errHas: []string{"default-ipv6-ippool", "wrong JSON type"},
		},
		{
			name: "namespace annotation duplicate", pools: pools,
			ns:  map[string]string{ipam.AnnotationNSDefaultIPv4: `["p4","x","p4"]`},
			err: ipam.ErrInvalid, errHas: []string{`[2] "p4": pool named twice`},
		},
		{
			name: "both namespace annotations bad: both reported", pools: pools,
			ns:  map[string]string{ipam.AnnotationNSDefaultIPv4: `[1]`, ipam.AnnotationNSDefaultIPv6: `[""]`},
			err: ipam.ErrInvalid, errHas: []string{"default-ipv4-ippool", "default-ipv6-ippool"},
		},
	})
}

func TestSelectSubnet(t *testing.T) {
	pools := []string{"p4/4", "d4/4/default"}
	runSelectCases(t, []selectCase{
		{
			name: "SP-11 a valid subnet annotation with a source that serves no auto-pools", pools: pools,
			pod:    map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-a"]}`},
			err:    ipam.ErrNotSupported,
			errHas: []string{`pod default/web-0: annotation "ipam.spidernet.io/subnet"`, "SpiderSubnet auto-pools are not enabled", "AppPoolSource"},
		},
		{
			name: "SP-11 subnet beats ippools", pools: pools,
			pod: map[string]string{
				ipam.AnnotationSubnet:  `{"ipv4":["subnet-a"]}`,
				ipam.AnnotationIPPools: `[{"interface":"eth0","ipv4":["p4"]}]`,
			},
			err: ipam.ErrNotSupported,
		},
		{
			name: "a valid subnets annotation with a source that serves no auto-pools", pools: pools,
			pod:    map[string]string{ipam.AnnotationSubnets: `[{"interface":"eth0","ipv4":["s1"]},{"interface":"net1","ipv4":["s2"]}]`},
			err:    ipam.ErrNotSupported,
			errHas: []string{"ipam.spidernet.io/subnets"},
		},
		{
			name: "an invalid subnet annotation is invalid", pools: pools,
			pod:    map[string]string{ipam.AnnotationSubnet: `{"ipv4":[]}`},
			err:    ipam.ErrInvalid,
			errHas: []string{"names no subnet"},
		},
		{
			name: "subnets: one subnet for two interfaces", pools: pools,
			pod:    map[string]string{ipam.AnnotationSubnets: `[{"interface":"eth0","ipv4":["s1"]},{"interface":"net1","ipv4":["s1"]}]`},
			err:    ipam.ErrInvalid,
			errHas: []string{"subnet used by two interfaces"},
		},
		{
			name: "subnets takes precedence over subnet, which is not read", pools: pools,
			pod: map[string]string{
				ipam.AnnotationSubnets: `[{"interface":"eth0","ipv6":["s6"]}]`,
				ipam.AnnotationSubnet:  `not json`,
			},
			err: ipam.ErrNotSupported,
		},
	})
	// A valid subnet error must not also claim to be invalid.
	req := ipam.Request{Name: "web-0", Interfaces: selIfaces("eth0"),
		Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-a"]}`}}
	_, err := ipam.Select(&req, nil)
	require.ErrorIs(t, err, ipam.ErrNotSupported)
	require.NotErrorIs(t, err, ipam.ErrInvalid)
	var ae *ipam.AnnotationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, ipam.AnnotationSubnet, ae.Key)
	require.Equal(t, "pod web-0", ae.Object)
}

func TestSelectFamilies(t *testing.T) {
	pools := []string{"v4/4", "v6/6", "d4/4/default", "d6/6/default"}
	runSelectCases(t, []selectCase{
		{
			name: "SP-35 IPv6 disabled drops the v6 candidates", pools: pools,
			pod:     map[string]string{ipam.AnnotationIPPool: `{"ipv4":["v4"],"ipv6":["v6"]}`},
			netconf: ipam.NetConf{DisableIPv6: true},
			want:    []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "v4")},
		},
		{
			name: "IPv4 disabled drops the cluster default v4 pools", pools: pools,
			netconf: ipam.NetConf{DisableIPv4: true},
			want:    []ipam.Candidates{selCand("eth0", 6, ipam.SourceClusterDefault, "d6")},
		},
		{
			name: "a disabled family does not let a lower rule in", pools: pools,
			pod:     map[string]string{ipam.AnnotationIPPool: `{"ipv6":["v6"]}`},
			netconf: ipam.NetConf{DisableIPv6: true, DefaultIPv4Pools: []string{"v4"}},
			err:     ipam.ErrNoCandidates,
			errHas:  []string{"eth0", "family is disabled"},
		},
		{
			name: "cluster defaults all of a disabled family", pools: []string{"v4/4", "d6/6/default"},
			netconf: ipam.NetConf{DisableIPv6: true},
			err:     ipam.ErrNoCandidates,
			errHas:  []string{string(ipam.SourceClusterDefault) + " rule applies but leaves no pool"},
		},
		{
			name: "CNI config with both families disabled", pools: pools,
			netconf: ipam.NetConf{DisableIPv4: true, DisableIPv6: true, DefaultIPv4Pools: []string{"v4"}},
			err:     ipam.ErrNoCandidates,
			errHas:  []string{string(ipam.SourceNetConf)},
		},
		{
			name: "a disabled family's list is still checked", pools: pools,
			netconf: ipam.NetConf{DisableIPv6: true, DefaultIPv4Pools: []string{"v4"}, DefaultIPv6Pools: []string{"[bad]["}},
			err:     ipam.ErrInvalid,
			errHas:  []string{"default_ipv6_ippool[0]"},
		},
		{
			name: "namespace wildcards matching nothing do not let the CNI config in", pools: pools,
			ns:      map[string]string{ipam.AnnotationNSDefaultIPv4: `["none-*"]`},
			netconf: ipam.NetConf{DefaultIPv4Pools: []string{"v4"}},
			err:     ipam.ErrNoCandidates,
			errHas:  []string{string(ipam.SourceNamespace), "leaves no pool"},
		},
	})
}

func TestSelectMultiNIC(t *testing.T) {
	pools := []string{"p-eth0/4", "p-net1/4", "p-net1-v6/6", "pA/4", "pB/4", "shared/4", "d4/4/default"}
	ippools := func(v string) map[string]string { return map[string]string{ipam.AnnotationIPPools: v} }
	sp37 := ippools(`[{"interface":"eth0","ipv4":["p-eth0"]},{"interface":"net1","ipv4":["p-net1"],"ipv6":["p-net1-v6"]}]`)
	sp41 := ippools(`[{"ipv4":["pA"]},{"ipv4":["pB"],"cleangateway":true}]`)
	runSelectCases(t, []selectCase{
		{
			name: "SP-37 named entries: every listed interface, on the first request", pools: pools, pod: sp37,
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "p-eth0"),
				selCand("net1", 4, ipam.SourcePodIPPools, "p-net1"),
				selCand("net1", 6, ipam.SourcePodIPPools, "p-net1-v6"),
			},
		},
		{
			name: "SP-37 a request for net1 gets both as well", pools: pools, pod: sp37, ifaces: selIfaces("net1"),
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "p-eth0"),
				selCand("net1", 4, ipam.SourcePodIPPools, "p-net1"),
				selCand("net1", 6, ipam.SourcePodIPPools, "p-net1-v6"),
			},
		},
		{
			name: "annotation order, not request order", pools: pools, pod: sp37, ifaces: selIfaces("net1", "eth0"),
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "p-eth0"),
				selCand("net1", 4, ipam.SourcePodIPPools, "p-net1"),
				selCand("net1", 6, ipam.SourcePodIPPools, "p-net1-v6"),
			},
		},
		{
			name: "an interface of the request must be listed", pools: pools, pod: sp37, ifaces: selIfaces("eth0", "net2"),
			err:    ipam.ErrInvalid,
			errHas: []string{`interface "net2" must be listed`},
		},
		{
			name: "an unlisted interface with explicit pools is fine", pools: pools, pod: sp37,
			ifaces: []ipam.NIC{{Name: "eth0"}, {Name: "net2", Pools: []string{"shared"}}},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "p-eth0"),
				selCand("net1", 4, ipam.SourcePodIPPools, "p-net1"),
				selCand("net1", 6, ipam.SourcePodIPPools, "p-net1-v6"),
			},
		},
		{
			name: "explicit pools win over an ippools entry", pools: pools, pod: sp37,
			ifaces: []ipam.NIC{{Name: "eth0", Pools: []string{"shared"}}, {Name: "net1"}},
			want: []ipam.Candidates{
				selCand("net1", 4, ipam.SourcePodIPPools, "p-net1"),
				selCand("net1", 6, ipam.SourcePodIPPools, "p-net1-v6"),
			},
		},
		{
			name: "SP-41 unnamed entries bind by position, Multus names beyond the request", pools: pools, pod: sp41,
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "pA"),
				selCleanGW(selCand("net1", 4, ipam.SourcePodIPPools, "pB")),
			},
		},
		{
			name: "SP-41 unnamed entries bind to eth0, net1 whatever the request's interface", pools: pools, pod: sp41, ifaces: selIfaces("net1"),
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "pA"),
				selCleanGW(selCand("net1", 4, ipam.SourcePodIPPools, "pB")),
			},
		},
		{
			name: "unnamed entries: an interface beyond the entries is an error", pools: pools, pod: sp41,
			ifaces: selIfaces("eth0", "net1", "net2"),
			err:    ipam.ErrInvalid,
			errHas: []string{`interface "net2" has no entry`},
		},
		{
			name: "unnamed entries: an interface without a Multus default name is an error", pools: pools, pod: sp41,
			ifaces: selIfaces("eth0", "macvlan0"),
			err:    ipam.ErrInvalid,
			errHas: []string{`interface "macvlan0" has no entry`, "eth0, net1"},
		},
		{
			name: "entry cleangateway overrides clean_gateway both ways", pools: pools,
			pod:     ippools(`[{"interface":"eth0","ipv4":["p-eth0"],"cleangateway":false},{"interface":"net1","ipv4":["p-net1"]}]`),
			netconf: ipam.NetConf{CleanGateway: true},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPools, "p-eth0"),
				selCleanGW(selCand("net1", 4, ipam.SourcePodIPPools, "p-net1")),
			},
		},
		{
			name: "an entry left with no pool is an error for that interface", pools: pools,
			pod:    ippools(`[{"interface":"eth0","ipv4":["p-eth0"]},{"interface":"net1","ipv4":["none-*"]}]`),
			err:    ipam.ErrNoCandidates,
			errHas: []string{"net1:", "leaves no pool for this interface"},
		},
		{
			name: "ippool applies to every interface that needs selection", pools: pools,
			pod:    map[string]string{ipam.AnnotationIPPool: `{"ipv4":["shared"]}`},
			ifaces: []ipam.NIC{{Name: "eth0"}, {Name: "net1", Pools: []string{"pA"}}, {Name: "net2"}},
			want: []ipam.Candidates{
				selCand("eth0", 4, ipam.SourcePodIPPool, "shared"),
				selCand("net2", 4, ipam.SourcePodIPPool, "shared"),
			},
		},
	})
}

func TestSelectRequest(t *testing.T) {
	cat := selCatalog(t, "p4/4", "d4/4/default")
	t.Run("nil request", func(t *testing.T) {
		_, err := ipam.Select(nil, cat)
		require.ErrorIs(t, err, ipam.ErrInvalid)
	})
	t.Run("unnamed interface", func(t *testing.T) {
		_, err := ipam.Select(&ipam.Request{Interfaces: []ipam.NIC{{}}}, cat)
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, "interfaces[0].name: required")
	})
	t.Run("duplicate interface", func(t *testing.T) {
		_, err := ipam.Select(&ipam.Request{Interfaces: selIfaces("eth0", "eth0")}, cat)
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, "duplicate interface")
	})
	t.Run("no interface needs selection: nothing is read", func(t *testing.T) {
		req := ipam.Request{
			Annotations: map[string]string{ipam.AnnotationIPPool: "{broken", ipam.AnnotationSubnet: "{broken"},
			Interfaces:  []ipam.NIC{{Name: "eth0", Pools: []string{"p4"}}},
		}
		got, err := ipam.Select(&req, selNoScan{t, cat})
		require.NoError(t, err)
		require.Nil(t, got)
		got, err = ipam.Select(&ipam.Request{}, cat)
		require.NoError(t, err)
		require.Nil(t, got)
	})
	t.Run("nil pool source", func(t *testing.T) {
		req := ipam.Request{Interfaces: selIfaces("eth0"),
			Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["a","b*"]}`}}
		got, err := ipam.Select(&req, nil)
		require.NoError(t, err)
		require.Equal(t, []ipam.Candidates{selCand("eth0", 4, ipam.SourcePodIPPool, "a")}, got)
		req.Annotations = nil
		_, err = ipam.Select(&req, nil)
		require.ErrorIs(t, err, ipam.ErrNoCandidates)
	})
	t.Run("the request is not modified and results share nothing with it", func(t *testing.T) {
		req := ipam.Request{Interfaces: selIfaces("eth0", "net1"),
			NetConf: ipam.NetConf{DefaultIPv4Pools: []string{"p4", "x"}}}
		got, err := ipam.Select(&req, cat)
		require.NoError(t, err)
		require.Len(t, got, 2)
		got[0].Pools[0] = "changed"
		require.Equal(t, []string{"p4", "x"}, req.NetConf.DefaultIPv4Pools)
		require.Equal(t, []string{"p4", "x"}, got[1].Pools, "two interfaces share one Pools slice")
	})
	t.Run("interfaces of one annotation share no slice", func(t *testing.T) {
		req := ipam.Request{Interfaces: selIfaces("eth0", "net1"),
			Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["p4"]}`}}
		got, err := ipam.Select(&req, cat)
		require.NoError(t, err)
		require.Len(t, got, 2)
		got[0].Pools[0] = "changed"
		require.Equal(t, []string{"p4"}, got[1].Pools)
	})
}

func TestSelectDefaultPoolSource(t *testing.T) {
	cat := selCatalog(t, "x4/4", "d4a/4/default", "d6/6/default", "d4b/4/default")
	want := []ipam.Candidates{
		selCand("eth0", 4, ipam.SourceClusterDefault, "d4a", "d4b"),
		selCand("eth0", 6, ipam.SourceClusterDefault, "d6"),
	}
	req := ipam.Request{Interfaces: selIfaces("eth0")}
	for name, src := range map[string]ipam.PoolSource{
		"index": selNoScan{t, cat}, // fails the test if Pools is called
		"scan":  selScanOnly{cat},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ipam.Select(&req, src)
			require.NoError(t, err)
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("Select (-want +got):\n%s", d)
			}
		})
	}
	t.Run("a disabled family's wildcards are not expanded", func(t *testing.T) {
		req := ipam.Request{Interfaces: selIfaces("eth0"),
			NetConf: ipam.NetConf{DisableIPv6: true, DefaultIPv4Pools: []string{"x4"}, DefaultIPv6Pools: []string{"d*"}}}
		got, err := ipam.Select(&req, selNoScan{t, cat})
		require.NoError(t, err)
		require.Equal(t, []ipam.Candidates{selCand("eth0", 4, ipam.SourceNetConf, "x4")}, got)
	})
	t.Run("explicit names need no scan", func(t *testing.T) {
		req := ipam.Request{Interfaces: selIfaces("eth0"),
			Annotations: map[string]string{ipam.AnnotationIPPools: `[{"interface":"eth0","ipv4":["x4"]}]`},
			NetConf:     ipam.NetConf{DefaultIPv4Pools: []string{"x4"}}}
		_, err := ipam.Select(&req, selNoScan{t, cat})
		require.NoError(t, err)
		req.Annotations = nil
		_, err = ipam.Select(&req, selNoScan{t, cat})
		require.NoError(t, err)
	})
}

func TestCatalogDefaultPools(t *testing.T) {
	cat := selCatalog(t, "x4/4", "d4a/4/default", "d6/6/default", "y6/6", "d4b/4/default")
	var names []string
	for p := range cat.DefaultPools() {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"d4a", "d6", "d4b"}, names)
	var ds ipam.DefaultPoolSource = cat // Catalog has the capability
	for range ds.DefaultPools() {
		break // stopping early must not panic
	}
	var zero ipam.Catalog
	for p := range zero.DefaultPools() {
		t.Fatalf("zero Catalog yields %q", p.Name)
	}
}

func TestSelectAllocs(t *testing.T) {
	cat := selCatalog(t, "p4/4", "p6/6", "d4/4/default")
	for _, tc := range []struct {
		name string
		req  ipam.Request
		max  float64
	}{
		// The result, and one copy of the CNI config's list.
		{"CNI config", ipam.Request{Interfaces: selIfaces("eth0"), NetConf: ipam.NetConf{DefaultIPv4Pools: []string{"p4"}}}, 2},
		// The result and the list of names.
		{"cluster default", ipam.Request{Interfaces: selIfaces("eth0")}, 2},
		{"explicit pools only", ipam.Request{Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p4"}}}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := testing.AllocsPerRun(100, func() {
				if _, err := ipam.Select(&tc.req, cat); err != nil {
					t.Fatal(err)
				}
			})
			require.LessOrEqual(t, n, tc.max)
		})
	}
}

func TestExpand(t *testing.T) {
	cat := selCatalog(t, "a1/4", "a2/4", "a3/6", "b1/4")
	for _, tc := range []struct {
		names  []string
		family int
		want   []string
		errHas string
	}{
		{names: nil, family: 4, want: nil},
		{names: []string{"x", "y"}, family: 4, want: []string{"x", "y"}},
		{names: []string{"a*"}, family: 4, want: []string{"a1", "a2"}},
		{names: []string{"a*"}, family: 6, want: []string{"a3"}},
		{names: []string{"b1", "*"}, family: 4, want: []string{"b1", "a1", "a2"}},
		{names: []string{"*1", "a?"}, family: 4, want: []string{"a1", "b1", "a2"}},
		{names: []string{"z*"}, family: 4, want: nil},
		{names: []string{"a[12]", "a[!1]"}, family: 4, want: []string{"a1", "a2"}},
		{names: []string{"a[", "x]"}, family: 4, want: []string{"a[", "x]"}}, // not patterns
		{names: []string{"x", "[a]["}, family: 4, errHas: `[1] "[a][": invalid wildcard pattern`},
		{names: []string{"x", ""}, family: 4, errHas: "[1]: empty pool name"},
		{names: []string{"x", "a*", "x"}, family: 4, errHas: `[2] "x": pool named twice (also at [0])`},
		{names: []string{"x"}, family: 5, errHas: "must be 4 or 6"},
	} {
		t.Run(fmt.Sprint(tc.names, tc.family), func(t *testing.T) {
			got, err := ipam.Expand(tc.names, tc.family, cat)
			if tc.errHas != "" {
				require.ErrorIs(t, err, ipam.ErrInvalid)
				require.ErrorContains(t, err, tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	t.Run("long lists", func(t *testing.T) {
		names := make([]string, 40)
		for i := range names {
			names[i] = fmt.Sprintf("n%d", i)
		}
		got, err := ipam.Expand(append(names, "a*", "n3"), 4, cat)
		require.ErrorContains(t, err, `[41] "n3": pool named twice (also at [3])`)
		require.Nil(t, got)
		got, err = ipam.Expand(append(names, "*", "a*"), 4, cat)
		require.NoError(t, err)
		require.Equal(t, append(names, "a1", "a2", "b1"), got)
	})
	t.Run("result does not share memory", func(t *testing.T) {
		in := []string{"x", "y"}
		got, err := ipam.Expand(in, 4, nil)
		require.NoError(t, err)
		got[0] = "changed"
		require.Equal(t, "x", in[0])
	})
}

func TestParseIPPoolAnnotation(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   ipam.IPPoolAnnotation
		errHas string
	}{
		{in: `{"ipv4":["a","b*"],"ipv6":["c"]}`, want: ipam.IPPoolAnnotation{IPv4: []string{"a", "b*"}, IPv6: []string{"c"}}},
		{in: ` {"ipv6":["c"],"ipv4":[]} `, want: ipam.IPPoolAnnotation{IPv6: []string{"c"}}},
		{in: `{"ipv4":["a"],"other":1}`, want: ipam.IPPoolAnnotation{IPv4: []string{"a"}}},
		{in: `{ipv4: bad`, errHas: `"{ipv4: bad": invalid JSON: invalid character 'i'`},
		{in: ``, errHas: "empty value"},
		{in: `null`, errHas: "names no pool"},
		{in: `{}`, errHas: "names no pool"},
		{in: `[]`, errHas: "an array where object is wanted"},
		{in: `{"ipv4":[1]}`, errHas: `ipv4[0] "1": wrong JSON type`},
		{in: `{"ipv4":[null]}`, errHas: "ipv4[0]: empty pool name"},
		{in: `{"ipv4":["a"]}x`, errHas: "trailing data"},
		{in: `{"ipv6":["x","[x]["]}`, errHas: `ipv6[1] "[x][": invalid wildcard pattern`},
		{in: `{"ipv4":["a","b","a"]}`, errHas: `ipv4[2] "a": pool named twice`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			checkAnnotationParse(t, ipam.AnnotationIPPool, tc.in, ipam.ParseIPPoolAnnotation, tc.want, tc.errHas)
		})
	}
}

func TestParseIPPoolsAnnotation(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		in     string
		want   []ipam.IPPoolsEntry
		errHas []string
	}{
		{
			in: `[{"interface":"eth0","ipv4":["a"],"cleangateway":true},{"interface":"net1","ipv6":["b*"],"cleangateway":false}]`,
			want: []ipam.IPPoolsEntry{
				{Interface: "eth0", IPv4: []string{"a"}, CleanGateway: &yes},
				{Interface: "net1", IPv6: []string{"b*"}, CleanGateway: &no},
			},
		},
		{
			in:   `[{"ipv4":["a"]},{"ipv4":["a"],"ipv6":[]}]`,
			want: []ipam.IPPoolsEntry{{IPv4: []string{"a"}}, {IPv4: []string{"a"}}},
		},
		{in: `[]`, errHas: []string{"value requires at least one item"}},
		{in: `null`, errHas: []string{"value requires at least one item"}},
		{in: `[null]`, errHas: []string{"[0]: entry names no pool"}},
		{in: `{}`, errHas: []string{"an object where array is wanted"}},
		{in: `[{"interface":1}]`, errHas: []string{`[0].interface "1": wrong JSON type`}},
		{in: `[{"interface":"eth0","ipv4":["a"]},{"interface":"net1","ipv4":[true]}]`, errHas: []string{`[1].ipv4[0] "true": wrong JSON type`}},
		{in: `[{"ipv4":["a"]},{"interface":"net1","ipv4":["b"]}]`, errHas: []string{"[1].interface: set on some entries and not on others"}},
		{in: `[{"interface":"eth0","ipv4":["a"]},{"ipv4":["b"]}]`, errHas: []string{"[1].interface: set on some entries and not on others"}},
		{in: `[{"interface":"eth0","ipv4":["a"]},{"interface":"eth0","ipv4":["b"]}]`, errHas: []string{`[1].interface "eth0": duplicate interface (also at [0])`}},
		{in: `[{"interface":"eth0"}]`, errHas: []string{"[0]: entry names no pool"}},
		{in: `[{"interface":"eth0","ipv4":["a",""]}]`, errHas: []string{"[0].ipv4[1]: empty pool name"}},
		{in: `[{"interface":"eth0","ipv6":["a","a"]}]`, errHas: []string{`[0].ipv6[1] "a": pool named twice`}},
		{in: `[{"interface":"eth0","ipv4":["[a]["]}]`, errHas: []string{`[0].ipv4[0] "[a][": invalid wildcard pattern`}},
		{
			in:     `[{"interface":"eth0"},{"interface":"eth0","ipv4":[""]}]`,
			errHas: []string{"[0]: entry names no pool", "[1].interface \"eth0\": duplicate interface", "[1].ipv4[0]: empty pool name"},
		},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ipam.ParseIPPoolsAnnotation(tc.in)
			if tc.errHas != nil {
				require.ErrorIs(t, err, ipam.ErrInvalid)
				for _, s := range tc.errHas {
					require.ErrorContains(t, err, s)
				}
				require.Nil(t, got)
				return
			}
			require.NoError(t, err)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}

// checkAnnotationParse parses in with parse and checks the result against
// want, or, when errHas is set, that the error is an *AnnotationError for key
// and in that unwraps to ErrInvalid and says errHas.
func checkAnnotationParse[T any](t *testing.T, key, in string, parse func(string) (T, error), want T, errHas string) {
	t.Helper()
	got, err := parse(in)
	if errHas != "" {
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, `annotation "`+key+`"`)
		require.ErrorContains(t, err, errHas)
		var ae *ipam.AnnotationError
		require.ErrorAs(t, err, &ae)
		require.Equal(t, key, ae.Key)
		require.Equal(t, in, ae.Value)
		return
	}
	require.NoError(t, err)
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

func TestParseSubnetAnnotation(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   ipam.NICSubnets
		errHas string
	}{
		{in: `{"ipv4":["s4","ignored"]}`, want: ipam.NICSubnets{Interface: "eth0", IPv4: []string{"s4"}}},
		{in: `{"interface":"net1","ipv6":["s6"],"ipv4":["s4"]}`, want: ipam.NICSubnets{Interface: "net1", IPv4: []string{"s4"}, IPv6: []string{"s6"}}},
		{in: `{"ipv4":["s4",""]}`, want: ipam.NICSubnets{Interface: "eth0", IPv4: []string{"s4"}}}, // only the first counts
		{in: `{}`, errHas: "names no subnet"},
		{in: `{"ipv4":[],"ipv6":[]}`, errHas: "names no subnet"},
		{in: `{"ipv4":[""]}`, errHas: "ipv4[0]: empty subnet name"},
		{in: `{"ipv6":["s*"]}`, errHas: `ipv6[0] "s*": subnet names cannot be wildcards`},
		{in: `{"ipv4":"s4"}`, errHas: `ipv4 "s4": wrong JSON type`},
		{in: `[{"ipv4":["s4"]}]`, errHas: "wrong JSON type"},
		{in: `{"ipv4":["s4"]`, errHas: "invalid JSON"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			checkAnnotationParse(t, ipam.AnnotationSubnet, tc.in, ipam.ParseSubnetAnnotation, tc.want, tc.errHas)
		})
	}
}

func TestParseSubnetsAnnotation(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   []ipam.NICSubnets
		errHas string
	}{
		{
			in: `[{"interface":"eth0","ipv4":["s1","x"]},{"interface":"net1","ipv4":["s2"],"ipv6":["s6"]}]`,
			want: []ipam.NICSubnets{
				{Interface: "eth0", IPv4: []string{"s1"}},
				{Interface: "net1", IPv4: []string{"s2"}, IPv6: []string{"s6"}},
			},
		},
		{in: `[]`, errHas: "value requires at least one item"},
		{in: `[{"ipv4":["s1"]}]`, errHas: "[0].interface: required"},
		{in: `[{"interface":"eth0","ipv4":["s1"]},{"interface":"eth0","ipv4":["s2"]}]`, errHas: `[1].interface "eth0": duplicate interface`},
		{in: `[{"interface":"eth0","ipv4":["s1"]},{"interface":"net1","ipv4":["s1"]}]`, errHas: `[1].ipv4[0] "s1": subnet used by two interfaces`},
		{in: `[{"interface":"eth0","ipv6":["s1"]},{"interface":"net1","ipv6":["s1"]}]`, errHas: `[1].ipv6[0] "s1": subnet used by two interfaces`},
		{in: `[{"interface":"eth0"}]`, errHas: "[0]: entry names no subnet"},
		{in: `[{"interface":"eth0","ipv4":[""]}]`, errHas: "[0].ipv4[0]: empty subnet name"},
		{in: `[{"interface":"eth0","ipv4":["s?"]}]`, errHas: "subnet names cannot be wildcards"},
		{in: `{"interface":"eth0","ipv4":["s1"]}`, errHas: "an object where array is wanted"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			checkAnnotationParse(t, ipam.AnnotationSubnets, tc.in, ipam.ParseSubnetsAnnotation, tc.want, tc.errHas)
		})
	}
}

func TestParsePoolList(t *testing.T) {
	for _, tc := range []struct {
		in     string
		want   []string
		errHas string
	}{
		{in: `["a","b*"]`, want: []string{"a", "b*"}},
		{in: `[]`, want: nil},
		{in: `null`, want: nil},
		{in: `"a"`, errHas: "wrong JSON type"},
		{in: `["a",1]`, errHas: `[1] "1": wrong JSON type`},
		{in: `["a"`, errHas: "invalid JSON"},
		{in: `["a",""]`, errHas: "[1]: empty pool name"},
		{in: `["a","a"]`, errHas: `[1] "a": pool named twice`},
		{in: `["[a]["]`, errHas: "invalid wildcard pattern"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ipam.ParsePoolList(tc.in)
			if tc.errHas != "" {
				require.ErrorIs(t, err, ipam.ErrInvalid)
				require.ErrorContains(t, err, tc.errHas)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestSelectAnnotationError(t *testing.T) {
	e := &ipam.AnnotationError{Object: "pod default/web-0", Key: ipam.AnnotationIPPool, Value: "{ipv4: bad",
		Reason: "invalid JSON: oops", Err: ipam.ErrInvalid}
	require.Equal(t, `pod default/web-0: annotation "ipam.spidernet.io/ippool" "{ipv4: bad": invalid JSON: oops`, e.Error())
	require.ErrorIs(t, e, ipam.ErrInvalid)
	require.NotErrorIs(t, e, ipam.ErrNotSupported)

	e = &ipam.AnnotationError{Key: ipam.AnnotationIPPool, Value: `{"ipv4":1}`, Reason: "r", Err: ipam.ErrInvalid}
	require.Equal(t, "annotation \"ipam.spidernet.io/ippool\" `{\"ipv4\":1}`: r", e.Error())

	// A long value is cut, on a rune boundary.
	long := `{"ipv4": ["` + strings.Repeat("é", 300) + `"]` // byte 200 is inside an "é"
	_, err := ipam.ParseIPPoolAnnotation(long)
	var ae *ipam.AnnotationError
	require.ErrorAs(t, err, &ae)
	require.Less(t, len(ae.Value), 220)
	require.True(t, strings.HasSuffix(ae.Value, "..."), ae.Value)
	require.True(t, strings.HasPrefix(long, strings.TrimSuffix(ae.Value, "...")))
	require.NotContains(t, ae.Error(), `\x`, "cut in the middle of a rune")

	// Many problems are reported, but not without bound.
	many := `{"ipv4":[` + strings.TrimSuffix(strings.Repeat(`[""],`, 50), ",") + `]}`
	_, err = ipam.ParseIPPoolsAnnotation("[" + strings.TrimSuffix(strings.Repeat(`{"interface":"e"},`, 50), ",") + "]")
	require.ErrorIs(t, err, ipam.ErrInvalid)
	require.LessOrEqual(t, strings.Count(err.Error(), "\n"), 10)
	require.GreaterOrEqual(t, strings.Count(err.Error(), "\n"), 2)
	_, err = ipam.ParseIPPoolAnnotation(many)
	require.ErrorIs(t, err, ipam.ErrInvalid)

	var target *ipam.AnnotationError
	require.False(t, errors.As(errors.New("x"), &target))
}
