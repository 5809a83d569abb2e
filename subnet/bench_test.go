package subnet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/subnet"
)

// Spiderpool's figures for its issue #1375: 100 Deployments of 10 replicas
// on one /16 SpiderSubnet, about half of the addresses pre-allocated after 11
// minutes, most (about 1,058) after 19.
const (
	spiderpoolHalfReady = 11 * time.Minute
	spiderpoolMostReady = 19 * time.Minute
)

// BenchmarkAutoPools creates apps Deployments of replicas pods each, every
// Deployment with the subnet annotation of one /16 subnet and "+1", through a
// Manager serving an Allocator, and allocates every pod. One
// iteration is the whole run: from the first application to the last pod's
// address. It reports the time until the last pool was ready
// (pools-ready-s, every SetApplication returned) and until the last pod had
// its address (all-allocated-s), and how many times less that is than
// Spiderpool's 19 minutes for the 100 x 10 case (x-vs-spiderpool-19min).
func BenchmarkAutoPools(b *testing.B) {
	for _, n := range []struct{ apps, replicas int }{{100, 10}, {1000, 10}} {
		b.Run(fmt.Sprintf("%dx%d", n.apps, n.replicas), func(b *testing.B) {
			apps := make([]subnet.Application, n.apps)
			for i := range apps {
				apps[i] = subnet.Application{
					AppRef: ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "bench",
						Name: fmt.Sprintf("app-%04d", i), UID: fmt.Sprintf("uid-%04d-%05x", i, i)},
					Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["bench"]}`, subnet.AnnotationIPNumber: "+1"},
					Replicas:    intp(n.replicas),
				}
			}
			sn := subnet.MustParse(`{"name":"bench","subnet":"10.6.0.0/16","gateway":"10.6.0.1","ips":["10.6.0.2-10.6.255.254"]}`)
			ctx := context.Background()
			var ready, done time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				st := memstore.New()
				m, err := subnet.NewManager(subnet.ManagerOptions{Subnets: []*subnet.Subnet{sn}, Claims: st})
				if err != nil {
					b.Fatal(err)
				}
				alloc, err := ipam.NewAllocator(ipam.Options{Pools: m, Store: st})
				if err != nil {
					b.Fatal(err)
				}
				var lastReady time.Time
				for _, app := range apps {
					if _, err := m.SetApplication(ctx, app); err != nil {
						b.Fatal(err)
					}
					lastReady = time.Now()
					for r := range n.replicas {
						name := fmt.Sprintf("%s-%d", app.Name, r)
						uid := app.UID + "-" + name
						if _, err := alloc.Allocate(ctx, ipam.Request{Namespace: "bench", Name: name, UID: uid,
							Annotations: app.Annotations, App: app.AppRef, Interfaces: []ipam.NIC{{Name: "eth0"}}}); err != nil {
							b.Fatal(err)
						}
					}
				}
				ready += lastReady.Sub(start)
				done += time.Since(start)
			}
			iters := float64(b.N)
			b.ReportMetric(ready.Seconds()/iters, "pools-ready-s")
			b.ReportMetric(done.Seconds()/iters, "all-allocated-s")
			b.ReportMetric(spiderpoolMostReady.Seconds()/(done.Seconds()/iters), "x-vs-spiderpool-19min")
			b.ReportMetric(spiderpoolHalfReady.Seconds()/(done.Seconds()/iters), "x-vs-spiderpool-half-11min")
		})
	}
}

// BenchmarkManagerHugePool shrinks an auto-pool of 16,777,216
// addresses (the largest ippool-ip-number, IPv6) to one address and grows
// it back: one iteration is both changes. Before the fences went by range,
// a shrink wrote one claim per address given back (5.7 s and 954 MB for a
// million addresses; out of memory for this size).
func BenchmarkManagerHugePool(b *testing.B) {
	ctx := context.Background()
	m, err := subnet.NewManager(subnet.ManagerOptions{
		Subnets: []*subnet.Subnet{subnet.MustParse(`{"name":"big","subnet":"fd00::/64","ips":["fd00::1-fd00::ffff:ffff"]}`)},
		Claims:  memstore.New(),
	})
	if err != nil {
		b.Fatal(err)
	}
	app := func(n string) subnet.Application {
		return subnet.Application{
			AppRef:      ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "huge", UID: "0b7c6f1e-3f00-4d5e-9c1a-a5bd3cafe001"},
			Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv6":["big"]}`, subnet.AnnotationIPNumber: n},
		}
	}
	if _, err := m.SetApplication(ctx, app("16777216")); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, n := range []string{"1", "16777216"} {
			if _, err := m.SetApplication(ctx, app(n)); err != nil {
				b.Fatal(err)
			}
		}
	}
}
