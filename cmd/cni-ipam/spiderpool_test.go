package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"
)

// spiderConf is a Spiderpool-style network config: SpiderIPPool specs inline,
// chosen by default_ipv4_ippool and default_ipv6_ippool.
const spiderConf = `{
	"cniVersion": "1.0.0",
	"name": "spider",
	"ipam": {
		"type": "cni-ipam",
		"pools": [
			{"name": "kube-system-v4", "subnet": "10.7.0.0/24", "ips": ["10.7.0.10"], "gateway": "10.7.0.1", "namespaceName": ["kube-system"]},
			{"name": "small-v4", "subnet": "10.6.0.0/24", "ips": ["10.6.0.10-10.6.0.11"], "gateway": "10.6.0.1"},
			{"name": "big-v4", "subnet": "10.6.1.0/24", "ips": ["10.6.1.10-10.6.1.20"], "excludeIPs": ["10.6.1.10"], "gateway": "10.6.1.1",
			 "routes": [{"dst": "172.16.0.0/12", "gw": "10.6.1.254"}]},
			{"name": "v6", "subnet": "fd00:6::/120", "ips": ["fd00:6::10-fd00:6::20"], "gateway": "fd00:6::1"}
		],
		"default_ipv4_ippool": ["kube-system-v4", "small-v4", "big-v4"],
		"default_ipv6_ippool": ["v6"],
		"clean_gateway": %s
	}
}`

// TestSpiderpoolPools runs the selection pipeline through the binary: pools
// named by the CNI config, filtered for the pod's namespace (K8S_POD_NAMESPACE),
// tried in order, an exhausted one falling through to the next, with
// Spiderpool's default route through the pool's gateway.
func TestSpiderpoolPools(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	conf := netconf(t, fmt.Sprintf(spiderConf, "false"), dataDir)
	podArgs := func(ns, name string) string {
		return "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + name + ";K8S_POD_UID=uid-" + name + ";K8S_POD_INFRA_CONTAINER_ID=" + name
	}
	add := func(id, ns string) addResult {
		t.Helper()
		return parseAdd(t, call{Command: "ADD", ContainerID: id, IfName: "eth0", Args: podArgs(ns, id), Config: conf}.mustExec(t))
	}
	routes := func(r addResult) []string {
		var out []string
		for _, rt := range r.Routes {
			out = append(out, strings.TrimSpace(rt.Dst+" "+rt.GW))
		}
		return out
	}

	// kube-system-v4 is for kube-system only: default's pods skip it.
	r1 := add("pod1", "default")
	require.Equal(t, []string{"10.6.0.10/24 10.6.0.1", "fd00:6::10/120 fd00:6::1"}, r1.addresses())
	require.Equal(t, []string{"0.0.0.0/0 10.6.0.1", "::/0 fd00:6::1"}, routes(r1))
	require.Equal(t, []string{"10.6.0.11/24 10.6.0.1", "fd00:6::11/120 fd00:6::1"}, add("pod2", "default").addresses())
	// small-v4 is full: big-v4 serves, skipping its excluded first address,
	// with its own route.
	r3 := add("pod3", "default")
	require.Equal(t, []string{"10.6.1.11/24 10.6.1.1", "fd00:6::12/120 fd00:6::1"}, r3.addresses())
	require.Equal(t, []string{"172.16.0.0/12 10.6.1.254", "0.0.0.0/0 10.6.1.1", "::/0 fd00:6::1"}, routes(r3))
	// A kube-system pod may use the first pool.
	require.Equal(t, []string{"10.7.0.10/24 10.7.0.1", "fd00:6::13/120 fd00:6::1"}, add("pod4", "kube-system").addresses())
	// A repeat ADD returns what the container holds.
	require.Equal(t, r1.addresses(), add("pod1", "default").addresses())

	// The state is host-local's: the container ID and interface, the cursor
	// per pool at the pool's position in ipam.pools.
	state := filepath.Join(dataDir, "spider")
	allocs, cursors := stateDir(t, state)
	require.Equal(t, "pod1\r\neth0", allocs["10.6.0.10"])
	require.Equal(t, "pod3\r\neth0", allocs["10.6.1.11"])
	require.Len(t, allocs, 8)
	require.Equal(t, map[string]string{"0": "10.7.0.10", "1": "10.6.0.11", "2": "10.6.1.11", "3": "fd00:6::13"}, cursors)

	// CHECK and DEL by container ID and interface.
	call{Command: "CHECK", ContainerID: "pod3", IfName: "eth0", Args: podArgs("default", "pod3"), Config: conf}.mustExec(t)
	call{Command: "DEL", ContainerID: "pod3", IfName: "eth0", Args: podArgs("default", "pod3"), Config: conf}.mustExec(t)
	allocs, _ = stateDir(t, state)
	require.NotContains(t, allocs, "10.6.1.11")
	require.NotContains(t, allocs, "fd00:6::12")

	// clean_gateway drops the default routes.
	clean := netconf(t, fmt.Sprintf(spiderConf, "true"), dataDir)
	out := call{Command: "ADD", ContainerID: "pod5", IfName: "eth0", Args: podArgs("default", "pod5"), Config: clean}.mustExec(t)
	r5 := parseAdd(t, out)
	require.Equal(t, []string{"10.6.1.12/24 10.6.1.1", "fd00:6::14/120 fd00:6::1"}, r5.addresses())
	require.Equal(t, []string{"172.16.0.0/12 10.6.1.254"}, routes(r5))
}

// TestSpiderpoolNothingLeft: when every candidate is filtered or exhausted,
// the error says why, pool by pool, and nothing is left allocated.
func TestSpiderpoolNothingLeft(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	conf := netconf(t, `{"cniVersion": "1.0.0", "name": "tiny", "ipam": {
		"pools": [
			{"name": "only-kube-system", "subnet": "10.8.0.0/24", "ips": ["10.8.0.10"], "namespaceName": ["kube-system"]},
			{"name": "one", "subnet": "10.8.1.0/24", "ips": ["10.8.1.10"]},
			{"name": "v6", "subnet": "fd00:8::/120", "ips": ["fd00:8::10-fd00:8::20"]}
		],
		"default_ipv4_ippool": ["only-kube-system", "one"],
		"default_ipv6_ippool": ["v6"]}}`, dataDir)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p"
	call{Command: "ADD", ContainerID: "a", IfName: "eth0", Args: args, Config: conf}.mustExec(t)
	cerr := call{Command: "ADD", ContainerID: "b", IfName: "eth0", Args: args, Config: conf}.mustFail(t)
	require.Equal(t, types.ErrInternal, cerr.Code)
	all := cerr.Msg + "\n" + cerr.Details
	for _, want := range []string{"only-kube-system", "one", "exhausted"} {
		require.Contains(t, all, want)
	}
	allocs, _ := stateDir(t, filepath.Join(dataDir, "tiny"))
	require.Equal(t, map[string]string{"10.8.1.10": "a\r\neth0", "fd00:8::10": "a\r\neth0"}, allocs,
		"b's IPv6 address is released when its IPv4 fails")
}

// TestSpiderpoolClusterDefaults: without default_ipv4_ippool, the pools marked
// default serve, filtered for this node (its host name) by nodeName.
func TestSpiderpoolClusterDefaults(t *testing.T) {
	t.Parallel()
	host, err := os.Hostname()
	require.NoError(t, err)
	dataDir := t.TempDir()
	conf := netconf(t, fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "defaults", "ipam": {"pools": [
		{"name": "elsewhere", "subnet": "10.9.0.0/24", "ips": ["10.9.0.10"], "nodeName": ["not-%[1]s"], "default": true},
		{"name": "here", "subnet": "10.9.1.0/24", "ips": ["10.9.1.10"], "gateway": "10.9.1.1", "nodeName": [%[1]q], "default": true},
		{"name": "not-default", "subnet": "10.9.2.0/24", "ips": ["10.9.2.10"]}]}}`, host), dataDir)
	out := call{Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
	require.Equal(t, []string{"10.9.1.10/24 10.9.1.1"}, parseAdd(t, out).addresses())
}
