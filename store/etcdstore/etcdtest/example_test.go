package etcdtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/etcdstore"
	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

// Two Allocators, as on two nodes, share a pool through etcd: each hands out
// addresses the other does not, and each finds what the other's owner holds.
func Example() {
	cluster, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	pools, err := ipam.NewCatalog(ipam.MustParsePool(`{"name": "blue", "ranges": [{"subnet": "10.0.0.0/24"}]}`))
	if err != nil {
		panic(err)
	}
	var nodes []*ipam.Allocator
	for range 2 {
		s, err := etcdstore.New(etcdstore.Options{Endpoints: cluster.Endpoints(), Prefix: "/example/"})
		if err != nil {
			panic(err)
		}
		defer s.Close()
		a, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: s})
		if err != nil {
			panic(err)
		}
		nodes = append(nodes, a)
	}

	ctx := context.Background()
	for i, name := range []string{"web-0", "web-1"} {
		res, err := nodes[i].Allocate(ctx, ipam.Request{Namespace: "default", Name: name, UID: "uid-" + name,
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}}})
		if err != nil {
			panic(err)
		}
		fmt.Printf("node %d: %s got %s\n", i, name, res.IPs[0].Address)
	}
	// The first node asks again for web-1: the Store says what it holds.
	res, err := nodes[0].Allocate(ctx, ipam.Request{Namespace: "default", Name: "web-1", UID: "uid-web-1",
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}}})
	if err != nil {
		panic(err)
	}
	fmt.Printf("node 0: web-1 has %s (reused: %t)\n", res.IPs[0].Address, res.IPs[0].Reused)

	// With no member left, calls fail with ErrUnavailable. (Close stops the
	// member as an operator would; Kill, a crash, is for fault tests.)
	cluster.Members[0].Close()
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = nodes[1].Release(ctx, store.Owner{Namespace: "default", Name: "web-1", UID: "uid-web-1"})
	fmt.Println(errors.Is(err, etcdstore.ErrUnavailable))
	// Output:
	// node 0: web-0 got 10.0.0.2/24
	// node 1: web-1 got 10.0.0.3/24
	// node 0: web-1 has 10.0.0.3/24 (reused: true)
	// true
}
