package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// This file holds ipamctl plan: the SpiderSubnet auto-pools each application
// of the input needs (subnet.Decide over the subnets, pools, reserved
// addresses and controllers read), and each subnet's counts once they are
// made.

func runPlan(args []string, in *input, stdout, stderr io.Writer) int {
	out := output("table")
	def := ""
	fs := newFlagSet("plan", stderr, in)
	fs.Var(&out, "o", "output `format`: table or json")
	fs.StringVar(&def, "default-ip-number", "", "size of the pools of applications without ipam.spidernet.io/ippool-ip-number, `N or +N` (Spiderpool's Helm value ipam.spiderSubnet.autoPool.defaultRedundantIPNumber N is +N; default +1)")
	if code, ok := parseFlags(fs, args, in); !ok {
		return code
	}
	opts := subnet.Options{DefaultIPNumber: def}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(stderr, "ipamctl plan: --default-ip-number: %v\n", err)
		return exitUsage
	}
	c := in.load()
	c.dropOverlaps()
	p := c.plan(opts)
	var err error
	if out == "json" {
		c.printNotes(stderr)
		err = p.writeJSON(stdout, c)
	} else {
		err = p.writeTable(stdout)
		if err == nil {
			return printProblems(stderr, c)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "ipamctl plan: writing the output: %v\n", err)
		return exitProblem
	}
	if len(c.problems) > 0 {
		return exitProblem
	}
	return exitOK
}

// planned is what plan found.
type planned struct {
	pools   []plannedPool
	subnets []subnet.Status
}

// plannedPool is one auto-pool and what the plan does to it.
type plannedPool struct {
	name, subnet, application string
	ips                       []string
	labels                    map[string]string
	action                    subnet.Action
	message                   string
}

// plan decides the auto-pools of the applications read. Every problem is
// recorded in c: objects that cannot be planned with (a subnet that overlaps
// another, an auto-pool whose labels do not parse) are left out, and an
// application whose annotations ask for what cannot be done gets no pool.
func (c *cluster) plan(opts subnet.Options) *planned {
	pools := c.poolList()
	subnets := c.plannedSubnets(pools)

	var manual []*ipam.Pool
	var auto []*subnet.AutoPool
	var claims []store.Claim
	for _, po := range c.pools {
		a, isAuto, err := subnet.ParseAutoPool(po.pool, po.labels, po.annotations)
		switch {
		case err != nil:
			c.addError(po.at, "", err)
			c.addProblem(po.at, "the auto-pool is planned with as a pool written by hand: its addresses stay taken, and no application resizes it")
			fallthrough
		case !isAuto:
			manual = append(manual, po.pool)
			continue
		}
		auto = append(auto, a)
		for _, cl := range po.claims {
			claims = append(claims, store.Claim{Pool: po.pool.Name, IP: cl.ip})
		}
	}
	reserved := make([]*ipam.ReservedIP, len(c.reserved))
	for i, r := range c.reserved {
		reserved[i] = r.r
	}
	snap, err := subnet.NewSnapshot(subnets, manual, auto, reserved, claims)
	if err != nil {
		for _, e := range leafErrors(err) {
			c.addProblem(origin{}, "cannot plan: %s", oneLine(e.Error()))
		}
		return &planned{}
	}
	apps := make([]subnet.Application, len(c.apps))
	at := make(map[string]origin, len(c.apps))
	for i, a := range c.apps {
		apps[i] = a.app
		at[a.app.UID] = a.at
	}
	final := make(map[string]*subnet.AutoPool, len(auto))
	for _, a := range auto {
		final[a.Name()] = a
	}
	p := &planned{}
	for _, d := range subnet.Decide(apps, snap, opts) {
		switch {
		case d.Action == subnet.Skip:
			continue
		case d.Action == subnet.Fail || (d.Action == subnet.Wait && d.Pool == nil):
			where := at[d.App.UID]
			if d.Action == subnet.Wait {
				c.addProblem(where, "no pool yet for %s: %s", d.Interface+" IPv"+fmt.Sprint(d.Family), d.Message)
				continue
			}
			for _, text := range errorLines("", d.Err) {
				c.addProblem(where, "%s", text)
			}
			continue
		case d.Action == subnet.Delete:
			delete(final, d.PoolName())
		default:
			final[d.PoolName()] = d.Pool
		}
		p.pools = append(p.pools, plannedPool{
			name: d.PoolName(), subnet: d.Subnet, application: d.App.StatusName(),
			ips: specIPs(d.Pool.Pool), labels: d.Pool.Labels(), action: d.Action, message: d.Message,
		})
	}
	finalPools := slices.SortedFunc(maps.Values(final), func(a, b *subnet.AutoPool) int { return cmp.Compare(a.Name(), b.Name()) })
	for _, s := range subnets {
		p.subnets = append(p.subnets, subnet.StatusOf(s, manual, finalPools))
	}
	return p
}

// plannedSubnets returns the subnets to plan with, in input order: each
// subnet that goes with the ones kept before it and with the pools
// (subnet.ValidateAll). A subnet that does not is left out, and a problem
// that names a pool is recorded at the pool.
func (c *cluster) plannedSubnets(pools []*ipam.Pool) []*subnet.Subnet {
	var kept []*subnet.Subnet
	reported := map[string]bool{}
	for _, so := range c.subnets {
		err := subnet.ValidateAll(append(slices.Clip(kept), so.subnet), pools)
		own := false
		for _, e := range leafErrors(err) {
			var fe *ipam.FieldError
			if errors.As(e, &fe) {
				if i := slices.IndexFunc(c.pools, func(po *poolObj) bool { return fe.Object == poolObject(po.pool.Name) }); i >= 0 {
					if text := c.crossText(c.pools[i], e); !reported[text] {
						reported[text] = true
						c.addProblem(c.pools[i].at, "%s", text)
					}
					continue
				}
			}
			own = true
			for _, text := range errorLines("spec.", e) {
				c.addProblem(so.at, "%s; the subnet is left out", text)
			}
		}
		if !own {
			kept = append(kept, so.subnet)
		}
	}
	return kept
}

// specIPs returns a pool's ips as Spiderpool writes them: single addresses
// and "a-b" ranges.
func specIPs(p *ipam.Pool) []string {
	data, err := json.Marshal(p)
	if err != nil {
		return nil
	}
	var spec struct {
		IPs []string `json:"ips"`
	}
	if json.Unmarshal(data, &spec) != nil || spec.IPs == nil {
		return []string{}
	}
	return spec.IPs
}

func (p *planned) writeTable(w io.Writer) error {
	ew := &errWriter{w: w}
	if len(p.pools) == 0 {
		fmt.Fprintln(ew, "no auto-pool")
	} else {
		t := newTable(ew)
		fmt.Fprintln(t, "POOL\tSUBNET\tAPPLICATION\tIPS\tACTION\tWHY")
		for _, pp := range p.pools {
			fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", pp.name, pp.subnet, pp.application, orDefault(strings.Join(pp.ips, ","), "-"), pp.action, pp.message)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(ew)
	if len(p.subnets) == 0 {
		fmt.Fprintln(ew, "no subnet")
		return ew.err
	}
	t := newTable(ew)
	fmt.Fprintln(t, "SUBNET\tTOTAL\tALLOCATED\tFREE")
	for _, s := range p.subnets {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", s.Name, atLeast(s, s.TotalIPCount), atLeast(s, s.AllocatedIPCount), freeCount(s))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	return ew.err
}

// atLeast writes count n of status s, ">=" before it if it is saturated
// (math.MaxInt64 standing for more).
func atLeast(s subnet.Status, n int64) string {
	if s.Saturated && n == math.MaxInt64 {
		return ">=" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// freeCount writes the free addresses of status s: exact, at least a count
// when only the total is saturated, "-" when both counts are.
func freeCount(s subnet.Status) string {
	switch {
	case s.Saturated && s.AllocatedIPCount == math.MaxInt64:
		return "-"
	case s.Saturated && s.TotalIPCount == math.MaxInt64:
		return ">=" + strconv.FormatInt(s.TotalIPCount-s.AllocatedIPCount, 10)
	}
	return strconv.FormatInt(s.TotalIPCount-s.AllocatedIPCount, 10)
}

// The JSON form of plan's output, documented in README.md.
type (
	jsonPlan struct {
		Pools    []jsonPlanPool    `json:"pools"`
		Subnets  []jsonPlanSubnet  `json:"subnets"`
		Problems []jsonPlanProblem `json:"problems"`
	}
	jsonPlanPool struct {
		Name        string            `json:"name"`
		Subnet      string            `json:"subnet"`
		Application string            `json:"application"`
		IPs         []string          `json:"ips"`
		Labels      map[string]string `json:"labels"`
		Reason      string            `json:"reason"`
	}
	jsonPlanSubnet struct {
		Name             string `json:"name"`
		TotalIPCount     int64  `json:"totalIPCount"`
		AllocatedIPCount int64  `json:"allocatedIPCount"`
		Saturated        bool   `json:"saturated,omitempty"`
	}
	jsonPlanProblem struct {
		Object  string `json:"object"`
		Message string `json:"message"`
	}
)

func (p *planned) writeJSON(w io.Writer, c *cluster) error {
	out := jsonPlan{Pools: []jsonPlanPool{}, Subnets: []jsonPlanSubnet{}, Problems: []jsonPlanProblem{}}
	for _, pp := range p.pools {
		out.Pools = append(out.Pools, jsonPlanPool{Name: pp.name, Subnet: pp.subnet, Application: pp.application,
			IPs: pp.ips, Labels: pp.labels, Reason: string(pp.action) + ": " + pp.message})
	}
	for _, s := range p.subnets {
		out.Subnets = append(out.Subnets, jsonPlanSubnet{Name: s.Name, TotalIPCount: s.TotalIPCount, AllocatedIPCount: s.AllocatedIPCount, Saturated: s.Saturated})
	}
	for _, pr := range c.sortedProblems() {
		obj := pr.at.String()
		switch {
		case pr.at.file == "":
			obj = "input"
		case pr.at.doc == 0:
			obj = pr.at.file
		}
		out.Problems = append(out.Problems, jsonPlanProblem{Object: obj, Message: pr.text})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
