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
	// step 1 +201ms create default/web0-aaaaa (uid u000001) on n0: v4-b 10.0.1.10, v6-a fd00:0:0:1::10
	// step 2 +318ms create team/web1-aaaaa (uid u000002) on n3: v4-a 10.0.0.10, v6-a fd00:0:0:1::11
	// step 3 +941ms create default/db0-0 (uid u000003) on n1: v4-c 10.0.2.10, v6-a fd00:0:0:1::12, v4-a 10.0.0.11
	// step 4 +1.876s delete default/db0-0 (uid u000003) on n1: DEL keeps the addresses of a valid StatefulSet member
	// step 5 +2.059s create default/db0-0 (uid u000004) on n1: v4-c 10.0.2.10, v6-a fd00:0:0:1::12, v4-a 10.0.0.11 (reused)
	// step 6 +2.969s delete-lost-del default/db0-0 (uid u000004) on n1: DEL lost
	// step 7 +1m3.231s advance: +1m0s
	// step 8 +1m3.966s restart default/web0-aaaaa (uid u000001) on n0: v4-b 10.0.1.10, v6-a fd00:0:0:1::10 (reused)
	// step 9 +1m4.488s create default/db0-0 (uid u000005) on n3: v4-c 10.0.2.10, v6-a fd00:0:0:1::12, v4-a 10.0.0.11 (reused)
	// step 10 +1m4.598s agent-restart: agent 0
	// step 11 +1m5.044s restart default/web0-aaaaa (uid u000001) on n0: v4-b 10.0.1.10, v6-a fd00:0:0:1::10 (reused)
	// step 12 +1m21.552s advance: +16s
	// step 13 +3m51.552s settle: clock +2m30s
	// step 13 +3m51.552s gc: 7 claims
	// step 13 +3m51.552s gc: 7 claims
}
