package hostlocal_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/hostlocal"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/filestore"
)

// A host-local network config, allocated through store/filestore in
// host-local's own state directory.
func ExampleFileStorePools() {
	dataDir, err := os.MkdirTemp("", "hostlocal-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dataDir)
	netconf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "net1", "ipam": {"type": "host-local",
		"dataDir": %q, "ranges": [[{"subnet": "10.10.0.0/24"}], [{"subnet": "2001:db8:10::/64"}]]}}`, dataDir)

	c, err := hostlocal.Load([]byte(netconf), "")
	if err != nil {
		panic(err)
	}
	pools, err := hostlocal.FileStorePools(c.Pools)
	if err != nil {
		panic(err)
	}
	st, err := filestore.Open(c.StateDir(), filestore.Options{Pools: pools})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	cat, err := ipam.NewCatalog(c.Pools...)
	if err != nil {
		panic(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := alloc.Allocate(ctx, ipam.Request{ContainerID: "c1",
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: c.PoolNames()}}})
	if err != nil {
		panic(err)
	}
	for _, ip := range res.IPs {
		b, err := os.ReadFile(c.StateDir() + "/" + ip.Address.Addr().String())
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s %s: %q\n", ip.Pool, ip.Address, b)
	}
	_, err = alloc.Allocate(ctx, ipam.Request{UID: "3f1c", ContainerID: "c2",
		Interfaces: []ipam.NIC{{Name: "eth0", Pools: c.PoolNames()}}})
	fmt.Println("a pod UID as owner:", err != nil)
	fmt.Println(alloc.Release(ctx, store.Owner{ContainerID: "c1"}))
	// Output:
	// net1/0 10.10.0.2/24: "c1\r\neth0"
	// net1/1 2001:db8:10::2/64: "c1\r\neth0"
	// a pod UID as owner: true
	// <nil>
}
