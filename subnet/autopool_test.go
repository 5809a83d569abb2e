package subnet_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

func TestAutoPoolName(t *testing.T) {
	app := func(name, uid string) ipam.AppRef {
		return ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: name, UID: uid}
	}
	for _, tc := range []struct {
		fam          int
		app          ipam.AppRef
		iface, want  string
		errorHas     string
		wantMaxBytes int
	}{
		{4, app("test-app-1", ssUID), "eth0", "auto4-test-app-1-eth0-a5bd3", "", 0},
		{6, app("Web.API", "ABCDEF-12"), "Net1", "auto6-web.api-net1-12", "", 0},
		{4, app("x", "nodash"), "eth0", "auto4-x-eth0-nodas", "", 0},
		// The cut lands on a dot and a dash, which are dropped.
		{4, app(strings.Repeat("a", 234)+".-bbbb", ssUID), "eth0", "auto4-" + strings.Repeat("a", 234) + "-eth0-a5bd3", "", 0},
		{4, app("web", ssUID), "net_1", "", `name "auto4-web-net_1-a5bd3": not a valid pool name`, 0},
		{4, app("web", ssUID), strings.Repeat("e", 250), "", "not a valid pool name", 0},
	} {
		got, err := subnet.AutoPoolName(tc.fam, tc.app, tc.iface)
		if tc.errorHas != "" {
			require.ErrorIs(t, err, ipam.ErrInvalid)
			require.ErrorContains(t, err, tc.errorHas)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
		require.LessOrEqual(t, len(got), 253)
	}
}

func TestApplicationPodCount(t *testing.T) {
	for _, tc := range []struct {
		app   subnet.Application
		n     int
		known bool
	}{
		{ssApp("Deployment", "d", "u", 4, nil), 4, true},
		{ssApp("ReplicaSet", "d", "u", 0, nil), 0, true},
		{ssApp("StatefulSet", "d", "u", 7, nil), 7, true},
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment"}}, 1, true}, // unset: the API server's default
		{ssApp("DaemonSet", "d", "u", 3, nil), 3, true},
		{ssApp("Job", "d", "u", 0, nil), 1, true}, // completions 0 counts as 1
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "batch/v1", Kind: "Job"}, Parallelism: intp(5)}, 5, true},
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "batch/v1", Kind: "CronJob"}, Completions: intp(2), Parallelism: intp(5)}, 2, true},
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "batch/v1", Kind: "CronJob"}}, 1, true},
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "batch/v1", Kind: "Job"}, Parallelism: intp(0)}, 1, true},
		{ssApp("apps.kruise.io/v1alpha1/CloneSet", "c", "u", -1, nil), 0, false},
		{ssApp("apps.kruise.io/v1alpha1/CloneSet", "c", "u", 6, nil), 6, true},
		// A kind in the wrong group is a third-party controller.
		{subnet.Application{AppRef: ipam.AppRef{APIVersion: "batch/v1", Kind: "Deployment"}}, 0, false},
	} {
		n, known := tc.app.PodCount()
		require.Equal(t, tc.n, n, tc.app.AppRef)
		require.Equal(t, tc.known, known, tc.app.AppRef)
	}
	err := (&subnet.Application{AppRef: ipam.AppRef{Kind: "Deployment", Name: "d"}, Replicas: intp(-1)}).Validate()
	for _, want := range []string{"application Deployment /d: apiVersion: required", "uid: required", `replicas "-1": negative`} {
		require.ErrorContains(t, err, want)
	}
}

func TestAppRef(t *testing.T) {
	core := ipam.AppRef{APIVersion: "v1", Kind: "ReplicationController", Namespace: "ns", Name: "rc"}
	require.Equal(t, "", core.Group())
	require.Equal(t, "v1", core.Version())
	require.False(t, core.IsNative())
	require.Equal(t, "no application", ipam.AppRef{}.String())
	// Long values become valid, distinct label values.
	a := subnet.AppLabels(ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Name: strings.Repeat("x", 100) + "1"})
	b := subnet.AppLabels(ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Name: strings.Repeat("x", 100) + "2"})
	require.Len(t, a[ipam.LabelAppName], 63)
	require.NotEqual(t, a[ipam.LabelAppName], b[ipam.LabelAppName])
	_, err := ipam.ParseLabelSelector([]byte(`{"matchLabels":{"k":"` + a[ipam.LabelAppName] + `"}}`))
	require.NoError(t, err)
}

func TestParseAutoPoolConfig(t *testing.T) {
	cfg, ok, err := subnet.ParseConfig(ssAnn(
		ipam.AnnotationSubnets, `[{"interface":"eth0","ipv4":["a"],"ipv6":["a6"]}]`,
		ipam.AnnotationSubnet, `not even json`, // subnets wins; subnet is not read
		subnet.AnnotationIPNumber, "3",
		subnet.AnnotationReclaim, "0"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, subnet.Config{Key: ipam.AnnotationSubnets, Subnets: []ipam.NICSubnets{{Interface: "eth0", IPv4: []string{"a"}, IPv6: []string{"a6"}}},
		IPNumber: subnet.IPNumber{N: 3}, HasIPNumber: true, Reclaim: false}, cfg)
	_, ok, err = subnet.ParseConfig(ssAnn(ipam.AnnotationIPPool, `{"ipv4":["p"]}`, subnet.AnnotationIPNumber, "bad"))
	require.False(t, ok, "no subnet annotation: nothing asked, the rest is not read")
	require.NoError(t, err)
	// Every problem at once.
	_, ok, err = subnet.ParseConfig(ssAnn(ipam.AnnotationSubnet, `{"ipv4":["*"]}`, subnet.AnnotationIPNumber, "++1", subnet.AnnotationReclaim, "maybe"))
	require.True(t, ok)
	require.Len(t, joined(err), 3)
	for _, want := range []string{
		`annotation "ipam.spidernet.io/subnet"`, `cannot be wildcards`,
		`annotation "ipam.spidernet.io/ippool-ip-number" "++1": invalid input`,
		`annotation "ipam.spidernet.io/ippool-reclaim" "maybe": invalid input: want "true" or "false"`,
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestIPNumberText(t *testing.T) {
	for _, s := range []string{"0", "+0", "12", "+3"} {
		var n subnet.IPNumber
		require.NoError(t, n.UnmarshalText([]byte(s)))
		b, err := n.MarshalText()
		require.NoError(t, err)
		require.Equal(t, s, string(b))
	}
	var n subnet.IPNumber
	require.ErrorIs(t, n.UnmarshalText([]byte("x")), ipam.ErrInvalid)
	require.Equal(t, 7, subnet.IPNumber{N: 2, Relative: true}.Size(5))
	require.Equal(t, 2, subnet.IPNumber{N: 2}.Size(5))
}

func TestParseAutoPool(t *testing.T) {
	app := ssApp("apps.kruise.io/v1alpha1/CloneSet", "c", ssUID, 3, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
	d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
	back, ok, err := subnet.ParseAutoPool(d.Pool.Pool, d.Pool.Labels(), d.Pool.Annotations())
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, d.Pool, back)
	// A pool written by hand is not an auto-pool.
	_, ok, err = subnet.ParseAutoPool(d.Pool.Pool, map[string]string{subnet.LabelOwnerSubnet: "subnet-6"}, nil)
	require.False(t, ok)
	require.NoError(t, err)
	// Broken labels: every problem at once.
	labels := d.Pool.Labels()
	delete(labels, subnet.LabelOwnerAppUID)
	labels[subnet.LabelReclaim] = "perhaps"
	labels[subnet.LabelIPVersion] = "IPv6"
	_, ok, err = subnet.ParseAutoPool(d.Pool.Pool, labels, map[string]string{subnet.AnnotationIPNumber: "x"})
	require.True(t, ok)
	for _, want := range []string{
		"metadata.labels.ipam.spidernet.io/owner-application-uid: required on an auto-pool",
		`metadata.labels.ipam.spidernet.io/ippool-reclaim "perhaps"`,
		`metadata.labels.ipam.spidernet.io/ip-version "IPv6": does not match the pool's IP family IPv4`,
		`metadata.annotations.ipam.spidernet.io/ippool-ip-number "x": invalid input`,
	} {
		require.ErrorContains(t, err, want)
	}
	// Without the size annotation, the pool's size is a fixed number.
	back, _, err = subnet.ParseAutoPool(d.Pool.Pool, d.Pool.Labels(), nil)
	require.NoError(t, err)
	require.Equal(t, subnet.IPNumber{N: 4}, back.IPNumber)
}

// decideOne runs Decide for the apps against the subnets and
// returns the decisions by pool name or, for decisions without a pool, by
// "<app name> <interface>".
func decideMap(t *testing.T, apps []subnet.Application, subnets []*subnet.Subnet, pools []*ipam.Pool, auto []*subnet.AutoPool, claims []store.Claim) map[string]subnet.Decision {
	t.Helper()
	out := map[string]subnet.Decision{}
	for _, d := range ssDecide(t, apps, subnets, pools, auto, claims) {
		k := d.PoolName()
		if k == "" {
			k = d.App.Name + " " + d.Interface
		}
		require.NotContains(t, out, k, "one decision per pool")
		out[k] = d
	}
	return out
}

func TestDecideAutoPoolsAllOrNothing(t *testing.T) {
	// subnet-7 has 2 free addresses; the application needs 3 on each
	// interface: neither pool is created.
	small := subnet.MustParse(`{"name":"subnet-7","subnet":"10.7.0.0/16","ips":["10.7.0.10-10.7.0.14"]}`)
	taken := ipam.MustParsePool(`{"name":"manual7","subnet":"10.7.0.0/16","ips":["10.7.0.10-10.7.0.12"]}`)
	app := ssApp("Deployment", "two", "u-two-22222", 2, ssAnn(ipam.AnnotationSubnets,
		`[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-7"]}]`))
	ds := ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6(), small}, []*ipam.Pool{taken}, nil, nil)
	require.Len(t, ds, 2)
	for _, d := range ds {
		require.Equal(t, subnet.Wait, d.Action)
		require.Nil(t, d.Pool, "nothing created")
		require.Empty(t, d.Added)
		require.ErrorIs(t, d.Err, ipam.ErrNotReady)
		var ae *subnet.Error
		require.ErrorAs(t, d.Err, &ae)
		require.Equal(t, d.Interface, ae.Interface)
	}
	require.Contains(t, ds[0].Message, `held back with the application's pool for net1 IPv4 (subnet "subnet-7")`)
	require.Contains(t, ds[1].Message, "3 wanted, 2 left")
}

func TestDecideAutoPoolsBadInput(t *testing.T) {
	v6 := subnet.MustParse(`{"name":"v6","subnet":"fd00::/64","ips":["fd00::10-fd00::20"]}`)
	gone := subnet.MustParse(`{"name":"gone","subnet":"10.9.0.0/16","ips":["10.9.0.10-10.9.0.20"],"terminating":true}`)
	subnets := []*subnet.Subnet{ssSubnet6(), ssSubnet7(), v6, gone}
	for _, tc := range []struct {
		name string
		app  subnet.Application
		want []string
		is   error
	}{
		{"unknown subnet and a subnet of the other family, at once",
			ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnets, `[{"interface":"eth0","ipv4":["nope"]},{"interface":"net1","ipv4":["v6"]}]`)),
			[]string{
				`pod template of Deployment default/web: annotation "ipam.spidernet.io/subnets"`,
				`[0].ipv4[0] "nope": no SpiderSubnet of that name`,
				`[1].ipv4[0] "v6": an IPv6 subnet, named for IPv4`,
			}, ipam.ErrInvalid},
		{"a subnet being deleted",
			ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["gone"]}`)),
			[]string{`ipv4[0] "gone": the subnet is being deleted`}, ipam.ErrNotFound},
		{"two interfaces on one subnet",
			ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnets, `[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-6"]}]`)),
			[]string{`[1].ipv4[0] "subnet-6": subnet used by two interfaces (also at [0])`}, ipam.ErrInvalid},
		{"a subnet too small",
			ssApp("Deployment", "web", ssUID, 20, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`)),
			[]string{`Deployment default/web eth0 IPv4: subnet "subnet-6": a pool of 21 addresses cannot fit: the subnet has 10 in all (totalIPCount); lower ipam.spidernet.io/ippool-ip-number "+1 (the default)"`},
			ipam.ErrInvalid},
		{"a malformed ippool-ip-number",
			ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+x")),
			[]string{`annotation "ipam.spidernet.io/ippool-ip-number" "+x": invalid input`}, ipam.ErrInvalid},
		{"an unnamed application",
			ssApp("Deployment", "web", "", 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`)),
			[]string{"application Deployment default/web: uid: required"}, ipam.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := ssDecide(t, []subnet.Application{tc.app}, subnets, nil, nil, nil)
			require.NotEmpty(t, ds)
			var msgs []string
			found := false
			for _, d := range ds {
				require.Equal(t, subnet.Fail, d.Action)
				require.Nil(t, d.Pool)
				found = found || errors.Is(d.Err, tc.is)
				msgs = append(msgs, d.Err.Error())
			}
			require.Truef(t, found, "no error wraps %v", tc.is)
			all := strings.Join(msgs, "\n")
			for _, w := range tc.want {
				require.Contains(t, all, w)
			}
		})
	}
}

func TestDecideAutoPoolsReclaim(t *testing.T) {
	s6 := ssSubnet6()
	mk := func(name, uid string, n int, reclaim string) *subnet.AutoPool {
		app := ssApp("Deployment", name, uid, n, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+0", subnet.AnnotationReclaim, reclaim))
		return ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, nil, nil, nil)).Pool
	}
	empty := mk("empty", "u-aaaa-aaaaa", 1, "true")
	used := mk("used", "u-bbbb-bbbbb", 1, "true")
	used.Pool.IPs = mustRanges("10.6.168.102")
	kept := mk("kept", "u-cccc-ccccc", 1, "false")
	kept.Pool.IPs = mustRanges("10.6.168.103")
	dying := mk("dying", "u-dddd-ddddd", 1, "true")
	dying.Pool.IPs = mustRanges("10.6.168.104")
	dying.Pool.Terminating = true
	claims := []store.Claim{
		{Pool: used.Name(), IP: netip.MustParseAddr("10.6.168.102"), Owner: store.Owner{UID: "p1"}},
		{Pool: dying.Name(), IP: netip.MustParseAddr("10.6.168.104"), Owner: store.Owner{UID: "p2"}},
	}
	// A new application takes the addresses the deleted pool gives back.
	newcomer := ssApp("Deployment", "new", "u-eeee-eeeee", 6, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+0"))
	ds := decideMap(t, []subnet.Application{newcomer}, []*subnet.Subnet{s6}, nil, []*subnet.AutoPool{empty, used, kept, dying}, claims)
	require.Equal(t, subnet.Delete, ds[empty.Name()].Action)
	require.Equal(t, []string{"10.6.168.101"}, formatRanges(ds[empty.Name()].Removed))
	require.Equal(t, subnet.Terminate, ds[used.Name()].Action)
	require.True(t, ds[used.Name()].Pool.Pool.Terminating)
	require.False(t, used.Pool.Terminating, "inputs are not changed")
	require.Equal(t, subnet.Keep, ds[kept.Name()].Action)
	require.Contains(t, ds[kept.Name()].Message, "ippool-reclaim is false")
	require.Equal(t, subnet.Wait, ds[dying.Name()].Action)
	require.ErrorIs(t, ds[dying.Name()].Err, ipam.ErrNotReady)
	d := ds["auto4-new-eth0-eeeee"]
	require.Equal(t, subnet.Create, d.Action)
	require.Equal(t, []string{"10.6.168.101", "10.6.168.105-10.6.168.109"}, ssIPs(d.Pool))
}

func TestDecideAutoPoolsChanges(t *testing.T) {
	s6, s7 := ssSubnet6(), ssSubnet7()
	base := ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	pool := ssOnly(t, ssDecide(t, []subnet.Application{base}, []*subnet.Subnet{s6, s7}, nil, nil, nil)).Pool
	subnets := []*subnet.Subnet{s6, s7}

	// Same size, reclaim changed: the labels are refreshed.
	app := base
	app.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationReclaim, "false")
	d := ssOnly(t, ssDecide(t, []subnet.Application{app}, subnets, nil, []*subnet.AutoPool{pool}, nil))
	require.Equal(t, subnet.Update, d.Action)
	require.Equal(t, "false", d.Pool.Labels()[subnet.LabelReclaim])

	// Nothing changed.
	require.Equal(t, subnet.Keep, ssOnly(t, ssDecide(t, []subnet.Application{base}, subnets, nil, []*subnet.AutoPool{pool}, nil)).Action)

	// The subnet changed: the pool stays, the change is refused.
	app = base
	app.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-7"]}`)
	d = ssOnly(t, ssDecide(t, []subnet.Application{app}, subnets, nil, []*subnet.AutoPool{pool}, nil))
	require.Equal(t, subnet.Fail, d.Action)
	require.ErrorIs(t, d.Err, ipam.ErrNotSupported)
	require.ErrorContains(t, d.Err, `the pod template now names subnet "subnet-7", but the application's pool "auto4-web-eth0-a5bd3" is from subnet "subnet-6"`)
	require.Equal(t, pool, d.Pool)

	// The annotation is gone: the pool is reclaimed.
	app = base
	app.Annotations = nil
	d = ssOnly(t, ssDecide(t, []subnet.Application{app}, subnets, nil, []*subnet.AutoPool{pool}, nil))
	require.Equal(t, subnet.Delete, d.Action)

	// A broken annotation keeps the pool: it is not reclaimed for a typo.
	app.Annotations = ssAnn(ipam.AnnotationSubnet, `{`)
	d = ssOnly(t, ssDecide(t, []subnet.Application{app}, subnets, nil, []*subnet.AutoPool{pool}, nil))
	require.Equal(t, subnet.Fail, d.Action)

	// Dual stack: one pool per family.
	v6 := subnet.MustParse(`{"name":"v6","subnet":"fd00::/64","ips":["fd00::10-fd00::20"]}`)
	app.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"],"ipv6":["v6"]}`)
	ds := ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6, v6}, nil, nil, nil)
	require.Len(t, ds, 2)
	require.Equal(t, "auto4-web-eth0-a5bd3", ds[0].PoolName())
	require.Equal(t, []string{"fd00::10-fd00::12"}, ssIPs(ds[1].Pool))

	// The same application twice.
	ds = ssDecide(t, []subnet.Application{base, base}, subnets, nil, nil, nil)
	require.Equal(t, subnet.Create, ds[0].Action)
	require.Equal(t, subnet.Fail, ds[1].Action)
	require.ErrorContains(t, ds[1].Err, "listed twice")

	// A pool of that name that is not the application's: the next name.
	squatter := ipam.MustParsePool(`{"name":"auto4-web-eth0-a5bd3","subnet":"10.6.0.0/16","ips":["10.6.168.110"]}`)
	d = ssOnly(t, ssDecide(t, []subnet.Application{base}, subnets, []*ipam.Pool{squatter}, nil, nil))
	require.Equal(t, subnet.Create, d.Action)
	require.Equal(t, "auto4-web-eth0-a5bd3cafe001", d.PoolName())
	require.Contains(t, d.Message, `named "auto4-web-eth0-a5bd3cafe001" because "auto4-web-eth0-a5bd3" is another pool's`)
	// Every name taken: it waits, naming them.
	names, err := subnet.AutoPoolNames(4, base.AppRef, "eth0")
	require.NoError(t, err)
	require.Len(t, names, 3)
	var squatters []*ipam.Pool
	for i, n := range names {
		squatters = append(squatters, ipam.MustParsePool(fmt.Sprintf(`{"name":%q,"subnet":"10.6.0.0/16","ips":["10.6.168.%d"]}`, n, 108+i)))
	}
	d = ssOnly(t, ssDecide(t, []subnet.Application{base}, subnets, squatters, nil, nil))
	require.Equal(t, subnet.Wait, d.Action)
	require.ErrorIs(t, d.Err, ipam.ErrNotReady)
	require.ErrorContains(t, d.Err, `every name this pool may have is taken: "auto4-web-eth0-a5bd3" is another pool's, "auto4-web-eth0-a5bd3cafe001" is another pool's, "`+names[2]+`" is another pool's`)
}

func TestDecideAutoPoolsReserved(t *testing.T) {
	snap, err := subnet.NewSnapshot([]*subnet.Subnet{ssSubnet6()}, nil, nil,
		[]*ipam.ReservedIP{{Name: "r", IPs: mustRanges("10.6.168.101-10.6.168.102")}, {Name: "t", IPs: mustRanges("10.6.168.103"), Terminating: true}}, nil)
	require.NoError(t, err)
	app := ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	d := ssOnly(t, subnet.Decide([]subnet.Application{app}, snap, subnet.Options{DefaultIPNumber: "+2"}))
	require.Equal(t, []string{"10.6.168.103-10.6.168.106"}, ssIPs(d.Pool), "reserved addresses skipped; a terminating reservation reserves nothing")
}

func TestNewAutoPoolSnapshotErrors(t *testing.T) {
	app := ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	pool := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil)).Pool
	orphan := *pool
	orphan.Subnet = "nope"
	orphan.Interface = ""
	_, err := subnet.NewSnapshot([]*subnet.Subnet{ssSubnet6()}, []*ipam.Pool{ipam.MustParsePool(`{"name":"clash","subnet":"10.6.0.0/16","ips":["10.6.168.101"]}`)},
		[]*subnet.AutoPool{&orphan, nil}, []*ipam.ReservedIP{nil}, nil)
	for _, want := range []string{
		`ips "10.6.168.101-10.6.168.101": overlaps the addresses of pool "clash"`,
		`metadata.labels.ipam.spidernet.io/owner-spider-subnet "nope": no such subnet`,
		`metadata.labels.ipam.spidernet.io/interface: required`,
		`autoPools[1]: nil auto-pool`,
		`reserved[0]: nil reservedIP`,
	} {
		require.ErrorContains(t, err, want)
	}
}

func TestApplicationValidateLabels(t *testing.T) {
	app := subnet.Application{AppRef: ipam.AppRef{APIVersion: "apps/v1", Kind: " ", Namespace: "default", Name: "-web", UID: "u"}}
	err := app.Validate()
	require.ErrorContains(t, err, `kind " ": cannot be written in a label`)
	require.ErrorContains(t, err, `name "-web": cannot be written in a label`)
	app = subnet.Application{AppRef: ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: strings.Repeat("n", 200), UID: strings.Repeat("u", 64)}}
	err = app.Validate()
	require.ErrorContains(t, err, `uid "uuuu`)
	require.NotContains(t, err.Error(), "name")
}

func TestDecideApplication(t *testing.T) {
	s6, s7 := ssSubnet6(), ssSubnet7()
	two := ssApp("Deployment", "two", "u-two-22222", 1, ssAnn(ipam.AnnotationSubnets,
		`[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-7"]}]`))
	other := ssApp("Deployment", "other", "u-oth-33333", 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	var pools []*subnet.AutoPool
	for _, d := range ssDecide(t, []subnet.Application{two, other}, []*subnet.Subnet{s6, s7}, nil, nil, nil) {
		pools = append(pools, d.Pool)
	}
	require.Len(t, pools, 3)
	snap, err := subnet.NewSnapshot([]*subnet.Subnet{s6, s7}, nil, pools, nil, nil)
	require.NoError(t, err)
	// two drops net1 and grows: net1's pool is reclaimed, and eth0's pool
	// keeps its addresses and takes the next free ones (other has .103-.104).
	two.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`)
	two.Replicas = intp(3)
	ds := subnet.DecideApplication(&two, snap, subnet.Options{})
	require.Len(t, ds, 2, "other's pool is not judged")
	require.Equal(t, subnet.Grow, ds[0].Action)
	require.Equal(t, []string{"10.6.168.101-10.6.168.102", "10.6.168.105-10.6.168.106"}, ssIPs(ds[0].Pool))
	require.Equal(t, subnet.Delete, ds[1].Action)
	require.Equal(t, "auto4-two-net1-22222", ds[1].PoolName())
	require.Nil(t, subnet.DecideApplication(nil, snap, subnet.Options{}))

	d := subnet.DecideReclaim(pools[2], snap)
	require.Equal(t, subnet.Delete, d.Action)
	require.Equal(t, subnet.Decision{}, subnet.DecideReclaim(nil, snap))
}

func TestIsAutoPool(t *testing.T) {
	app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
	require.True(t, ipam.IsAutoPool(d.Pool.Pool), "a pool Decide makes")
	require.False(t, ipam.IsAutoPool(nil))
	require.False(t, ipam.IsAutoPool(autoTestPool("p", "")))
	require.False(t, ipam.IsAutoPool(autoTestPool("p", `"podAffinity":{"matchLabels":{"app":"web"}}`)))
	// Four of the five keys: a label selector like any other.
	require.False(t, ipam.IsAutoPool(autoTestPool("p", `"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-api-version":"v1",`+
		`"ipam.spidernet.io/app-kind":"Deployment","ipam.spidernet.io/app-namespace":"ns1","ipam.spidernet.io/app-name":"web"}}`)))
	// The five keys, with an empty group (the core group): auto-created.
	require.True(t, ipam.IsAutoPool(autoTestPool("p", `"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-api-group":"","ipam.spidernet.io/app-api-version":"v1",`+
		`"ipam.spidernet.io/app-kind":"Thing","ipam.spidernet.io/app-namespace":"ns1","ipam.spidernet.io/app-name":"web"}}`)))
}

// requireOneNameEach fails if two decisions of ds create pools of one name.
func requireOneNameEach(t *testing.T, ds []subnet.Decision) {
	t.Helper()
	seen := map[string]string{}
	for _, d := range ds {
		if d.Action != subnet.Create {
			continue
		}
		require.NotContainsf(t, seen, d.PoolName(), "two creates of %q: %s and %s", d.PoolName(), seen[d.PoolName()], d.String())
		seen[d.PoolName()] = d.String()
	}
}

// TestDecideAutoPoolsInterfaceCase pins issue 26 case 3: interfaces that
// differ only in case ("net1", "NET1") would get one lower-cased pool name;
// the application fails, naming both, and nothing is created.
func TestDecideAutoPoolsInterfaceCase(t *testing.T) {
	app := ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnets,
		`[{"interface":"net1","ipv4":["subnet-6"]},{"interface":"NET1","ipv4":["subnet-7"]}]`))
	ds := ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil, nil, nil)
	requireOneNameEach(t, ds)
	d := ssOnly(t, ds)
	require.Equal(t, subnet.Fail, d.Action)
	require.Nil(t, d.Pool)
	require.ErrorIs(t, d.Err, ipam.ErrInvalid)
	require.ErrorContains(t, d.Err, `[0].interface "net1" and [1].interface "NET1" differ only in case`)
	// One application at a time too.
	snap, err := subnet.NewSnapshot([]*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil, nil, nil, nil)
	require.NoError(t, err)
	d = ssOnly(t, subnet.DecideApplication(&app, snap, subnet.Options{}))
	require.Equal(t, subnet.Fail, d.Action)
}

// TestDecideAutoPoolsUIDCollision pins issue 26 case 6: two applications
// of one name whose UIDs share the five characters Spiderpool keeps get
// two pools: the first Spiderpool's name, the second a longer one.
func TestDecideAutoPoolsUIDCollision(t *testing.T) {
	ann := ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "2")
	a := ssApp("Deployment", "web", "11111111-1111-4111-8111-abcde0000001", 1, ann)
	a.Namespace = "team-a"
	b := ssApp("Deployment", "web", "22222222-2222-4222-8222-abcde0000002", 1, ann)
	b.Namespace = "team-b"
	subnets := []*subnet.Subnet{ssSubnet6()}
	ds := ssDecide(t, []subnet.Application{a, b}, subnets, nil, nil, nil)
	requireOneNameEach(t, ds)
	require.Len(t, ds, 2)
	require.Equal(t, subnet.Create, ds[0].Action)
	require.Equal(t, "auto4-web-eth0-abcde", ds[0].PoolName())
	require.Equal(t, subnet.Create, ds[1].Action)
	require.Equal(t, "auto4-web-eth0-abcde0000002", ds[1].PoolName())
	require.Contains(t, ds[1].Message, `"auto4-web-eth0-abcde" is planned for Deployment team-a/web eth0 IPv4`)
	require.Equal(t, []string{"10.6.168.103-10.6.168.104"}, ssIPs(ds[1].Pool))

	// The first pool exists: the second application gets the longer name
	// from DecideApplication too, and the first keeps its pool.
	snap, err := subnet.NewSnapshot(subnets, nil, []*subnet.AutoPool{ds[0].Pool}, nil, nil)
	require.NoError(t, err)
	d := ssOnly(t, subnet.DecideApplication(&b, snap, subnet.Options{}))
	require.Equal(t, subnet.Create, d.Action)
	require.Equal(t, "auto4-web-eth0-abcde0000002", d.PoolName())
	ds = subnet.Decide([]subnet.Application{b, a}, snap, subnet.Options{})
	requireOneNameEach(t, ds)
	require.Equal(t, subnet.Create, ds[0].Action)
	require.Equal(t, "auto4-web-eth0-abcde0000002", ds[0].PoolName())
	require.Equal(t, subnet.Keep, ds[1].Action)
	require.Equal(t, "auto4-web-eth0-abcde", ds[1].PoolName())

	// UIDs that share their whole last block differ by the hash.
	c := ssApp("Deployment", "web", "33333333-abcde0000002", 1, ann)
	c.Namespace = "team-c"
	ds = ssDecide(t, []subnet.Application{a, b, c}, subnets, nil, nil, nil)
	requireOneNameEach(t, ds)
	require.Equal(t, subnet.Create, ds[2].Action)
	names, err := subnet.AutoPoolNames(4, c.AppRef, "eth0")
	require.NoError(t, err)
	require.Equal(t, names[2], ds[2].PoolName())
}

// TestDecideAutoPoolsHugePool pins issue 26 case 5: a pool of more than
// 2^26 addresses that has exactly its size is kept, not grown on every
// decision, and one a few addresses too big shrinks.
func TestDecideAutoPoolsHugePool(t *testing.T) {
	v6 := subnet.MustParse(`{"name":"v6","subnet":"fd00::/64","ips":["fd00::1-fd00::ffff:ffff"]}`)
	const pods = 100_000_000 // > 2^26
	app := ssApp("Deployment", "big", ssUID, pods, ssAnn(ipam.AnnotationSubnet, `{"ipv6":["v6"]}`, subnet.AnnotationIPNumber, "+0"))
	d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{v6}, nil, nil, nil))
	require.Equal(t, subnet.Create, d.Action)
	require.Equal(t, pods, d.Pool.Size())
	pool := d.Pool

	d = ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{v6}, nil, []*subnet.AutoPool{pool}, nil))
	require.Equal(t, subnet.Keep, d.Action, d.String())
	require.Empty(t, d.Added)

	// Five addresses too many: a shrink by five.
	q := *pool.Pool
	last := pool.Pool.IPs[len(pool.Pool.IPs)-1].To()
	to := last
	for range 5 {
		to = to.Next()
	}
	q.IPs = append(slices.Clone(pool.Pool.IPs), netipx.IPRangeFrom(last.Next(), to))
	bigger := *pool
	bigger.Pool = &q
	require.Equal(t, pods+5, bigger.Size())
	d = ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{v6}, nil, []*subnet.AutoPool{&bigger}, nil))
	require.Equal(t, subnet.Shrink, d.Action, d.String())
	require.Equal(t, []string{"fd00::1-fd00::5"}, formatRanges(d.Removed))
	require.Equal(t, pods, d.Pool.Size())
}

// autoTestPool builds a valid IPv4 pool named name; fields is a JSON fragment
// of further spec fields.
func autoTestPool(name, fields string) *ipam.Pool {
	doc := `{"name":"` + name + `","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.20"]`
	if fields != "" {
		doc += "," + fields
	}
	return ipam.MustParsePool(doc + "}")
}
