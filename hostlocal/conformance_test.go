package hostlocal_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/hostlocal"
	"github.com/ipamkit/ipam/internal/hostlocalvectors"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// The vectors were recorded by running host-local v1.9.1 (see
// testdata/conformance/README.md). This test runs them at the library level:
// hostlocal.Load for the config, an Allocator over memstore for the operations.
// The CNI protocol itself (result formats, exit codes) is the plugin's test.

type (
	vector      = hostlocalvectors.Vector
	op          = hostlocalvectors.Op
	expectation = hostlocalvectors.Expectation
	ipOut       = hostlocalvectors.IPOut
	ip020       = hostlocalvectors.IP020
)

func TestHostLocalVectors(t *testing.T) {
	vs, err := hostlocalvectors.Load()
	require.NoError(t, err)
	differences, err := hostlocalvectors.LoadDifferences(vs)
	require.NoError(t, err)
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			diff := differences[v.Name]
			r := newRunner(t, v)
			for i, o := range v.Ops {
				want, why, err := v.Want(i, diff)
				require.NoError(t, err)
				if why != "" {
					t.Logf("op %d: %s", i, why)
				}
				r.do(t, i, o, want)
			}
			r.checkFinal(t, v.FinalAllocations(diff))
			cursors, err := v.FinalCursors(diff)
			require.NoError(t, err)
			r.checkCursors(t, cursors)
		})
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
	cfgBytes, err := hostlocalvectors.WithRequests(r.v.Config, o.RequestIPs) // as the recorder passed them
	require.NoError(t, err)
	cfg, err := hostlocal.Load(cfgBytes, o.CNIArgs)
	if err == nil && r.alloc == nil {
		t.Fatalf("op %d: config loads with requests but not without", i)
	}
	owner := store.Owner{ContainerID: o.ID, Interface: o.Ifname}
	switch o.Op {
	case "add":
		var res ipam.Result
		if err == nil {
			res, err = r.alloc.Allocate(ctx, ipam.Request{ContainerID: o.ID, Interfaces: []ipam.NIC{
				{Name: o.Ifname, Pools: cfg.PoolNames(), IPs: cfg.Requested}}})
		}
		if want.Error != "" || want.ErrorPrefix != "" {
			require.Errorf(t, err, "op %d: want error %q%q, got %v", i, want.Error, want.ErrorPrefix, res.IPs)
			require.NoErrorf(t, hostlocalvectors.CheckErrorNames(err.Error(), want), "op %d: error", i)
			return
		}
		require.NoErrorf(t, err, "op %d", i)
		var got []ipOut
		for _, c := range res.IPs {
			got = append(got, ipOut{Address: c.Address.String(), Gateway: c.Gateway.String()})
		}
		wantIPs := want.IPs
		if want.IP4 != nil || want.IP6 != nil {
			// CNI 0.2.0 reports one address per family; the library returns them
			// in range-set order, and the plugin converts.
			wantIPs = nil
			for _, x := range []*ip020{want.IP4, want.IP6} {
				if x != nil {
					wantIPs = append(wantIPs, ipOut{Address: x.IP, Gateway: x.Gateway})
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

// TestCursorRules checks what the README says of the round-robin cursor
// (last_reserved_ip) beside the vectors: a granted requested address moves
// it; an ADD that fails on a requested address moves none; an ADD that fails
// because a later range set is exhausted leaves the earlier set's cursor
// moved, as host-local does; a release never removes it, even for a
// container ID spelled as the address it holds.
func TestCursorRules(t *testing.T) {
	cfg, err := hostlocal.Load([]byte(`{"cniVersion":"1.0.0","name":"n","ipam":{"type":"host-local",
		"ranges":[[{"subnet":"10.0.0.0/24"}],[{"subnet":"10.1.0.0/30"}]]}}`), "")
	require.NoError(t, err)
	cat, err := ipam.NewCatalog(cfg.Pools...)
	require.NoError(t, err)
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	require.NoError(t, err)
	ctx := context.Background()
	add := func(id string, ips ...string) error {
		iface := ipam.NIC{Name: "eth0", Pools: cfg.PoolNames()}
		for _, s := range ips {
			iface.IPs = append(iface.IPs, netip.MustParseAddr(s))
		}
		_, err := a.Allocate(ctx, ipam.Request{ContainerID: id, Interfaces: []ipam.NIC{iface}})
		return err
	}
	cursors := func() [2]string {
		var out [2]string
		for i, p := range cfg.Pools {
			ip, err := st.Cursor(ctx, p.Name)
			require.NoError(t, err)
			if ip.IsValid() {
				out[i] = ip.String()
			}
		}
		return out
	}

	require.NoError(t, add("a", "10.0.0.200"))
	require.Equal(t, [2]string{"10.0.0.200", "10.1.0.2"}, cursors(), "a granted request moves its set's cursor")

	require.Error(t, add("b", "10.0.0.200"), "taken")
	require.Error(t, add("c", "10.9.0.1"), "outside every range set")
	require.Equal(t, [2]string{"10.0.0.200", "10.1.0.2"}, cursors(), "an ADD that fails on a requested address moves nothing")

	require.Error(t, add("d"), "range set 1 is full")
	require.Equal(t, [2]string{"10.0.0.201", "10.1.0.2"}, cursors(), "range set 0 allocated before set 1 failed, as host-local's")
	held, err := a.Claims(ctx)
	require.NoError(t, err)
	require.Len(t, held, 2, "the failed ADD claimed nothing that stays")

	require.NoError(t, a.Release(ctx, store.Owner{ContainerID: "10.0.0.201", Interface: "eth0"}))
	require.NoError(t, a.Release(ctx, store.Owner{ContainerID: "10.0.0.201"}))
	require.Equal(t, [2]string{"10.0.0.201", "10.1.0.2"}, cursors(), "a release never removes a cursor")
}
