package subnet_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/subnet"
)

// Decide says what SpiderSubnet does about the applications and the
// pools that exist: here a Deployment of 2 replicas gets a pool of 3
// addresses ("+1"), and a second one asks for more than is left.
func ExampleDecide() {
	sn := subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","gateway":"10.6.0.1",
		"ips":["10.6.168.101-10.6.168.110"]}`)
	snap, err := subnet.NewSnapshot([]*subnet.Subnet{sn}, nil, nil, nil, nil)
	if err != nil {
		panic(err)
	}
	deployment := func(name, uid string, replicas int, number string) subnet.Application {
		return subnet.Application{
			AppRef: ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: name, UID: uid},
			Annotations: map[string]string{
				ipam.AnnotationSubnet:     `{"ipv4":["subnet-6"]}`,
				subnet.AnnotationIPNumber: number,
			},
			Replicas: &replicas,
		}
	}
	apps := []subnet.Application{
		deployment("web", "6f1d-00000-a5bd3c", 2, "+1"),
		deployment("batch", "77aa-11111-b0b0b0", 9, "+0"),
	}
	for _, d := range subnet.Decide(apps, snap, subnet.Options{}) {
		fmt.Println(d.String())
		if d.Pool != nil {
			fmt.Println("\tips:", d.Pool.Pool.IPs)
		}
	}
	// Output:
	// create auto4-web-eth0-a5bd3 (Deployment default/web eth0 IPv4, subnet "subnet-6"): 3 addresses for 2 pods and ipam.spidernet.io/ippool-ip-number "+1"
	// 	ips: [10.6.168.101-10.6.168.103]
	// wait (Deployment default/batch eth0 IPv4, subnet "subnet-6"): insufficient free addresses: 9 wanted, 7 left (Spiderpool: insufficient subnet FreeIPs, required '9' but only left '7'); retried when addresses are given back
}

// A Decision's String says what it does, to which pool of which
// application, and why.
func ExampleDecision_String() {
	sn := subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","ips":["10.6.168.101-10.6.168.110"]}`)
	snap, err := subnet.NewSnapshot([]*subnet.Subnet{sn}, nil, nil, nil, nil)
	if err != nil {
		panic(err)
	}
	replicas := 2
	app := subnet.Application{
		AppRef:      ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "app", UID: "6f1d-00000-a5bd3c"},
		Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-6"]}`, subnet.AnnotationIPNumber: "+1"},
		Replicas:    &replicas,
	}
	d := subnet.Decide([]subnet.Application{app}, snap, subnet.Options{})[0]
	fmt.Println(d.String())
	// Output:
	// create auto4-app-eth0-a5bd3 (Deployment default/app eth0 IPv4, subnet "subnet-6"): 3 addresses for 2 pods and ipam.spidernet.io/ippool-ip-number "+1"
}

// A Manager creates an application's pools when it is told about the
// application, and serves them to an Allocator: a pod's pool is ready when
// its allocation arrives, or the allocation fails at once saying why.
func ExampleManager() {
	ctx := context.Background()
	claims := memstore.New()
	m, err := subnet.NewManager(subnet.ManagerOptions{
		Subnets: []*subnet.Subnet{subnet.MustParse(`{"name":"subnet-6","subnet":"10.6.0.0/16","gateway":"10.6.0.1",
			"ips":["10.6.168.101-10.6.168.110"]}`)},
		Claims: claims,
	})
	if err != nil {
		panic(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: m, Store: claims})
	if err != nil {
		panic(err)
	}
	replicas := 2
	app := subnet.Application{
		AppRef:      ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web", UID: "6f1d-00000-a5bd3c"},
		Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-6"]}`},
		Replicas:    &replicas,
	}
	// A pod names its application (its top controller) in Request.App.
	pod := func(name string, owner ipam.AppRef) ipam.Request {
		return ipam.Request{Namespace: "default", Name: name, UID: "uid-" + name, App: owner,
			Annotations: app.Annotations, Interfaces: []ipam.NIC{{Name: "eth0"}}}
	}

	// The pod comes before its application: it is told to retry.
	_, err = alloc.Allocate(ctx, pod("web-0", app.AppRef))
	fmt.Println(errors.Is(err, ipam.ErrNotReady), err)

	if _, err := m.SetApplication(ctx, app); err != nil {
		panic(err)
	}
	res, err := alloc.Allocate(ctx, pod("web-0", app.AppRef))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.IPs[0].Address, "from", res.IPs[0].Pool, "by", res.Trace[0].Source)

	// A pod without a controller is refused, as Spiderpool refuses it.
	_, err = alloc.Allocate(ctx, pod("lonely", ipam.AppRef{}))
	fmt.Println(errors.Is(err, ipam.ErrNotSupported))

	// The application goes; its pool goes once its pods are gone.
	ds, _ := m.DeleteApplication(ctx, app.AppRef)
	fmt.Println(ds[0].Action)
	if err := alloc.Release(ctx, store.Owner{UID: "uid-web-0"}); err != nil {
		panic(err)
	}
	ds, _ = m.DeletePod(ctx, "uid-web-0")
	fmt.Println(ds[0].Action, m.Status()[0].AllocatedIPCount)
	// Output:
	// true pod default/web-0 of Deployment default/web eth0 IPv4: subnet "subnet-6": the application (uid "6f1d-00000-a5bd3c") is not known to the subnet manager yet (SetApplication creates its pools)
	// 10.6.168.101/16 from auto4-web-eth0-a5bd3 by pod annotation ipam.spidernet.io/subnet
	// true
	// terminate
	// delete 0
}
