package ipam_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// fuzzCmp compares pools field by field: addresses by value, and an empty
// slice or map like a missing one (JSON's omitempty cannot tell them apart).
var fuzzCmp = []cmp.Option{
	cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }),
	cmp.Comparer(func(a, b netipx.IPRange) bool { return a == b }),
	cmpopts.EquateEmpty(),
}

// FuzzParsePool: ParsePool never panics and fails only with ErrInvalid; a pool
// it accepts is valid, and writing it out and parsing it again gives an equal
// pool and the same JSON.
func FuzzParsePool(f *testing.F) {
	for _, s := range []string{
		`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`,
		`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20","gateway":"10.0.0.254"},{"subnet":"10.0.1.0/24"}],"routes":[{"dst":"0.0.0.0/0"}],"strategy":"lowest-free"}`,
		`{"name":"v6","ranges":[{"subnet":"fd00::/64","rangeStart":"fd00::10"}],"excludeIPs":["fd00::11-fd00::20"]}`,
		`{"name":"green","ipVersion":4,"subnet":"10.0.1.0/24","ips":["10.0.1.10","10.0.1.20-10.0.1.30"],"excludeIPs":["10.0.1.25"],"gateway":"10.0.1.1","routes":[{"dst":"10.1.0.0/16","gw":"10.0.1.2"}],"vlan":100,"strategy":"round-robin"}`,
		`{"name":"aff","subnet":"fd00:1::/120","ips":["fd00:1::10-fd00:1::ff"],"default":true,"disable":false,"terminating":true,"nodeName":["n1"],"nodeAffinity":{"matchLabels":{"zone":"a"},"matchExpressions":[{"key":"cpu","operator":"In","values":["x","y"]}]},"namespaceName":["default"],"namespaceAffinity":{"matchExpressions":[{"key":"team","operator":"Exists"}]},"podAffinity":{"matchLabels":{"app":"web"}},"multusName":["kube-system/macvlan"]}`,
		`{"name":"p","subnet":"10.0.0.0/24","ips":["::ffff:10.0.0.5"],"gateway":"::ffff:10.0.0.1"}`,
		`{"name":"p","subnet":"10.0.0.0/24","ips":[],"nodeAffinity":{"matchLabels":{}}}`,
		`{"name":"p","subnet":"10.0.0.0/24","vlan":"x"}`,
		`{"name":"p","subnet":"10.0.0.0/24"}}`,
		`{"name":"p","subnet":"10.0`,
		`{}`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ipam.ParsePool(data)
		if err != nil {
			if !errors.Is(err, ipam.ErrInvalid) {
				t.Fatalf("error does not unwrap to ErrInvalid: %v", err)
			}
			return
		}
		require.NoError(t, p.Validate(), "ParsePool accepted an invalid pool")
		out, err := p.MarshalJSON()
		require.NoError(t, err)
		q, err := ipam.ParsePool(out)
		require.NoError(t, err, "reparsing %s", out)
		if d := cmp.Diff(p, q, fuzzCmp...); d != "" {
			t.Fatalf("round trip through %s changed the pool (-parsed +reparsed):\n%s", out, d)
		}
		require.NoError(t, q.Validate())
		again, err := q.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, string(out), string(again), "MarshalJSON is not stable")
	})
}

// FuzzParseIPRange: ParseIPRange never panics; a range it accepts is ordered,
// of one family, without zones, and formats to a string that parses back to it.
func FuzzParseIPRange(f *testing.F) {
	for _, s := range []string{
		"10.0.0.1", "10.0.0.1-10.0.0.9", " 10.0.0.1 - 10.0.0.9 ", "10.0.0.9-10.0.0.1",
		"fd00::1-fd00::ff", "::ffff:10.0.0.1-10.0.0.2", "10.0.0.1-fd00::1", "fe80::1%eth0",
		"10.0.0.1-", "-10.0.0.1", "", "0.0.0.0-255.255.255.255", "::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ipam.ParseIPRange(s)
		if err != nil {
			return
		}
		from, to := r.From(), r.To()
		if !r.IsValid() || !from.IsValid() || !to.IsValid() {
			t.Fatalf("ParseIPRange(%q) = %v: not a valid range", s, r)
		}
		if to.Less(from) {
			t.Fatalf("ParseIPRange(%q) = %v: from after to", s, r)
		}
		if from.Is4() != to.Is4() || from.Is4In6() || to.Is4In6() {
			t.Fatalf("ParseIPRange(%q) = %v: mixed or mapped families", s, r)
		}
		if from.Zone() != "" || to.Zone() != "" || strings.Contains(s, "%") {
			t.Fatalf("ParseIPRange(%q) = %v: accepted an address with a zone", s, r)
		}
		text := from.String()
		if from != to {
			text = from.String() + "-" + to.String()
		}
		back, err := ipam.ParseIPRange(text)
		require.NoError(t, err, "reparsing %q (from %q)", text, s)
		require.Equal(t, r, back, "round trip of %q through %q", s, text)
	})
}

// FuzzRangeCanonical: Range.UnmarshalJSON and Canonical never panic and fail
// only with ErrInvalid; a canonical range lies inside its subnet in order, has a
// gateway of its family, keeps what was written, is a fixed point of Canonical,
// and round-trips through JSON.
func FuzzRangeCanonical(f *testing.F) {
	f.Add("10.0.0.0/24", "", "", "")
	f.Add("10.0.0.0/24", "10.0.0.10", "10.0.0.20", "10.0.0.1")
	f.Add("10.0.0.0/30", "", "", "")
	f.Add("10.0.0.0/31", "", "", "")
	f.Add("10.0.0.0/24", "10.0.0.0", "10.0.0.255", "10.0.0.255")
	f.Add("10.0.0.0/24", "10.0.0.50", "10.0.0.40", "")
	f.Add("fd00::/64", "fd00::10", "", "fd00::1")
	f.Add("fd00::/126", "", "", "")
	f.Add("::/0", "", "", "")
	f.Add("0.0.0.0/0", "", "", "")
	f.Add("10.0.0.5/24", "", "", "")
	f.Add("::ffff:10.0.0.0/120", "", "", "")
	f.Add("10.0.0.0/24", "::ffff:10.0.0.5", "", "fd00::1")
	f.Add("fe80::/64", "fe80::1%eth0", "", "")
	f.Fuzz(func(t *testing.T, subnet, start, end, gateway string) {
		doc, err := json.Marshal(map[string]string{"subnet": subnet, "rangeStart": start, "rangeEnd": end, "gateway": gateway})
		require.NoError(t, err)
		var r ipam.Range
		if err := r.UnmarshalJSON(doc); err != nil {
			if !errors.Is(err, ipam.ErrInvalid) {
				t.Fatalf("UnmarshalJSON(%s): error does not unwrap to ErrInvalid: %v", doc, err)
			}
			return
		}
		c, err := r.Canonical()
		if err != nil {
			if !errors.Is(err, ipam.ErrInvalid) {
				t.Fatalf("Canonical(%s): error does not unwrap to ErrInvalid: %v", doc, err)
			}
			return
		}
		p := c.Subnet
		if p != r.Subnet || !c.Start.IsValid() || !c.End.IsValid() || !c.Gateway.IsValid() {
			t.Fatalf("Canonical(%s) = %+v: subnet changed or a field left unset", doc, c)
		}
		if !p.Contains(c.Start) || !p.Contains(c.End) {
			t.Fatalf("Canonical(%s) = %+v: start or end outside %s", doc, c, p)
		}
		if c.End.Less(c.Start) {
			t.Fatalf("Canonical(%s) = %+v: start after end", doc, c)
		}
		if c.Gateway.Is4() != p.Addr().Is4() {
			t.Fatalf("Canonical(%s) = %+v: gateway of another family", doc, c)
		}
		for _, kept := range [][2]netip.Addr{{r.Start, c.Start}, {r.End, c.End}, {r.Gateway, c.Gateway}} {
			if kept[0].IsValid() && kept[0] != kept[1] {
				t.Fatalf("Canonical(%s) = %+v: changed %s to %s", doc, c, kept[0], kept[1])
			}
		}
		if !c.Contains(c.Start) || !c.Contains(c.End) {
			t.Fatalf("Canonical(%s) = %+v: does not contain its own start and end", doc, c)
		}
		again, err := c.Canonical()
		require.NoError(t, err, "Canonical of a canonical range %+v", c)
		require.Equal(t, c, again, "Canonical is not idempotent")

		out, err := c.MarshalJSON()
		require.NoError(t, err)
		var back ipam.Range
		require.NoError(t, back.UnmarshalJSON(out), "reparsing %s", out)
		require.Equal(t, c, back, "JSON round trip through %s", out)
	})
}

// The pools FuzzAllocateRelease runs on: a host-local /29, round-robin, whose
// allocatable addresses are 10.0.0.2-10.0.0.6 (10.0.0.1 is the gateway,
// 10.0.0.7 the broadcast); and a SpiderIPPool spec, lowest-free, whose
// allocatable addresses are 10.0.1.10, .11, .13, .14 and .20.
const (
	fuzzPoolHL = `{"name":"hl","ranges":[{"subnet":"10.0.0.0/29"}]}`
	fuzzPoolSP = `{"name":"sp","subnet":"10.0.1.0/24","ips":["10.0.1.10-10.0.1.14","10.0.1.20"],"excludeIPs":["10.0.1.12"],"gateway":"10.0.1.1","strategy":"lowest-free"}`
)

// fuzzAllocatable is the reference: each pool's allocatable addresses in
// ascending order, written out by hand.
var fuzzAllocatable = map[string][]netip.Addr{
	"hl": fuzzAddrs("10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"),
	"sp": fuzzAddrs("10.0.1.10", "10.0.1.11", "10.0.1.13", "10.0.1.14", "10.0.1.20"),
}

// fuzzPrefixBits and fuzzGateway are what every IPConfig of a pool carries.
var (
	fuzzPrefixBits = map[string]int{"hl": 29, "sp": 24}
	fuzzGateway    = map[string]netip.Addr{"hl": netip.MustParseAddr("10.0.0.1"), "sp": netip.MustParseAddr("10.0.1.1")}
)

// fuzzCandidates are the addresses the fuzzer requests and releases: gateways,
// excluded, broadcast, outside and foreign-family addresses among the good ones.
var fuzzCandidates = fuzzAddrs(
	"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.7",
	"10.0.1.1", "10.0.1.10", "10.0.1.11", "10.0.1.12", "10.0.1.13", "10.0.1.14", "10.0.1.20", "10.0.1.99",
	"fd00::1",
)

var fuzzPoolSets = [][]string{{"hl"}, {"sp"}, {"hl", "sp"}, {"sp", "hl"}}

const fuzzOwners = 6

func fuzzAddrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// fuzzOwner is owner i: owners 0-2 are pods known by UID, 3-5 containers known
// by container ID (host-local's identity).
func fuzzOwner(i int) store.Owner {
	if i < 3 {
		return store.Owner{Namespace: "default", Name: fmt.Sprintf("pod-%d", i), UID: fmt.Sprintf("uid-%d", i)}
	}
	return store.Owner{ContainerID: fmt.Sprintf("ctr-%d", i)}
}

// fuzzHeld is one address of the shadow model.
type fuzzHeld struct {
	Owner int
	Pool  string
	Iface string
	IP    netip.Addr
}

// fuzzModel runs operations against a real Allocator and keeps a shadow of
// who holds what, built only from successful results and releases.
type fuzzModel struct {
	t      *testing.T
	ctx    context.Context
	a      *ipam.Allocator
	now    time.Time
	shadow map[netip.Addr]fuzzHeld
	log    []string
}

func newFuzzModel(t *testing.T) *fuzzModel {
	cat, err := ipam.NewCatalog(ipam.MustParsePool(fuzzPoolHL), ipam.MustParsePool(fuzzPoolSP))
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	return &fuzzModel{
		t: t, ctx: context.Background(), a: a,
		now:    time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC),
		shadow: make(map[netip.Addr]fuzzHeld),
	}
}

func (m *fuzzModel) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("%s\nafter operations:\n  %s", fmt.Sprintf(format, args...), strings.Join(m.log, "\n  "))
}

// holding returns what owner holds in pool for iface, per the shadow.
func (m *fuzzModel) holding(owner int, pool, iface string) (netip.Addr, bool) {
	for ip, h := range m.shadow {
		if h.Owner == owner && h.Pool == pool && h.Iface == iface {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func (m *fuzzModel) used(pool string) int {
	n := 0
	for _, h := range m.shadow {
		if h.Pool == pool {
			n++
		}
	}
	return n
}

// step decodes one operation from 4 bytes and runs it.
func (m *fuzzModel) step(op []byte) {
	m.now = m.now.Add(time.Millisecond)
	owner := int(op[1]) % fuzzOwners
	switch op[0] % 8 {
	case 0, 1, 2:
		m.allocate(owner, m.request(owner, op, false))
	case 3, 4:
		m.allocate(owner, m.request(owner, op, true))
	case 5, 6:
		iface := []string{"", "eth0", "eth1"}[int(op[1]/fuzzOwners)%3]
		m.release(owner, iface)
	case 7:
		m.releaseIP(fuzzPoolSets[op[2]&1][0], fuzzCandidates[int(op[3])%len(fuzzCandidates)])
	}
}

func (m *fuzzModel) request(owner int, op []byte, requested bool) ipam.Request {
	o := fuzzOwner(owner)
	req := ipam.Request{Namespace: o.Namespace, Name: o.Name, UID: o.UID, ContainerID: o.ContainerID}
	names := []string{"eth0", "eth1"}
	first := int(op[2]>>4) & 1
	req.Interfaces = append(req.Interfaces, ipam.NIC{Name: names[first], Pools: fuzzPoolSets[op[2]&3]})
	if op[2]&4 != 0 {
		req.Interfaces = append(req.Interfaces, ipam.NIC{Name: names[1-first], Pools: fuzzPoolSets[(op[2]>>5)&3]})
	}
	if requested {
		n := len(fuzzCandidates)
		ifc := &req.Interfaces[0]
		ifc.IPs = append(ifc.IPs, fuzzCandidates[int(op[3])%n])
		if op[0]&8 != 0 {
			ifc.IPs = append(ifc.IPs, fuzzCandidates[int(op[3]/16)%n])
		}
		if op[0]&16 != 0 {
			ifc = &req.Interfaces[len(req.Interfaces)-1]
			ifc.IPs = append(ifc.IPs, fuzzCandidates[int(op[3]+op[0]/32)%n])
		}
	}
	return req
}

func (m *fuzzModel) allocate(owner int, req ipam.Request) {
	m.t.Helper()
	desc := fmt.Sprintf("allocate owner %d %+v", owner, req.Interfaces)
	res, err := m.a.AllocateAt(m.ctx, req, m.now)
	m.log = append(m.log, fmt.Sprintf("%s -> %v %v", desc, fuzzResultString(res), err))

	// What the request needs: new claims per pool, requested addresses.
	newTasks := map[string]int{}
	requestedBy := map[netip.Addr]int{}
	hasRequested := false
	for _, ifc := range req.Interfaces {
		for _, p := range ifc.Pools {
			if _, ok := m.holding(owner, p, ifc.Name); !ok {
				newTasks[p]++
			}
		}
		for _, ip := range slices.Compact(slices.SortedFunc(slices.Values(ifc.IPs), netip.Addr.Compare)) {
			requestedBy[ip]++
			hasRequested = true
		}
	}

	if err != nil {
		if !errors.Is(err, ipam.ErrExhausted) && !errors.Is(err, ipam.ErrUnavailable) &&
			!errors.Is(err, ipam.ErrNotInRange) && !errors.Is(err, ipam.ErrOwnerConflict) {
			m.fatalf("%s: untyped or unexpected error: %v", desc, err)
		}
		if !hasRequested && !errors.Is(err, ipam.ErrExhausted) {
			m.fatalf("%s: without requested addresses only exhaustion may fail, got: %v", desc, err)
		}
		for _, e := range fuzzAllocationErrors(err) {
			switch {
			case e.Err == nil:
				m.fatalf("%s: AllocationError without Err: %v", desc, e)
			case errors.Is(e, ipam.ErrExhausted):
				if m.used(e.Pool)+newTasks[e.Pool] <= len(fuzzAllocatable[e.Pool]) {
					m.fatalf("%s: pool %q exhausted with %d of %d used and %d new claims: %v",
						desc, e.Pool, m.used(e.Pool), len(fuzzAllocatable[e.Pool]), newTasks[e.Pool], e)
				}
			case errors.Is(e, ipam.ErrUnavailable):
				_, held := m.shadow[e.IP]
				if slices.Contains(fuzzAllocatable[e.Pool], e.IP) && !held && requestedBy[e.IP] < 2 {
					m.fatalf("%s: %s is allocatable in %q, held by nobody and requested once, yet: %v", desc, e.IP, e.Pool, e)
				}
			case errors.Is(e, ipam.ErrOwnerConflict):
				if ip, ok := m.holding(owner, e.Pool, e.Interface); !ok || ip == e.IP {
					m.fatalf("%s: owner conflict but the owner holds %v (%v) in %q: %v", desc, ip, ok, e.Pool, e)
				}
			case errors.Is(e, ipam.ErrNotInRange):
				if !hasRequested {
					m.fatalf("%s: not-in-range without requested addresses: %v", desc, e)
				}
			}
		}
		return
	}

	// Success: one address per (interface, pool), in order.
	var want [][2]string
	for _, ifc := range req.Interfaces {
		for _, p := range ifc.Pools {
			want = append(want, [2]string{ifc.Name, p})
		}
	}
	var got [][2]string
	for _, c := range res.IPs {
		got = append(got, [2]string{c.Interface, c.Pool})
	}
	if d := cmp.Diff(want, got); d != "" {
		m.fatalf("%s: result is not one address per interface and pool (-want +got):\n%s", desc, d)
	}
	claimedNow := map[netip.Addr]bool{}
	var added []fuzzHeld
	for k, c := range res.IPs {
		ip := c.Address.Addr()
		ifc := req.Interfaces[slices.IndexFunc(req.Interfaces, func(i ipam.NIC) bool { return i.Name == c.Interface })]
		if !slices.Contains(fuzzAllocatable[c.Pool], ip) {
			m.fatalf("%s: result %d: %s is not allocatable in %q", desc, k, ip, c.Pool)
		}
		if c.Address.Bits() != fuzzPrefixBits[c.Pool] || c.Gateway != fuzzGateway[c.Pool] {
			m.fatalf("%s: result %d: %s gateway %s: wrong mask or gateway for %q", desc, k, c.Address, c.Gateway, c.Pool)
		}
		if prev, ok := m.holding(owner, c.Pool, c.Interface); ok {
			if !c.Reused || ip != prev {
				m.fatalf("%s: result %d: owner held %s in %q for %s, got %s reused=%v", desc, k, prev, c.Pool, c.Interface, ip, c.Reused)
			}
			continue
		}
		if c.Reused {
			m.fatalf("%s: result %d: %s reported reused but the owner held nothing there", desc, k, ip)
		}
		if h, ok := m.shadow[ip]; ok || claimedNow[ip] {
			m.fatalf("%s: result %d: %s handed out again; already held by %+v", desc, k, ip, h)
		}
		if c.Pool == "sp" && !slices.Contains(ifc.IPs, ip) {
			// Lowest-free: the lowest address neither held nor claimed by this
			// call; requested addresses are claimed before any dynamic one.
			requestedNow := map[netip.Addr]bool{}
			for _, r := range res.IPs {
				ri := req.Interfaces[slices.IndexFunc(req.Interfaces, func(i ipam.NIC) bool { return i.Name == r.Interface })]
				if !r.Reused && slices.Contains(ri.IPs, r.Address.Addr()) {
					requestedNow[r.Address.Addr()] = true
				}
			}
			for _, a := range fuzzAllocatable["sp"] {
				if _, held := m.shadow[a]; !held && !claimedNow[a] && !requestedNow[a] {
					if a != ip {
						m.fatalf("%s: result %d: lowest-free pool handed out %s, but %s is free", desc, k, ip, a)
					}
					break
				}
			}
		}
		claimedNow[ip] = true
		added = append(added, fuzzHeld{Owner: owner, Pool: c.Pool, Iface: c.Interface, IP: ip})
	}
	for _, ifc := range req.Interfaces {
		for _, ip := range ifc.IPs {
			if !slices.ContainsFunc(res.IPs, func(c ipam.IPConfig) bool { return c.Interface == ifc.Name && c.Address.Addr() == ip }) {
				m.fatalf("%s: requested %s for %s is not in the result", desc, ip, ifc.Name)
			}
		}
	}
	for _, h := range added {
		m.shadow[h.IP] = h
	}
}

func (m *fuzzModel) release(owner int, iface string) {
	m.t.Helper()
	o := fuzzOwner(owner)
	o.Interface = iface
	err := m.a.ReleaseAt(m.ctx, o, m.now)
	m.log = append(m.log, fmt.Sprintf("release owner %d iface %q -> %v", owner, iface, err))
	if err != nil {
		m.fatalf("release: %v", err)
	}
	for ip, h := range m.shadow {
		if h.Owner == owner && (iface == "" || h.Iface == iface) {
			delete(m.shadow, ip)
		}
	}
}

func (m *fuzzModel) releaseIP(pool string, ip netip.Addr) {
	m.t.Helper()
	err := m.a.ReleaseIP(m.ctx, pool, ip)
	m.log = append(m.log, fmt.Sprintf("releaseIP %s %s -> %v", pool, ip, err))
	if h, ok := m.shadow[ip]; ok && h.Pool == pool {
		if err != nil {
			m.fatalf("releaseIP %s %s held by %+v: %v", pool, ip, h, err)
		}
		delete(m.shadow, ip)
		return
	}
	if !errors.Is(err, ipam.ErrNotFound) {
		m.fatalf("releaseIP %s %s held by nobody: want ErrNotFound, got %v", pool, ip, err)
	}
}

// check compares every owner's Lookup with the shadow and checks that no
// address is held twice and every held address is allocatable in its pool.
func (m *fuzzModel) check() {
	m.t.Helper()
	holders := map[netip.Addr]int{}
	for i := range fuzzOwners {
		claims, err := m.a.Lookup(m.ctx, fuzzOwner(i))
		if err != nil {
			m.fatalf("lookup owner %d: %v", i, err)
		}
		var got, want []fuzzHeld
		for _, c := range claims {
			if j, dup := holders[c.IP]; dup {
				m.fatalf("%s held by owners %d and %d", c.IP, j, i)
			}
			holders[c.IP] = i
			if !slices.Contains(fuzzAllocatable[c.Pool], c.IP) {
				m.fatalf("owner %d holds %s, not allocatable in %q", i, c.IP, c.Pool)
			}
			if fuzzIdentity(c.Owner) != fuzzIdentity(fuzzOwner(i)) {
				m.fatalf("lookup owner %d returned a claim of %v", i, c.Owner)
			}
			got = append(got, fuzzHeld{Owner: i, Pool: c.Pool, Iface: c.Owner.Interface, IP: c.IP})
		}
		for _, h := range m.shadow {
			if h.Owner == i {
				want = append(want, h)
			}
		}
		slices.SortFunc(want, func(a, b fuzzHeld) int {
			if c := strings.Compare(a.Pool, b.Pool); c != 0 {
				return c
			}
			return a.IP.Compare(b.IP)
		})
		if d := cmp.Diff(want, got, fuzzCmp...); d != "" {
			m.fatalf("lookup owner %d differs from the shadow (-shadow +lookup):\n%s", i, d)
		}
	}
}

func fuzzIdentity(o store.Owner) string {
	if o.UID != "" {
		return "uid " + o.UID
	}
	return "ctr " + o.ContainerID
}

func fuzzResultString(res ipam.Result) string {
	var parts []string
	for _, c := range res.IPs {
		s := fmt.Sprintf("%s/%s=%s", c.Interface, c.Pool, c.Address.Addr())
		if c.Reused {
			s += "(reused)"
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// fuzzAllocationErrors returns every *AllocationError in an errors.Join tree.
func fuzzAllocationErrors(err error) []*ipam.AllocationError {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*ipam.AllocationError
		for _, e := range j.Unwrap() {
			out = append(out, fuzzAllocationErrors(e)...)
		}
		return out
	}
	var ae *ipam.AllocationError
	if errors.As(err, &ae) {
		return []*ipam.AllocationError{ae}
	}
	return nil
}

// FuzzAllocateRelease: bytes, 4 per operation, drive allocations (dynamic and
// requested, one or two interfaces, one or both pools), releases (all of an
// owner or one interface) and releases by address over two small pools and six
// owners. After every operation: no address is held twice, every held address
// is allocatable in its pool, Lookup agrees with a shadow built from results,
// every error is typed and justified by the shadow, and nothing panics.
func FuzzAllocateRelease(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1, 1, 0, 0, 2, 2, 0, 5, 0, 0, 0, 0, 3, 3, 0})
	// Fill both pools, then ask for more.
	f.Add([]byte{0, 0, 2, 0, 0, 1, 2, 0, 0, 2, 2, 0, 0, 3, 2, 0, 0, 4, 2, 0, 0, 5, 2, 0, 0, 0, 6, 0})
	// Requested addresses: good, gateway, excluded, outside, foreign family.
	f.Add([]byte{3, 0, 0, 2, 3, 1, 0, 2, 3, 1, 0, 0, 3, 2, 1, 10, 3, 2, 1, 15, 3, 3, 2, 14, 3, 0, 0, 3})
	// Two interfaces, release one of them, release by address.
	f.Add([]byte{0, 1, 6, 0, 5, 7, 0, 0, 7, 0, 0, 1, 7, 0, 1, 8, 0, 1, 0x26, 0, 6, 1, 0, 0})
	// Containers, idempotent repeats, owner conflict.
	f.Add([]byte{0, 3, 0, 0, 0, 3, 0, 0, 3, 3, 0, 4, 3, 4, 1, 9, 0, 4, 1, 0, 5, 9, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const maxOps = 64
		m := newFuzzModel(t)
		for i := 0; i+4 <= len(ops) && i/4 < maxOps; i += 4 {
			m.step(ops[i : i+4])
			m.check()
		}
	})
}
