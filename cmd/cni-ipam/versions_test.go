package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/version"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// TestResultVersions checks the result format of every CNI version the plugin
// speaks: ip4 and ip6 up to 0.2.0, ips with a version field in 0.3.0 to 0.4.0,
// ips without it from 1.0.0 on.
func TestResultVersions(t *testing.T) {
	t.Parallel()
	out := call{Command: "VERSION"}.mustExec(t)
	var info struct {
		CNIVersion string   `json:"cniVersion"`
		Supported  []string `json:"supportedVersions"`
	}
	require.NoError(t, json.Unmarshal(out, &info))
	require.Equal(t, []string{"0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}, info.Supported)
	require.Equal(t, version.Current(), info.CNIVersion)

	dataDir := t.TempDir()
	for i, v := range info.Supported {
		conf := netconf(t, fmt.Sprintf(`{"cniVersion": %q, "name": "v%d", "ipam": {"ranges": [[{"subnet": "10.50.0.0/24"}], [{"subnet": "2001:db8:50::/64"}]],
			"routes": [{"dst": "10.0.0.0/8"}, {"dst": "2001:db8::/32", "gw": "2001:db8:50::fe"}]}}`, v, i), dataDir)
		out := call{Command: "ADD", ContainerID: "c", IfName: "eth0", Config: conf}.mustExec(t)
		var got map[string]any
		require.NoError(t, json.Unmarshal(out, &got))
		delete(got, "dns")
		var want map[string]any
		switch v {
		case "0.1.0", "0.2.0":
			want = map[string]any{"cniVersion": v,
				"ip4": map[string]any{"ip": "10.50.0.2/24", "gateway": "10.50.0.1", "routes": []any{map[string]any{"dst": "10.0.0.0/8"}}},
				"ip6": map[string]any{"ip": "2001:db8:50::2/64", "gateway": "2001:db8:50::1", "routes": []any{map[string]any{"dst": "2001:db8::/32", "gw": "2001:db8:50::fe"}}}}
		default:
			ip4 := map[string]any{"address": "10.50.0.2/24", "gateway": "10.50.0.1"}
			ip6 := map[string]any{"address": "2001:db8:50::2/64", "gateway": "2001:db8:50::1"}
			if v < "1.0.0" {
				ip4["version"], ip6["version"] = "4", "6"
			}
			want = map[string]any{"cniVersion": v, "ips": []any{ip4, ip6},
				"routes": []any{map[string]any{"dst": "10.0.0.0/8"}, map[string]any{"dst": "2001:db8::/32", "gw": "2001:db8:50::fe"}}}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("cniVersion %s: result (-want +got):\n%s\n%s", v, d, out)
		}
		call{Command: "DEL", ContainerID: "c", IfName: "eth0", Config: conf}.mustExec(t)
	}
}
