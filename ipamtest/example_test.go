package ipamtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/ipamtest"
)

// Pools and pods in one line each: a StatefulSet pod on node n1 gets an
// address from the default pool that serves n1 (a pool bound to nodes ranks
// first), and gets it back when it is re-created with a new UID.
func ExampleNewPod() {
	cat, err := ipam.NewCatalog(
		ipamtest.V4Pool("blue", "10.0.0.0/29", ipamtest.Default()),
		ipamtest.V4Pool("green", "10.0.1.0/29", ipamtest.Default(), ipamtest.OnNodes("n1")),
	)
	if err != nil {
		panic(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	db := ipamtest.NewPod("default", "db-0").StatefulSet().Node("n1")
	for _, uid := range []string{"uid-1", "uid-2"} {
		res, err := a.AllocateAt(ctx, db.UID(uid).Request(), now)
		if err != nil {
			panic(err)
		}
		ip := res.IPs[0]
		fmt.Printf("%s: %s %s from %s (reused %t)\n", uid, ip.Interface, ip.Address, ip.Pool, ip.Reused)
	}
	web := ipamtest.NewPod("default", "web").Node("n2").Request()
	res, err := a.AllocateAt(ctx, web, now)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s on n2: %s from %s\n", web.UID, res.IPs[0].Address, res.IPs[0].Pool)
	// Output:
	// uid-1: eth0 10.0.1.2/29 from green (reused false)
	// uid-2: eth0 10.0.1.2/29 from green (reused true)
	// uid-default-web on n2: 10.0.0.2/29 from blue
}

// A simulated cluster: each step is one event, checked against the Store. The
// same seed gives the same history.
func ExampleSim() {
	s, err := ipamtest.NewSim(42, ipamtest.SimOptions{HistoryLen: -1})
	if err != nil {
		panic(err)
	}
	if err := s.Run(12); err != nil {
		panic(err) // a *Violation, naming the seed, the step and the events before it
	}
	for _, line := range s.History() {
		fmt.Println(line)
	}
	// Output:
	// step 1 +856ms scale-up: team/db0 to 1 replicas
	// step 2 +40.694s advance: +39s
	// step 3 +41.014s node-fail: n0 NotReady
	// step 4 +51.684s advance: +10s
	// step 5 +52.324s create default/web0-aaaaa (uid u000001) on n1: v4-b 10.0.1.10, v6-a fd00:0:0:1::10
	// step 6 +52.617s create default/web0-aaaab (uid u000002) on n1: v4-b 10.0.1.11, v6-a fd00:0:0:1::11
	// step 7 +52.975s create team/db0-0 (uid u000003) on n1: v4-b 10.0.1.12, v6-a fd00:0:0:1::12
	// step 8 +1m50.486s advance: +57s
	// step 9 +1m50.766s node-recover: n0 Ready
	// step 10 +1m50.949s recreate team/db0-0 (uid u000003) on n1: deleted, DEL lost
	// step 10 +1m50.949s recreate team/db0-0 (uid u000004) on n1: v4-b 10.0.1.12, v6-a fd00:0:0:1::12 (reused)
	// step 11 +1m51.756s create default/web1-aaaaa (uid u000005) on n1: v4-b 10.0.1.13, v6-a fd00:0:0:1::13
	// step 12 +1m52.323s restart default/web1-aaaaa (uid u000005) on n1: v4-b 10.0.1.13, v6-a fd00:0:0:1::13 (reused)
	// step 13 +4m22.323s settle: clock +2m30s
	// step 13 +4m22.323s gc: 8 claims
	// step 13 +4m22.323s gc: 8 claims
}
