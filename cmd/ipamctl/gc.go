package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// runGC judges every existing claim (status.allocatedIPs, and a live
// cluster's IPClaims) with the library's garbage collection rules
// (gc.Decide, default options) against the pods, nodes and StatefulSets
// of the input, at --now or the current time. With --release (a live
// cluster only), it releases the IPClaims judged releasable, each at the
// revision it was read at (gc.Collect).
func runGC(ctx context.Context, args []string, in *input, stdout, stderr io.Writer, clock func() time.Time) int {
	var (
		out     = output("table")
		at      string
		release bool
	)
	fs := newFlagSet("gc", stderr, in)
	fs.StringVar(&at, "now", "", "judge the claims at this `time` (RFC 3339) instead of now")
	fs.Var(&out, "o", "output `format`: table or json")
	addKubeconfig(fs, in)
	fs.BoolVar(&release, "release", false, "release the IPClaims judged releasable (with --kubeconfig)")
	if code, ok := parseFlags(fs, args, in); !ok {
		return code
	}
	if in.live && at != "" {
		fmt.Fprintln(stderr, "ipamctl gc: --now and a cluster: a live cluster is judged as it is now")
		return exitUsage
	}
	if release && !in.live {
		fmt.Fprintln(stderr, "ipamctl gc: --release needs a cluster (--kubeconfig, --context, $KUBECONFIG or ~/.kube/config): claims in files are not released")
		return exitUsage
	}
	// A live cluster's snapshot is as old as the moment before it is read:
	// a claim made later, for a pod the lists may have missed, is kept.
	now := clock()
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			fmt.Fprintf(stderr, "ipamctl gc: --now %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z\n", at)
			return exitUsage
		}
		now = t
	}
	ctx, cancel := in.bound(ctx)
	defer cancel()
	c, err := in.cluster(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl gc: %v\n", err)
		return exitProblem
	}
	// Pools that overlap cannot all be right: their claims are not judged
	// (the problems say which were left out), as explain does not use them.
	c.dropOverlaps()
	snap, err := gc.NewSnapshot(now, c.gcPods(), c.gcSets())
	if err != nil {
		printProblems(stderr, c)
		for _, line := range errorLines("", err) {
			fmt.Fprintf(stderr, "ipamctl gc: %s\n", line)
		}
		return exitProblem
	}
	var claims []store.Claim
	for _, po := range c.pools {
		for _, cl := range po.claims {
			claims = append(claims, store.Claim{Pool: po.pool.Name, IP: cl.ip, Owner: c.claimOwner(cl)})
		}
	}
	if c.live {
		now = clock()
	}
	ds := gc.Decide(claims, snap, now, gc.Options{})
	if release {
		live, err := collectLive(ctx, in, c, snap, now)
		if err != nil {
			fmt.Fprintf(stderr, "ipamctl gc: --release: %v\n", err)
		}
		ds = append(ds, live...)
	} else {
		ds = append(ds, gc.Decide(c.liveClaims, snap, now, gc.Options{})...)
	}
	if out == "json" {
		err = writeGCJSON(stdout, now, ds)
	} else {
		err = writeGCTable(stdout, now, ds)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl gc: %v\n", err)
		return exitProblem
	}
	return printProblems(stderr, c)
}

// collectLive releases the IPClaims of c's pools that gc.Decide releases
// against snap, through the cluster's API, each at the revision it is read
// at: they are read again after snap was taken.
func collectLive(ctx context.Context, in *input, c *cluster, snap *gc.Snapshot, now time.Time) ([]gc.Decision, error) {
	cfg, err := in.restConfig()
	if err != nil {
		return nil, err
	}
	st, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		return nil, err
	}
	cat, err := ipam.NewCatalog(c.poolList()...)
	if err != nil {
		return nil, err
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		return nil, err
	}
	return gc.Collect(ctx, a, snap, now, gc.Options{})
}

// gcPods describes the input's pods as garbage collection sees them.
func (c *cluster) gcPods() []gc.Pod {
	out := make([]gc.Pod, 0, len(c.pods))
	for _, po := range c.pods {
		gp := k8s.GCPod(po.pod, c.nodes[po.pod.Spec.NodeName])
		gp.UID = podUID(po.pod)
		out = append(out, gp)
	}
	return out
}

// gcSets describes the input's StatefulSets as garbage collection sees them.
func (c *cluster) gcSets() []gc.StatefulSet {
	out := make([]gc.StatefulSet, 0, len(c.sets))
	for _, so := range c.sets {
		out = append(out, k8s.GCStatefulSet(so.set))
	}
	return out
}

func decision(d gc.Decision) string {
	switch {
	case d.Applied:
		return "released"
	case d.Release && d.Err != nil:
		return "not released"
	case d.Release:
		return "release"
	}
	return "keep"
}

func writeGCTable(w io.Writer, now time.Time, ds []gc.Decision) error {
	n := 0
	for _, d := range ds {
		if d.Release {
			n++
		}
	}
	fmt.Fprintf(w, "at %s: %s, %d to release\n", now.UTC().Format(time.RFC3339), plural(len(ds), "claim"), n)
	if len(ds) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w)
	fmt.Fprintln(t, "POOL\tIP\tPOD\tUID\tDECISION\tREASON")
	for _, d := range ds {
		o := d.Claim.Owner
		fmt.Fprintf(t, "%s\t%s\t%s/%s\t%s\t%s\t%s\n", d.Claim.Pool, d.Claim.IP, o.Namespace, o.Name, o.UID, decision(d), d.Reason)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "why:")
	for _, d := range ds {
		fmt.Fprintf(w, "  %s %s: %s\n", d.Claim.Pool, d.Claim.IP, d.Message)
		if d.Err != nil {
			fmt.Fprintf(w, "    not released: %v\n", d.Err)
		}
	}
	return nil
}

type (
	jsonGC struct {
		Now    string        `json:"now"`
		Claims []jsonGCClaim `json:"claims"`
	}
	jsonGCClaim struct {
		Pool    string `json:"pool"`
		IP      string `json:"ip"`
		Pod     string `json:"pod"`
		PodUID  string `json:"podUid"`
		Release bool   `json:"release"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		// Released and Error say what --release did.
		Released bool   `json:"released,omitempty"`
		Error    string `json:"error,omitempty"`
	}
)

func writeGCJSON(w io.Writer, now time.Time, ds []gc.Decision) error {
	out := jsonGC{Now: now.UTC().Format(time.RFC3339), Claims: make([]jsonGCClaim, 0, len(ds))}
	for _, d := range ds {
		o := d.Claim.Owner
		jc := jsonGCClaim{Pool: d.Claim.Pool, IP: d.Claim.IP.String(), Pod: o.Namespace + "/" + o.Name,
			PodUID: o.UID, Release: d.Release, Reason: string(d.Reason), Message: d.Message, Released: d.Applied}
		if d.Err != nil {
			jc.Error = d.Err.Error()
		}
		out.Claims = append(out.Claims, jc)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
