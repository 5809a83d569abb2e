package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// The vectors were recorded by running host-local v1.9.1 (see
// ../../testdata/conformance/README.md). hostlocal/conformance_test.go runs
// them against the library; this test runs them against the plugin binary over
// the CNI protocol: the state directory is seeded with host-local's files, each
// op is one exec of the binary, and the result JSON (per cniVersion) and the
// state directory's bytes afterwards are compared with what host-local did.

const vectorsPath = "../../testdata/conformance/host-local-vectors.json"

type vector struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	Seed   *struct {
		Allocated    map[string]string `json:"allocated"`
		Files        map[string]string `json:"files"`
		LastReserved map[string]string `json:"lastReserved"`
	} `json:"seed"`
	Ops        []op              `json:"ops"`
	Expect     []json.RawMessage `json:"expect"`
	FinalState struct {
		Allocations  map[string]string `json:"allocations"`
		LastReserved map[string]string `json:"lastReserved"`
	} `json:"finalState"`
}

type op struct {
	Op         string   `json:"op"`
	ID         string   `json:"id"`
	Ifname     string   `json:"ifname"`
	RequestIPs []string `json:"requestIPs"`
	CNIArgs    string   `json:"cniArgs"`
}

type ipOut struct {
	Address string `json:"address"`
	Gateway string `json:"gateway"`
}

type expectation struct {
	IPs    []ipOut `json:"ips"`
	IP4    *ip020  `json:"ip4"`
	IP6    *ip020  `json:"ip6"`
	Routes []struct {
		Dst string `json:"dst"`
		GW  string `json:"gw"`
	} `json:"routes"`
	OK          bool   `json:"ok"`
	Error       string `json:"error"`
	ErrorPrefix string `json:"errorPrefix"`
}

type ip020 struct {
	IP      string `json:"ip"`
	Gateway string `json:"gateway"`
}

// difference overrides what host-local did, where
// ../../testdata/conformance/README.md lists a deliberate difference. The
// table is hostlocal/conformance_test.go's, reasons and all: the plugin
// differs from host-local exactly where the library does.
type difference struct {
	Why    string              `json:"why"`
	Expect map[int]expectation `json:"expect"` // op index -> what we do instead
	Final  map[string]string   `json:"final"`  // allocations afterwards, if different
	// Cursor: the final last-reserved addresses differ (difference 3: a failed
	// ADD does not advance the cursor, or host-local's own bug).
	Cursor bool `json:"cursor"`
}

// loadDifferences reads the overrides, shared with the other test of these
// vectors, from ../../testdata/conformance/host-local-differences.json.
func loadDifferences(t *testing.T) map[string]difference {
	t.Helper()
	data, err := os.ReadFile("../../testdata/conformance/host-local-differences.json")
	require.NoError(t, err)
	var ds map[string]difference
	require.NoError(t, json.Unmarshal(data, &ds))
	for name, d := range ds {
		require.NotEmptyf(t, d.Why, "override %s gives no reason", name)
	}
	return ds
}

func loadVectors(t *testing.T) []vector {
	t.Helper()
	data, err := os.ReadFile(vectorsPath)
	require.NoError(t, err)
	var vs []vector
	require.NoError(t, json.Unmarshal(data, &vs))
	require.NotEmpty(t, vs)
	return vs
}

func TestHostLocalVectors(t *testing.T) {
	vs := loadVectors(t)
	differences := loadDifferences(t)
	used := map[string]bool{}
	for _, v := range vs {
		diff, hasDiff := differences[v.Name]
		used[v.Name] = hasDiff
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			require.Len(t, v.Expect, len(v.Ops), "one expectation per op")
			r := newVectorRun(t, v)
			for i, o := range v.Ops {
				var want expectation
				require.NoError(t, json.Unmarshal(v.Expect[i], &want))
				if d, ok := diff.Expect[i]; ok {
					t.Logf("op %d: %s", i, diff.Why)
					want = d
				}
				r.do(t, i, o, want)
			}
			allocs, cursors := stateDir(t, r.state)
			wantAlloc := v.FinalState.Allocations
			if diff.Final != nil {
				wantAlloc = diff.Final
			}
			if d := cmp.Diff(wantAlloc, allocs); d != "" {
				t.Errorf("final state directory: address files (-want +got):\n%s", d)
			}
			if !diff.Cursor && !strings.Contains(fmt.Sprint(v.FinalState.LastReserved), "random") {
				if d := cmp.Diff(v.FinalState.LastReserved, cursors); d != "" {
					t.Errorf("final state directory: last_reserved_ip files (-want +got):\n%s", d)
				}
			}
		})
	}
	for name := range differences {
		if _, ok := used[name]; !ok {
			t.Errorf("difference for %q names no vector", name)
		}
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
	if len(o.RequestIPs) > 0 {
		rc, _ := m["runtimeConfig"].(map[string]any)
		if rc == nil {
			rc = map[string]any{}
		}
		rc["ips"] = o.RequestIPs
		m["runtimeConfig"] = rc
	}
	b, err := json.Marshal(m)
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
		checkErrorNames(t, i, cerr, want)
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

var addrToken = regexp.MustCompile(`[0-9A-Fa-f:.]*[.:][0-9A-Fa-f:.]*(/[0-9]+)?`)

// checkErrorNames checks that our error names the values host-local's names:
// every address, range bound and CIDR in its message appears in ours (message
// or details) as a whole token. Messages that name no value must match in
// wording. It is hostlocal/conformance_test.go's check, on a CNI error.
func checkErrorNames(t *testing.T, i int, cerr *types.Error, want expectation) {
	t.Helper()
	msg := cerr.Msg + "\n" + cerr.Details
	theirs := want.Error
	prefix := false
	if theirs == "" {
		theirs, prefix = want.ErrorPrefix, true
	}
	var tokens []string
	for _, tok := range addrToken.FindAllString(theirs, -1) {
		for _, part := range strings.FieldsFunc(tok, func(r rune) bool { return r == '-' || r == ',' }) {
			switch {
			case prefix && strings.HasSuffix(part, "."):
				tokens = append(tokens, part) // a truncated address: match as a prefix
			case strings.ContainsAny(part, "0123456789") && len(part) > 3:
				// An address, range bound or CIDR, valid or not (the bad input).
				tokens = append(tokens, strings.TrimRight(part, ".:"))
			}
		}
	}
	if len(tokens) == 0 {
		// "host-local: " in host-local's messages is its name, not wording.
		theirs = strings.TrimPrefix(theirs, "host-local: ")
		require.Containsf(t, strings.ToLower(msg), strings.ToLower(theirs), "op %d: error (code %d)", i, cerr.Code)
		return
	}
	var oursParts []string
	for _, tok := range addrToken.FindAllString(msg, -1) {
		oursParts = append(oursParts, strings.FieldsFunc(tok, func(r rune) bool { return r == '-' || r == ',' })...)
	}
	for _, tok := range tokens {
		found := slices.ContainsFunc(oursParts, func(p string) bool {
			p = strings.TrimRight(p, ".:")
			if strings.HasSuffix(tok, ".") {
				return strings.HasPrefix(p, tok)
			}
			return p == tok
		})
		if !found {
			t.Fatalf("op %d: our error %q does not name %s (host-local: %q)", i, msg, tok, theirs)
		}
	}
}
