package ipam_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ipamkit/ipam"
)

// selFuzzAnnotationError checks an error of an annotation parser: it unwraps to
// ErrInvalid, through an *AnnotationError for key that keeps a bounded part
// of the value, and its text names the key.
func selFuzzAnnotationError(t *testing.T, err error, key string) {
	t.Helper()
	if !errors.Is(err, ipam.ErrInvalid) {
		t.Fatalf("error does not unwrap to ErrInvalid: %v", err)
	}
	var ae *ipam.AnnotationError
	if !errors.As(err, &ae) {
		t.Fatalf("error is not an *AnnotationError: %v", err)
	}
	if ae.Key != key {
		t.Fatalf("AnnotationError.Key = %q, want %q", ae.Key, key)
	}
	if len(ae.Value) > 210 {
		t.Fatalf("AnnotationError.Value keeps %d bytes", len(ae.Value))
	}
	if ae.Reason == "" || !strings.Contains(err.Error(), ae.Reason) {
		t.Fatalf("error text %q lacks the reason %q", err.Error(), ae.Reason)
	}
}

// selFuzzNames checks a parsed list of pool names: no empty name, no name
// written twice unless it is a wildcard.
func selFuzzNames(t *testing.T, names []string) {
	t.Helper()
	for i, n := range names {
		if n == "" {
			t.Fatalf("parsed an empty pool name in %q", names)
		}
		if !selIsPattern(n) && slices.Contains(names[:i], n) {
			t.Fatalf("parsed %q twice in %q", n, names)
		}
	}
}

func selIsPattern(n string) bool {
	return strings.ContainsAny(n, "*?") || (strings.Contains(n, "[") && strings.Contains(n, "]"))
}

// selFuzzRoundTrip checks that v, written as JSON and parsed again, is equal.
func selFuzzRoundTrip[T any](t *testing.T, v T, parse func(string) (T, error)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %#v: %v", v, err)
	}
	w, err := parse(string(b))
	if err != nil {
		t.Fatalf("reparsing %s: %v", b, err)
	}
	if d := cmp.Diff(v, w); d != "" {
		t.Fatalf("round trip through %s changed the value (-parsed +reparsed):\n%s", b, d)
	}
}

// FuzzParseIPPoolAnnotation: no panic; errors are ErrInvalid AnnotationErrors;
// an accepted value names a pool, and survives a JSON round trip.
func FuzzParseIPPoolAnnotation(f *testing.F) {
	for _, s := range []string{
		`{"ipv4":["a","b*"],"ipv6":["c"]}`, `{"ipv6":["[ab]"]}`, `{"ipv4":["a","a"]}`,
		`{ipv4: bad`, `{"ipv4":"a"}`, `{}`, `null`, ``, `{"IPV4":["a"]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ipam.ParseIPPoolAnnotation(s)
		if err != nil {
			selFuzzAnnotationError(t, err, ipam.AnnotationIPPool)
			return
		}
		if len(v.IPv4)+len(v.IPv6) == 0 {
			t.Fatalf("accepted %q, which names no pool", s)
		}
		selFuzzNames(t, v.IPv4)
		selFuzzNames(t, v.IPv6)
		selFuzzRoundTrip(t, v, ipam.ParseIPPoolAnnotation)
	})
}

// FuzzParseIPPoolsAnnotation: as FuzzParseIPPoolAnnotation, and an accepted
// value names the interface of every entry or of none, each at most once.
func FuzzParseIPPoolsAnnotation(f *testing.F) {
	for _, s := range []string{
		`[{"interface":"eth0","ipv4":["a"],"cleangateway":true},{"interface":"net1","ipv6":["b*"]}]`,
		`[{"ipv4":["a"]},{"ipv4":["b"],"cleangateway":false}]`,
		`[{"interface":"eth0","ipv4":["a"]},{"ipv4":["b"]}]`,
		`[{"interface":"eth0","ipv4":["a"]},{"interface":"eth0","ipv4":["b"]}]`,
		`[]`, `[null]`, `[{"interface":1}]`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ipam.ParseIPPoolsAnnotation(s)
		if err != nil {
			selFuzzAnnotationError(t, err, ipam.AnnotationIPPools)
			return
		}
		if len(v) == 0 {
			t.Fatalf("accepted %q, which has no entry", s)
		}
		for i, e := range v {
			if (e.Interface == "") != (v[0].Interface == "") {
				t.Fatalf("accepted %q, which names some interfaces only", s)
			}
			if e.Interface != "" && slices.ContainsFunc(v[:i], func(x ipam.IPPoolsEntry) bool { return x.Interface == e.Interface }) {
				t.Fatalf("accepted %q, which lists %q twice", s, e.Interface)
			}
			if len(e.IPv4)+len(e.IPv6) == 0 {
				t.Fatalf("accepted %q, whose entry %d names no pool", s, i)
			}
			selFuzzNames(t, e.IPv4)
			selFuzzNames(t, e.IPv6)
		}
		selFuzzRoundTrip(t, v, ipam.ParseIPPoolsAnnotation)
	})
}

// FuzzParseSubnetAnnotation: no panic; an accepted value has an interface and
// at most one subnet per family, none empty or a wildcard.
func FuzzParseSubnetAnnotation(f *testing.F) {
	for _, s := range []string{
		`{"ipv4":["s4","x"]}`, `{"interface":"net1","ipv6":["s6"]}`, `{"ipv4":[""]}`, `{"ipv4":["s*"]}`, `{}`, `[]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ipam.ParseSubnetAnnotation(s)
		if err != nil {
			selFuzzAnnotationError(t, err, ipam.AnnotationSubnet)
			return
		}
		selFuzzSubnet(t, s, v)
		selFuzzRoundTrip(t, v, ipam.ParseSubnetAnnotation)
	})
}

func selFuzzSubnet(t *testing.T, s string, v ipam.NICSubnets) {
	t.Helper()
	if v.Interface == "" || len(v.IPv4) > 1 || len(v.IPv6) > 1 || len(v.IPv4)+len(v.IPv6) == 0 {
		t.Fatalf("accepted %q as %#v", s, v)
	}
	for _, n := range append(slices.Clip(v.IPv4), v.IPv6...) {
		if n == "" || selIsPattern(n) {
			t.Fatalf("accepted %q with subnet %q", s, n)
		}
	}
}

// FuzzParseSubnetsAnnotation: as FuzzParseSubnetAnnotation, and no interface
// or subnet appears twice.
func FuzzParseSubnetsAnnotation(f *testing.F) {
	for _, s := range []string{
		`[{"interface":"eth0","ipv4":["s1"]},{"interface":"net1","ipv4":["s2"],"ipv6":["s6"]}]`,
		`[{"interface":"eth0","ipv4":["s1"]},{"interface":"net1","ipv4":["s1"]}]`,
		`[{"ipv4":["s1"]}]`, `[]`, `{}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ipam.ParseSubnetsAnnotation(s)
		if err != nil {
			selFuzzAnnotationError(t, err, ipam.AnnotationSubnets)
			return
		}
		if len(v) == 0 {
			t.Fatalf("accepted %q, which has no entry", s)
		}
		seen := map[string]bool{}
		for _, e := range v {
			selFuzzSubnet(t, s, e)
			keys := []string{"if " + e.Interface}
			for _, n := range e.IPv4 {
				keys = append(keys, "4 "+n)
			}
			for _, n := range e.IPv6 {
				keys = append(keys, "6 "+n)
			}
			for _, k := range keys {
				if seen[k] {
					t.Fatalf("accepted %q, which uses %q twice", s, k)
				}
				seen[k] = true
			}
		}
		selFuzzRoundTrip(t, v, ipam.ParseSubnetsAnnotation)
	})
}

// FuzzParsePoolList: no panic; an accepted list has valid names.
func FuzzParsePoolList(f *testing.F) {
	for _, s := range []string{`["a","b*"]`, `[]`, `null`, `["a","a"]`, `["[a]["]`, `"a"`, `[1]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ipam.ParsePoolList(s)
		if err != nil {
			selFuzzAnnotationError(t, err, "")
			return
		}
		selFuzzNames(t, v)
		selFuzzRoundTrip(t, v, ipam.ParsePoolList)
	})
}

// Bits of FuzzSelect's flags.
const (
	sfIPPool = 1 << iota
	sfIPPools
	sfSubnet
	sfSubnets
	sfNS4
	sfNS6
	sfNoIPv4
	sfNoIPv6
	sfNetConf
	sfNet1
	sfEth0Explicit
	sfScanOnly
	sfCleanGateway
)

// FuzzSelect feeds annotation values to Select over a small catalogue: no
// panic; errors unwrap to ErrInvalid, ErrNotSupported or ErrNoCandidates; a
// result serves every interface that needs selection, from one rule, with
// enabled families only, IPv4 before IPv6, and no pool twice in a list; and
// Select is deterministic.
func FuzzSelect(f *testing.F) {
	seeds := []struct {
		ippool, ippools, subnet, ns4, ns6 string
		flags                             uint16
	}{
		{`{"ipv4":["a1","a*"],"ipv6":["b*"]}`, ``, ``, ``, ``, sfIPPool},
		{``, `[{"interface":"eth0","ipv4":["c"]},{"interface":"net1","ipv6":["b1"]}]`, ``, ``, ``, sfIPPools | sfNet1},
		{``, `[{"ipv4":["c"]},{"ipv4":["a*"],"cleangateway":true}]`, ``, ``, ``, sfIPPools | sfNet1 | sfEth0Explicit},
		{``, ``, `{"ipv4":["s"]}`, ``, ``, sfSubnet},
		{``, ``, `[{"interface":"eth0","ipv4":["s"]}]`, ``, ``, sfSubnets},
		{``, ``, ``, `["a?"]`, `["b*"]`, sfNS4 | sfNS6 | sfNoIPv6},
		{``, ``, ``, `[]`, ``, sfNS4 | sfNetConf},
		{``, ``, ``, ``, ``, sfScanOnly | sfNoIPv4},
		{``, ``, ``, ``, ``, sfCleanGateway | sfNet1},
		{`{ipv4: bad`, ``, ``, ``, ``, sfIPPool},
		{`{"ipv4":["[x]["]}`, ``, ``, ``, ``, sfIPPool},
	}
	for _, s := range seeds {
		f.Add(s.ippool, s.ippools, s.subnet, s.ns4, s.ns6, s.flags)
	}
	cat := selCatalog(f, "a1/4", "a2/4/default", "b1/6", "b2/6/default", "c/4")
	f.Fuzz(func(t *testing.T, ippool, ippools, subnet, ns4, ns6 string, flags uint16) {
		has := func(bit uint16) bool { return flags&bit != 0 }
		req := ipam.Request{Namespace: "default", Name: "web-0", UID: "u",
			Annotations: map[string]string{}, NamespaceAnnotations: map[string]string{}}
		put := func(m map[string]string, bit uint16, key, value string) {
			if has(bit) {
				m[key] = value
			}
		}
		put(req.Annotations, sfIPPool, ipam.AnnotationIPPool, ippool)
		put(req.Annotations, sfIPPools, ipam.AnnotationIPPools, ippools)
		put(req.Annotations, sfSubnet, ipam.AnnotationSubnet, subnet)
		put(req.Annotations, sfSubnets, ipam.AnnotationSubnets, subnet)
		put(req.NamespaceAnnotations, sfNS4, ipam.AnnotationNSDefaultIPv4, ns4)
		put(req.NamespaceAnnotations, sfNS6, ipam.AnnotationNSDefaultIPv6, ns6)
		req.NetConf.DisableIPv4, req.NetConf.DisableIPv6 = has(sfNoIPv4), has(sfNoIPv6)
		req.NetConf.CleanGateway = has(sfCleanGateway)
		if has(sfNetConf) {
			req.NetConf.DefaultIPv4Pools = []string{"c", "a*"}
			req.NetConf.DefaultIPv6Pools = []string{"b?"}
		}
		req.Interfaces = selIfaces("eth0")
		if has(sfEth0Explicit) {
			req.Interfaces[0].Pools = []string{"c"}
		}
		if has(sfNet1) {
			req.Interfaces = append(req.Interfaces, ipam.NIC{Name: "net1"})
		}
		var src ipam.PoolSource = cat
		if has(sfScanOnly) {
			src = selScanOnly{cat}
		}

		got, err := ipam.Select(&req, src)
		again, err2 := ipam.Select(&req, src)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("Select is not deterministic: %v, then %v", err, err2)
		}
		if d := cmp.Diff(got, again); d != "" {
			t.Fatalf("Select is not deterministic (-first +second):\n%s", d)
		}
		if err != nil {
			if !errors.Is(err, ipam.ErrInvalid) && !errors.Is(err, ipam.ErrNotSupported) && !errors.Is(err, ipam.ErrNoCandidates) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if got != nil {
				t.Fatalf("a result with an error: %v", got)
			}
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		selFuzzCheckCandidates(t, &req, got)
	})
}

func selFuzzCheckCandidates(t *testing.T, req *ipam.Request, got []ipam.Candidates) {
	t.Helper()
	served := map[string]int{} // interface -> last family
	for i, c := range got {
		if c.Source != got[0].Source {
			t.Fatalf("candidates from two rules: %v", got)
		}
		switch c.Source {
		case ipam.SourcePodIPPools, ipam.SourcePodIPPool, ipam.SourceNamespace, ipam.SourceNetConf, ipam.SourceClusterDefault:
		default:
			t.Fatalf("candidates %d: source %q", i, c.Source)
		}
		if c.Family != 4 && c.Family != 6 ||
			c.Family == 4 && req.NetConf.DisableIPv4 || c.Family == 6 && req.NetConf.DisableIPv6 {
			t.Fatalf("candidates %d: family %d with %+v", i, c.Family, req.NetConf)
		}
		if last, ok := served[c.Interface]; ok && (last >= c.Family || got[i-1].Interface != c.Interface) {
			t.Fatalf("candidates %d: interface %q out of order in %v", i, c.Interface, got)
		}
		served[c.Interface] = c.Family
		if len(c.Pools) == 0 {
			t.Fatalf("candidates %d: no pool", i)
		}
		for j, p := range c.Pools {
			if p == "" || selIsPattern(p) || slices.Contains(c.Pools[:j], p) {
				t.Fatalf("candidates %d: pools %q", i, c.Pools)
			}
		}
		if c.CleanGateway != req.NetConf.CleanGateway && c.Source != ipam.SourcePodIPPools {
			t.Fatalf("candidates %d: clean gateway %v", i, c.CleanGateway)
		}
	}
	for _, ifc := range req.Interfaces {
		_, ok := served[ifc.Name]
		if len(ifc.Pools) > 0 && ok {
			t.Fatalf("interface %q names its pools but got candidates: %v", ifc.Name, got)
		}
		if len(ifc.Pools) == 0 && !ok {
			t.Fatalf("interface %q needs selection but got no candidates: %v", ifc.Name, got)
		}
	}
}
