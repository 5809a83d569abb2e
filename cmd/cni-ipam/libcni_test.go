package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// TestLibCNI drives the binary the way a container runtime does: libcni finds
// it in CNI_PATH under its type name, passes runtimeConfig capabilities and
// CNI_ARGS, caches results for CHECK and DEL, and sends GC its list of valid
// attachments.
func TestLibCNI(t *testing.T) {
	t.Parallel()
	dataDir, cacheDir := t.TempDir(), t.TempDir()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, []byte("# test\nnameserver 192.0.2.53\nnameserver 2001:db8::53\ndomain example.org\nsearch a.example.org b.example.org\noptions ndots:2\n"), 0o644))
	list, err := libcni.NetworkConfFromBytes(fmt.Appendf(nil, `{
		"cniVersion": "1.1.0",
		"name": "rtnet",
		"plugins": [{
			"type": %q,
			"capabilities": {"ips": true},
			"ipam": {
				"type": %[1]q,
				"dataDir": %q,
				"resolvConf": %q,
				"ranges": [[{"subnet": "10.10.0.0/24", "rangeStart": "10.10.0.10", "rangeEnd": "10.10.0.20"}],
				           [{"subnet": "2001:db8:10::/64"}]],
				"routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.10.0.254"}]
			}
		}]
	}`, pluginType, dataDir, resolv))
	require.NoError(t, err)
	cni := libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, cacheDir, nil)
	ctx := context.Background()
	state := filepath.Join(dataDir, "rtnet")
	rt := func(id string) *libcni.RuntimeConf {
		return &libcni.RuntimeConf{ContainerID: id, NetNS: "/var/run/netns/" + id, IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", id}}}
	}
	add := func(r *libcni.RuntimeConf) *types100.Result {
		t.Helper()
		res, err := cni.AddNetworkList(ctx, list, r)
		require.NoError(t, err)
		cur, err := types100.NewResultFromResult(res)
		require.NoError(t, err)
		return cur
	}
	addrs := func(r *types100.Result) []string {
		var out []string
		for _, ip := range r.IPs {
			out = append(out, ip.Address.String()+" "+ip.Gateway.String())
		}
		return out
	}

	r1 := add(rt("ctr1"))
	require.Equal(t, []string{"10.10.0.10/24 10.10.0.1", "2001:db8:10::2/64 2001:db8:10::1"}, addrs(r1))
	var routes []string
	for _, r := range r1.Routes {
		routes = append(routes, fmt.Sprintf("%s via %v", r.Dst.String(), r.GW))
	}
	require.Equal(t, []string{"0.0.0.0/0 via <nil>", "192.168.0.0/16 via 10.10.0.254"}, routes)
	if d := cmp.Diff(types.DNS{Nameservers: []string{"192.0.2.53", "2001:db8::53"}, Domain: "example.org",
		Search: []string{"a.example.org", "b.example.org"}, Options: []string{"ndots:2"}}, r1.DNS); d != "" {
		t.Errorf("dns (-want +got):\n%s", d)
	}

	// The ips capability: a requested address.
	with := rt("ctr2")
	with.CapabilityArgs = map[string]any{"ips": []string{"10.10.0.15/24"}}
	r2 := add(with)
	require.Equal(t, []string{"10.10.0.15/24 10.10.0.1", "2001:db8:10::3/64 2001:db8:10::1"}, addrs(r2))

	// CHECK passes the cached result as prevResult; it holds.
	require.NoError(t, cni.CheckNetworkList(ctx, list, rt("ctr1")))
	require.NoError(t, cni.CheckNetworkList(ctx, list, with))
	// An address file gone behind the plugin's back fails CHECK.
	require.NoError(t, os.Remove(filepath.Join(state, "2001:db8:10::3")))
	err = cni.CheckNetworkList(ctx, list, with)
	require.ErrorContains(t, err, "2001:db8:10::3")

	// STATUS: ready.
	require.NoError(t, cni.GetStatusNetworkList(ctx, list))

	// DEL releases ctr1's addresses (through prevResult); a repeat DEL is fine.
	require.NoError(t, cni.DelNetworkList(ctx, list, rt("ctr1")))
	require.NoError(t, cni.DelNetworkList(ctx, list, rt("ctr1")))
	allocs, _ := stateDir(t, state)
	require.Equal(t, map[string]string{"10.10.0.15": "ctr2\r\neth0"}, allocs)

	// Two attachments the runtime's cache does not know (a direct exec, and
	// a legacy id-only file), then GC keeping ctr2 and ctr4's attachment:
	// ctr3 goes, ctr4's legacy claim stays for its valid attachment.
	direct, err := libcni.InjectConf(list.Plugins[0], map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	require.NoError(t, err)
	call{Command: "ADD", ContainerID: "ctr3", IfName: "eth0", Config: direct.Bytes}.mustExec(t)
	writeState(t, state, map[string]string{"10.10.0.19": "ctr4"})
	r5 := add(rt("ctr5"))
	require.NoError(t, cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{
		{ContainerID: "ctr2", IfName: "eth0"},
		{ContainerID: "ctr4", IfName: "net1"},
	}}))
	allocs, _ = stateDir(t, state)
	require.Equal(t, map[string]string{"10.10.0.15": "ctr2\r\neth0", "10.10.0.19": "ctr4"}, allocs,
		"GC released ctr3 (unknown to the cache: the plugin's GC) and ctr5 (cached: libcni's DEL); result of ctr5 was %v", addrs(r5))

	// An empty list of valid attachments releases everything.
	require.NoError(t, cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}))
	allocs, cursors := stateDir(t, state)
	require.Empty(t, allocs)
	require.NotEmpty(t, cursors, "GC leaves the last_reserved_ip files")
}

// TestGCWithoutList: a GC whose config has no cni.dev/valid-attachments
// releases nothing (the plugin cannot tell what is valid), and GC needs a 1.1.0
// config.
func TestGCWithoutList(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	conf := netconf(t, `{"cniVersion": "1.1.0", "name": "gc", "ipam": {"ranges": [[{"subnet": "10.70.0.0/24"}]]}}`, dataDir)
	call{Command: "ADD", ContainerID: "a", IfName: "eth0", Config: conf}.mustExec(t)
	call{Command: "GC", Config: conf}.mustExec(t)
	allocs, _ := stateDir(t, filepath.Join(dataDir, "gc"))
	require.Equal(t, map[string]string{"10.70.0.2": "a\r\neth0"}, allocs)

	old := netconf(t, `{"cniVersion": "1.0.0", "name": "gc", "ipam": {"ranges": [[{"subnet": "10.70.0.0/24"}]]}, "cni.dev/valid-attachments": []}`, dataDir)
	cerr := call{Command: "GC", Config: old}.mustFail(t)
	require.Equal(t, types.ErrIncompatibleCNIVersion, cerr.Code)
	allocs, _ = stateDir(t, filepath.Join(dataDir, "gc"))
	require.Len(t, allocs, 1)
}
