package gc_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store"
)

// Garbage collection judges each claim against a snapshot of the cluster's
// pods and StatefulSets at a given time; nothing is read from a clock or a
// store.
func ExampleDecide() {
	now := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)
	claim := func(ip, name, uid string) store.Claim {
		return store.Claim{
			Pool:  "blue",
			IP:    netip.MustParseAddr(ip),
			Owner: store.Owner{Namespace: "default", Name: name, UID: uid, Interface: "eth0"},
			Time:  now.Add(-time.Hour),
		}
	}
	claims := []store.Claim{
		claim("10.0.0.2", "cache", "u1"),  // running
		claim("10.0.0.3", "api", "u2"),    // terminating for a while
		claim("10.0.0.4", "report", "u3"), // a finished Job pod
		claim("10.0.0.5", "db-1", "u4"),   // StatefulSet pod being recreated
		claim("10.0.0.6", "db-2", "u5"),   // StatefulSet scaled down to 2
		claim("10.0.0.7", "old", "u6"),    // deleted
		{Pool: "blue", IP: netip.MustParseAddr("10.0.0.8"), Owner: store.Owner{ContainerID: "c0ffee"}},
	}
	snap, err := gc.NewSnapshot(now, []gc.Pod{
		{Namespace: "default", Name: "cache", UID: "u1", Phase: gc.PodRunning, NodeReady: true, HasIPs: true},
		{
			Namespace: "default", Name: "api", UID: "u2", Phase: gc.PodRunning, NodeReady: true, HasIPs: true,
			DeletionTimestamp: now.Add(-10 * time.Second), DeletionGracePeriod: 30 * time.Second,
		},
		{
			Namespace: "default", Name: "report", UID: "u3", Phase: gc.PodSucceeded, NodeReady: true, HasIPs: true,
			FinishedAt: now.Add(-20 * time.Second), TerminationGracePeriod: 30 * time.Second,
		},
	}, []gc.StatefulSet{{Namespace: "default", Name: "db", Replicas: 2}})
	if err != nil {
		panic(err)
	}

	for _, d := range gc.Decide(claims, snap, now, gc.Options{AdditionalGraceDelay: 5 * time.Second}) {
		verdict := "keep"
		if d.Release {
			verdict = "release"
		}
		fmt.Printf("%s %s (%s)\n\t%s\n", d.Claim.IP, verdict, d.Reason, d.Message)
	}
	// Output:
	// 10.0.0.2 keep (running)
	// 	pod default/cache (uid u1) is Running and reports its addresses
	// 10.0.0.3 release (terminating-expired)
	// 	pod default/api (uid u2) is terminating (deletion timestamp 2026-07-01T11:59:50Z, grace 30s); releasable from 2026-07-01T11:59:55Z (additional delay 5s); now 2026-07-01T12:00:00Z
	// 10.0.0.4 keep (finished)
	// 	pod default/report (uid u3) is Succeeded since 2026-07-01T11:59:40Z; releasable from 2026-07-01T12:00:15Z (termination grace 30s, additional delay 5s); now 2026-07-01T12:00:00Z
	// 10.0.0.5 keep (statefulset-member)
	// 	pod default/db-1 (uid u4) no longer exists, but ordinal 1 is within StatefulSet default/db's ordinals 0-1: its recreated pod will reuse blue/10.0.0.5
	// 10.0.0.6 release (pod-gone)
	// 	pod default/db-2 (uid u5) no longer exists and ordinal 2 is outside StatefulSet default/db's ordinals 0-1
	// 10.0.0.7 release (pod-gone)
	// 	pod default/old (uid u6) no longer exists
	// 10.0.0.8 keep (not-pod-owned)
	// 	blue/10.0.0.8 is held by container c0ffee, which names no pod UID: pod garbage collection does not judge it
}

// Collect lists the claims, judges them, and releases the releasable
// ones, each only if it has not changed since it was listed.
func ExampleCollect() {
	ctx := context.Background()
	cat, err := ipam.NewCatalog(ipam.MustParsePool(`{"name":"blue","ranges":[{"subnet":"10.0.0.0/29"}]}`))
	if err != nil {
		panic(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		panic(err)
	}
	start := time.Date(2026, 7, 1, 11, 0, 0, 0, time.UTC)
	for _, name := range []string{"web", "gone"} {
		_, err := a.AllocateAt(ctx, ipam.Request{
			Namespace: "default", Name: name, UID: "uid-" + name,
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"blue"}}},
		}, start)
		if err != nil {
			panic(err)
		}
	}

	now := start.Add(time.Hour)
	snap, err := gc.NewSnapshot(now, []gc.Pod{
		{Namespace: "default", Name: "web", UID: "uid-web", Phase: gc.PodRunning, NodeReady: true, HasIPs: true},
	}, nil)
	if err != nil {
		panic(err)
	}
	ds, err := gc.Collect(ctx, a, snap, now, gc.Options{})
	if err != nil {
		panic(err)
	}
	for _, d := range ds {
		fmt.Printf("%s %s: release=%t applied=%t\n", d.Claim.IP, d.Claim.Owner.Name, d.Release, d.Applied)
	}
	left, err := a.Claims(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("claims left:", len(left))
	// Output:
	// 10.0.0.2 web: release=false applied=false
	// 10.0.0.3 gone: release=true applied=true
	// claims left: 1
}
