package subnet_test

import (
	"encoding/json"
	"errors"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

func TestParseSubnetRoundTrip(t *testing.T) {
	in := `{"name":"subnet-6","ipVersion":4,"subnet":"10.6.0.0/16","ips":["10.6.168.101-10.6.168.110","10.6.168.120"],
		"excludeIPs":["10.6.168.105"],"gateway":"10.6.0.1","routes":[{"dst":"10.7.0.0/16","gw":"10.6.0.1"}],"vlan":7}`
	s, err := subnet.Parse([]byte(in))
	require.NoError(t, err)
	require.Equal(t, 4, s.Family())
	require.Equal(t, 7, s.Vlan)
	out, err := json.Marshal(s)
	require.NoError(t, err)
	require.JSONEq(t, in, string(out))
	back, err := subnet.Parse(out)
	require.NoError(t, err)
	require.Equal(t, s, back)
	require.Equal(t, "10.6.168.101-10.6.168.104,10.6.168.106-10.6.168.110,10.6.168.120", strings.Join(formatRanges(s.Usable().Ranges()), ","))
}

// TestParseSubnetEveryProblem checks that every problem is reported at once,
// each naming the subnet, the field and the value.
func TestParseSubnetEveryProblem(t *testing.T) {
	_, err := subnet.Parse([]byte(`{"name":"s","subnet":"10.6.0.0/16","ips":["10.6.0.5","bad"],"gateway":"10.6.0.300","vlan":5000}`))
	require.ErrorIs(t, err, ipam.ErrInvalid)
	for _, want := range []string{`subnet "s": ips[1] "bad": invalid IP address`, `gateway "10.6.0.300": invalid IP address`, `vlan "5000"`} {
		require.ErrorContains(t, err, want)
	}
	_, err = subnet.Parse([]byte(`{"name":"s","subnet":"10.6.0.1/16","IPs":["10.6.0.5"]}`))
	require.ErrorContains(t, err, `did you mean "ips"?`)
	_, err = subnet.Parse([]byte(`{"name":"s","ipVersion":6,"subnet":"10.6.0.1/16","ips":["10.7.0.1","fd00::1"],"gateway":"10.6.0.5",
		"excludeIPs":["10.8.0.1"],"routes":[{"dst":"0.0.0.0/0","gw":"10.6.0.1"},{"dst":"10.9.0.0/16","gw":"10.10.0.1"}]}`))
	for _, want := range []string{
		`subnet "s": ipVersion "6": does not match subnet 10.6.0.1/16`,
		`subnet "s": subnet "10.6.0.1/16": unformatted subnet: want 10.6.0.0/16`,
	} {
		require.ErrorContains(t, err, want)
	}
	s := &subnet.Subnet{Name: "s", Subnet: mustPrefix("10.6.0.0/16"), IPs: mustRanges("10.7.0.1", "fd00::1", "10.6.0.1-10.6.0.9"),
		ExcludeIPs: mustRanges("10.8.0.1"), Gateway: mustAddr("10.6.0.5"),
		Routes: []ipam.Route{{Dst: mustPrefix("0.0.0.0/0"), GW: mustAddr("10.6.0.1")}, {Dst: mustPrefix("10.9.0.0/16"), GW: mustAddr("10.10.0.1")}}}
	err = s.Validate()
	for _, want := range []string{
		`ips[0] "10.7.0.1": not inside subnet 10.6.0.0/16`,
		`ips[1] "fd00::1": not of the subnet's IP family IPv4`,
		`ips[2] "10.6.0.1-10.6.0.9": conflicts with gateway 10.6.0.5`,
		`excludeIPs[0] "10.8.0.1": not inside subnet`,
		`routes[0].dst "0.0.0.0/0": default route not allowed`,
		`routes[1].gw "10.10.0.1": not inside subnet`,
	} {
		require.ErrorContains(t, err, want)
	}
	require.ErrorContains(t, (&subnet.Subnet{}).Validate(), "subnet: name: required")
	require.ErrorContains(t, (&subnet.Subnet{Name: "x"}).Validate(), `subnet "x": subnet: required`)
}

func TestValidateSubnets(t *testing.T) {
	s6, s7 := ssSubnet6(), ssSubnet7()
	require.NoError(t, subnet.ValidateAll([]*subnet.Subnet{s6, s7}, []*ipam.Pool{
		ipam.MustParsePool(`{"name":"in6","subnet":"10.6.0.0/16","ips":["10.6.168.108-10.6.168.110"]}`),
		ipam.MustParsePool(`{"name":"elsewhere","subnet":"10.9.0.0/24"}`),
		ipam.MustParsePool(`{"name":"v6","subnet":"fd00::/64"}`),
		ipam.MustParsePool(`{"name":"hl","ranges":[{"subnet":"10.6.0.0/24"}]}`), // not a SpiderIPPool
	}))
	dup := *s6
	nested := subnet.MustParse(`{"name":"nested","subnet":"10.6.1.0/24"}`)
	same := subnet.MustParse(`{"name":"same","subnet":"10.6.0.0/16"}`)
	err := subnet.ValidateAll([]*subnet.Subnet{s6, &dup, nested, same, s7, nil}, []*ipam.Pool{
		ipam.MustParsePool(`{"name":"wider","subnet":"10.6.0.0/15"}`),
		ipam.MustParsePool(`{"name":"narrower","subnet":"10.7.1.0/24"}`),
		ipam.MustParsePool(`{"name":"outside","subnet":"10.7.0.0/16","ips":["10.7.168.109-10.7.168.112"]}`),
	})
	for _, want := range []string{
		`subnet "subnet-6": name "subnet-6": duplicate: also subnets[0]`,
		`subnet "nested": subnet "10.6.1.0/24": overlaps subnet "subnet-6" whose subnet is 10.6.0.0/16`,
		`subnet "same": subnet "10.6.0.0/16": overlaps subnet "subnet-6"`,
		`subnets[5]: nil subnet`,
		`pool "wider": subnet "10.6.0.0/15": overlaps subnet "subnet-6" whose subnet is 10.6.0.0/16`,
		`pool "wider": subnet "10.6.0.0/15": overlaps subnet "subnet-7"`,
		`pool "narrower": subnet "10.7.1.0/24": overlaps subnet "subnet-7"`,
		`pool "outside": ips "10.7.168.111-10.7.168.112": not among the addresses of subnet "subnet-7"`,
	} {
		require.ErrorContains(t, err, want)
	}
	require.Len(t, joined(err), 8)
	// A subnet's excluded addresses are outside it too.
	ex := subnet.MustParse(`{"name":"ex","subnet":"10.6.0.0/16","ips":["10.6.0.10-10.6.0.20"],"excludeIPs":["10.6.0.15"]}`)
	err = subnet.ValidateAll([]*subnet.Subnet{ex}, []*ipam.Pool{ipam.MustParsePool(`{"name":"p","subnet":"10.6.0.0/16","ips":["10.6.0.14-10.6.0.16"],"excludeIPs":["10.6.0.14"]}`)})
	require.ErrorContains(t, err, `pool "p": ips "10.6.0.15": not among the addresses of subnet "ex"`)
}

func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

func TestValidateSubnetUpdate(t *testing.T) {
	s6 := ssSubnet6()
	pool := ipam.MustParsePool(`{"name":"in6","subnet":"10.6.0.0/16","ips":["10.6.168.108-10.6.168.110"]}`)
	app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	auto := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, nil, nil, nil)).Pool
	wider := subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","gateway":"10.6.0.1","ips":["10.6.168.101-10.6.168.120"]}`)
	require.NoError(t, subnet.ValidateUpdate(s6, wider, []*ipam.Pool{pool}, []*subnet.AutoPool{auto}))
	narrower := subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","gateway":"10.6.0.1","ips":["10.6.168.103-10.6.168.108"]}`)
	err := subnet.ValidateUpdate(s6, narrower, []*ipam.Pool{pool}, []*subnet.AutoPool{auto})
	require.ErrorContains(t, err, `pool "in6": ips "10.6.168.109-10.6.168.110": held by a pool the subnet controls, so "subnet-6" cannot remove it`)
	require.ErrorContains(t, err, `pool "auto4-test-app-1-eth0-a5bd3": ips "10.6.168.101-10.6.168.102": held by a pool`)
	moved := subnet.MustParse(`{"name":"subnet-6","subnet":"10.16.0.0/16"}`)
	require.ErrorContains(t, subnet.ValidateUpdate(s6, moved, nil, nil), `subnet "10.16.0.0/16": cannot change: was 10.6.0.0/16`)
	require.ErrorIs(t, subnet.ValidateUpdate(nil, s6, nil, nil), ipam.ErrInvalid)
}

func TestSubnetStatusOf(t *testing.T) {
	s := subnet.MustParse(`{"name":"big","subnet":"fd00::/64","ips":["fd00::1-fd00::ffff:ffff:ffff:ffff"]}`)
	st := subnet.StatusOf(s, []*ipam.Pool{
		ipam.MustParsePool(`{"name":"p","subnet":"fd00::/64","ips":["fd00::10-fd00::1f"],"excludeIPs":["fd00::10"]}`),
		ipam.MustParsePool(`{"name":"other","subnet":"fd01::/64","ips":["fd01::10"]}`),
	}, nil)
	require.Equal(t, int64(math.MaxInt64), st.TotalIPCount, "saturates")
	require.True(t, st.Saturated, "and says so (issue 26 case 10)")
	require.Equal(t, int64(15), st.AllocatedIPCount)
	require.Len(t, st.ControlledIPPools, 1)
	b, err := json.Marshal(st)
	require.NoError(t, err)
	require.JSONEq(t, `{"name":"big","totalIPCount":9223372036854775807,"allocatedIPCount":15,"saturated":true,"controlledIPPools":{"p":{"ips":["fd00::11-fd00::1f"]}}}`, string(b))
	// 2^63 - 1 addresses exactly is not saturated; one more is.
	exact := subnet.MustParse(`{"name":"exact","subnet":"fd00::/64","ips":["fd00::1-fd00::7fff:ffff:ffff:ffff"]}`)
	st = subnet.StatusOf(exact, nil, nil)
	require.Equal(t, int64(math.MaxInt64), st.TotalIPCount)
	require.False(t, st.Saturated)
	exact = subnet.MustParse(`{"name":"exact","subnet":"fd00::/64","ips":["fd00::1-fd00::8000:0:0:0"]}`)
	require.True(t, subnet.StatusOf(exact, nil, nil).Saturated)
	// A pool with addresses outside the subnet counts only those inside.
	s6 := ssSubnet6()
	st = subnet.StatusOf(s6, []*ipam.Pool{ipam.MustParsePool(`{"name":"half","subnet":"10.6.0.0/16","ips":["10.6.168.109-10.6.168.112"]}`)}, nil)
	require.Equal(t, int64(2), st.AllocatedIPCount)
}

func TestSubnetAdopt(t *testing.T) {
	s6 := ssSubnet6()
	own := ipam.MustParsePool(`{"name":"own","subnet":"10.6.0.0/16","ips":["10.6.168.108"],"gateway":"10.6.0.254","routes":[{"dst":"10.9.0.0/16","gw":"10.6.0.254"}]}`)
	require.Same(t, own, s6.Adopt(own), "a pool with its own gateway and routes is unchanged")
	other := ipam.MustParsePool(`{"name":"other","subnet":"10.9.0.0/16"}`)
	require.Same(t, other, s6.Adopt(other), "not controlled")
	require.False(t, s6.Controls(nil))
}

func TestAutoPoolOptionsValidate(t *testing.T) {
	require.NoError(t, subnet.Options{}.Validate())
	require.NoError(t, subnet.Options{DefaultIPNumber: "+3"}.Validate())
	err := subnet.Options{DefaultIPNumber: "x"}.Validate()
	require.ErrorIs(t, err, ipam.ErrInvalid)
	require.ErrorContains(t, err, `DefaultIPNumber "x"`)
	var fe *ipam.FieldError
	require.True(t, errors.As(err, &fe))
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }
