package kubestore

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ipamkit/ipam/store"
)

func TestLegacyClaimName(t *testing.T) {
	long := strings.Repeat("a", 250)
	tests := []struct {
		pool, ip, want string
	}{
		{"blue", "10.0.0.1", "blue.10.0.0.1"},
		{"blue.10", "10.0.0.1", "blue.10.10.0.0.1"},
		{"blue", "2001:db8::1", "blue.2001-0db8-0000-0000-0000-0000-0000-0001"},
		{"blue", "::", "blue.0000-0000-0000-0000-0000-0000-0000-0000"},
		{"blue", "::ffff:10.0.0.1", "blue.0000-0000-0000-0000-0000-ffff-0a00-0001"},
		{"blue", "fd00::", "blue.fd00-0000-0000-0000-0000-0000-0000-0000"},
		// Not DNS-1123: hashed.
		{"Blue", "10.0.0.1", hash("Blue") + ".10.0.0.1"},
		{"blue_pool", "10.0.0.1", hash("blue_pool") + ".10.0.0.1"},
		{"-blue", "10.0.0.1", hash("-blue") + ".10.0.0.1"},
		{"a..b", "10.0.0.1", hash("a..b") + ".10.0.0.1"},
		{"a.-b", "10.0.0.1", hash("a.-b") + ".10.0.0.1"},
		{"", "10.0.0.1", hash("") + ".10.0.0.1"},
		// Too long with the address: hashed.
		{long, "10.0.0.1", hash(long) + ".10.0.0.1"},
		{long[:253-len(".10.0.0.1")], "10.0.0.1", long[:253-len(".10.0.0.1")] + ".10.0.0.1"},
	}
	for _, tc := range tests {
		ip := netip.MustParseAddr(tc.ip)
		got, ok := LegacyClaimName(tc.pool, ip)
		if !ok || got != tc.want {
			t.Errorf("LegacyClaimName(%q, %s) = %q, %t; want %q", tc.pool, ip, got, ok, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); errs != nil {
			t.Errorf("LegacyClaimName(%q, %s) = %q: not a valid name: %v", tc.pool, ip, got, errs)
		}
		if _, ok := ParseClaimName(got); ok {
			t.Errorf("ParseClaimName(%q) succeeded: a legacy name taken for an address's", got)
		}
		pool, back, ok := ParseLegacyClaimName(got)
		wantPool := tc.pool
		if !strings.HasPrefix(tc.want, tc.pool+".") || tc.pool == "" {
			wantPool = hash(tc.pool)
		}
		if !ok || back != ip || pool != wantPool {
			t.Errorf("ParseLegacyClaimName(%q) = %q, %v, %t; want %q, %v", got, pool, back, ok, wantPool, ip)
		}
	}
	for _, ip := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0")} {
		if got, ok := LegacyClaimName("blue", ip); ok {
			t.Errorf("LegacyClaimName(blue, %v) = %q, true; want false", ip, got)
		}
	}
}

func TestClaimName(t *testing.T) {
	for ip, want := range map[string]string{
		"10.0.0.1":        "10.0.0.1",
		"2001:db8::1":     "2001-0db8-0000-0000-0000-0000-0000-0001",
		"::":              "0000-0000-0000-0000-0000-0000-0000-0000",
		"::ffff:10.0.0.1": "0000-0000-0000-0000-0000-ffff-0a00-0001",
	} {
		addr := netip.MustParseAddr(ip)
		got, ok := ClaimName(addr)
		if !ok || got != want {
			t.Errorf("ClaimName(%s) = %q, %t; want %q", ip, got, ok, want)
		}
		if errs := validation.IsDNS1123Subdomain(got); errs != nil {
			t.Errorf("ClaimName(%s) = %q: not a valid name: %v", ip, got, errs)
		}
		if back, ok := ParseClaimName(got); !ok || back != addr {
			t.Errorf("ParseClaimName(%q) = %v, %t; want %v", got, back, ok, addr)
		}
	}
	for _, ip := range []netip.Addr{{}, netip.MustParseAddr("fe80::1%eth0")} {
		if got, ok := ClaimName(ip); ok {
			t.Errorf("ClaimName(%v) = %q, true; want false", ip, got)
		}
	}
	for _, name := range []string{"", "blue.10.0.0.1", "010.0.0.1", "2001-db8-0-0-0-0-0-1", "2001-0DB8-0000-0000-0000-0000-0000-0001", "layout"} {
		if ip, ok := ParseClaimName(name); ok {
			t.Errorf("ParseClaimName(%q) = %v, true; want false", name, ip)
		}
	}
}

func TestOwnerIndexName(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct {
		q    store.OwnerQuery
		want string
	}{
		{store.ByUID("0d4e-11aa"), "uid.0d4e-11aa"},
		{store.ByUID("Upper"), "uid." + hash("Upper")},
		{store.ByName("ns", "web-0"), "name.ns.web-0"},
		{store.ByName("ns", "Web_0"), "name." + hash("ns/Web_0")},
		{store.ByContainer("abc123"), "container.abc123"},
		{store.ByContainer(long), "container." + hash(long)},
	} {
		got := OwnerIndexName(tc.q)
		if got != tc.want {
			t.Errorf("OwnerIndexName(%v) = %q, want %q", tc.q, got, tc.want)
		}
		if errs := validation.IsDNS1123Subdomain(got); errs != nil || got == LayoutMarker {
			t.Errorf("OwnerIndexName(%v) = %q: not a valid name, or the layout marker's: %v", tc.q, got, errs)
		}
	}
}

func TestParseClaimNameRejects(t *testing.T) {
	for _, name := range []string{
		"", "blue", "10.0.0.1", ".10.0.0.1", "blue.10.0.0", "blue.10.0.0.256", "blue.010.0.0.1",
		"blue.2001-db8-0-0-0-0-0-1", "blue.2001-0DB8-0000-0000-0000-0000-0000-0001",
		"blue.0000-0000-0000-0000-0000-ffff-0a00-000g", "-0000-0000-0000-0000-0000-0000-0000-0000",
	} {
		if pool, ip, ok := ParseLegacyClaimName(name); ok {
			t.Errorf("ParseLegacyClaimName(%q) = %q, %v, true; want false", name, pool, ip)
		}
	}
}

// Names of one pool sort in address order within a family, so that a list,
// which the API server returns in name order, comes in address order.
func TestClaimNameOrder(t *testing.T) {
	for _, ips := range [][]string{
		{"2001:db8::1", "2001:db8::2", "2001:db8::a", "2001:db8::10", "2001:db8:0:1::", "fd00::"},
	} {
		var names []string
		for _, s := range ips {
			n, _ := ClaimName(netip.MustParseAddr(s))
			names = append(names, n)
		}
		if !slices.IsSorted(names) {
			t.Errorf("names of %v are not sorted: %v", ips, names)
		}
	}
}

// FuzzNames checks the validity checks against Kubernetes' own, and that
// every name ClaimName makes is valid and parses back.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"blue", "Blue", "a.b", "a..b", "-a", "a-", "a_b", strings.Repeat("x", 64), "", "ns/name"} {
		f.Add(s, []byte{10, 0, 0, 1})
	}
	f.Add("p", []byte{0x20, 1, 0xd, 0xb8, 15: 1})
	f.Fuzz(func(t *testing.T, s string, b []byte) {
		if got, want := isDNSSubdomain(s), validation.IsDNS1123Subdomain(s) == nil; got != want {
			t.Errorf("isDNSSubdomain(%q) = %t, Kubernetes says %t", s, got, want)
		}
		if got, want := isLabelValue(s), validation.IsValidLabelValue(s) == nil; got != want {
			t.Errorf("isLabelValue(%q) = %t, Kubernetes says %t", s, got, want)
		}
		if v := labelValue(s); validation.IsValidLabelValue(v) != nil {
			t.Errorf("labelValue(%q) = %q, not a valid label value", s, v)
		}
		ip, ok := netip.AddrFromSlice(b)
		if !ok {
			return
		}
		name, ok := LegacyClaimName(s, ip)
		if !ok {
			t.Fatalf("LegacyClaimName(%q, %v) failed", s, ip)
		}
		if errs := validation.IsDNS1123Subdomain(name); errs != nil {
			t.Fatalf("LegacyClaimName(%q, %v) = %q: %v", s, ip, name, errs)
		}
		pool, back, ok := ParseLegacyClaimName(name)
		if !ok || back != ip || (pool != s && pool != hash(s)) {
			t.Fatalf("ParseLegacyClaimName(%q) = %q, %v, %t; want %q (or its hash), %v", name, pool, back, ok, s, ip)
		}
		if _, ok := ParseClaimName(name); ok {
			t.Fatalf("ParseClaimName(%q) took a legacy name for an address's", name)
		}
		if addr, ok := ClaimName(ip); ok {
			if errs := validation.IsDNS1123Subdomain(addr); errs != nil {
				t.Fatalf("ClaimName(%v) = %q: %v", ip, addr, errs)
			}
			if back, ok := ParseClaimName(addr); !ok || back != ip {
				t.Fatalf("ParseClaimName(%q) = %v, %t; want %v", addr, back, ok, ip)
			}
		}
		q := store.ByName("ns", s)
		if n := OwnerIndexName(q); validation.IsDNS1123Subdomain(n) != nil {
			t.Fatalf("OwnerIndexName(%v) = %q: not a valid name", q, n)
		}
	})
}
