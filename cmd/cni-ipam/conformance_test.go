package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam/internal/hostlocalvectors"
)

// The vectors were recorded by running host-local v1.9.1 (see
// ../../testdata/conformance/README.md). hostlocal/conformance_test.go runs
// them against the library; this test runs them against the plugin binary over
// the CNI protocol: the state directory is seeded with host-local's files, each
// op is one exec of the binary, and the result JSON (per cniVersion) and the
// state directory's bytes afterwards are compared with what host-local did.

type (
	vector      = hostlocalvectors.Vector
	op          = hostlocalvectors.Op
	expectation = hostlocalvectors.Expectation
)

func TestHostLocalVectors(t *testing.T) {
	vs, err := hostlocalvectors.Load()
	require.NoError(t, err)
	differences, err := hostlocalvectors.LoadDifferences(vs)
	require.NoError(t, err)
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			diff := differences[v.Name]
			r := newVectorRun(t, v)
			for i, o := range v.Ops {
				want, why, err := v.Want(i, diff)
				require.NoError(t, err)
				if why != "" {
					t.Logf("op %d: %s", i, why)
				}
				r.do(t, i, o, want)
			}
			allocs, cursors := stateDir(t, r.state)
			if d := cmp.Diff(v.FinalAllocations(diff), allocs); d != "" {
				t.Errorf("final state directory: address files (-want +got):\n%s", d)
			}
			wantCursors, err := v.FinalCursors(diff)
			require.NoError(t, err)
			if d := cmp.Diff(wantCursors, cursors); d != "" {
				t.Errorf("final state directory: last_reserved_ip files (-want +got):\n%s", d)
			}
		})
	}
}

// vectorRun is one vector's state directory across its ops, as host-local's
// persists across its invocations.
type vectorRun struct {
	v       vector
	dataDir string
	state   string // <dataDir>/<network name>
}

func newVectorRun(t *testing.T, v vector) *vectorRun {
	var nc struct {
		Name string `json:"name"`
	}
	require.NoError(t, json.Unmarshal(v.Config, &nc))
	r := &vectorRun{v: v, dataDir: t.TempDir()}
	r.state = filepath.Join(r.dataDir, nc.Name)
	if v.Seed != nil {
		files := map[string]string{}
		for ip, id := range v.Seed.Allocated {
			files[ip] = id + "\r\neth0"
		}
		for ip, content := range v.Seed.Files {
			files[ip] = content
		}
		for idx, ip := range v.Seed.LastReserved {
			files["last_reserved_ip."+idx] = ip
		}
		writeState(t, r.state, files)
	}
	return r
}

// config returns the vector's config with the test's dataDir and the op's
// requested addresses in runtimeConfig.ips, as the recorder passed them.
func (r *vectorRun) config(t *testing.T, o op) []byte {
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.v.Config, &m))
	m["ipam"].(map[string]any)["dataDir"] = r.dataDir
	b, err := json.Marshal(m)
	require.NoError(t, err)
	b, err = hostlocalvectors.WithRequests(b, o.RequestIPs)
	require.NoError(t, err)
	return b
}

func (r *vectorRun) do(t *testing.T, i int, o op, want expectation) {
	t.Helper()
	cmd := map[string]string{"add": "ADD", "del": "DEL", "check": "CHECK"}[o.Op]
	require.NotEmptyf(t, cmd, "op %d: unknown op %q", i, o.Op)
	c := call{Command: cmd, ContainerID: o.ID, IfName: o.Ifname, Args: o.CNIArgs, Config: r.config(t, o)}
	out, cerr := c.exec(t)
	if want.Error != "" || want.ErrorPrefix != "" {
		require.NotNilf(t, cerr, "op %d (%s %s/%s): want error %q%q, got %s", i, cmd, o.ID, o.Ifname, want.Error, want.ErrorPrefix, out)
		// Ours may name the values in the message or its details.
		require.NoErrorf(t, hostlocalvectors.CheckErrorNames(cerr.Msg+"\n"+cerr.Details, want), "op %d: error (code %d)", i, cerr.Code)
		return
	}
	require.Nilf(t, cerr, "op %d (%s %s/%s)", i, cmd, o.ID, o.Ifname)
	if cmd != "ADD" {
		require.Emptyf(t, strings.TrimSpace(string(out)), "op %d: %s prints nothing", i, cmd)
		return
	}
	var vers struct {
		CNIVersion string `json:"cniVersion"`
	}
	require.NoError(t, json.Unmarshal(r.v.Config, &vers))
	var got expectation
	require.NoErrorf(t, json.Unmarshal(out, &got), "op %d: result %s", i, out)
	var gotVers struct {
		CNIVersion string `json:"cniVersion"`
	}
	require.NoError(t, json.Unmarshal(out, &gotVers))
	require.Equalf(t, vers.CNIVersion, gotVers.CNIVersion, "op %d: the result is in the config's cniVersion", i)
	if want.IP4 != nil || want.IP6 != nil {
		// CNI 0.2.0: ip4 and ip6, no ips.
		require.Nilf(t, got.IPs, "op %d: a %s result has no ips: %s", i, vers.CNIVersion, out)
	}
	// Compare only what host-local's result has.
	got.Routes = nil
	if want.Routes != nil {
		var rs expectation
		require.NoError(t, json.Unmarshal(out, &rs))
		got.Routes = rs.Routes
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("op %d (add %s/%s): result (-want +got):\n%s\nresult: %s", i, o.ID, o.Ifname, d, out)
	}
}
