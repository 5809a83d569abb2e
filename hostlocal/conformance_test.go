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
	IPs         []ipOut `json:"ips"`
	IP4         *ip020  `json:"ip4"`
	IP6         *ip020  `json:"ip6"`
	OK          bool    `json:"ok"`
	Error       string  `json:"error"`
	ErrorPrefix string  `json:"errorPrefix"`
}

type ip020 struct {
	IP      string `json:"ip"`
	Gateway string `json:"gateway"`
}

// difference overrides what host-local did, where ../testdata/conformance/README.md
// lists a deliberate difference. Every override names the difference.
type difference struct {
	why    string
	expect map[int]expectation // op index -> what we do instead
	final  map[string]string   // allocations afterwards, if different
	// cursor: the final last-reserved addresses differ (difference 3: a failed
	// ADD does not advance the cursor, or host-local's own bug).
	cursor bool
}

var differences = map[string]difference{
	"repeat-add-same-id": {
		why: "difference 1: a repeat ADD returns what the owner holds",
		expect: map[int]expectation{
			1: {IPs: []ipOut{{"10.1.2.2/24", "10.1.2.1"}}},
			3: {IPs: []ipOut{{"10.1.2.2/24", "10.1.2.1"}}},
		},
	},
	"legacy-file-format": {
		why: "difference 1: the legacy id-only claim of container old is returned to it",
		expect: map[int]expectation{
			0: {IPs: []ipOut{{"10.0.0.7/24", "10.0.0.1"}}},
		},
	},
	"failed-duplicate-add-rollback-releases-original": {
		why: "differences 1 and 2: asking for another address than the one held is an error that names both, and the failed ADD keeps what the owner held",
		expect: map[int]expectation{
			1: {Error: "10.0.0.50 10.0.0.2"},
			2: {OK: true},
		},
		final:  map[string]string{"10.0.0.2": "a\r\neth0", "10.1.0.2": "a\r\neth0"},
		cursor: true,
	},
	"request-not-in-any-set-rolls-back": {
		why: "difference 3: requested addresses are checked before anything is allocated, so the failed ADD leaves the cursor where it was",
		expect: map[int]expectation{
			1: {IPs: []ipOut{{"10.0.0.2/24", "10.0.0.1"}, {"10.1.0.2/24", "10.1.0.1"}}},
		},
		final:  map[string]string{"10.0.0.2": "b\r\neth0", "10.1.0.2": "b\r\neth0"},
		cursor: true,
	},
	"args-cni-ips-two-in-same-set": {
		why: "difference 3: requested addresses are placed in order (10.1.2.88 first), so the leftover is always 10.1.2.77, and nothing is allocated",
		expect: map[int]expectation{
			0: {Error: "10.1.2.77"},
			1: {Error: "10.1.2.77"},
		},
		cursor: true,
	},
	"request-already-allocated": {
		why: "difference 1: the repeat ADD by the same container ID asks for the address it already holds, and gets it",
		expect: map[int]expectation{
			1: {IPs: []ipOut{{"192.168.1.5/29", "192.168.1.1"}}},
		},
	},
	"explicit-start-end-gateway": {
		why:    "difference 3: the failed ADDs with requested addresses outside the range do not move the cursor",
		cursor: true,
	},
	"v4-/24-defaults": {
		why:    "difference 3: the failed ADDs with requested addresses outside the range do not move the cursor",
		cursor: true,
	},
	"v4-/25-defaults": {
		why:    "difference 3: the failed ADD with a requested address outside the range does not move the cursor",
		cursor: true,
	},
	"request-outside-range": {
		why:    "difference 3: the failed ADDs with requested addresses outside the range do not move the cursor",
		cursor: true,
	},
	"container-id-equal-to-ip-string-legacy-match": {
		why:    "host-local's id-only fallback deleted its own last_reserved_ip.0 file; we never treat the cursor as a claim",
		cursor: true,
	},
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
				if d, ok := diff.expect[i]; ok {
					t.Logf("op %d: %s", i, diff.why)
					want = d
				}
				r.do(t, i, o, want)
			}
			wantAlloc := v.FinalState.Allocations
			if diff.final != nil {
				wantAlloc = diff.final
			}
			r.checkFinal(t, wantAlloc)
			if !diff.cursor && !strings.Contains(fmt.Sprint(v.FinalState.LastReserved), "random") {
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
