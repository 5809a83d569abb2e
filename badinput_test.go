package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// badInput is one malformed input and what its error must say.
type badInput struct {
	name string
	// run feeds the input to the library and returns its error.
	run func(t *testing.T) error
	// is lists the sentinels the error must reach with errors.Is.
	is []error
	// want lists substrings of the message: the field path (or the pool and
	// interface name), and the offending value exactly as written.
	want []string
	// n, when above 1, is how many problems the input has; all must be reported
	// at once (errors.Join), so the error must have at least n leaves.
	n int
}

// badInputPools are the pools the allocator rows run against: a host-local /29
// (gateway 10.0.0.1, addresses 10.0.0.2-10.0.0.6) and a SpiderIPPool spec.
var badInputPools = []string{
	`{"name":"blue","ranges":[{"subnet":"10.0.0.0/29"}]}`,
	`{"name":"green","subnet":"10.0.1.0/24","ips":["10.0.1.10-10.0.1.20"],"excludeIPs":["10.0.1.15"],"gateway":"10.0.1.1"}`,
}

var badInputTime = time.Date(2024, time.May, 1, 12, 0, 0, 0, time.UTC)

func badParsePool(doc string) func(*testing.T) error {
	return func(*testing.T) error {
		p, err := ipam.ParsePool([]byte(doc))
		if err == nil {
			return fmt.Errorf("accepted: %+v", p)
		}
		return err
	}
}

func badValidatePools(docs ...string) func(*testing.T) error {
	return func(t *testing.T) error {
		var pools []*ipam.Pool
		for _, d := range docs {
			pools = append(pools, ipam.MustParsePool(d))
		}
		return ipam.ValidatePools(pools)
	}
}

func badNewCatalog(pools ...*ipam.Pool) func(*testing.T) error {
	return func(*testing.T) error {
		_, err := ipam.NewCatalog(pools...)
		return err
	}
}

func badReservedIP(doc string) func(*testing.T) error {
	return func(*testing.T) error {
		var r ipam.ReservedIP
		return r.UnmarshalJSON([]byte(doc))
	}
}

func badRangeJSON(doc string) func(*testing.T) error {
	return func(*testing.T) error {
		var r ipam.Range
		return r.UnmarshalJSON([]byte(doc))
	}
}

// badCanonical parses doc as a Range, which must succeed, and canonicalises it.
func badCanonical(doc string) func(*testing.T) error {
	return func(t *testing.T) error {
		var r ipam.Range
		require.NoError(t, r.UnmarshalJSON([]byte(doc)))
		_, err := r.Canonical()
		return err
	}
}

func badParseIPRange(s string) func(*testing.T) error {
	return func(*testing.T) error {
		r, err := ipam.ParseIPRange(s)
		if err == nil {
			return fmt.Errorf("accepted as %s", r)
		}
		return err
	}
}

func newBadInputAllocator(t *testing.T) *ipam.Allocator {
	t.Helper()
	var pools []*ipam.Pool
	for _, d := range badInputPools {
		pools = append(pools, ipam.MustParsePool(d))
	}
	cat, err := ipam.NewCatalog(pools...)
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	require.NoError(t, err)
	return a
}

// badAllocate runs the setup requests, which must succeed, then req.
func badAllocate(req ipam.Request, setup ...ipam.Request) func(*testing.T) error {
	return func(t *testing.T) error {
		a := newBadInputAllocator(t)
		ctx := context.Background()
		for _, s := range setup {
			_, err := a.AllocateAt(ctx, s, badInputTime)
			require.NoError(t, err, "setup")
		}
		res, err := a.AllocateAt(ctx, req, badInputTime)
		if err == nil {
			return fmt.Errorf("allocated: %+v", res.IPs)
		}
		return err
	}
}

func badEth0(uid string, pools []string, ips ...string) ipam.Request {
	ifc := ipam.NIC{Name: "eth0", Pools: pools}
	for _, s := range ips {
		ifc.IPs = append(ifc.IPs, netip.MustParseAddr(s))
	}
	return ipam.Request{Namespace: "default", Name: "pod-" + uid, UID: uid, Interfaces: []ipam.NIC{ifc}}
}

func TestBadInput(t *testing.T) {
	blue, green := []string{"blue"}, []string{"green"}
	rows := []badInput{
		// Pool JSON: subnets.
		{name: "subnet bad CIDR", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/33"}`),
			want: []string{`pool "p"`, "subnet", "10.0.0.0/33"}},
		{name: "subnet not an address", run: badParsePool(`{"name":"p","subnet":"ten/24"}`),
			want: []string{"subnet", "ten/24"}},
		{name: "ranges subnet bad CIDR", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0/24"}]}`),
			want: []string{"ranges[0].subnet", "10.0.0/24"}},
		{name: "subnet host bits set", run: badParsePool(`{"name":"p","subnet":"10.0.0.5/24"}`),
			want: []string{"subnet", "10.0.0.5/24"}},
		{name: "ranges subnet host bits set", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.1.5/24"}]}`),
			want: []string{"ranges[1].subnet", "10.0.1.5/24"}},
		{name: "ranges subnet /31", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/31"}]}`),
			want: []string{"ranges[0].subnet", "10.0.0.0/31"}},
		{name: "ranges subnet /32", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.7/32"}]}`),
			want: []string{"ranges[0].subnet", "10.0.0.7/32"}},
		{name: "ranges subnet /127", run: badParsePool(`{"name":"p","ranges":[{"subnet":"fd00::/127"}]}`),
			want: []string{"ranges[0].subnet", "fd00::/127"}},
		{name: "ranges subnet /128", run: badParsePool(`{"name":"p","ranges":[{"subnet":"fd00::1/128"}]}`),
			want: []string{"ranges[0].subnet", "fd00::1/128"}},
		{name: "IPv4-mapped subnet", run: badParsePool(`{"name":"p","subnet":"::ffff:10.0.0.0/120"}`),
			want: []string{"subnet", "::ffff:10.0.0.0/120"}},

		// Pool JSON: host-local ranges.
		{name: "rangeStart outside subnet", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.10"}]}`),
			want: []string{"ranges[0].rangeStart", "10.0.1.10"}},
		{name: "rangeEnd outside subnet", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.1.200"}]}`),
			want: []string{"ranges[0].rangeEnd", "10.0.1.200"}},
		{name: "rangeStart after rangeEnd", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.50","rangeEnd":"10.0.0.40"}]}`),
			want: []string{"ranges[0].rangeStart", "10.0.0.50", "10.0.0.40"}},
		{name: "rangeEnd not an address", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeEnd":"10.0.0.300"}]}`),
			want: []string{"ranges[0].rangeEnd", "10.0.0.300"}},
		{name: "mixed families in one range set", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"},{"subnet":"fd00::/64"}]}`),
			want: []string{"ranges[1].subnet", "fd00::/64"}},
		{name: "overlapping ranges in one set", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.15","rangeEnd":"10.0.0.30"}]}`),
			want: []string{"ranges[1]", "10.0.0.15", "10.0.0.30"}},
		{name: "ranges and subnet both", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ranges":[{"subnet":"10.0.0.0/24"}]}`),
			want: []string{"subnet", "10.0.0.0/24"}},
		{name: "ranges and ips both", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}],"ips":["192.168.0.1"]}`),
			want: []string{"ips", "192.168.0.1"}},
		{name: "ranges and top-level gateway both", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}],"gateway":"192.168.0.1"}`),
			want: []string{"gateway", "192.168.0.1"}},
		{name: "ipVersion does not match ranges", run: badParsePool(`{"name":"p","ipVersion":6,"ranges":[{"subnet":"10.0.0.0/24"}]}`),
			want: []string{"ipVersion", "6"}},
		{name: "ranges excludeIPs wrong family", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"}],"excludeIPs":["fd00::1"]}`),
			want: []string{"excludeIPs[0]", "fd00::1"}},
		{name: "no subnet", run: badParsePool(`{"name":"p","ips":["10.0.0.5"]}`),
			want: []string{`pool "p"`, "subnet"}}, // nothing written: no value to quote

		// Pool JSON: SpiderIPPool ips and excludeIPs.
		{name: "ips outside subnet", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.5","10.0.1.5"]}`),
			want: []string{"ips[1]", "10.0.1.5"}},
		{name: "ips range leaving subnet", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.250-10.0.1.5"]}`),
			want: []string{"ips[0]", "10.0.0.250-10.0.1.5"}},
		{name: "ips wrong family", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["fd00::5"]}`),
			want: []string{"ips[0]", "fd00::5"}},
		{name: "ips start after end", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.30-10.0.0.20"]}`),
			want: []string{"ips[0]", "10.0.0.30-10.0.0.20"}},
		{name: "ips garbage", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["banana"]}`),
			want: []string{"ips[0]", "banana"}},
		{name: "ips range mixing families", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.5-fd00::5"]}`),
			want: []string{"ips[0]", "10.0.0.5-fd00::5"}},
		{name: "ips with zone", run: badParsePool(`{"name":"p","subnet":"fd00::/64","ips":["fd00::5%eth0"]}`),
			want: []string{"ips[0]", "fd00::5%eth0"}},
		{name: "ips IPv4-mapped with zone", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["::ffff:10.0.0.5%eth0"]}`),
			want: []string{"ips[0]", "::ffff:10.0.0.5%eth0"}},
		{name: "excludeIPs garbage", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.5"],"excludeIPs":["10.0.0.x"]}`),
			want: []string{"excludeIPs[0]", "10.0.0.x"}},
		{name: "excludeIPs outside subnet", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.5"],"excludeIPs":["10.0.2.5"]}`),
			want: []string{"excludeIPs[0]", "10.0.2.5"}},

		// Pool JSON: gateway and routes.
		{name: "gateway outside subnet", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.5"],"gateway":"10.0.1.1"}`),
			want: []string{"gateway", "10.0.1.1"}},
		{name: "gateway inside ips not excluded", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.0.1-10.0.0.10"],"gateway":"10.0.0.1"}`),
			want: []string{"ips[0]", "10.0.0.1-10.0.0.10", "gateway 10.0.0.1"}},
		{name: "gateway empty string", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","gateway":""}`),
			want: []string{"gateway"}}, // the value written is empty
		{name: "gateway with zone", run: badParsePool(`{"name":"p","subnet":"fd00::/64","gateway":"fd00::1%eth0"}`),
			want: []string{"gateway", "fd00::1%eth0"}},
		{name: "default route in routes", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","routes":[{"dst":"0.0.0.0/0","gw":"10.0.0.1"}]}`),
			want: []string{"routes[0].dst", "0.0.0.0/0"}},
		{name: "duplicate route dst", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.0/16"},{"dst":"10.2.0.0/16"},{"dst":"10.1.0.0/16","gw":"10.0.0.2"}]}`),
			want: []string{"routes[2].dst", "10.1.0.0/16", "routes[0]"}},
		{name: "route gw outside subnet", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.0/16","gw":"10.9.0.1"}]}`),
			want: []string{"routes[0].gw", "10.9.0.1"}},
		{name: "route dst wrong family", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","routes":[{"dst":"fd00:1::/64"}]}`),
			want: []string{"routes[0].dst", "fd00:1::/64"}},
		{name: "route dst garbage", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","routes":[{"dst":"10.1.0.0"}]}`),
			want: []string{"routes[0].dst", "10.1.0.0"}},

		// Pool JSON: scalar fields.
		{name: "vlan above range", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","vlan":4095}`),
			want: []string{"vlan", "4095"}},
		{name: "vlan negative", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","vlan":-1}`),
			want: []string{"vlan", "-1"}},
		{name: "ipVersion 5", run: badParsePool(`{"name":"p","ipVersion":5,"subnet":"10.0.0.0/24"}`),
			want: []string{"ipVersion", "5"}},
		{name: "ipVersion does not match subnet", run: badParsePool(`{"name":"p","ipVersion":6,"subnet":"10.0.0.0/24"}`),
			want: []string{"ipVersion", "6", "10.0.0.0/24"}},
		{name: "unknown strategy", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","strategy":"random"}`),
			want: []string{"strategy", "random"}},
		{name: "name missing", run: badParsePool(`{"subnet":"10.0.0.0/24"}`),
			want: []string{"name"}}, // nothing written: no value to quote
		{name: "name with white space", run: badParsePool(`{"name":"my pool","subnet":"10.0.0.0/24"}`),
			want: []string{"name", "my pool"}},
		{name: "multusName with two slashes", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","multusName":["kube-system/macvlan/x"]}`),
			want: []string{"multusName[0]", "kube-system/macvlan/x"}},

		// Pool JSON: label selectors.
		{name: "empty podAffinity", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","podAffinity":{}}`),
			want: []string{"podAffinity", "{}"}},
		{name: "selector operator Gt", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchExpressions":[{"key":"cpu","operator":"Gt","values":["4"]}]}}`),
			want: []string{"nodeAffinity.matchExpressions[0].operator", "Gt"}},
		{name: "selector In without values", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","podAffinity":{"matchExpressions":[{"key":"app","operator":"In"}]}}`),
			want: []string{"podAffinity.matchExpressions[0].values", "In"}},
		{name: "selector Exists with values", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","namespaceAffinity":{"matchExpressions":[{"key":"team","operator":"Exists","values":["infra"]}]}}`),
			want: []string{"namespaceAffinity.matchExpressions[0].values", "infra"}},
		{name: "selector bad label key", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchLabels":{"-zone":"a"}}}`),
			want: []string{"nodeAffinity.matchLabels", "-zone"}},
		{name: "selector bad label value", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchLabels":{"zone":"eu west"}}}`),
			want: []string{"nodeAffinity.matchLabels[zone]", "eu west"}},
		{name: "selector bad expression key", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchExpressions":[{"key":"Example.com/zone","operator":"Exists"}]}}`),
			want: []string{"nodeAffinity.matchExpressions[0].key", "Example.com/zone"}},

		// Pool JSON: wrong types and broken documents.
		{name: "ips a string", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":"10.0.0.1"}`),
			want: []string{"ips", "10.0.0.1"}},
		{name: "vlan a string", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","vlan":"high"}`),
			want: []string{"vlan", "high"}},
		{name: "ranges subnet a number", run: badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24"},{"subnet":1234}]}`),
			want: []string{"ranges[1].subnet", "1234"}},
		{name: "strategy a number", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","strategy":17}`),
			want: []string{"strategy", "17"}},
		{name: "matchLabels a string", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchLabels":"zone=a"}}`),
			want: []string{"nodeAffinity.matchLabels", "zone=a"}},
		// A truncated document has no offending value: the row asserts the
		// document path and the cause.
		{name: "truncated JSON", run: badParsePool(`{"name":"p","subnet":"10.0`),
			want: []string{"(document)", "unexpected EOF"}},
		{name: "syntax error", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24",}`),
			want: []string{"offset 36", "'}'"}},
		{name: "trailing garbage", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24"} xyz`),
			want: []string{"(document)", "xyz"}},
		{name: "trailing brace", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24"}}`),
			want: []string{"(document)", "}"}},
		{name: "trailing bracket", run: badParsePool(`{"name":"p","subnet":"10.0.0.0/24"}]`),
			want: []string{"(document)", "]"}},
		{name: "not an object", run: badParsePool(`["10.0.0.0/24"]`),
			want: []string{"(document)", `["10.0.0.0/24"]`}},

		// Pool JSON: several problems at once.
		{name: "four parse problems at once", n: 4,
			run:  badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["banana","10.0.0.9-10.0.0.1"],"vlan":5000,"strategy":"fast"}`),
			want: []string{"ips[0]", "banana", "ips[1]", "10.0.0.9-10.0.0.1", "vlan", "5000", "strategy", "fast"}},
		{name: "three validation problems at once", n: 3,
			run:  badParsePool(`{"name":"p","subnet":"10.0.0.0/24","ips":["10.0.1.5"],"gateway":"10.0.2.1","routes":[{"dst":"0.0.0.0/0"}]}`),
			want: []string{"ips[0]", "10.0.1.5", "gateway", "10.0.2.1", "routes[0].dst", "0.0.0.0/0"}},
		{name: "two range problems at once", n: 2,
			run:  badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"},{"subnet":"10.0.0.0/31"}]}`),
			want: []string{"ranges[0].rangeStart", "10.0.1.1", "ranges[1].subnet", "10.0.0.0/31"}},
		// Issue 26 case 10: the overlap of ranges[1] in the same round as
		// ranges[0]'s own problem.
		{name: "an invalid range and an overlap at once", n: 2,
			run:  badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20"}]}`),
			want: []string{"ranges[0].rangeStart", "10.0.1.1", `ranges[1] "10.0.0.10-10.0.0.20": overlaps ranges[0] 10.0.0.1-10.0.0.254 (with its invalid fields unset)`}},
		{name: "a subnet with host bits and an overlap at once", n: 2,
			run:  badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.1/24"},{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.10","rangeEnd":"10.0.0.20"}]}`),
			want: []string{"ranges[0].subnet", "10.0.0.1/24", `ranges[1] "10.0.0.10-10.0.0.20": overlaps ranges[0]`}},
		{name: "three selector problems at once", n: 3,
			run:  badParsePool(`{"name":"p","subnet":"10.0.0.0/24","nodeAffinity":{"matchExpressions":[{"key":"cpu","operator":"Gt","values":["4"]},{"key":"-bad","operator":"Exists"},{"key":"zone","operator":"In"}]}}`),
			want: []string{"matchExpressions[0].operator", "Gt", "matchExpressions[1].key", "-bad", "matchExpressions[2].values"}},

		// Catalogue checks.
		{name: "duplicate pool names", run: badValidatePools(
			`{"name":"a","subnet":"10.0.0.0/24","ips":["10.0.0.10"]}`,
			`{"name":"a","subnet":"10.0.1.0/24","ips":["10.0.1.10"]}`),
			want: []string{`pool "a"`, `name "a"`, "pools[0]"}},
		{name: "overlapping subnets of different size", run: badValidatePools(
			`{"name":"a","subnet":"10.0.0.0/16","ips":["10.0.5.1"]}`,
			`{"name":"b","subnet":"10.0.0.0/24","ips":["10.0.0.10"]}`),
			want: []string{`pool "b"`, "subnet", "10.0.0.0/24", `pool "a"`, "10.0.0.0/16"}},
		{name: "same subnet overlapping ips", run: badValidatePools(
			`{"name":"a","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.30"]}`,
			`{"name":"b","subnet":"10.0.0.0/24","ips":["10.0.0.20-10.0.0.25"]}`),
			want: []string{`pool "b"`, "ips", "10.0.0.20-10.0.0.25", `pool "a"`}},
		{name: "host-local range sets overlapping across pools", run: badValidatePools(
			`{"name":"a","ranges":[{"subnet":"10.1.0.0/24"}]}`,
			`{"name":"b","ranges":[{"subnet":"10.1.0.0/24","rangeStart":"10.1.0.100","rangeEnd":"10.1.0.120"}]}`),
			want: []string{`pool "b"`, "ranges[0]", "10.1.0.100-10.1.0.120", `pool "a"`}},
		{name: "catalogue with an invalid pool",
			run:  badNewCatalog(&ipam.Pool{Name: "x", Subnet: netip.MustParsePrefix("10.0.0.0/24"), Vlan: 5000}),
			want: []string{`pool "x"`, "vlan", "5000"}},
		{name: "catalogue with a nil pool",
			run:  badNewCatalog(ipam.MustParsePool(`{"name":"a","subnet":"10.0.0.0/24"}`), nil),
			want: []string{"pools[1]"}},
		{name: "duplicate name and overlapping subnet at once", n: 2, run: badValidatePools(
			`{"name":"a","subnet":"10.0.0.0/16","ips":["10.0.9.1"]}`,
			`{"name":"a","subnet":"10.2.0.0/24","ips":["10.2.0.5"]}`,
			`{"name":"b","subnet":"10.0.0.0/24","ips":["10.0.0.5"]}`),
			want: []string{`name "a"`, `pool "b"`, "10.0.0.0/24", "10.0.0.0/16"}},

		// ReservedIP JSON.
		{name: "reservedIP start after end", run: badReservedIP(`{"name":"r","ips":["10.0.0.9-10.0.0.1"]}`),
			want: []string{`reservedIP "r"`, "ips[0]", "10.0.0.9-10.0.0.1"}},
		{name: "reservedIP mixed family", run: badReservedIP(`{"name":"r","ips":["10.0.0.1","fd00::1"]}`),
			want: []string{"ips[1]", "fd00::1"}},
		{name: "reservedIP range mixing families", run: badReservedIP(`{"ips":["10.0.0.1-fd00::1"]}`),
			want: []string{"ips[0]", "10.0.0.1-fd00::1"}},
		{name: "reservedIP ipVersion 5", run: badReservedIP(`{"name":"r","ipVersion":5,"ips":["10.0.0.1"]}`),
			want: []string{"ipVersion", "5"}},
		{name: "reservedIP ipVersion mismatch", run: badReservedIP(`{"ipVersion":6,"ips":["10.0.0.1"]}`),
			want: []string{"ips[0]", "10.0.0.1"}},
		{name: "reservedIP garbage", run: badReservedIP(`{"ips":["10.0.0.1/24"]}`),
			want: []string{"ips[0]", "10.0.0.1/24"}},

		// Range.UnmarshalJSON and Range.Canonical.
		{name: "range rangeStart not an address", run: badRangeJSON(`{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.300"}`),
			want: []string{"rangeStart", "10.0.0.300"}},
		{name: "range without subnet", run: badRangeJSON(`{"rangeStart":"10.0.0.5"}`),
			want: []string{"subnet"}}, // nothing written: no value to quote
		{name: "range gateway with zone", run: badRangeJSON(`{"subnet":"fd00::/64","gateway":"fd00::1%eth0"}`),
			want: []string{"gateway", "fd00::1%eth0"}},
		{name: "range subnet an array", run: badRangeJSON(`{"subnet":["10.0.0.0/24"]}`),
			want: []string{"subnet", "10.0.0.0/24"}},
		{name: "canonical start after end", run: badCanonical(`{"subnet":"10.0.0.0/24","rangeStart":"10.0.0.50","rangeEnd":"10.0.0.40"}`),
			want: []string{"rangeStart", "10.0.0.50", "10.0.0.40"}},
		{name: "canonical host bits set", run: badCanonical(`{"subnet":"10.0.0.5/24"}`),
			want: []string{"subnet", "10.0.0.5/24"}},
		{name: "canonical /32", run: badCanonical(`{"subnet":"192.168.1.1/32"}`),
			want: []string{"subnet", "192.168.1.1/32"}},
		{name: "canonical gateway wrong family", run: badCanonical(`{"subnet":"10.0.0.0/24","gateway":"fd00::1"}`),
			want: []string{"gateway", "fd00::1"}},
		{name: "canonical zero range", run: func(*testing.T) error { _, err := ipam.Range{}.Canonical(); return err },
			want: []string{"subnet"}},
		{name: "canonical start and end outside at once", n: 2,
			run:  badCanonical(`{"subnet":"10.0.0.0/24","rangeStart":"10.0.1.1","rangeEnd":"10.0.2.1"}`),
			want: []string{"rangeStart", "10.0.1.1", "rangeEnd", "10.0.2.1"}},

		// ParseIPRange.
		{name: "ParseIPRange garbage", run: badParseIPRange("banana"), want: []string{"banana"}},
		{name: "ParseIPRange start after end", run: badParseIPRange("10.0.0.9-10.0.0.1"), want: []string{"10.0.0.9-10.0.0.1"}},
		{name: "ParseIPRange mixed families", run: badParseIPRange("10.0.0.1-fd00::1"), want: []string{"10.0.0.1-fd00::1"}},
		{name: "ParseIPRange missing end", run: badParseIPRange("10.0.0.1-"), want: []string{"10.0.0.1-"}},
		{name: "ParseIPRange zone", run: badParseIPRange("fe80::1%eth0"), want: []string{"fe80::1%eth0"}},
		{name: "ParseIPRange IPv4-mapped zone", run: badParseIPRange("::ffff:10.0.0.5%eth0"), want: []string{"::ffff:10.0.0.5%eth0"}},

		// Allocator requests.
		{name: "request without uid or containerID",
			run:  badAllocate(ipam.Request{Interfaces: []ipam.NIC{{Name: "eth0", Pools: blue}}}),
			want: []string{"request", "uid"}},
		{name: "request without interfaces",
			run:  badAllocate(ipam.Request{UID: "u1"}),
			want: []string{"request", "interfaces"}},
		{name: "request with empty interface name",
			run:  badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Pools: blue}}}),
			want: []string{"interfaces[0].name"}},
		{name: "request with duplicate interface names",
			run: badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{
				{Name: "eth0", Pools: blue}, {Name: "net1", Pools: green}, {Name: "eth0", Pools: green}}}),
			want: []string{"interfaces[2].name", `"eth0"`}},
		{name: "pool field in the wrong case",
			run:  badParsePool(`{"name":"p","subnet":"10.0.1.0/24","ips":["10.0.1.10"],"NodeAffinity":{"matchLabels":{"zone":"a"}}}`),
			want: []string{"NodeAffinity", `"nodeAffinity"`, "case-sensitive"}},
		{name: "selector field in the wrong case",
			run:  badParsePool(`{"name":"p","subnet":"10.0.1.0/24","ips":["10.0.1.10"],"podAffinity":{"MatchLabels":{"app":"web"}}}`),
			want: []string{"podAffinity.MatchLabels", `"matchLabels"`}},
		{name: "range field in the wrong case",
			run:  badParsePool(`{"name":"p","ranges":[{"subnet":"10.0.0.0/24","RangeStart":"10.0.0.5"}]}`),
			want: []string{"ranges[0].RangeStart", `"rangeStart"`}},
		{name: "selector expression key in the wrong case",
			run:  badParsePool(`{"name":"p","subnet":"10.0.1.0/24","ips":["10.0.1.10"],"nodeAffinity":{"matchExpressions":[{"Key":"zone","operator":"Exists"}]}}`),
			want: []string{"nodeAffinity.matchExpressions[0].Key", `"key"`}},
		{name: "request without pools and no rule that names one", is: []error{ipam.ErrNoCandidates},
			run:  badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Name: "eth0"}}}),
			want: []string{"eth0", "no pool selection rule"}},
		{name: "requested IP without pools",
			run: badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Name: "eth0",
				IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}}}),
			want: []string{"interfaces[0].ips", "10.0.0.5"}},
		{name: "request with empty pool name",
			run:  badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue", ""}}}}),
			want: []string{"interfaces[0].pools[1]"}},
		{name: "request for an unknown pool", is: []error{ipam.ErrNotFound},
			run:  badAllocate(badEth0("u1", []string{"blue", "nope"})),
			want: []string{"eth0", `"nope"`}},
		{name: "request naming a pool twice",
			run:  badAllocate(badEth0("u1", []string{"blue", "green", "blue"})),
			want: []string{"interfaces[0].pools[2]", `"blue"`}},
		{name: "request with a zero requested IP",
			run:  badAllocate(ipam.Request{UID: "u1", Interfaces: []ipam.NIC{{Name: "eth0", Pools: blue, IPs: []netip.Addr{{}}}}}),
			want: []string{"interfaces[0].ips[0]"}},
		{name: "requested IP outside every pool", is: []error{ipam.ErrNotInRange},
			run:  badAllocate(badEth0("u1", []string{"blue", "green"}, "10.9.9.9")),
			want: []string{"eth0", "10.9.9.9", `"blue"`, `"green"`}},
		{name: "requested IP of the wrong family", is: []error{ipam.ErrNotInRange},
			run:  badAllocate(badEth0("u1", blue, "fd00::5")),
			want: []string{"eth0", "fd00::5", `"blue"`}},
		{name: "requested IP is the broadcast address", is: []error{ipam.ErrNotInRange},
			run:  badAllocate(badEth0("u1", blue, "10.0.0.7")),
			want: []string{"eth0", "10.0.0.7", `"blue"`}},
		{name: "requested IP is the gateway", is: []error{ipam.ErrUnavailable},
			run:  badAllocate(badEth0("u1", blue, "10.0.0.1")),
			want: []string{"eth0", `pool "blue"`, "10.0.0.1"}},
		{name: "requested IP is excluded", is: []error{ipam.ErrUnavailable},
			run:  badAllocate(badEth0("u1", green, "10.0.1.15")),
			want: []string{"eth0", `pool "green"`, "10.0.1.15"}},
		{name: "requested IP held by another owner", is: []error{ipam.ErrUnavailable},
			run:  badAllocate(badEth0("u2", blue, "10.0.0.3"), badEth0("u1", blue, "10.0.0.3")),
			want: []string{"eth0", `pool "blue"`, "10.0.0.3"}},
		{name: "owner holds another IP than it requests", is: []error{ipam.ErrOwnerConflict},
			run:  badAllocate(badEth0("u1", blue, "10.0.0.4"), badEth0("u1", blue, "10.0.0.3")),
			want: []string{"eth0", `pool "blue"`, "10.0.0.4", "10.0.0.3"}},
		{name: "pool exhausted", is: []error{ipam.ErrExhausted},
			run: badAllocate(badEth0("u9", blue),
				badEth0("u1", blue), badEth0("u2", blue), badEth0("u3", blue), badEth0("u4", blue), badEth0("u5", blue)),
			want: []string{"eth0", `pool "blue"`, "10.0.0.1-10.0.0.6"}},
		{name: "three request problems at once", n: 3,
			run: badAllocate(ipam.Request{Interfaces: []ipam.NIC{{Pools: blue},
				{Name: "net1", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}}}),
			want: []string{"uid", "interfaces[0].name", "interfaces[1].ips"}},
		{name: "requested gateway and outside IP at once", n: 2, is: []error{ipam.ErrUnavailable, ipam.ErrNotInRange},
			run:  badAllocate(badEth0("u1", []string{"blue", "green"}, "10.0.0.1", "10.9.9.9")),
			want: []string{"eth0", `pool "blue"`, "10.0.0.1", "10.9.9.9"}},
		{name: "Release with zero owner",
			run: func(t *testing.T) error {
				return newBadInputAllocator(t).ReleaseAt(context.Background(), store.Owner{Interface: "eth0"}, badInputTime)
			},
			want: []string{"owner", "uid"}},
		{name: "Lookup with zero owner",
			run: func(t *testing.T) error {
				_, err := newBadInputAllocator(t).Lookup(context.Background(), store.Owner{Name: "web-0"})
				return err
			},
			want: []string{"owner", "uid"}},
		{name: "ReleaseIP from an unknown pool", is: []error{ipam.ErrNotFound},
			run: func(t *testing.T) error {
				return newBadInputAllocator(t).ReleaseIP(context.Background(), "nope", netip.MustParseAddr("10.0.0.2"))
			},
			want: []string{`"nope"`}},
		{name: "ReleaseIP of an unclaimed address", is: []error{ipam.ErrNotFound},
			run: func(t *testing.T) error {
				return newBadInputAllocator(t).ReleaseIP(context.Background(), "blue", netip.MustParseAddr("10.0.0.5"))
			},
			want: []string{`pool "blue"`, "10.0.0.5"}},
		{name: "NewAllocator without pools",
			run: func(*testing.T) error {
				_, err := ipam.NewAllocator(ipam.Options{})
				return err
			},
			want: []string{"Pools"}},
	}
	if len(rows) < 45 {
		t.Fatalf("only %d rows", len(rows))
	}
	seen := make(map[string]bool, len(rows))
	for _, row := range rows {
		require.False(t, seen[row.name], "duplicate row name %q", row.name)
		seen[row.name] = true
		t.Run(row.name, func(t *testing.T) {
			err := badInputRun(t, row.run)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			is := row.is
			if len(is) == 0 {
				is = []error{ipam.ErrInvalid}
			}
			for _, s := range is {
				if !errors.Is(err, s) {
					t.Errorf("errors.Is(err, %q) is false; err = %v", s, err)
				}
			}
			for _, w := range row.want {
				if !strings.Contains(msg, w) {
					t.Errorf("message lacks %q:\n%s", w, msg)
				}
			}
			if row.n > 1 {
				if got := len(badInputLeaves(err)); got < row.n {
					t.Errorf("%d problems reported, want %d at once:\n%s", got, row.n, msg)
				}
			}
		})
	}
}

// badInputRun calls run and turns a panic into a test failure.
func badInputRun(t *testing.T, run func(*testing.T) error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("panic: %v", r)
		}
	}()
	return run(t)
}

// badInputLeaves flattens errors.Join trees into their leaves.
func badInputLeaves(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, badInputLeaves(e)...)
		}
		return out
	}
	return []error{err}
}
