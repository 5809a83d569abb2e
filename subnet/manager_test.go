package subnet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/subnet"
)

func TestNewSubnetManagerErrors(t *testing.T) {
	_, err := subnet.NewManager(subnet.ManagerOptions{})
	require.ErrorContains(t, err, "Claims: required")
	_, err = subnet.NewManager(subnet.ManagerOptions{Claims: memstore.New(), AutoPool: subnet.Options{DefaultIPNumber: "-2"}})
	require.ErrorContains(t, err, `DefaultIPNumber "-2"`)
	dup := ssSubnet6()
	_, err = subnet.NewManager(subnet.ManagerOptions{Claims: memstore.New(), Subnets: []*subnet.Subnet{ssSubnet6(), dup}})
	require.ErrorContains(t, err, "duplicate")
}

// TestSubnetManagerBadInput checks that bad input is an error naming the
// annotation or field and the value, that nothing is created, and that a
// pod of the application gets the same reason.
func TestSubnetManagerBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		ann  map[string]string
		n    int
		want string
	}{
		{"malformed ippool-ip-number", ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "1+"),
			2, `annotation "ipam.spidernet.io/ippool-ip-number" "1+": invalid input`},
		{"unknown subnet", ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-x"]}`),
			2, `annotation "ipam.spidernet.io/subnet" ` + "`" + `{"ipv4":["subnet-x"]}` + "`" + `: ipv4[0] "subnet-x": no SpiderSubnet of that name`},
		{"two interfaces on one subnet", ssAnn(ipam.AnnotationSubnets, `[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-6"]}]`),
			2, `[1].ipv4[0] "subnet-6": subnet used by two interfaces`},
		{"subnet too small", ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "11"),
			2, `a pool of 11 addresses cannot fit: the subnet has 10 in all (totalIPCount); lower ipam.spidernet.io/ippool-ip-number "11"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, nil)
			app := ssApp("Deployment", "web", ssUID, tc.n, tc.ann)
			ds, err := c.set(app)
			require.ErrorContains(t, err, tc.want)
			require.False(t, errors.Is(err, ipam.ErrNotReady), "bad input is not worth retrying")
			for _, d := range ds {
				require.Equal(t, subnet.Fail, d.Action)
			}
			require.Empty(t, c.m.AutoPools())
			require.Equal(t, int64(0), c.status("subnet-6").AllocatedIPCount)
			require.Empty(t, slices.Collect(c.m.Pools()))
			if _, ok := tc.ann[ipam.AnnotationSubnets]; ok {
				return // the pod's own annotation is refused by Select first
			}
			_, err = c.start(app, "web-0", false)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSubnetManagerAutoPoolErrors(t *testing.T) {
	c := newSSCluster(t, []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, nil)
	app := ssApp("Deployment", "web", ssUID, 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	req := &ipam.Request{Namespace: "default", Name: "web-0", UID: "uid-web-0"}
	_, err := c.m.AutoPool(req, "eth0", 4, "subnet-6")
	require.ErrorIs(t, err, ipam.ErrNotSupported)
	require.ErrorContains(t, err, `pod default/web-0 eth0 IPv4: subnet "subnet-6": SpiderSubnet auto-pools serve the pods of a controller, and the request names none (Request.App is empty)`)
	req.App = app.AppRef
	_, err = c.m.AutoPool(req, "eth0", 4, "subnet-6")
	require.ErrorIs(t, err, ipam.ErrNotReady)
	require.ErrorContains(t, err, `the application (uid "`+ssUID+`") is not known to the subnet manager yet`)
	c.mustSet(app)
	name, err := c.m.AutoPool(req, "eth0", 4, "subnet-6")
	require.NoError(t, err)
	require.Equal(t, "auto4-web-eth0-a5bd3", name)
	_, err = c.m.AutoPool(req, "eth0", 4, "subnet-7")
	require.ErrorIs(t, err, ipam.ErrNotSupported)
	require.ErrorContains(t, err, `the pod names subnet "subnet-7", but its application's pool "auto4-web-eth0-a5bd3" is from subnet "subnet-6"`)
	_, err = c.m.AutoPool(req, "eth0", 6, "subnet-6")
	require.ErrorIs(t, err, ipam.ErrNotFound)
	// A pool that waits to grow still serves the pods it has room for.
	app.Replicas = intp(20)
	_, err = c.set(app)
	require.ErrorContains(t, err, "cannot fit")
	c.mustStart(app, "web-0")
	// The Allocator's trace names the subnet annotation as the rule.
	res, err := c.start(app, "web-0", false)
	require.NoError(t, err)
	require.Equal(t, ipam.SourceSubnet, res.Trace[0].Source)
	require.Equal(t, "eth0 IPv4 auto4-web-eth0-a5bd3: served (rank 1): already held", res.Trace[0].String())
}

// retireRace is a Store that, once armed, lets a pod claim the lowest
// address of a pool just after the manager first read that pool's claims
// (the read its shrink decision counts the idle addresses by): the race
// between a shrink's decision and an allocation in flight.
type retireRace struct {
	store.Store
	armed atomic.Bool
	once  sync.Once
}

func (s *retireRace) List(ctx context.Context, pool string) ([]store.Claim, error) {
	cs, err := s.Store.List(ctx, pool)
	if s.armed.Load() {
		s.once.Do(func() {
			_, _ = s.Store.Create(ctx, store.Claim{Pool: pool, IP: netip.MustParseAddr("10.6.168.101"), Owner: store.Owner{Namespace: "default", Name: "sneaky", UID: "uid-sneaky"}})
		})
	}
	return cs, err
}

func TestSubnetManagerShrinkRace(t *testing.T) {
	ctx := t.Context()
	st := &retireRace{Store: memstore.New()}
	m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6()}, Claims: st})
	require.NoError(t, err)
	app := ssApp("Deployment", "web", ssUID, 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "3"))
	_, err = m.SetApplication(ctx, app)
	require.NoError(t, err)
	app.Annotations = ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "1")
	st.armed.Store(true)
	ds, err := m.SetApplication(ctx, app)
	require.ErrorIs(t, err, ipam.ErrNotReady)
	d := ssOnly(t, ds)
	require.Equal(t, subnet.Wait, d.Action)
	require.Contains(t, d.Message, "address 10.6.168.101 was claimed by a pod meanwhile")
	pool := m.AutoPools()[0]
	require.Equal(t, []string{"10.6.168.101-10.6.168.103"}, ssIPs(pool), "nothing given back")
	// The lifted fence left no claim behind but the pod's, and the pool is
	// served whole again.
	p, ok := m.Pool(pool.Name())
	require.True(t, ok)
	require.Empty(t, p.ExcludeIPs)
	cs, err := st.List(ctx, pool.Name())
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, "uid-sneaky", cs[0].Owner.UID)
	// No other application can get the address meanwhile.
	other := ssApp("Deployment", "other", "u-other-0ther", 7, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "7"))
	d = ssOnly(t, mustSetApp(t, m, other))
	require.Equal(t, []string{"10.6.168.104-10.6.168.110"}, ssIPs(d.Pool))
	// Once the pod's address is released, the shrink goes ahead, keeping
	// the pod's address... and giving back the two free ones.
	require.NoError(t, st.Delete(ctx, cs[0].Pool, cs[0].IP, cs[0].Revision))
	ds, err = m.Sync(ctx)
	require.NoError(t, err)
	d = ssOnly(t, ds)
	require.Equal(t, subnet.Shrink, d.Action)
	require.Equal(t, []string{"10.6.168.101-10.6.168.102"}, formatRanges(d.Removed))
}

func mustSetApp(t *testing.T, m *subnet.Manager, app subnet.Application) []subnet.Decision {
	t.Helper()
	ds, err := m.SetApplication(t.Context(), app)
	require.NoError(t, err)
	return ds
}

func TestSubnetManagerRestart(t *testing.T) {
	ctx := t.Context()
	st := memstore.New()
	s6 := ssSubnet6()
	m1, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{s6}, Claims: st})
	require.NoError(t, err)
	sub := `{"ipv4":["subnet-6"]}`
	a := ssApp("Deployment", "a", "u-a-aaaaa", 1, ssAnn(ipam.AnnotationSubnet, sub))
	b := ssApp("Deployment", "b", "u-b-bbbbb", 1, ssAnn(ipam.AnnotationSubnet, sub, subnet.AnnotationReclaim, "false"))
	gone := ssApp("Deployment", "c", "u-c-ccccc", 1, ssAnn(ipam.AnnotationSubnet, sub))
	for _, app := range []subnet.Application{a, b, gone} {
		mustSetApp(t, m1, app)
	}
	m2, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{s6}, Claims: st, AutoPools: m1.AutoPools()})
	require.NoError(t, err)
	require.Len(t, slices.Collect(m2.Pools()), 3, "served before any application is known")
	ds, err := m2.Resync(ctx, []subnet.Application{a})
	require.NoError(t, err)
	actions := map[string]subnet.Action{}
	for _, d := range ds {
		actions[d.PoolName()] = d.Action
	}
	require.Equal(t, map[string]subnet.Action{
		"auto4-a-eth0-aaaaa": subnet.Keep,
		"auto4-b-eth0-bbbbb": subnet.Keep,
		"auto4-c-eth0-ccccc": subnet.Delete,
	}, actions)
	require.Equal(t, int64(4), m2.Status()[0].AllocatedIPCount)
	// A newcomer gets the lowest free addresses, which include c's.
	d := ssOnly(t, mustSetApp(t, m2, ssApp("Deployment", "d", "u-d-ddddd", 0, ssAnn(ipam.AnnotationSubnet, sub))))
	require.Equal(t, []string{"10.6.168.105"}, ssIPs(d.Pool))
	d = ssOnly(t, mustSetApp(t, m2, ssApp("Deployment", "e", "u-e-eeeee", 1, ssAnn(ipam.AnnotationSubnet, sub))))
	require.Equal(t, []string{"10.6.168.106-10.6.168.107"}, ssIPs(d.Pool))
	_ = netipx.IPRange{}
}

func TestSubnetManagerServes(t *testing.T) {
	manual := ipam.MustParsePool(`{"name":"manual","subnet":"10.6.0.0/16","ips":["10.6.168.109-10.6.168.110"],"default":true}`)
	c := newSSCluster(t, []*subnet.Subnet{ssSubnet6()}, []*ipam.Pool{manual})
	app := ssApp("Deployment", "web", ssUID, 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
	c.mustSet(app)
	var names []string
	for p := range c.m.Pools() {
		names = append(names, p.Name)
	}
	require.Equal(t, []string{"auto4-web-eth0-a5bd3", "manual"}, names)
	var defaults []string
	for p := range c.m.DefaultPools() {
		defaults = append(defaults, p.Name)
	}
	require.Equal(t, []string{"manual"}, defaults)
	p, ok := c.m.Pool("auto4-web-eth0-a5bd3")
	require.True(t, ok)
	require.Equal(t, subnet.AppLabels(app.AppRef), p.PodAffinity.MatchLabels, "served with its podAffinity, which the filters match against Request.App")
	require.True(t, ipam.IsAutoPool(p))
	require.Equal(t, ipam.LowestFree, p.Strategy)
	// A pod without the subnet annotation is served by the cluster default.
	res, err := c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: "plain", UID: "uid-plain", Interfaces: []ipam.NIC{{Name: "eth0"}}})
	require.NoError(t, err)
	require.Equal(t, "manual", res.IPs[0].Pool)
	require.Nil(t, c.m.Reserved(4))
}

// TestSubnetManagerConcurrent runs applications on two subnets from many
// goroutines at once, pods coming and going, and checks the invariants.
func TestSubnetManagerConcurrent(t *testing.T) {
	subnets := []*subnet.Subnet{
		subnet.MustParse(`{"name":"a","subnet":"10.10.0.0/24","ips":["10.10.0.2-10.10.0.254"]}`),
		subnet.MustParse(`{"name":"b","subnet":"10.11.0.0/24","ips":["10.11.0.2-10.11.0.254"]}`),
	}
	c := newSSCluster(t, subnets, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			sn := []string{"a", "b"}[g%2]
			for round := range 20 {
				app := ssApp("Deployment", fmt.Sprintf("g%d", g), fmt.Sprintf("u-%d-%05d", g, g), r.IntN(6),
					ssAnn(ipam.AnnotationSubnet, `{"ipv4":["`+sn+`"]}`))
				if _, err := c.m.SetApplication(c.ctx, app); err != nil && !errors.Is(err, ipam.ErrNotReady) {
					t.Error(err)
					return
				}
				name := fmt.Sprintf("g%d-%d", g, round)
				_, err := c.alloc.Allocate(c.ctx, ipam.Request{Namespace: "default", Name: name, UID: "uid-" + name,
					Annotations: app.Annotations, App: app.AppRef, Interfaces: []ipam.NIC{{Name: "eth0"}}})
				if err != nil && !errors.Is(err, ipam.ErrNoCandidates) && !errors.Is(err, ipam.ErrNotReady) {
					t.Error(err)
					return
				}
				if r.IntN(2) == 0 {
					if err := c.alloc.Release(c.ctx, store.Owner{UID: "uid-" + name}); err != nil {
						t.Error(err)
						return
					}
					if _, err := c.m.DeletePod(c.ctx, "uid-"+name); err != nil && !errors.Is(err, ipam.ErrNotReady) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	checkSubnetInvariants(t, c, subnets, nil)
}

// checkSubnetInvariants checks that auto-pools are disjoint, inside their
// subnets and clear of pools written by hand; that every pod's claim lies in
// its pool; that no address is held twice; and that the subnets' counts add
// up.
func checkSubnetInvariants(t *testing.T, c *ssCluster, subnets []*subnet.Subnet, manual []*ipam.Pool) {
	t.Helper()
	var seen netipx.IPSetBuilder
	sizes := map[string]int64{}
	pools := map[string]*subnet.AutoPool{}
	for _, a := range c.m.AutoPools() {
		pools[a.Name()] = a
		var s *subnet.Subnet
		for _, x := range subnets {
			if x.Name == a.Subnet {
				s = x
			}
		}
		require.NotNil(t, s)
		var b netipx.IPSetBuilder
		for _, r := range a.Pool.IPs {
			b.AddRange(r)
		}
		set, _ := b.IPSet()
		for _, r := range set.Ranges() {
			require.Truef(t, s.Usable().ContainsRange(r), "pool %s: %s outside subnet %s", a.Name(), r, s.Name)
			for _, p := range manual {
				for _, m := range p.IPs {
					require.Falsef(t, m.Overlaps(r), "pool %s overlaps %s", a.Name(), p.Name)
				}
			}
		}
		done, _ := seen.IPSet()
		require.Falsef(t, done.Overlaps(set), "pool %s overlaps another auto-pool", a.Name())
		seen.AddSet(set)
		sizes[a.Subnet] += int64(a.Size())
	}
	for _, s := range subnets {
		sizes[s.Name] += subnet.StatusOf(s, manual, nil).AllocatedIPCount
	}
	for _, st := range c.m.Status() {
		require.Equal(t, sizes[st.Name], st.AllocatedIPCount, st.Name)
	}
	held := map[netip.Addr]string{}
	for name, a := range pools {
		cs, err := c.st.List(c.ctx, name)
		require.NoError(t, err)
		for _, cl := range cs {
			if cl.Owner.UID == "" {
				continue // not a pod's
			}
			ok := false
			for _, r := range a.Pool.IPs {
				ok = ok || r.Contains(cl.IP)
			}
			require.Truef(t, ok, "pod %s holds %s, which pool %s no longer has", cl.Owner, cl.IP, name)
			require.NotContainsf(t, held, cl.IP, "%s held twice", cl.IP)
			held[cl.IP] = cl.Owner.UID
		}
	}
}

// TestSubnetManagerModel runs seeded random histories of applications and
// pods against a Manager and an Allocator, and checks the invariants
// after every step.
func TestSubnetManagerModel(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d", seed)
			r := rand.New(rand.NewPCG(seed, 16))
			s6, s7 := ssSubnet6(), ssSubnet7()
			manual := ipam.MustParsePool(`{"name":"manual","subnet":"10.6.0.0/16","ips":["10.6.168.110"]}`)
			c := newSSCluster(t, []*subnet.Subnet{s6, s7}, []*ipam.Pool{manual})
			type pod struct {
				app  subnet.Application
				name string
			}
			apps := map[int]subnet.Application{}
			var pods []pod
			gen := 0
			for step := range 60 {
				switch op := r.IntN(6); {
				case op <= 1: // set or change an application
					i := r.IntN(3)
					app, ok := apps[i]
					if !ok {
						gen++
						app = ssApp([]string{"Deployment", "StatefulSet"}[r.IntN(2)], fmt.Sprintf("app%d", i), fmt.Sprintf("u-%d-%05d", i, gen), 0, nil)
					}
					app.Replicas = intp(r.IntN(5))
					ann := ssAnn(ipam.AnnotationSubnet, []string{`{"ipv4":["subnet-6"]}`, `{"ipv4":["subnet-7"]}`}[r.IntN(2)])
					if r.IntN(4) == 0 {
						ann = ssAnn(ipam.AnnotationSubnets, `[{"interface":"eth0","ipv4":["subnet-6"]},{"interface":"net1","ipv4":["subnet-7"]}]`)
					}
					if n := []string{"", "+0", "+1", "2", "4"}[r.IntN(5)]; n != "" {
						ann[subnet.AnnotationIPNumber] = n
					}
					if r.IntN(3) == 0 {
						ann[subnet.AnnotationReclaim] = "false"
					}
					app.Annotations = ann
					apps[i] = app
					dd, err := c.set(app)
					for _, d := range dd {
						t.Logf("step %d set %s: %s", step, app.Annotations, d.String())
					}
					if err != nil && !errors.Is(err, ipam.ErrNotReady) && !errors.Is(err, ipam.ErrNotSupported) {
						t.Fatalf("step %d: %v", step, err)
					}
				case op == 2: // delete an application
					i := r.IntN(3)
					if app, ok := apps[i]; ok {
						delete(apps, i)
						dd, err := c.m.DeleteApplication(c.ctx, app.AppRef)
						for _, d := range dd {
							t.Logf("step %d delete: %s", step, d.String())
						}
						if err != nil && !errors.Is(err, ipam.ErrNotReady) {
							t.Fatalf("step %d: %v", step, err)
						}
					}
				case op == 3 || op == 4: // start a pod
					i := r.IntN(3)
					if app, ok := apps[i]; ok {
						name := fmt.Sprintf("p%d", step)
						ifaces := []string{"eth0"}
						if _, ok := app.Annotations[ipam.AnnotationSubnets]; ok {
							ifaces = append(ifaces, "net1")
						}
						if res, err := c.start(app, name, false, ifaces...); err == nil {
							t.Logf("step %d start %s: %s", step, name, res.IPs[0].Address)
							pods = append(pods, pod{app, name})
						} else if !errors.Is(err, ipam.ErrNoCandidates) && !errors.Is(err, ipam.ErrNotReady) && !errors.Is(err, ipam.ErrNotSupported) {
							t.Fatalf("step %d: %v", step, err)
						}
					}
				default: // stop a pod
					if len(pods) > 0 {
						k := r.IntN(len(pods))
						for _, d := range c.stop(pods[k].name) {
							t.Logf("step %d stop %s: %s", step, pods[k].name, d.String())
						}
						pods = slices.Delete(pods, k, k+1)
					}
				}
				checkSubnetInvariants(t, c, []*subnet.Subnet{s6, s7}, []*ipam.Pool{manual})
			}
			// Once every pod and application is gone, every pool with
			// reclaim true is gone too.
			for len(pods) > 0 {
				c.stop(pods[0].name)
				pods = pods[1:]
			}
			for _, app := range apps {
				_, err := c.m.DeleteApplication(c.ctx, app.AppRef)
				require.NoError(t, err)
			}
			for _, a := range c.m.AutoPools() {
				require.Falsef(t, a.Reclaim, "pool %s with reclaim true outlived its application", a.Name())
			}
			checkSubnetInvariants(t, c, []*subnet.Subnet{s6, s7}, []*ipam.Pool{manual})
		})
	}
}

// TestSubnetManagerApply checks Options.Apply: every change is written
// before it is served, in order, and a change whose write fails is not made
// (its addresses stay where they were) and is made on Sync once writes work.
func TestSubnetManagerApply(t *testing.T) {
	ctx := t.Context()
	st := memstore.New()
	var mu sync.Mutex
	var written []string
	fail := false
	m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6()}, Claims: st,
		Apply: func(_ context.Context, d *subnet.Decision) error {
			mu.Lock()
			defer mu.Unlock()
			if fail {
				return errors.New("the API server said no")
			}
			written = append(written, fmt.Sprintf("%s %s %v", d.Action, d.PoolName(), ssIPs(d.Pool)))
			return nil
		}})
	require.NoError(t, err)
	setFail := func(v bool) { mu.Lock(); fail = v; mu.Unlock() }
	app := ssApp("Deployment", "web", ssUID, 2, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))

	// A create whose write fails: nothing served, no address taken.
	setFail(true)
	ds, err := m.SetApplication(ctx, app)
	require.ErrorIs(t, err, ipam.ErrNotReady)
	require.ErrorContains(t, err, "create: writing the pool: the API server said no; retried on Sync")
	require.Equal(t, subnet.Wait, ssOnly(t, ds).Action)
	require.Empty(t, m.AutoPools())
	require.Equal(t, int64(0), m.Status()[0].AllocatedIPCount)
	_, served := m.Pool("auto4-web-eth0-a5bd3")
	require.False(t, served)
	_, err = m.AutoPool(&ipam.Request{Namespace: "default", Name: "web-0", UID: "uid-web-0", App: app.AppRef}, "eth0", 4, "subnet-6")
	require.ErrorIs(t, err, ipam.ErrNotReady)

	// Sync makes it once writes work.
	setFail(false)
	ds, err = m.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, subnet.Create, ssOnly(t, ds).Action)

	// A grow, then a shrink whose write fails and then works, then the
	// application goes.
	app.Replicas = intp(4)
	_, err = m.SetApplication(ctx, app)
	require.NoError(t, err)
	app.Replicas = intp(1)
	setFail(true)
	ds, err = m.SetApplication(ctx, app)
	require.ErrorContains(t, err, "shrinking: writing the pool: the API server said no")
	require.Equal(t, subnet.Wait, ssOnly(t, ds).Action)
	require.Equal(t, []string{"10.6.168.101-10.6.168.105"}, ssIPs(m.AutoPools()[0]))
	claims, err := st.List(ctx, "auto4-web-eth0-a5bd3")
	require.NoError(t, err)
	require.Empty(t, claims, "no claim is left behind")
	p, ok := m.Pool("auto4-web-eth0-a5bd3")
	require.True(t, ok)
	require.Empty(t, p.ExcludeIPs, "the fence is lifted")
	setFail(false)
	_, err = m.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"10.6.168.104-10.6.168.105"}, ssIPs(m.AutoPools()[0]))

	setFail(true)
	ds, err = m.DeleteApplication(ctx, app.AppRef)
	require.NoError(t, err)
	require.Equal(t, subnet.Wait, ssOnly(t, ds).Action)
	require.Len(t, m.AutoPools(), 1, "a deletion whose write failed keeps the pool")
	setFail(false)
	ds, err = m.Sync(ctx)
	require.NoError(t, err)
	require.Equal(t, subnet.Delete, ssOnly(t, ds).Action)
	require.Empty(t, m.AutoPools())
	require.Equal(t, []string{
		"create auto4-web-eth0-a5bd3 [10.6.168.101-10.6.168.103]",
		"grow auto4-web-eth0-a5bd3 [10.6.168.101-10.6.168.105]",
		"shrink auto4-web-eth0-a5bd3 [10.6.168.104-10.6.168.105]",
		"delete auto4-web-eth0-a5bd3 [10.6.168.104-10.6.168.105]",
	}, written)
}

// TestSubnetManagerResyncReclaimsFirst: after a restart, the pools of the
// applications that went are reclaimed before the others grow, so that
// their addresses are free for them (a regression: Resync set the
// applications first, and a growth that needed those addresses waited).
func TestSubnetManagerResyncReclaimsFirst(t *testing.T) {
	ctx := t.Context()
	sub := `{"ipv4":["subnet-6"]}`
	kept := ssApp("Deployment", "kept", "u-kept-aaaaa", 2, ssAnn(ipam.AnnotationSubnet, sub))
	gone := ssApp("Deployment", "gone", "u-gone-bbbbb", 2, ssAnn(ipam.AnnotationSubnet, sub))
	st := memstore.New()
	m1, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6()}, Claims: st})
	require.NoError(t, err)
	mustSetApp(t, m1, kept)
	mustSetApp(t, m1, gone)
	m2, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6()}, Claims: st, AutoPools: m1.AutoPools()})
	require.NoError(t, err)
	kept.Replicas = intp(7) // 8 addresses: 5 more, and 4 are free unless gone's 3 come back
	ds, err := m2.Resync(ctx, []subnet.Application{kept})
	require.NoError(t, err)
	actions := map[string]subnet.Action{}
	for _, d := range ds {
		actions[d.PoolName()] = d.Action
	}
	require.Equal(t, map[string]subnet.Action{"auto4-gone-eth0-bbbbb": subnet.Delete, "auto4-kept-eth0-aaaaa": subnet.Grow}, actions)
	require.Equal(t, []string{"10.6.168.101-10.6.168.108"}, ssIPs(m2.AutoPools()[0]))
}

// noAddressReader hides the AddressReader of the Store it wraps.
type noAddressReader struct{ store.Store }

// TestSubnetManagerShrinkFences: a shrink fences the addresses it gives
// back by range: when Apply writes it, the manager already serves the pool
// without them, and it writes no claim in the Store (earlier versions wrote
// one per address, and kept them on a Store without AddressReader).
func TestSubnetManagerShrinkFences(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   store.Store
	}{{"AddressReader", memstore.New()}, {"no AddressReader", noAddressReader{memstore.New()}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			var m *subnet.Manager
			var served []string
			apply := func(_ context.Context, d *subnet.Decision) error {
				if d.Action == subnet.Shrink {
					p, ok := m.Pool(d.PoolName())
					require.True(t, ok)
					served = formatRanges(p.ExcludeIPs)
				}
				return nil
			}
			m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6()}, Claims: tc.st, Apply: apply})
			require.NoError(t, err)
			app := ssApp("Deployment", "web", ssUID, 4, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`))
			mustSetApp(t, m, app)
			app.Replicas = intp(1)
			d := ssOnly(t, mustSetApp(t, m, app))
			require.Equal(t, subnet.Shrink, d.Action)
			require.Equal(t, []string{"10.6.168.101-10.6.168.103"}, formatRanges(d.Removed))
			require.Equal(t, formatRanges(d.Removed), served, "fenced when Apply is called")
			p, _ := m.Pool("auto4-web-eth0-a5bd3")
			require.Empty(t, p.ExcludeIPs, "the new definition replaces the fence")
			cs, err := tc.st.List(ctx, "auto4-web-eth0-a5bd3")
			require.NoError(t, err)
			require.Empty(t, cs)
			// Growing onto them again works.
			app.Replicas = intp(4)
			require.Equal(t, subnet.Grow, ssOnly(t, mustSetApp(t, m, app)).Action)
		})
	}
}

// TestSubnetManagerNameCollision pins issue 26 cases 3 and 6 in the
// manager: two applications "web" whose UIDs share Spiderpool's five
// characters both get a pool and are served (the second used to wait
// forever, "one being deleted, perhaps"); an application with interfaces
// "net1" and "NET1" is refused instead of overwriting its first pool; and
// once every application is gone, the subnet has every address back.
func TestSubnetManagerNameCollision(t *testing.T) {
	ctx := t.Context()
	m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, Claims: memstore.New()})
	require.NoError(t, err)
	ann := ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "2")
	a := ssApp("Deployment", "web", "11111111-1111-4111-8111-abcde0000001", 1, ann)
	a.Namespace = "team-a"
	b := ssApp("Deployment", "web", "22222222-2222-4222-8222-abcde0000002", 1, ann)
	b.Namespace = "team-b"
	d := ssOnly(t, mustSetApp(t, m, a))
	require.Equal(t, "auto4-web-eth0-abcde", d.PoolName())
	d = ssOnly(t, mustSetApp(t, m, b))
	require.Equal(t, subnet.Create, d.Action)
	require.Equal(t, "auto4-web-eth0-abcde0000002", d.PoolName())
	for _, app := range []subnet.Application{a, b} {
		name, err := m.AutoPool(&ipam.Request{App: app.AppRef}, "eth0", 4, "subnet-6")
		require.NoError(t, err)
		p, ok := m.Pool(name)
		require.True(t, ok)
		require.Equal(t, app.Namespace, p.PodAffinity.MatchLabels[ipam.LabelAppNamespace])
	}

	c := ssApp("Deployment", "nics", "33333333-3333-4333-8333-333333333333", 1, ssAnn(ipam.AnnotationSubnets,
		`[{"interface":"net1","ipv4":["subnet-6"]},{"interface":"NET1","ipv4":["subnet-7"]}]`))
	ds, err := m.SetApplication(ctx, c)
	require.ErrorIs(t, err, ipam.ErrInvalid)
	require.ErrorContains(t, err, `"net1" and [1].interface "NET1" differ only in case`)
	require.Equal(t, subnet.Fail, ssOnly(t, ds).Action)

	for _, app := range []subnet.Application{a, b, c} {
		_, err := m.DeleteApplication(ctx, app.AppRef)
		require.NoError(t, err)
	}
	require.Empty(t, m.AutoPools())
	for _, st := range m.Status() {
		require.Equal(t, int64(0), st.AllocatedIPCount, st.Name)
	}
}

// createLimit is a Store that refuses to write more than limit claims, so
// that a manager writing one claim per address fails at once instead of
// running out of memory.
type createLimit struct {
	store.Store
	n, limit atomic.Int64
}

func (s *createLimit) Create(ctx context.Context, c store.Claim) (store.Claim, error) {
	if s.n.Add(1) > s.limit.Load() {
		return store.Claim{}, errors.New("test: too many claims written")
	}
	return s.Store.Create(ctx, c)
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSubnetManagerHugePoolBounded pins issue 26 case 4: shrinking and
// deleting an auto-pool of 16,777,216 addresses (the largest
// ippool-ip-number), IPv6 and IPv4, writes no claim per address and
// allocates a bounded amount of memory (it used to write one claim per
// address under the subnet's lock: 954 MB for a million, out of memory for
// 16,777,216). BenchmarkManagerHugePool times it.
func TestSubnetManagerHugePoolBounded(t *testing.T) {
	const bound = 1 << 20 // bytes per change (about 16 KiB measured); one claim per address would be gigabytes
	for _, tc := range []struct{ name, subnet, ann string }{
		{"IPv6", `{"name":"big","subnet":"fd00::/64","ips":["fd00::1-fd00::ffff:ffff"]}`, `{"ipv6":["big"]}`},
		{"IPv4", `{"name":"big","subnet":"10.0.0.0/7","ips":["10.0.0.1-11.255.255.254"]}`, `{"ipv4":["big"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			st := &createLimit{Store: memstore.New()}
			st.limit.Store(1000)
			m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{subnet.MustParse(tc.subnet)}, Claims: st})
			require.NoError(t, err)
			set := func(n string, want subnet.Action) subnet.Decision {
				t.Helper()
				app := ssApp("Deployment", "huge", ssUID, 1, ssAnn(ipam.AnnotationSubnet, tc.ann, subnet.AnnotationIPNumber, n))
				var d subnet.Decision
				b := allocated(func() { d = ssOnly(t, mustSetApp(t, m, app)) })
				require.Equal(t, want, d.Action, d.String())
				require.LessOrEqualf(t, b, uint64(bound), "%s to %s allocated %d bytes", want, n, b)
				return d
			}
			set("16777216", subnet.Create)
			d := set("1", subnet.Shrink)
			require.Equal(t, 1, d.Pool.Size())
			set("16777216", subnet.Grow)
			require.Equal(t, 16777216, m.AutoPools()[0].Size())
			var ds []subnet.Decision
			b := allocated(func() {
				ds, err = m.DeleteApplication(ctx, ssApp("Deployment", "huge", ssUID, 1, nil).AppRef)
			})
			require.NoError(t, err)
			dd := ssOnly(t, ds)
			require.Equal(t, subnet.Delete, dd.Action, dd.String())
			require.LessOrEqualf(t, b, uint64(bound), "delete allocated %d bytes", b)
			require.Empty(t, m.AutoPools())
			require.Equal(t, int64(0), m.Status()[0].AllocatedIPCount)
			require.Zero(t, st.n.Load(), "no claim written")
		})
	}
}

// TestSubnetManagerNameReserved: decisions for different subnets run in
// parallel, and a name being created for one is reserved, so that the
// other, decided meanwhile, takes another name instead of overwriting the
// pool (issue 26 case 6). The second application is set from within the
// first one's Apply, when the first pool is decided but not served yet.
func TestSubnetManagerNameReserved(t *testing.T) {
	a := ssApp("Deployment", "web", "11111111-1111-4111-8111-abcde0000001", 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber, "2"))
	a.Namespace = "team-a"
	b := ssApp("Deployment", "web", "22222222-2222-4222-8222-abcde0000002", 1, ssAnn(ipam.AnnotationSubnet, `{"ipv4":["subnet-7"]}`, subnet.AnnotationIPNumber, "2"))
	b.Namespace = "team-b"
	var m *subnet.Manager
	var inner []subnet.Decision
	var once sync.Once
	apply := func(ctx context.Context, d *subnet.Decision) error {
		if d.App.UID == a.UID {
			once.Do(func() {
				var err error
				inner, err = m.SetApplication(ctx, b)
				require.NoError(t, err)
			})
		}
		return nil
	}
	m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{ssSubnet6(), ssSubnet7()}, Claims: memstore.New(), Apply: apply})
	require.NoError(t, err)
	d := ssOnly(t, mustSetApp(t, m, a))
	require.Equal(t, "auto4-web-eth0-abcde", d.PoolName())
	di := ssOnly(t, inner)
	require.Equal(t, subnet.Create, di.Action)
	require.Equal(t, "auto4-web-eth0-abcde0000002", di.PoolName())
	require.Len(t, m.AutoPools(), 2)
	for i, sn := range []string{"subnet-6", "subnet-7"} {
		app := []subnet.Application{a, b}[i]
		_, err := m.AutoPool(&ipam.Request{App: app.AppRef}, "eth0", 4, sn)
		require.NoError(t, err)
	}
}
