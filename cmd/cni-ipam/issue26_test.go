package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/cmd/internal/cmdtest"
)

// TestNullSection (issue 26, case 2): an etcd or kubernetes section that
// is null (what a template renders for an unset value) or not an object is
// a configuration error that names the field, not "no section": read so,
// etcd's claims went to the node's state directory, and two nodes handed
// out one address. (Two nodes over etcd: TestPluginEtcdNullSection in
// store/etcdstore/etcdtest.)
func TestNullSection(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	tests := []struct {
		ipam string
		code uint
		msg  string
	}{
		{`"ranges": [[{"subnet": "10.71.0.0/24"}]], "etcd": null`, types.ErrInvalidNetworkConfig, "ipam.etcd: null: give the section as an object or leave the key out"},
		{`"kubernetes": null, "default_ipv4_ippool": ["a"]`, types.ErrInvalidNetworkConfig, "ipam.kubernetes: null: give the section as an object or leave the key out"},
		{`"ranges": [[{"subnet": "10.71.0.0/24"}]], "etcd": "http://127.0.0.1:2379"`, types.ErrDecodingFailure, `ipam.etcd: "http://127.0.0.1:2379" is not an object`},
		{`"kubernetes": [], "default_ipv4_ippool": ["a"]`, types.ErrDecodingFailure, `ipam.kubernetes: [] is not an object`},
	}
	for _, tt := range tests {
		conf := []byte(`{"cniVersion": "1.1.0", "name": "nullnet", "type": "cni-ipam", "ipam": {` + tt.ipam + `}}`)
		for _, cmd := range []string{"ADD", "STATUS"} {
			cerr := call{Command: cmd, ContainerID: "c1", IfName: "eth0", Config: conf}.mustFail(t)
			require.Equalf(t, tt.code, cerr.Code, "%s %s: %+v", cmd, tt.ipam, cerr)
			require.Containsf(t, cerr.Msg, tt.msg, "%s %s", cmd, tt.ipam)
		}
		// With a dataDir too: still refused, nothing written.
		withDir := netconf(t, string(conf), dataDir)
		call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Config: withDir}.mustFail(t)
	}
	entries, err := os.ReadDir(dataDir)
	require.NoError(t, err)
	require.Empty(t, entries, "a refused config wrote to the state directory")
}

// TestInputIsSizeLimited (issue 26, case 8): the network config on stdin
// is read up to 16 MiB and resolvConf up to 4 MiB; more (/dev/zero never
// ends) is a CNI error naming the input, not a plugin out of memory.
// (The etcd section's files: TestPluginEtcdFilesSizeLimited in
// store/etcdstore/etcdtest; the kubeconfig: TestKubernetesKubeconfigSizeLimited,
// -tags kubernetes.)
func TestInputIsSizeLimited(t *testing.T) {
	t.Parallel()
	huge := bytes.Repeat([]byte(" "), 17<<20)
	copy(huge, `{"cniVersion": "1.1.0", "name": "n", "type": "cni-ipam", "ipam": {"ranges": [[{"subnet": "10.72.0.0/24"}]]}}`)
	cerr := call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Config: huge}.mustFail(t)
	require.Equal(t, types.ErrDecodingFailure, cerr.Code, "%+v", cerr)
	require.Equal(t, "network config on stdin: larger than the limit of 16 MiB", cerr.Msg)

	dataDir := t.TempDir()
	for _, file := range []string{cmdtest.BigFile(t, 64<<20), "/dev/zero"} {
		conf := netconf(t, fmt.Sprintf(`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": [[{"subnet": "10.72.0.0/24"}]], "resolvConf": %q}}`, file), dataDir)
		for _, cmd := range []string{"ADD", "STATUS"} {
			cerr := call{Command: cmd, ContainerID: "c1", IfName: "eth0", Config: conf}.mustFail(t)
			require.Equalf(t, types.ErrInvalidNetworkConfig, cerr.Code, "%s: %+v", cmd, cerr)
			require.Equal(t, fmt.Sprintf("ipam.resolvConf: %q: larger than the limit of 4 MiB", file), cerr.Msg)
		}
	}
}

// TestLongContainerID (issue 26, case 10): a container ID of 64 KiB is an
// invalid environment variable (code 4) that names CNI_CONTAINERID, not an
// internal error (999) from the store.
func TestLongContainerID(t *testing.T) {
	t.Parallel()
	conf := netconf(t, smallNet, t.TempDir())
	for _, cmd := range []string{"ADD", "DEL", "CHECK"} {
		cerr := call{Command: cmd, ContainerID: strings.Repeat("a", 64<<10), IfName: "eth0", Config: conf}.mustFail(t)
		require.Equalf(t, types.ErrInvalidEnvironmentVariables, cerr.Code, "%s: %+v", cmd, cerr)
		require.Containsf(t, cerr.Msg, "CNI_CONTAINERID: 65536 bytes, more than 1024", "%s", cmd)
	}
	// The longest taken.
	call{Command: "ADD", ContainerID: strings.Repeat("a", maxContainerID), IfName: "eth0", Config: conf}.mustExec(t)
}

// TestRequestedNetworkAddress (issue 26, case 10): a requested network or
// broadcast address is refused with the library's reason, which names the
// rule, in every form of the request (CNI_ARGS, args.cni.ips,
// runtimeConfig.ips), not as "not in any range of pools".
func TestRequestedNetworkAddress(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	for ip, rule := range map[string]string{
		"10.73.1.0":   "it is the network address of subnet 10.73.1.0/24 (range set 1)",
		"10.73.1.255": "it is the broadcast address of subnet 10.73.1.0/24 (range set 1)",
		"fd00:73::":   "it is the network address of subnet fd00:73::/120 (range set 2)",
	} {
		ranges := `[[{"subnet": "10.73.0.0/24"}], [{"subnet": "10.73.1.0/24", "rangeStart": "10.73.1.10"}], [{"subnet": "fd00:73::/120"}]]`
		forms := []struct{ conf, args string }{
			{`{"cniVersion": "1.1.0", "name": "n", "ipam": {"ranges": ` + ranges + `}}`, "IP=" + ip},
			{`{"cniVersion": "1.1.0", "name": "n", "args": {"cni": {"ips": ["` + ip + `"]}}, "ipam": {"ranges": ` + ranges + `}}`, ""},
			{`{"cniVersion": "1.1.0", "name": "n", "runtimeConfig": {"ips": ["` + ip + `"]}, "ipam": {"ranges": ` + ranges + `}}`, ""},
		}
		for _, f := range forms {
			cerr := call{Command: "ADD", ContainerID: "c1", IfName: "eth0", Args: f.args, Config: netconf(t, f.conf, dataDir)}.mustFail(t)
			require.Containsf(t, cerr.Msg, "requested IP address "+ip+": "+rule, "%s %s", f.conf, f.args)
			require.NotContains(t, cerr.Msg+cerr.Details, "not in any range")
		}
	}
}

// TestGCWithSharedSectionInDefaultBuild: GC, which releases nothing with an
// etcd or kubernetes section, still refuses a section that a plugin built
// without its support cannot read, as every other command does.
func TestGCWithSharedSectionInDefaultBuild(t *testing.T) {
	t.Parallel()
	for section, tag := range map[string]string{
		`"ranges": [[{"subnet": "10.74.0.0/24"}]], "etcd": {"endpoints": ["http://127.0.0.1:2379"]}`: "-tags etcd",
		`"kubernetes": {}, "default_ipv4_ippool": ["a"]`:                                             "-tags kubernetes",
	} {
		conf := []byte(`{"cniVersion": "1.1.0", "name": "n", "type": "cni-ipam", "cni.dev/valid-attachments": [], "ipam": {` + section + `}}`)
		cerr := call{Command: "GC", Config: conf}.mustFail(t)
		require.Equalf(t, types.ErrInvalidNetworkConfig, cerr.Code, "%+v", cerr)
		require.Contains(t, cerr.Msg, tag)
	}
}
