package ipam_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// exampleAllocator returns an in-memory Allocator over the pools, given as JSON.
func exampleAllocator(pools ...string) *ipam.Allocator {
	var ps []*ipam.Pool
	for _, s := range pools {
		ps = append(ps, ipam.MustParsePool(s))
	}
	cat, err := ipam.NewCatalog(ps...)
	if err != nil {
		panic(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		panic(err)
	}
	return a
}

// examplePod is a request for one interface of one pod.
func examplePod(name, iface string, pools ...string) ipam.Request {
	return ipam.Request{
		Namespace:  "default",
		Name:       name,
		UID:        "uid-" + name,
		Interfaces: []ipam.NIC{{Name: iface, Pools: pools}},
	}
}

// A SpiderIPPool spec: the addresses to hand out are ips minus excludeIPs; the
// gateway lies outside ips.
func ExampleParsePool() {
	p, err := ipam.ParsePool([]byte(`{
		"name": "green",
		"subnet": "10.0.1.0/24",
		"ips": ["10.0.1.10-10.0.1.20", "10.0.1.30"],
		"excludeIPs": ["10.0.1.15"],
		"gateway": "10.0.1.1",
		"routes": [{"dst": "10.96.0.0/12", "gw": "10.0.1.1"}],
		"vlan": 100,
		"nodeAffinity": {"matchLabels": {"topology.kubernetes.io/zone": "eu-1a"}},
		"strategy": "lowest-free"
	}`))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s: IPv%d subnet %s gateway %s vlan %d, %s\n", p.Name, p.Family(), p.Subnet, p.Gateway, p.Vlan, p.Strategy)
	fmt.Println("ips:", p.IPs)
	fmt.Println("excluded:", p.ExcludeIPs)
	for _, r := range p.Routes {
		fmt.Println("route:", r.Dst, "via", r.GW)
	}
	fmt.Println("nodes:", p.NodeAffinity)
	// Output:
	// green: IPv4 subnet 10.0.1.0/24 gateway 10.0.1.1 vlan 100, lowest-free
	// ips: [10.0.1.10-10.0.1.20 10.0.1.30-10.0.1.30]
	// excluded: [10.0.1.15-10.0.1.15]
	// route: 10.96.0.0/12 via 10.0.1.1
	// nodes: topology.kubernetes.io/zone=eu-1a
}

// A host-local range set gets host-local's defaults: a range starts at
// network+1 and ends before the broadcast address, and the gateway defaults to
// network+1, which is never handed out, so the first address is .2.
func ExampleParsePool_hostLocal() {
	p := ipam.MustParsePool(`{"name":"blue","ranges":[
		{"subnet": "10.0.0.0/24"},
		{"subnet": "10.0.1.0/24", "rangeStart": "10.0.1.100", "rangeEnd": "10.0.1.199", "gateway": "10.0.1.254"}
	]}`)
	rs, err := p.RangeSet()
	if err != nil {
		panic(err)
	}
	for i, r := range rs {
		fmt.Printf("ranges[%d]: %s in %s, gateway %s\n", i, r, r.Subnet, r.Gateway)
	}

	a := exampleAllocator(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	res, err := a.Allocate(context.Background(), examplePod("web-0", "eth0", "blue"))
	if err != nil {
		panic(err)
	}
	fmt.Println("first address:", res.IPs[0].Address, "gateway", res.IPs[0].Gateway)
	// Output:
	// ranges[0]: 10.0.0.1-10.0.0.254 in 10.0.0.0/24, gateway 10.0.0.1
	// ranges[1]: 10.0.1.100-10.0.1.199 in 10.0.1.0/24, gateway 10.0.1.254
	// first address: 10.0.0.2/24 gateway 10.0.0.1
}

// An interface that names two pools gets one address from each: here an IPv4
// and an IPv6 address for a dual-stack pod.
func ExampleAllocator_Allocate() {
	a := exampleAllocator(
		`{"name":"v4","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.99"],"gateway":"10.0.0.1","vlan":10}`,
		`{"name":"v6","subnet":"fd00::/64","ips":["fd00::10-fd00::ff"],"gateway":"fd00::1","vlan":10}`,
	)
	res, err := a.Allocate(context.Background(), examplePod("web-0", "eth0", "v4", "v6"))
	if err != nil {
		panic(err)
	}
	for _, c := range res.IPs {
		fmt.Printf("%s from %s: %s gateway %s vlan %d\n", c.Interface, c.Pool, c.Address, c.Gateway, c.Vlan)
	}
	// Output:
	// eth0 from v4: 10.0.0.10/24 gateway 10.0.0.1 vlan 10
	// eth0 from v6: fd00::10/64 gateway fd00::1 vlan 10
}

// Asking again for the same owner and interface returns what the owner already
// holds, marked Reused, instead of a second address.
func ExampleAllocator_Allocate_idempotent() {
	a := exampleAllocator(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	ctx := context.Background()
	for range 2 {
		res, err := a.Allocate(ctx, examplePod("web-0", "eth0", "blue"))
		if err != nil {
			panic(err)
		}
		fmt.Println(res.IPs[0].Address, "reused:", res.IPs[0].Reused)
	}
	// Output:
	// 10.0.0.2/24 reused: false
	// 10.0.0.2/24 reused: true
}

// A request may name the address it wants; an address someone else holds is
// refused with ErrUnavailable.
func ExampleAllocator_Allocate_requested() {
	a := exampleAllocator(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	ctx := context.Background()

	req := examplePod("db-0", "eth0", "blue")
	req.Interfaces[0].IPs = []netip.Addr{netip.MustParseAddr("10.0.0.7")}
	res, err := a.Allocate(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Println("db-0:", res.IPs[0].Address)

	req = examplePod("db-1", "eth0", "blue")
	req.Interfaces[0].IPs = []netip.Addr{netip.MustParseAddr("10.0.0.7")}
	_, err = a.Allocate(ctx, req)
	fmt.Println("db-1:", errors.Is(err, ipam.ErrUnavailable), err)
	// Output:
	// db-0: 10.0.0.7/24
	// db-1: true eth0: pool "blue": requested IP address 10.0.0.7 is not available in range set 10.0.0.1-10.0.0.254: already claimed
}

// Release gives back everything an owner holds; releasing again is not an error.
func ExampleAllocator_Release() {
	a := exampleAllocator(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/24"}]}`)
	ctx := context.Background()
	if _, err := a.Allocate(ctx, examplePod("web-0", "eth0", "blue")); err != nil {
		panic(err)
	}
	owner := store.Owner{UID: "uid-web-0"}
	held, _ := a.Lookup(ctx, owner)
	for _, c := range held {
		fmt.Println("holds", c.Key(), "for", c.Owner)
	}

	fmt.Println("release:", a.Release(ctx, owner))
	held, _ = a.Lookup(ctx, owner)
	fmt.Println("holds", len(held), "addresses")
	fmt.Println("release again:", a.Release(ctx, owner))
	// Output:
	// holds blue/10.0.0.2 for default/web-0 (uid uid-web-0) eth0
	// release: <nil>
	// holds 0 addresses
	// release again: <nil>
}

// Round-robin (host-local's choice, the default) continues after the last
// address it handed out, so a released address is not reused at once;
// lowest-free (Spiderpool's choice) hands out the lowest free address.
func ExampleStrategy() {
	a := exampleAllocator(
		`{"name":"rr","ranges":[{"subnet":"10.0.0.0/29"}]}`,
		`{"name":"lf","subnet":"10.0.1.0/29","ips":["10.0.1.2-10.0.1.6"],"gateway":"10.0.1.1","strategy":"lowest-free"}`,
	)
	ctx := context.Background()
	for _, pool := range []string{"rr", "lf"} {
		var got []netip.Addr
		for _, pod := range []string{"a", "b", "c"} {
			res, err := a.Allocate(ctx, examplePod(pool+"-"+pod, "eth0", pool))
			if err != nil {
				panic(err)
			}
			got = append(got, res.IPs[0].Address.Addr())
		}
		if err := a.Release(ctx, store.Owner{UID: "uid-" + pool + "-a"}); err != nil {
			panic(err)
		}
		res, err := a.Allocate(ctx, examplePod(pool+"-d", "eth0", pool))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: a b c got %v; after releasing a, d gets %s\n", pool, got, res.IPs[0].Address.Addr())
	}
	// Output:
	// rr: a b c got [10.0.0.2 10.0.0.3 10.0.0.4]; after releasing a, d gets 10.0.0.5
	// lf: a b c got [10.0.1.2 10.0.1.3 10.0.1.4]; after releasing a, d gets 10.0.1.2
}

// ValidatePools checks pools against each other and reports every problem at
// once: here two pools share addresses, and a third has a subnet that overlaps
// theirs without being the same.
func ExampleValidatePools() {
	err := ipam.ValidatePools([]*ipam.Pool{
		ipam.MustParsePool(`{"name":"blue","subnet":"10.0.0.0/24","ips":["10.0.0.10-10.0.0.30"]}`),
		ipam.MustParsePool(`{"name":"green","subnet":"10.0.0.0/24","ips":["10.0.0.20-10.0.0.25"]}`),
		ipam.MustParsePool(`{"name":"red","subnet":"10.0.0.0/16","ips":["10.0.9.1"]}`),
	})
	fmt.Println(errors.Is(err, ipam.ErrInvalid))
	fmt.Println(err)
	// Output:
	// true
	// pool "red": subnet "10.0.0.0/16": overlaps pool "green" whose subnet is 10.0.0.0/24
	// pool "red": subnet "10.0.0.0/16": overlaps pool "blue" whose subnet is 10.0.0.0/24
	// pool "green": ips "10.0.0.20-10.0.0.25": overlaps the addresses of pool "blue"
}

// A pod that names no pools gets them from Spiderpool's chain: here its
// ipam.spidernet.io/ippool annotation. Pools the pod cannot use are filtered,
// the rest are sorted by priority and tried in order, and the trace says what
// happened to each.
func ExampleAllocator_Allocate_selection() {
	a := exampleAllocator(
		`{"name":"blue","subnet":"10.0.1.0/24","ips":["10.0.1.10-10.0.1.20"],"gateway":"10.0.1.1","nodeName":["n1"]}`,
		`{"name":"green","subnet":"10.0.2.0/24","ips":["10.0.2.10"],"gateway":"10.0.2.1"}`,
		`{"name":"red","subnet":"10.0.3.0/24","ips":["10.0.3.10-10.0.3.20"],"gateway":"10.0.3.1"}`,
	)
	ctx := context.Background()
	pod := func(name string) ipam.Request {
		return ipam.Request{
			Namespace: "default", Name: name, UID: "uid-" + name, Node: "n2",
			Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["blue","green","red"]}`},
			Interfaces:  []ipam.NIC{{Name: "eth0"}},
		}
	}
	for _, name := range []string{"web-0", "web-1"} {
		res, err := a.Allocate(ctx, pod(name))
		if err != nil {
			panic(err)
		}
		fmt.Println(name, "got", res.IPs[0].Address, "from", res.IPs[0].Pool, "routes", res.IPs[0].Routes)
		for _, e := range res.Trace {
			fmt.Println("  ", e)
		}
	}
	// Output:
	// web-0 got 10.0.2.10/24 from green routes [{0.0.0.0/0 10.0.2.1}]
	//    eth0 IPv4 blue: filtered: node "n2" not in nodeName [n1]
	//    eth0 IPv4 green: served (rank 1)
	//    eth0 IPv4 red: candidate (rank 2)
	// web-1 got 10.0.3.10/24 from red routes [{0.0.0.0/0 10.0.3.1}]
	//    eth0 IPv4 blue: filtered: node "n2" not in nodeName [n1]
	//    eth0 IPv4 green: exhausted (rank 1) (1/1 used)
	//    eth0 IPv4 red: served (rank 2)
}

// When no pool can serve, the error says why, pool by pool, and carries the
// trace.
func ExampleAllocationError_trace() {
	a := exampleAllocator(
		`{"name":"blue","subnet":"10.0.1.0/24","ips":["10.0.1.10-10.0.1.20"],"nodeName":["n1"]}`,
		`{"name":"green","subnet":"10.0.2.0/24","ips":["10.0.2.10"]}`,
	)
	ctx := context.Background()
	req := func(name string) ipam.Request {
		return ipam.Request{
			Namespace: "default", Name: name, UID: "uid-" + name, Node: "n2",
			Annotations: map[string]string{ipam.AnnotationIPPool: `{"ipv4":["blue","green"]}`},
			Interfaces:  []ipam.NIC{{Name: "eth0"}},
		}
	}
	if _, err := a.Allocate(ctx, req("web-0")); err != nil {
		panic(err)
	}
	_, err := a.Allocate(ctx, req("web-1"))
	fmt.Println(err)
	var ae *ipam.AllocationError
	if errors.As(err, &ae) {
		fmt.Println(errors.Is(err, ipam.ErrNoCandidates), len(ae.Trace), "pools in the trace")
	}
	// Output:
	// eth0 IPv4: no pool can serve pod default/web-1: blue: node "n2" not in nodeName [n1]; green: exhausted (1/1 used)
	// true 2 pools in the trace
}
