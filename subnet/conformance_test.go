package subnet_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/subnet"
)

// This file runs every scenario of
// ../testdata/conformance/spidersubnet-scenarios.md (Spiderpool's SpiderSubnet
// auto-pools): the pure decisions (Decide, StatusOf,
// AutoPoolName, ParseConfig, ValidateAutoPoolUpdate) and, for
// scenarios about pods and lifecycles, a Manager serving an Allocator.
// Where a row is a Spiderpool bug the scenario file lists, the test encodes
// the intended outcome; the README lists each such difference.

// ssUID is the UID of the scenarios' application: its last block starts with
// a5bd3.
const ssUID = "0b7c6f1e-3f00-4d5e-9c1a-a5bd3cafe001"

func ssSubnet6() *subnet.Subnet {
	return subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","gateway":"10.6.0.1",
		"ips":["10.6.168.101-10.6.168.110"],"routes":[{"dst":"10.7.0.0/16","gw":"10.6.0.1"}]}`)
}

func ssSubnet7() *subnet.Subnet {
	return subnet.MustParse(`{"name":"subnet-7","subnet":"10.7.0.0/16","gateway":"10.7.0.1",
		"ips":["10.7.168.101-10.7.168.110"],"routes":[{"dst":"10.8.0.0/16","gw":"10.7.0.1"}]}`)
}

func intp(n int) *int { return &n }

// ssApp is an application of the given kind ("Deployment", "StatefulSet",
// "DaemonSet", "Job", "CronJob", "ReplicaSet", or "group/version/Kind"
// for a third-party controller) in namespace default.
func ssApp(kind, name, uid string, replicas int, ann map[string]string) subnet.Application {
	ref := ipam.AppRef{APIVersion: "apps/v1", Kind: kind, Namespace: "default", Name: name, UID: uid}
	switch kind {
	case "Job", "CronJob":
		ref.APIVersion = "batch/v1"
	}
	if i := strings.LastIndexByte(kind, '/'); i >= 0 {
		ref.APIVersion, ref.Kind = kind[:i], kind[i+1:]
	}
	app := subnet.Application{AppRef: ref, Annotations: ann}
	switch ref.Kind {
	case "DaemonSet":
		app.DesiredNumberScheduled = replicas
	case "Job", "CronJob":
		app.Completions = intp(replicas)
	default:
		if replicas >= 0 {
			app.Replicas = intp(replicas)
		}
	}
	return app
}

func ssAnn(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// ssDecide runs Decide on the base setup plus what is given.
func ssDecide(t *testing.T, apps []subnet.Application, subnets []*subnet.Subnet, pools []*ipam.Pool, auto []*subnet.AutoPool, claims []store.Claim) []subnet.Decision {
	t.Helper()
	snap, err := subnet.NewSnapshot(subnets, pools, auto, nil, claims)
	require.NoError(t, err)
	return subnet.Decide(apps, snap, subnet.Options{})
}

func ssIPs(a *subnet.AutoPool) []string {
	b, err := json.Marshal(a.Pool)
	if err != nil {
		panic(err)
	}
	var spec struct {
		IPs []string `json:"ips"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		panic(err)
	}
	return spec.IPs
}

// ssOnly returns the one decision of ds, failing otherwise.
func ssOnly(t *testing.T, ds []subnet.Decision) subnet.Decision {
	t.Helper()
	require.Lenf(t, ds, 1, "decisions: %v", ds)
	return ds[0]
}

// ssCluster is a Manager serving an Allocator, with helpers to run
// applications and pods.
type ssCluster struct {
	t     *testing.T
	ctx   context.Context
	m     *subnet.Manager
	alloc *ipam.Allocator
	st    store.Store
	apps  map[string]subnet.Application // by name
}

func newSSCluster(t *testing.T, subnets []*subnet.Subnet, pools []*ipam.Pool) *ssCluster {
	t.Helper()
	st := memstore.New()
	m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: subnets, Pools: pools, Claims: st})
	require.NoError(t, err)
	a, err := ipam.NewAllocator(ipam.Options{Pools: m, Store: st})
	require.NoError(t, err)
	return &ssCluster{t: t, ctx: t.Context(), m: m, alloc: a, st: st, apps: map[string]subnet.Application{}}
}

func (c *ssCluster) set(app subnet.Application) ([]subnet.Decision, error) {
	c.t.Helper()
	c.apps[app.Name+"/"+app.Kind] = app
	return c.m.SetApplication(c.ctx, app)
}

func (c *ssCluster) mustSet(app subnet.Application) []subnet.Decision {
	c.t.Helper()
	ds, err := c.set(app)
	require.NoError(c.t, err)
	return ds
}

// start allocates the interfaces of pod name of app.
func (c *ssCluster) start(app subnet.Application, name string, stable bool, ifaces ...string) (ipam.Result, error) {
	c.t.Helper()
	if len(ifaces) == 0 {
		ifaces = []string{"eth0"}
	}
	uid := "uid-" + name
	req := ipam.Request{Namespace: "default", Name: name, UID: uid, Stable: stable, Annotations: app.Annotations, App: app.AppRef}
	for _, i := range ifaces {
		req.Interfaces = append(req.Interfaces, ipam.NIC{Name: i})
	}
	return c.alloc.Allocate(c.ctx, req)
}

func (c *ssCluster) mustStart(app subnet.Application, name string) netip.Addr {
	c.t.Helper()
	res, err := c.start(app, name, false)
	require.NoError(c.t, err)
	return res.IPs[0].Address.Addr()
}

// stop releases pod name's addresses and forgets it.
func (c *ssCluster) stop(name string) []subnet.Decision {
	c.t.Helper()
	require.NoError(c.t, c.alloc.Release(c.ctx, store.Owner{UID: "uid-" + name}))
	ds, err := c.m.DeletePod(c.ctx, "uid-"+name)
	require.NoError(c.t, err)
	return ds
}

func (c *ssCluster) pool(name string) *subnet.AutoPool {
	for _, a := range c.m.AutoPools() {
		if a.Name() == name {
			return a
		}
	}
	return nil
}

func (c *ssCluster) status(name string) subnet.Status {
	for _, s := range c.m.Status() {
		if s.Name == name {
			return s
		}
	}
	c.t.Fatalf("no subnet %q", name)
	return subnet.Status{}
}

func ssStatusJSON(t *testing.T, st subnet.Status) string {
	t.Helper()
	b, err := json.Marshal(st.ControlledIPPools)
	require.NoError(t, err)
	return string(b)
}

var ssCases = map[string]func(t *testing.T){
	"SS-01": func(t *testing.T) {
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
		s6 := ssSubnet6()
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, nil, nil, nil))
		require.Equal(t, subnet.Create, d.Action)
		require.Equal(t, "auto4-test-app-1-eth0-a5bd3", d.PoolName())
		b, err := json.Marshal(d.Pool.Pool)
		require.NoError(t, err)
		require.JSONEq(t, `{"name":"auto4-test-app-1-eth0-a5bd3","ipVersion":4,"subnet":"10.6.0.0/16",
			"ips":["10.6.168.101-10.6.168.103"],"gateway":"10.6.0.1","routes":[{"dst":"10.7.0.0/16","gw":"10.6.0.1"}],
			"podAffinity":{"matchLabels":{"ipam.spidernet.io/app-api-group":"apps","ipam.spidernet.io/app-api-version":"v1",
			"ipam.spidernet.io/app-kind":"Deployment","ipam.spidernet.io/app-namespace":"default","ipam.spidernet.io/app-name":"test-app-1"}}}`, string(b))
		require.Equal(t, map[string]string{subnet.AnnotationIPNumber: "+1"}, d.Pool.Annotations())
		st := subnet.StatusOf(s6, nil, []*subnet.AutoPool{d.Pool})
		require.Equal(t, int64(10), st.TotalIPCount)
		require.Equal(t, int64(3), st.AllocatedIPCount)
		require.JSONEq(t, `{"auto4-test-app-1-eth0-a5bd3":{"ips":["10.6.168.101-10.6.168.103"],"application":"apps_v1_Deployment_default_test-app-1"}}`,
			ssStatusJSON(t, st))
	},
	"SS-02": func(t *testing.T) {
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, map[string]string{
			"ipam.spidernet.io/owner-spider-subnet":         "subnet-6",
			"ipam.spidernet.io/owner-application-gv":        "apps_v1",
			"ipam.spidernet.io/owner-application-kind":      "Deployment",
			"ipam.spidernet.io/owner-application-namespace": "default",
			"ipam.spidernet.io/owner-application-name":      "test-app-1",
			"ipam.spidernet.io/owner-application-uid":       ssUID,
			"ipam.spidernet.io/interface":                   "eth0",
			"ipam.spidernet.io/ip-version":                  "IPv4",
			"ipam.spidernet.io/ippool-reclaim":              "true",
			"ipam.spidernet.io/ippool-cidr":                 "10-6-0-0-16",
		}, d.Pool.Labels())
		require.Equal(t, "subnet-6", d.Pool.Subnet, "the controller owner reference names the SpiderSubnet")
		require.Equal(t, "spiderpool.spidernet.io", subnet.Finalizer)
		// The labels read back give the same auto-pool.
		back, isAuto, err := subnet.ParseAutoPool(d.Pool.Pool, d.Pool.Labels(), d.Pool.Annotations())
		require.NoError(t, err)
		require.True(t, isAuto)
		require.Equal(t, d.Pool, back)
	},
	"SS-03": func(t *testing.T) {
		// Deliberate difference: Spiderpool cuts the name to 237 characters
		// and writes 254, which the API server refuses; the library cuts to
		// 236 and writes 253.
		long := strings.Repeat("a", 250)
		s6 := subnet.MustParse(`{"name":"subnet-v6","subnet":"fd00:6::/64","ips":["fd00:6::101-fd00:6::110"]}`)
		app := ssApp("Deployment", long, ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv6":["subnet-v6"]}`))
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, nil, nil, nil))
		require.Equal(t, subnet.Create, d.Action, d.Message)
		require.Equal(t, "auto6-"+strings.Repeat("a", 236)+"-eth0-a5bd3", d.PoolName())
		require.Len(t, d.PoolName(), 253)
		spiderpoolLen := len("auto6-") + (253 - 5 - 7 - len("eth0")) + len("-eth0-a5bd3")
		require.Equal(t, 254, spiderpoolLen, "the scenario's arithmetic")
		// The pool, its labels and its podAffinity are valid objects.
		require.NoError(t, d.Pool.Pool.Validate())
		for k, v := range d.Pool.Labels() {
			require.LessOrEqualf(t, len(v), 63, "label %s", k)
		}
	},
	"SS-04": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
		c.mustSet(app)
		ip0, ip1 := c.mustStart(app, "test-app-1-a"), c.mustStart(app, "test-app-1-b")
		app.Replicas = intp(3)
		d := ssOnly(t, c.mustSet(app))
		require.Equal(t, subnet.Grow, d.Action)
		require.Equal(t, []string{"10.6.168.101-10.6.168.104"}, ssIPs(c.pool("auto4-test-app-1-eth0-a5bd3")))
		require.Equal(t, int64(4), c.status("subnet-6").AllocatedIPCount)
		// Existing pods keep their addresses.
		for name, ip := range map[string]netip.Addr{"test-app-1-a": ip0, "test-app-1-b": ip1} {
			res, err := c.start(app, name, false)
			require.NoError(t, err)
			require.Equal(t, ip, res.IPs[0].Address.Addr())
			require.True(t, res.IPs[0].Reused)
		}
		require.Equal(t, netip.MustParseAddr("10.6.168.103"), c.mustStart(app, "test-app-1-c"))
	},
	"SS-07": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "2"))
		c.mustSet(app)
		app.Replicas = intp(5)
		d := ssOnly(t, c.mustSet(app))
		require.Equal(t, subnet.Keep, d.Action)
		require.Equal(t, []string{"10.6.168.101-10.6.168.102"}, ssIPs(c.pool("auto4-test-app-1-eth0-a5bd3")))
		c.mustStart(app, "p0")
		c.mustStart(app, "p1")
		for _, p := range []string{"p2", "p3", "p4"} {
			_, err := c.start(app, p, false)
			require.ErrorIs(t, err, ipam.ErrNoCandidates, "the fixed-size pool is used up (Spiderpool: all IP addresses used out)")
			require.Contains(t, err.Error(), "exhausted")
		}
	},
	"SS-08": func(t *testing.T) {
		// Deliberate difference: Spiderpool's agent expects replicas + 0,
		// waits 25 x 2 s for a pool of that size, then uses the pool anyway;
		// here the pool is replicas + the default, ready when
		// SetApplication returns, and the pod is served at once.
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
		d := ssOnly(t, c.mustSet(app))
		require.Equal(t, subnet.Create, d.Action)
		require.Equal(t, 3, d.Desired)
		require.Contains(t, d.Message, "(the default)")
		require.Equal(t, []string{"10.6.168.101-10.6.168.103"}, ssIPs(d.Pool))
		require.Equal(t, netip.MustParseAddr("10.6.168.101"), c.mustStart(app, "p0"))
		// The size annotation is written on the pool as the default it used.
		require.Equal(t, "+1", d.Pool.Annotations()[subnet.AnnotationIPNumber])
	},
	"SS-09": func(t *testing.T) {
		for _, tc := range []struct {
			in      string
			want    subnet.IPNumber
			errHave string
		}{
			{"++1", subnet.IPNumber{}, "invalid input"},
			{"abc", subnet.IPNumber{}, "invalid input"},
			{"-1", subnet.IPNumber{}, "must be 0 or greater"},
			{"+0", subnet.IPNumber{N: 0, Relative: true}, ""},
			{"+2", subnet.IPNumber{N: 2, Relative: true}, ""},
			{"7", subnet.IPNumber{N: 7}, ""},
			{"", subnet.IPNumber{}, "invalid input"},
			{"+", subnet.IPNumber{}, "invalid input"},
			{"1.5", subnet.IPNumber{}, "invalid input"},
			{"99999999999999999999", subnet.IPNumber{}, "at most"},
		} {
			n, err := subnet.ParseIPNumber(tc.in)
			if tc.errHave == "" {
				require.NoError(t, err, tc.in)
				require.Equal(t, tc.want, n, tc.in)
				continue
			}
			require.ErrorIs(t, err, ipam.ErrInvalid, tc.in)
			require.ErrorContains(t, err, tc.errHave, tc.in)
			require.ErrorContains(t, err, subnet.AnnotationIPNumber, tc.in)
			require.ErrorContains(t, err, `"`+tc.in+`"`, "the message quotes the value")
			// Through the decisions: the application fails, nothing is created.
			app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, tc.in))
			d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
			require.Equal(t, subnet.Fail, d.Action)
			require.Nil(t, d.Pool)
			require.ErrorContains(t, d.Err, "pod template of Deployment default/test-app-1")
			require.ErrorContains(t, d.Err, subnet.AnnotationIPNumber)
		}
		// "+0" is replicas exactly.
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+0"))
		require.Equal(t, 2, ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil)).Desired)
	},
	"SS-10": func(t *testing.T) {
		cfg, ok, err := subnet.ParseConfig(ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6","subnet-x"]}`))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, []ipam.NICSubnets{{Interface: "eth0", IPv4: []string{"subnet-6"}}}, cfg.Subnets)
		// subnet-x is not even looked up.
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6","subnet-x"]}`))
		require.Equal(t, subnet.Create, ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil)).Action)
		for in, want := range map[string]string{`{"ipv4":[""]}`: "ipv4[0]: empty subnet name", `{}`: "ipv4 and ipv6 are both empty"} {
			_, _, err := subnet.ParseConfig(ssAnn(ipam.AnnotationSubnet, in))
			require.ErrorIs(t, err, ipam.ErrInvalid, in)
			require.ErrorContains(t, err, want, in)
			require.ErrorContains(t, err, ipam.AnnotationSubnet, in)
		}
	},
	"SS-11": func(t *testing.T) {
		app := ssApp("Deployment", "test-app-2", "1111-2222-b0b01cafe", 2, ssAnn(ipam.AnnotationSubnets,
			`[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-7"]}]`))
		ds := ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil, nil, nil)
		require.Len(t, ds, 2)
		want := map[string]struct{ ips, gw, route string }{
			"auto4-test-app-2-eth0-b0b01": {"10.6.168.101-10.6.168.103", "10.6.0.1", "10.7.0.0/16"},
			"auto4-test-app-2-net1-b0b01": {"10.7.168.101-10.7.168.103", "10.7.0.1", "10.8.0.0/16"},
		}
		for _, d := range ds {
			w, ok := want[d.PoolName()]
			require.Truef(t, ok, "unexpected pool %s", d.PoolName())
			require.Equal(t, subnet.Create, d.Action)
			require.Equal(t, []string{w.ips}, ssIPs(d.Pool))
			require.Equal(t, w.gw, d.Pool.Pool.Gateway.String())
			require.Equal(t, w.route, d.Pool.Pool.Routes[0].Dst.String())
		}
		// Through a Manager, one request serves both interfaces.
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil)
		c.mustSet(app)
		res, err := c.start(app, "test-app-2-x", false, "eth0", "net1")
		require.NoError(t, err)
		require.Len(t, res.IPs, 2)
		require.Equal(t, "10.6.168.101/16", res.IPs[0].Address.String())
		require.Equal(t, "10.7.168.101/16", res.IPs[1].Address.String())
		for _, e := range res.Trace {
			require.Equal(t, ipam.SourceSubnets, e.Source, "the trace names the subnets annotation")
		}
	},
	"SS-12": func(t *testing.T) {
		for in, want := range map[string]string{
			`[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-6"]}]`: `[1].ipv4[0] "subnet-6": subnet used by two interfaces (also at [0])`,
			`[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"eth0","ipv4":["subnet-7"]}]`: `[1].interface "eth0": duplicate interface (also at [0])`,
		} {
			app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnets, in))
			d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil, nil, nil))
			require.Equal(t, subnet.Fail, d.Action)
			require.ErrorIs(t, d.Err, ipam.ErrInvalid)
			require.ErrorContains(t, d.Err, want)
			require.ErrorContains(t, d.Err, ipam.AnnotationSubnets)
		}
	},
	"SS-15": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		a := ssApp("Deployment", "app-a", "aaaa-aaaaa1", 5, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "5"))
		b := ssApp("Deployment", "app-b", "bbbb-bbbbb1", 6, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "6"))
		c.mustSet(a)
		require.Equal(t, []string{"10.6.168.101-10.6.168.105"}, ssIPs(c.pool("auto4-app-a-eth0-aaaaa")))
		ds, err := c.set(b)
		require.ErrorIs(t, err, ipam.ErrNotReady)
		d := ssOnly(t, ds)
		require.Equal(t, subnet.Wait, d.Action)
		require.Contains(t, d.Message, "insufficient subnet FreeIPs, required '6' but only left '5'")
		require.Nil(t, c.pool("auto4-app-b-eth0-bbbbb"), "not created")
		// A pod of B fails at once, with a retryable error saying why.
		_, err = c.start(b, "app-b-0", false)
		require.ErrorIs(t, err, ipam.ErrNotReady)
		require.ErrorContains(t, err, "pod default/app-b-0 of Deployment default/app-b eth0 IPv4")
		require.ErrorContains(t, err, "insufficient free addresses: 6 wanted, 5 left")
		// A shrinks, giving back its lowest free address as Spiderpool does:
		// B gets its pool in the same call.
		a.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "4")
		ds = c.mustSet(a)
		require.Len(t, ds, 2)
		require.Equal(t, subnet.Shrink, ds[0].Action)
		require.Equal(t, subnet.Create, ds[1].Action)
		require.Equal(t, []string{"10.6.168.102-10.6.168.105"}, ssIPs(c.pool("auto4-app-a-eth0-aaaaa")))
		require.Equal(t, []string{"10.6.168.101", "10.6.168.106-10.6.168.110"}, ssIPs(c.pool("auto4-app-b-eth0-bbbbb")))
		require.Equal(t, netip.MustParseAddr("10.6.168.101"), c.mustStart(b, "app-b-0"))
	},
	"SS-16": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
		c.mustSet(app)
		c.mustStart(app, "p0")
		c.mustStart(app, "p1")
		ds, err := c.m.DeleteApplication(c.ctx, app.AppRef)
		require.NoError(t, err)
		d := ssOnly(t, ds)
		require.Equal(t, subnet.Terminate, d.Action)
		require.True(t, c.pool("auto4-test-app-1-eth0-a5bd3").Pool.Terminating)
		p, ok := c.m.Pool("auto4-test-app-1-eth0-a5bd3")
		require.True(t, ok)
		require.True(t, p.Terminating, "served as terminating: no new allocation")
		d = ssOnly(t, c.stop("p0"))
		require.Equal(t, subnet.Wait, d.Action, "one pod still holds an address")
		d = ssOnly(t, c.stop("p1"))
		require.Equal(t, subnet.Delete, d.Action)
		require.Nil(t, c.pool("auto4-test-app-1-eth0-a5bd3"))
		_, ok = c.m.Pool("auto4-test-app-1-eth0-a5bd3")
		require.False(t, ok)
		st := c.status("subnet-6")
		require.Equal(t, int64(0), st.AllocatedIPCount)
		require.Empty(t, st.ControlledIPPools)
		// No claim is left behind, the manager's included.
		cs, err := c.st.List(c.ctx, "auto4-test-app-1-eth0-a5bd3")
		require.NoError(t, err)
		require.Empty(t, cs)
	},
	"SS-18": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		// SS-17 (the setup): a Deployment with reclaim false, 3 replicas and
		// "+1", deleted: its pool and 4 addresses stay.
		dep := ssApp("Deployment", "test-app-1", ssUID, 3, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`,
			subnet.AnnotationIPNumber, "+1", subnet.AnnotationReclaim, "false"))
		c.mustSet(dep)
		ds, err := c.m.DeleteApplication(c.ctx, dep.AppRef)
		require.NoError(t, err)
		require.Equal(t, subnet.Keep, ssOnly(t, ds).Action)
		kept := c.pool("auto4-test-app-1-eth0-a5bd3")
		require.NotNil(t, kept)
		// A StatefulSet of the same name gets a pool of its own.
		sts := ssApp("StatefulSet", "test-app-1", "5555-5555-57575beef", 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
		d := ssOnly(t, c.mustSet(sts))
		require.Equal(t, subnet.Create, d.Action)
		require.Equal(t, "auto4-test-app-1-eth0-57575", d.PoolName())
		require.Equal(t, []string{"10.6.168.105-10.6.168.107"}, ssIPs(d.Pool))
		require.Equal(t, kept, c.pool("auto4-test-app-1-eth0-a5bd3"), "the kept pool is untouched")
		require.Len(t, c.status("subnet-6").ControlledIPPools, 2)
		// The docs' reuse: a Deployment of that name again, 2 replicas and
		// "+1", takes the kept pool over and shrinks it from 4 to 3.
		dep2 := ssApp("Deployment", "test-app-1", "6666-6666-66666f00d", 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`,
			subnet.AnnotationIPNumber, "+1", subnet.AnnotationReclaim, "false"))
		d = ssOnly(t, c.mustSet(dep2))
		require.Equal(t, subnet.Shrink, d.Action)
		require.Contains(t, d.Message, "reuses the pool kept from Deployment default/test-app-1")
		reused := c.pool("auto4-test-app-1-eth0-a5bd3")
		require.Equal(t, []string{"10.6.168.102-10.6.168.104"}, ssIPs(reused), "the lowest free address is given back")
		require.Equal(t, dep2.UID, reused.Labels()[subnet.LabelOwnerAppUID])
		require.Equal(t, netip.MustParseAddr("10.6.168.102"), c.mustStart(dep2, "p0"))
	},
	"SS-19": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		dep := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationReclaim, "false"))
		c.mustSet(dep)
		_, err := c.m.DeleteApplication(c.ctx, dep.AppRef)
		require.NoError(t, err)
		again := ssApp("Deployment", "test-app-1", "7777-77777abcd", 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationReclaim, "true"))
		d := ssOnly(t, c.mustSet(again))
		require.Equal(t, subnet.Update, d.Action, "the kept pool is reused; its labels change")
		require.Equal(t, "true", c.pool("auto4-test-app-1-eth0-a5bd3").Labels()[subnet.LabelReclaim])
		ds, err := c.m.DeleteApplication(c.ctx, again.AppRef)
		require.NoError(t, err)
		require.Equal(t, subnet.Delete, ssOnly(t, ds).Action)
		require.Empty(t, c.m.AutoPools())
	},
	"SS-20": func(t *testing.T) {
		for _, tc := range []struct {
			number string
			size   int
		}{{"+1", 4}, {"+0", 3}} {
			c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
			sts := ssApp("StatefulSet", "sts", ssUID, 3, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, tc.number))
			require.Equal(t, tc.size, ssOnly(t, c.mustSet(sts)).Desired)
			ips := map[string]netip.Addr{}
			for _, p := range []string{"sts-0", "sts-1", "sts-2"} {
				res, err := c.start(sts, p, true)
				require.NoError(t, err)
				ips[p] = res.IPs[0].Address.Addr()
			}
			// A restarted member (new UID, same name) keeps its address.
			res, err := c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: "sts-1", UID: "uid-sts-1-again", Stable: true,
				Annotations: sts.Annotations, App: sts.AppRef, Interfaces: []ipam.NIC{{Name: "eth0"}}})
			require.NoError(t, err)
			require.Equal(t, ips["sts-1"], res.IPs[0].Address.Addr())
			// Scale 3 -> 2.
			sts.Replicas = intp(2)
			ds, err := c.set(sts)
			d := ssOnly(t, ds)
			if tc.number == "+1" {
				// A free address exists (.104): the pool shrinks at once, and
				// sts-2 keeps its address until it is released.
				require.Equal(t, subnet.Shrink, d.Action)
				require.NoError(t, err)
				require.Equal(t, []string{"10.6.168.104"}, formatRanges(d.Removed))
				continue
			}
			require.ErrorIs(t, err, ipam.ErrNotReady)
			require.Equal(t, subnet.Wait, d.Action, "every address is held: waits for sts-2's")
			require.ErrorIs(t, d.Err, ipam.ErrNotReady)
			require.Contains(t, d.Message, "pods hold 3 of the 3")
			require.NoError(t, c.alloc.Release(c.ctx, store.Owner{Namespace: "default", Name: "sts-2", Stable: true, UID: "uid-sts-2"}))
			ds, err = c.m.DeletePod(c.ctx, "uid-sts-2")
			require.NoError(t, err)
			d = ssOnly(t, ds)
			require.Equal(t, subnet.Shrink, d.Action)
			require.Equal(t, []string{ips["sts-2"].String()}, formatRanges(d.Removed))
		}
	},
	"SS-22": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		ds := ssApp("DaemonSet", "ds", ssUID, 3, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "+1"))
		require.Equal(t, 4, ssOnly(t, c.mustSet(ds)).Desired)
		ds.DesiredNumberScheduled = 5
		d := ssOnly(t, c.mustSet(ds))
		require.Equal(t, subnet.Grow, d.Action)
		require.Equal(t, []string{"10.6.168.101-10.6.168.106"}, ssIPs(d.Pool))
	},
	"SS-23": func(t *testing.T) {
		clone := func(ann map[string]string, replicas int) subnet.Application {
			return ssApp("apps.kruise.io/v1alpha1/CloneSet", "clone", ssUID, replicas, ann)
		}
		sub := `{"ipv4":["subnet-6"]}`
		d := ssOnly(t, ssDecide(t, []subnet.Application{clone(ssAnn(ipam.AnnotationSubnet, sub, subnet.AnnotationIPNumber, "5"), -1)},
			[]*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, subnet.Create, d.Action)
		require.Equal(t, 5, d.Desired)
		require.Equal(t, "5", d.Pool.Annotations()[subnet.AnnotationIPNumber])
		d = ssOnly(t, ssDecide(t, []subnet.Application{clone(ssAnn(ipam.AnnotationSubnet, sub), -1)}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, subnet.Fail, d.Action)
		require.ErrorIs(t, d.Err, ipam.ErrInvalid)
		require.ErrorContains(t, d.Err, "CloneSet/default/clone only supports a fixed auto-created pool size")
		require.ErrorContains(t, d.Err, subnet.AnnotationIPNumber)
		// Deliberate difference: Spiderpool reads "+2" as 2; here "+2" needs
		// the replica count (the scale subresource), and is refused without.
		d = ssOnly(t, ssDecide(t, []subnet.Application{clone(ssAnn(ipam.AnnotationSubnet, sub, subnet.AnnotationIPNumber, "+2"), -1)},
			[]*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, subnet.Fail, d.Action)
		require.ErrorContains(t, d.Err, `ipam.spidernet.io/ippool-ip-number "+2"`)
		require.ErrorContains(t, d.Err, "unknown")
		d = ssOnly(t, ssDecide(t, []subnet.Application{clone(ssAnn(ipam.AnnotationSubnet, sub, subnet.AnnotationIPNumber, "+2"), 3)},
			[]*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, 5, d.Desired, "3 replicas from the scale subresource, +2")
		// Deleting the CloneSet deletes its reclaim=true pool.
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		app := clone(ssAnn(ipam.AnnotationSubnet, sub, subnet.AnnotationIPNumber, "5"), -1)
		c.mustSet(app)
		ds, err := c.m.DeleteApplication(c.ctx, app.AppRef)
		require.NoError(t, err)
		require.Equal(t, subnet.Delete, ssOnly(t, ds).Action)
	},
	"SS-24": func(t *testing.T) {
		c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
		bare := subnet.Application{Annotations: ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`)}
		_, err := c.start(bare, "lonely", false)
		require.ErrorIs(t, err, ipam.ErrNotSupported)
		require.ErrorContains(t, err, "pod default/lonely")
		require.ErrorContains(t, err, "SpiderSubnet feature doesn't support no-controller pod")
		require.Empty(t, c.m.AutoPools())
	},
	"SS-25": func(t *testing.T) {
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
		app.HostNetwork = true
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.Equal(t, subnet.Skip, d.Action)
		require.Nil(t, d.Pool)
	},
	"SS-26": func(t *testing.T) {
		app := ssApp("Deployment", "test-app-1", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{ssSubnet6()}, nil, nil, nil))
		require.NoError(t, subnet.ValidateAutoPoolUpdate(d.Pool, d.Pool))
		patched := *d.Pool
		spec := *d.Pool.Pool
		spec.IPs = mustRanges("10.6.168.102")
		patched.Pool = &spec
		err := subnet.ValidateAutoPoolUpdate(d.Pool, &patched)
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, `ips "10.6.168.102"`)
		require.ErrorContains(t, err, "SpiderSubnet's to set: want 10.6.168.101-10.6.168.103")
		labelled := *d.Pool
		spec2 := *d.Pool.Pool
		sel := *spec2.PodAffinity
		sel.MatchLabels = maps.Clone(sel.MatchLabels)
		sel.MatchLabels["extra"] = "x"
		spec2.PodAffinity = &sel
		labelled.Pool = &spec2
		err = subnet.ValidateAutoPoolUpdate(d.Pool, &labelled)
		require.ErrorIs(t, err, ipam.ErrInvalid)
		require.ErrorContains(t, err, "podAffinity")
		require.ErrorContains(t, err, "extra")
	},
	"SS-27": func(t *testing.T) {
		s6 := ssSubnet6()
		manual := ipam.MustParsePool(`{"name":"ippool-test","subnet":"10.6.0.0/16","ips":["10.6.168.108-10.6.168.110"]}`)
		require.True(t, s6.Controls(manual))
		adopted := s6.Adopt(manual)
		require.Equal(t, s6.Gateway, adopted.Gateway)
		require.Equal(t, s6.Routes, adopted.Routes)
		require.False(t, manual.Gateway.IsValid(), "the input is not changed")
		require.Equal(t, map[string]string{subnet.LabelOwnerSubnet: "subnet-6", subnet.LabelCIDR: "10-6-0-0-16"}, s6.PoolLabels())
		st := subnet.StatusOf(s6, []*ipam.Pool{manual}, nil)
		require.Equal(t, int64(3), st.AllocatedIPCount)
		require.JSONEq(t, `{"ippool-test":{"ips":["10.6.168.108-10.6.168.110"]}}`, ssStatusJSON(t, st))
		// Auto-pools skip its addresses: 7 are left.
		app := ssApp("Deployment", "test-app-1", ssUID, 6, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
		d := ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, []*ipam.Pool{manual}, nil, nil))
		require.Equal(t, []string{"10.6.168.101-10.6.168.107"}, ssIPs(d.Pool))
		app.Replicas = intp(7)
		d = ssOnly(t, ssDecide(t, []subnet.Application{app}, []*subnet.Subnet{s6}, []*ipam.Pool{manual}, nil, nil))
		require.Equal(t, subnet.Wait, d.Action)
		require.Contains(t, d.Message, "8 wanted, 7 left")
		// A Manager serves the pool with the inherited gateway.
		c := newSSCluster(t, []*subnet.Subnet{s6}, []*ipam.Pool{manual})
		p, ok := c.m.Pool("ippool-test")
		require.True(t, ok)
		require.Equal(t, s6.Gateway, p.Gateway)
	},
}

func formatRanges(rs []netipx.IPRange) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		if r.From() == r.To() {
			out[i] = r.From().String()
		} else {
			out[i] = r.String()
		}
	}
	return out
}

func mustRanges(ss ...string) []netipx.IPRange {
	var out []netipx.IPRange
	for _, s := range ss {
		from, to, ok := strings.Cut(s, "-")
		if !ok {
			to = from
		}
		r := netipx.IPRangeFrom(netip.MustParseAddr(from), netip.MustParseAddr(to))
		if !r.IsValid() {
			panic("invalid range " + s)
		}
		out = append(out, r)
	}
	return out
}

var ssRow = regexp.MustCompile(`(?m)^\| (SS-\d+) \|`)

// TestSpiderSubnetScenarios runs one case per row of the scenario file, and
// fails if a row has no case or a case no row.
func TestSpiderSubnetScenarios(t *testing.T) {
	data, err := os.ReadFile("../testdata/conformance/spidersubnet-scenarios.md")
	require.NoError(t, err)
	var ids []string
	for _, m := range ssRow.FindAllStringSubmatch(string(data), -1) {
		ids = append(ids, m[1])
	}
	require.NotEmpty(t, ids)
	if d := gocmp.Diff(slices.Sorted(maps.Keys(ssCases)), slices.Sorted(slices.Values(ids))); d != "" {
		t.Fatalf("cases (-) and scenario rows (+) differ:\n%s", d)
	}
	for _, id := range ids {
		t.Run(id, ssCases[id])
	}
}

// TestSpiderSubnetAutoPoolAffinity checks Spiderpool's podAffinity rule for
// auto-created pools (its agent's selectByPod: an auto-created pool's
// podAffinity is matched against the pod's top controller,
// IsMatchAutoPoolAffinity, and a mismatch filters the pool out): a pod of
// another application, or one without a controller, that names an auto-pool
// in ipam.spidernet.io/ippool is refused by the pod-affinity filter; a pod
// of the application that names it so is served. (This was README
// difference 14 before a Request carried the pod's application.)
func TestSpiderSubnetAutoPoolAffinity(t *testing.T) {
	c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
	web := ssApp("Deployment", "web", ssUID, 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	c.mustSet(web)
	byName := ssAnn(ipam.AnnotationIPPool, `{"ipv4":["auto4-web-eth0-a5bd3"]}`)
	for _, tc := range []struct {
		name string
		app  ipam.AppRef
		want string
	}{
		{"another application", ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "other", UID: "u-other-0ther"},
			"eth0 IPv4 auto4-web-eth0-a5bd3: filtered: pod's application Deployment default/other (apps/v1) does not match the podAffinity of an auto-created pool, which serves the pods of Deployment default/web (apps/v1)"},
		{"same name, another kind", ipam.AppRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "default", Name: "web", UID: "u-sts-5t5t5"},
			"eth0 IPv4 auto4-web-eth0-a5bd3: filtered: pod's application StatefulSet default/web (apps/v1) does not match the podAffinity of an auto-created pool, which serves the pods of Deployment default/web (apps/v1)"},
		{"no controller", ipam.AppRef{},
			"eth0 IPv4 auto4-web-eth0-a5bd3: filtered: pod has no application (no controller, or none given), and an auto-created pool serves only the pods of its own: Deployment default/web (apps/v1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: "intruder", UID: "uid-intruder", App: tc.app,
				Annotations: byName, Interfaces: []ipam.NIC{{Name: "eth0"}}})
			require.ErrorIs(t, err, ipam.ErrNoCandidates)
			var ae *ipam.AllocationError
			require.ErrorAs(t, err, &ae)
			require.Len(t, ae.Trace, 1)
			require.Equal(t, ipam.ReasonPodAffinity, ae.Trace[0].Reason)
			require.Equal(t, ipam.SourcePodIPPool, ae.Trace[0].Source)
			require.Equal(t, tc.want, ae.Trace[0].String())
		})
	}
	// The application's own pod may name its pool, and gets the lowest
	// free address of it.
	res, err := c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: "web-0", UID: "uid-web-0", App: web.AppRef,
		Annotations: byName, Interfaces: []ipam.NIC{{Name: "eth0"}}})
	require.NoError(t, err)
	require.Equal(t, "auto4-web-eth0-a5bd3", res.IPs[0].Pool)
	require.Equal(t, "10.6.168.101/16", res.IPs[0].Address.String())
	require.Equal(t, ipam.SourcePodIPPool, res.Trace[0].Source)
	// A pod that asks through the subnet annotation but names another
	// application is refused by Select before any filter: its application
	// has no pool.
	other := ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "other", UID: "u-other-0ther"}
	_, err = c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: "x", UID: "uid-x", App: other,
		Annotations: web.Annotations, Interfaces: []ipam.NIC{{Name: "eth0"}}})
	require.ErrorIs(t, err, ipam.ErrNotReady)
}
