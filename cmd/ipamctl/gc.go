package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

// runGC judges every existing claim (status.allocatedIPs) with the library's
// garbage collection rules (ipam.DecideGC, default options) against the pods,
// nodes and StatefulSets of the input, at --now or the current time.
func runGC(args []string, in *input, stdout, stderr io.Writer, clock func() time.Time) int {
	var (
		out = output("table")
		at  string
	)
	fs := newFlagSet("gc", stderr, in)
	fs.StringVar(&at, "now", "", "judge the claims at this `time` (RFC 3339) instead of now")
	fs.Var(&out, "o", "output `format`: table or json")
	if code, ok := parseFlags(fs, args, in); !ok {
		return code
	}
	now := clock()
	if at != "" {
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			fmt.Fprintf(stderr, "ipamctl gc: --now %q: want an RFC 3339 time such as 2025-01-02T15:04:05Z\n", at)
			return exitUsage
		}
		now = t
	}

	c := in.load()
	// Pools that overlap cannot all be right: their claims are not judged
	// (the problems say which were left out), as explain does not use them.
	c.dropOverlaps()
	snap, err := ipam.NewGCSnapshot(now, c.gcPods(), c.gcSets())
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
	ds := ipam.DecideGC(claims, snap, now, ipam.GCOptions{})
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

// gcPods describes the input's pods as garbage collection sees them.
func (c *cluster) gcPods() []ipam.Pod {
	out := make([]ipam.Pod, 0, len(c.pods))
	for _, po := range c.pods {
		p := po.pod
		gp := ipam.Pod{
			Namespace:      p.Namespace,
			Name:           p.Name,
			UID:            podUID(p),
			Phase:          ipam.PodPhase(p.Status.Phase),
			HostNetwork:    p.Spec.HostNetwork,
			HasIPs:         len(p.Status.PodIPs) > 0 || p.Status.PodIP != "",
			ControllerKind: controllerKind(p),
			NodeReady:      nodeReady(c.nodes[p.Spec.NodeName]),
			// Kubernetes fills in 30 seconds when the field is unset.
			TerminationGracePeriod: 30 * time.Second,
		}
		if t := p.DeletionTimestamp; t != nil {
			gp.DeletionTimestamp = t.Time
		}
		if s := p.DeletionGracePeriodSeconds; s != nil {
			gp.DeletionGracePeriod = time.Duration(*s) * time.Second
		}
		if s := p.Spec.TerminationGracePeriodSeconds; s != nil {
			gp.TerminationGracePeriod = time.Duration(*s) * time.Second
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.Time.After(gp.FinishedAt) {
				gp.FinishedAt = t.FinishedAt.Time
			}
		}
		out = append(out, gp)
	}
	return out
}

// nodeReady reports whether the node exists and its Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	if n == nil {
		return false
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// gcSets describes the input's StatefulSets as garbage collection sees them.
func (c *cluster) gcSets() []ipam.StatefulSet {
	out := make([]ipam.StatefulSet, 0, len(c.sets))
	for _, so := range c.sets {
		s := so.set
		gs := ipam.StatefulSet{Namespace: s.Namespace, Name: s.Name, Replicas: 1}
		if s.Spec.Replicas != nil {
			gs.Replicas = int(*s.Spec.Replicas)
		}
		if s.Spec.Ordinals != nil {
			gs.OrdinalsStart = int(s.Spec.Ordinals.Start)
		}
		out = append(out, gs)
	}
	return out
}

func decision(d ipam.GCDecision) string {
	if d.Release {
		return "release"
	}
	return "keep"
}

func writeGCTable(w io.Writer, now time.Time, ds []ipam.GCDecision) error {
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
	}
)

func writeGCJSON(w io.Writer, now time.Time, ds []ipam.GCDecision) error {
	out := jsonGC{Now: now.UTC().Format(time.RFC3339), Claims: make([]jsonGCClaim, 0, len(ds))}
	for _, d := range ds {
		o := d.Claim.Owner
		out.Claims = append(out.Claims, jsonGCClaim{Pool: d.Claim.Pool, IP: d.Claim.IP.String(), Pod: o.Namespace + "/" + o.Name,
			PodUID: o.UID, Release: d.Release, Reason: string(d.Reason), Message: d.Message})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
