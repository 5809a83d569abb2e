package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

// runValidate checks the input: every document decodes, every pool is valid
// alone and against the others (names, subnets, overlapping addresses),
// every reserved IP object is valid, every SpiderSubnet is valid alone, with
// the others and with the pools in its CIDR, every claim in
// status.allocatedIPs is an allocatable address of its pool, and the
// pool-choice annotations of pods and namespaces, and the SpiderSubnet
// annotations of the controllers' pod templates, parse. It prints every problem and exits non-zero if there
// is any.
func runValidate(args []string, in *input, stdout, stderr io.Writer) int {
	fs := newFlagSet("validate", stderr, in)
	if code, ok := parseFlags(fs, args, in); !ok {
		return code
	}
	c := in.load()
	c.printNotes(stderr)
	c.crossCheck()
	c.plannedSubnets(c.poolList())
	c.checkClaims()
	c.checkAnnotations()
	if len(c.problems) == 0 {
		v4, claims := 0, 0
		for _, po := range c.pools {
			if po.pool.Family() == 4 {
				v4++
			}
			claims += len(po.claims)
		}
		fmt.Fprintf(stdout, "ok: %s (%d IPv4, %d IPv6), %s, %s, %s, %s, %s\n",
			plural(len(c.pools), "pool"), v4, len(c.pools)-v4,
			plural(len(c.reserved), "reserved IP object"), plural(claims, "claim"), plural(len(c.pods), "pod"),
			plural(len(c.subnets), "subnet"), plural(len(c.apps), "application"))
		return exitOK
	}
	for _, p := range c.sortedProblems() {
		fmt.Fprintln(stdout, p)
	}
	fmt.Fprintln(stdout, plural(len(c.problems), "problem"))
	return exitProblem
}

// checkClaims reports claims on addresses the pool never hands out: excluded
// ones and gateways. (Addresses outside the pool were reported when read.)
func (c *cluster) checkClaims() {
	for _, po := range c.pools {
		p := po.pool
		rs, _ := p.RangeSet()
		for _, cl := range po.claims {
			path := fmt.Sprintf("status.allocatedIPs[%q]", cl.ip.String())
			excluded := false
			for _, r := range p.ExcludeIPs {
				excluded = excluded || r.Contains(cl.ip)
			}
			switch {
			case excluded:
				c.addProblem(po.at, "%s: claimed by %s/%s but excluded by spec.excludeIPs", path, cl.namespace, cl.pod)
			case slices.ContainsFunc(rs, func(r ipam.Range) bool { return r.Gateway == cl.ip }):
				c.addProblem(po.at, "%s: claimed by %s/%s but it is the gateway", path, cl.namespace, cl.pod)
			}
		}
	}
}

// checkAnnotations reports pool-choice annotations that do not parse.
func (c *cluster) checkAnnotations() {
	for _, po := range c.pods {
		a := po.pod.Annotations
		check := func(key string, parse func(string) error) {
			if v, ok := a[key]; ok {
				c.addAnnotationError(po.at, key, parse(v))
			}
		}
		check(ipam.AnnotationIPPool, func(v string) error { _, err := ipam.ParseIPPoolAnnotation(v); return err })
		check(ipam.AnnotationIPPools, func(v string) error { _, err := ipam.ParseIPPoolsAnnotation(v); return err })
		check(ipam.AnnotationSubnet, func(v string) error { _, err := ipam.ParseSubnetAnnotation(v); return err })
		check(ipam.AnnotationSubnets, func(v string) error { _, err := ipam.ParseSubnetsAnnotation(v); return err })
	}
	for _, a := range c.apps {
		_, _, err := subnet.ParseConfig(a.app.Annotations)
		for _, e := range leafErrors(err) {
			var ae *ipam.AnnotationError
			if errors.As(e, &ae) {
				c.addProblem(a.at, "pod template annotations[%q] %s: %s", ae.Key, quote(ae.Value), ae.Reason)
			}
		}
	}
	names := make([]string, 0, len(c.namespaces))
	for n := range c.namespaces {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		ns := c.namespaces[n]
		at := c.seen[kindNamespace+"//"+n]
		for _, key := range []string{ipam.AnnotationNSDefaultIPv4, ipam.AnnotationNSDefaultIPv6} {
			if v, ok := ns.Annotations[key]; ok {
				_, err := ipam.ParsePoolList(v)
				c.addAnnotationError(at, key, err)
			}
		}
	}
}

func (c *cluster) addAnnotationError(at origin, key string, err error) {
	for _, e := range leafErrors(err) {
		var ae *ipam.AnnotationError
		if errors.As(e, &ae) {
			c.addProblem(at, "metadata.annotations[%q] %s: %s", key, quote(ae.Value), ae.Reason)
			continue
		}
		c.addProblem(at, "metadata.annotations[%q]: %v", key, e)
	}
}

// quote quotes a value for a message: between backquotes when it holds
// double quotes (JSON reads better unescaped), else with strconv.Quote.
func quote(s string) string {
	if strings.Contains(s, `"`) && !strings.ContainsAny(s, "`\n") {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}
