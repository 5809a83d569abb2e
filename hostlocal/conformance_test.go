package hostlocal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/hostlocal"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// The vectors were recorded by running host-local v1.9.1 (see
// testdata/conformance/README.md). This test runs them at the library level:
// hostlocal.Load for the config, an Allocator over memstore for the operations.
// The CNI protocol itself (result formats, exit codes) is the plugin's test.

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
	IPs         []ipOut `json:"ips,omitempty"`
	IP4         *ip020  `json:"ip4,omitempty"`
	IP6         *ip020  `json:"ip6,omitempty"`
	OK          bool    `json:"ok,omitempty"`
	Error       string  `json:"error,omitempty"`
	ErrorPrefix string  `json:"errorPrefix,omitempty"`
}

type ip020 struct {
	IP      string `json:"ip"`
	Gateway string `json:"gateway"`
}

// difference overrides what host-local did, where ../testdata/conformance/README.md
// lists a deliberate difference. Every override names the difference.
type difference struct {
	Why    string              `json:"why"`
	Expect map[int]expectation `json:"expect,omitempty"` // op index -> what we do instead
	Final  map[string]string   `json:"final,omitempty"`  // allocations afterwards, if different
	// Cursor: the final last-reserved addresses differ (difference 3: a failed
	// ADD does not advance the cursor, or host-local's own bug).
	Cursor bool `json:"cursor,omitempty"`
}

// loadDifferences reads the overrides, shared with the other test of these
// vectors, from ../testdata/conformance/host-local-differences.json.
func loadDifferences(t *testing.T) map[string]difference {
	t.Helper()
	data, err := os.ReadFile("../testdata/conformance/host-local-differences.json")
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
	data, err := os.ReadFile("../testdata/conformance/host-local-vectors.json")
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
		t.Run(v.Name, func(t *testing.T) {
			require.Len(t, v.Expect, len(v.Ops), "one expectation per op")
			diff, hasDiff := differences[v.Name]
			used[v.Name] = hasDiff
			r := newRunner(t, v)
			for i, o := range v.Ops {
				var want expectation
				require.NoError(t, json.Unmarshal(v.Expect[i], &want))
				if d, ok := diff.Expect[i]; ok {
					t.Logf("op %d: %s", i, diff.Why)
					want = d
				}
				r.do(t, i, o, want)
			}
			wantAlloc := v.FinalState.Allocations
			if diff.Final != nil {
				wantAlloc = diff.Final
			}
			r.checkFinal(t, wantAlloc)
			if !diff.Cursor && !strings.Contains(fmt.Sprint(v.FinalState.LastReserved), "random") {
				r.checkCursors(t, v.FinalState.LastReserved)
			}
		})
	}
	for name := range differences {
		if _, ok := used[name]; !ok {
			t.Errorf("difference for %q names no vector", name)
		}
	}
}

// runner holds one vector's allocator and store across its operations, as
// host-local's state directory persists across its invocations.
type runner struct {
	v     vector
	st    *memstore.Store
	alloc *ipam.Allocator
	cfg   *hostlocal.Config // the config without per-op requests; nil if it does not load
}

func newRunner(t *testing.T, v vector) *runner {
	r := &runner{v: v, st: memstore.New()}
	cfg, err := hostlocal.Load(v.Config, "")
	if err != nil {
		return r // every op must then fail at load time
	}
	r.cfg = cfg
	cat, err := ipam.NewCatalog(cfg.Pools...)
	require.NoError(t, err)
	ctx := context.Background()
	if v.Seed != nil {
		seed := func(ip, content string) {
			addr := netip.MustParseAddr(ip)
			id, ifname, _ := strings.Cut(strings.TrimSpace(content), "\r\n")
			_, err := r.st.Create(ctx, store.Claim{Pool: poolOf(t, cfg, addr), IP: addr,
				Owner: store.Owner{ContainerID: id, Interface: ifname}})
			require.NoError(t, err)
		}
		for ip, id := range v.Seed.Allocated {
			seed(ip, id+"\r\neth0")
		}
		for ip, content := range v.Seed.Files {
			seed(ip, content)
		}
		for idx, ip := range v.Seed.LastReserved {
			require.NoError(t, r.st.SetCursor(ctx, poolName(t, cfg, idx), netip.MustParseAddr(ip)))
		}
	}
	r.alloc, err = ipam.NewAllocator(ipam.Options{Pools: cat, Store: r.st})
	require.NoError(t, err)
	return r
}

func poolOf(t *testing.T, cfg *hostlocal.Config, ip netip.Addr) string {
	for _, p := range cfg.Pools {
		rs, err := p.RangeSet()
		require.NoError(t, err)
		for _, rg := range rs {
			if rg.Contains(ip) {
				return p.Name
			}
		}
	}
	t.Fatalf("seeded address %s is in no range set", ip)
	return ""
}

func poolName(t *testing.T, cfg *hostlocal.Config, idx string) string {
	for i := range cfg.Pools {
		if fmt.Sprint(i) == idx {
			return hostlocal.PoolName(cfg.Name, i)
		}
	}
	t.Fatalf("no range set %s", idx)
	return ""
}

func (r *runner) do(t *testing.T, i int, o op, want expectation) {
	ctx := context.Background()
	cfgBytes := withRequests(t, r.v.Config, o.RequestIPs)
	cfg, err := hostlocal.Load(cfgBytes, o.CNIArgs)
	if err == nil && r.alloc == nil {
		t.Fatalf("op %d: config loads with requests but not without", i)
	}
	owner := store.Owner{ContainerID: o.ID, Interface: o.Ifname}
	switch o.Op {
	case "add":
		var res ipam.Result
		if err == nil {
			res, err = r.alloc.Allocate(ctx, ipam.Request{ContainerID: o.ID, Interfaces: []ipam.Interface{
				{Name: o.Ifname, Pools: cfg.PoolNames(), IPs: cfg.Requested}}})
		}
		if want.Error != "" || want.ErrorPrefix != "" {
			require.Errorf(t, err, "op %d: want error %q%q, got %v", i, want.Error, want.ErrorPrefix, res.IPs)
			checkErrorNames(t, i, err, want)
			return
		}
		require.NoErrorf(t, err, "op %d", i)
		var got []ipOut
		for _, c := range res.IPs {
			got = append(got, ipOut{c.Address.String(), c.Gateway.String()})
		}
		wantIPs := want.IPs
		if want.IP4 != nil || want.IP6 != nil {
			// CNI 0.2.0 reports one address per family; the library returns them
			// in range-set order, and the plugin converts.
			wantIPs = nil
			for _, x := range []*ip020{want.IP4, want.IP6} {
				if x != nil {
					wantIPs = append(wantIPs, ipOut{x.IP, x.Gateway})
				}
			}
		}
		if d := cmp.Diff(wantIPs, got); d != "" {
			t.Fatalf("op %d (add %s/%s): addresses (-want +got):\n%s", i, o.ID, o.Ifname, d)
		}
	case "del":
		require.NoErrorf(t, err, "op %d: DEL needs a config that loads", i)
		err = r.alloc.Release(ctx, owner)
		if want.Error != "" {
			require.Errorf(t, err, "op %d", i)
			return
		}
		require.NoErrorf(t, err, "op %d", i)
	case "check":
		require.NoErrorf(t, err, "op %d: CHECK needs a config that loads", i)
		held, err := r.alloc.Lookup(ctx, owner)
		require.NoError(t, err)
		if want.Error != "" {
			require.Emptyf(t, held, "op %d: CHECK must find nothing for %s", i, owner)
		} else {
			require.NotEmptyf(t, held, "op %d: CHECK must find the address of %s", i, owner)
		}
	default:
		t.Fatalf("op %d: unknown op %q", i, o.Op)
	}
}

// withRequests adds requestIPs to runtimeConfig.ips, as the recorder passed them.
func withRequests(t *testing.T, config json.RawMessage, ips []string) []byte {
	if len(ips) == 0 {
		return config
	}
	var m map[string]any
	require.NoError(t, json.Unmarshal(config, &m))
	rc, _ := m["runtimeConfig"].(map[string]any)
	if rc == nil {
		rc = map[string]any{}
	}
	rc["ips"] = ips
	m["runtimeConfig"] = rc
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

var addrToken = regexp.MustCompile(`[0-9A-Fa-f:.]*[.:][0-9A-Fa-f:.]*(/[0-9]+)?`)

// checkErrorNames checks that our error names the values host-local's names:
// every address, range bound and CIDR in its message appears in ours as a
// whole token. Messages that name no value must match in wording.
func checkErrorNames(t *testing.T, i int, err error, want expectation) {
	t.Helper()
	msg := err.Error()
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
		// Ours has the same words (possibly behind a "hostlocal: " prefix).
		require.Containsf(t, strings.ToLower(msg), strings.ToLower(theirs), "op %d: error", i)
		return
	}
	ours := addrToken.FindAllString(msg, -1)
	var oursParts []string
	for _, tok := range ours {
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

func (r *runner) checkFinal(t *testing.T, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	if r.cfg != nil {
		for _, p := range r.cfg.Pools {
			cs, err := r.st.List(context.Background(), p.Name)
			require.NoError(t, err)
			for _, c := range cs {
				v := c.Owner.ContainerID
				if c.Owner.Interface != "" {
					v += "\r\n" + c.Owner.Interface
				}
				got[c.IP.String()] = v
			}
		}
	}
	norm := map[string]string{}
	for ip, content := range want {
		norm[ip] = strings.TrimSpace(content) // byte-exact files are the file store's test
	}
	if d := cmp.Diff(norm, got); d != "" {
		t.Fatalf("final allocations (-want +got):\n%s", d)
	}
}

func (r *runner) checkCursors(t *testing.T, want map[string]string) {
	t.Helper()
	if r.cfg == nil {
		return
	}
	got := map[string]string{}
	for i, p := range r.cfg.Pools {
		ip, err := r.st.Cursor(context.Background(), p.Name)
		require.NoError(t, err)
		if ip.IsValid() {
			got[fmt.Sprint(i)] = ip.String()
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("final last reserved addresses (-want +got):\n%s", d)
	}
}
