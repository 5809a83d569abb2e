// Command quickstart walks through the ipam library on a small cluster: it
// reads pools, nodes, namespaces and pods from cluster.json, allocates an
// address for every interface of every pod, prints what each got, then releases
// one pod and allocates again to show how each pool's strategy treats a freed
// address.
//
// A pod interface that names its pools gets one address from each (host-local's
// range sets). One that names none gets its pools from Spiderpool's rules (pod
// and namespace annotations, cluster default pools, node and namespace
// affinities), and the walk-through prints the trace of that choice.
//
// Run it from the repository root:
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -f my-cluster.json
//
// The embedded cluster.json is the default input. Every time is fixed, so the
// output is the same on every run.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/store"
)

//go:embed cluster.json
var clusterJSON []byte

// now is the time of every allocation and release, so that runs are identical.
var now = time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)

// cluster is the file's form.
type cluster struct {
	// Pools are SpiderIPPool specs or host-local range sets, as ipam.ParsePool
	// reads them.
	Pools []json.RawMessage `json:"pools"`
	// Pods are allocated in order.
	Pods []pod `json:"pods"`
	// Nodes maps node names to their labels.
	Nodes map[string]map[string]string `json:"nodes,omitempty"`
	// Namespaces maps namespace names to their labels and annotations.
	Namespaces map[string]namespace `json:"namespaces,omitempty"`
	// ReservedIPs are SpiderReservedIP specs, kept out of every pool.
	ReservedIPs []*ipam.ReservedIP `json:"reservedIPs,omitempty"`
	// Release names a pod to release after Pods, if any.
	Release *owner `json:"release,omitempty"`
	// AfterRelease are allocated after the release.
	AfterRelease []pod `json:"afterRelease,omitempty"`
}

type owner struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type namespace struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type pod struct {
	owner
	Node        string            `json:"node,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Interfaces  []iface           `json:"interfaces"`
}

type iface struct {
	Name  string   `json:"name"`
	Pools []string `json:"pools,omitempty"`
	IPs   []string `json:"ips,omitempty"`
}

func main() {
	file := flag.String("f", "", "read the cluster from this JSON `file` instead of the embedded cluster.json")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "quickstart: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	data := clusterJSON
	if *file != "" {
		var err error
		if data, err = os.ReadFile(*file); err != nil {
			fmt.Fprintln(os.Stderr, "quickstart:", err)
			os.Exit(1)
		}
	}
	if err := run(os.Stdout, data); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// run reads the cluster in data and writes the walk-through to w. It returns an
// error only for a cluster file it cannot use; allocation failures are part of
// the output.
func run(w io.Writer, data []byte) error {
	c, pools, err := parseCluster(data)
	if err != nil {
		return err
	}
	cat, err := ipam.NewCatalog(pools...)
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if cat, err = cat.WithReserved(c.ReservedIPs...); err != nil {
		return fmt.Errorf("cluster: reservedIPs: %w", err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat})
	if err != nil {
		return err
	}
	ctx := context.Background()

	fmt.Fprintln(w, "Pools:")
	pt := newTable(w)
	fmt.Fprintln(pt, "  NAME\tFAMILY\tSTRATEGY\tADDRESSES")
	for p := range cat.Pools() {
		fmt.Fprintf(pt, "  %s\tIPv%d\t%s\t%s\n", p.Name, p.Family(), p.Strategy, describe(p))
	}
	if err := pt.Flush(); err != nil {
		return err
	}
	for _, r := range c.ReservedIPs {
		parts := make([]string, len(r.IPs))
		for i, x := range r.IPs {
			parts[i] = rangeString(x.From(), x.To())
		}
		fmt.Fprintf(w, "  reserved in every IPv%d pool (%s): %s\n", r.IPVersion, r.Name, strings.Join(parts, ", "))
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "Allocations:")
	if _, err := allocate(ctx, w, alloc, c, c.Pods); err != nil {
		return err
	}

	if c.Release == nil {
		return nil
	}
	o := store.Owner{Namespace: c.Release.Namespace, Name: c.Release.Name, UID: c.Release.UID}
	held, err := alloc.Lookup(ctx, o)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := alloc.ReleaseAt(ctx, o, now); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Released %s/%s:", o.Namespace, o.Name)
	if len(held) == 0 {
		fmt.Fprint(w, " nothing held")
	}
	for i, cl := range held {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s (%s, %s)", sep, cl.IP, cl.Pool, cl.Owner.Interface)
	}
	fmt.Fprintln(w)

	if len(c.AfterRelease) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Allocations after the release:")
	got, err := allocate(ctx, w, alloc, c, c.AfterRelease)
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, cl := range held {
		p, _ := cat.Pool(cl.Pool)
		if who, ok := got[poolAddr{cl.Pool, cl.IP}]; ok {
			fmt.Fprintf(w, "%s (%s): released %s went straight to %s, the lowest free address.\n", p.Name, p.Strategy, cl.IP, who)
		} else {
			fmt.Fprintf(w, "%s (%s): released %s was not handed out again; the next address follows the last one reserved.\n", p.Name, p.Strategy, cl.IP)
		}
	}
	return nil
}

// poolAddr is an address in a pool.
type poolAddr struct {
	pool string
	ip   netip.Addr
}

// parseCluster decodes the cluster file and parses its pools. Errors name the
// field and the value at fault.
func parseCluster(data []byte) (*cluster, []*ipam.Pool, error) {
	var c cluster
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, nil, fmt.Errorf("cluster: %s: wrong JSON type: a %s where %s is wanted", te.Field, te.Value, te.Type)
		}
		return nil, nil, fmt.Errorf("cluster: %w", err)
	}
	if len(c.Pools) == 0 {
		return nil, nil, errors.New("cluster: pools: at least one pool is required")
	}
	var errs []error
	pools := make([]*ipam.Pool, 0, len(c.Pools))
	for i, raw := range c.Pools {
		p, err := ipam.ParsePool(raw)
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster: pools[%d]: %w", i, err))
			continue
		}
		pools = append(pools, p)
	}
	for i, p := range c.Pods {
		errs = append(errs, checkPod(fmt.Sprintf("pods[%d]", i), p)...)
	}
	for i, p := range c.AfterRelease {
		errs = append(errs, checkPod(fmt.Sprintf("afterRelease[%d]", i), p)...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return &c, pools, nil
}

// checkPod reports the addresses of p that do not parse. Everything else is
// the allocator's to judge.
func checkPod(path string, p pod) []error {
	var errs []error
	for i, ifc := range p.Interfaces {
		for j, s := range ifc.IPs {
			if _, err := netip.ParseAddr(s); err != nil {
				errs = append(errs, fmt.Errorf("cluster: %s.interfaces[%d].ips[%d] %q: invalid IP address", path, i, j, s))
			}
		}
	}
	return errs
}

// request turns a pod of the file into an ipam.Request, with its node's and
// namespace's labels. The addresses were checked by checkPod.
func (p pod) request(c *cluster) ipam.Request {
	ns := c.Namespaces[p.Namespace]
	req := ipam.Request{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		Labels: p.Labels, Annotations: p.Annotations,
		Node: p.Node, NodeLabels: c.Nodes[p.Node],
		NamespaceLabels: ns.Labels, NamespaceAnnotations: ns.Annotations}
	for _, ifc := range p.Interfaces {
		in := ipam.NIC{Name: ifc.Name, Pools: ifc.Pools}
		for _, s := range ifc.IPs {
			in.IPs = append(in.IPs, netip.MustParseAddr(s))
		}
		req.Interfaces = append(req.Interfaces, in)
	}
	return req
}

// allocate allocates each pod in order and writes one row per address, or one
// row per failed pod, then the trace of every pod whose pools were selected by
// Spiderpool's rules. It returns who got each address.
func allocate(ctx context.Context, w io.Writer, alloc *ipam.Allocator, c *cluster, pods []pod) (map[poolAddr]string, error) {
	got := make(map[poolAddr]string)
	tw := newTable(w)
	fmt.Fprintln(tw, "  POD\tINTERFACE\tPOOL\tADDRESS\tGATEWAY\tVLAN\tNOTE")
	var traces []string
	for _, p := range pods {
		name := p.Namespace + "/" + p.Name
		req := p.request(c)
		res, err := alloc.AllocateAt(ctx, req, now)
		trace := res.Trace
		if err != nil {
			ifc, pool := "-", "-"
			var ae *ipam.AllocationError
			if errors.As(err, &ae) {
				ifc, pool = orDash(ae.Interface), orDash(ae.Pool)
				trace = ae.Trace
			}
			msg := strings.ReplaceAll(err.Error(), "\n", "; ")
			fmt.Fprintf(tw, "  %s\t%s\t%s\t-\t-\t-\terror: %s\n", name, ifc, pool, msg)
		}
		if selects(req) && len(trace) > 0 {
			var sources []string
			for _, e := range trace {
				if !slices.Contains(sources, string(e.Source)) {
					sources = append(sources, string(e.Source))
				}
			}
			traces = append(traces, fmt.Sprintf("  %s, pools from the %s:", name, strings.Join(sources, " and the ")))
			for _, e := range trace {
				traces = append(traces, "    "+e.String())
			}
		}
		if err != nil {
			continue
		}
		for _, ip := range res.IPs {
			got[poolAddr{ip.Pool, ip.Address.Addr()}] = name + " " + ip.Interface
			var notes []string
			if ip.Reused {
				notes = append(notes, "reused")
			}
			if requested(req, ip) {
				notes = append(notes, "requested")
			}
			if len(ip.Routes) > 0 {
				rs := make([]string, len(ip.Routes))
				for i, r := range ip.Routes {
					rs[i] = r.Dst.String()
					if r.GW.IsValid() {
						rs[i] += " via " + r.GW.String()
					}
				}
				notes = append(notes, "routes "+strings.Join(rs, ", "))
			}
			gw, vlan := "-", "-"
			if ip.Gateway.IsValid() {
				gw = ip.Gateway.String()
			}
			if ip.Vlan != 0 {
				vlan = fmt.Sprint(ip.Vlan)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, ip.Interface, ip.Pool, ip.Address, gw, vlan, strings.Join(notes, "; "))
		}
	}
	if err := tw.Flush(); err != nil {
		return nil, err
	}
	if len(traces) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "How the pools were chosen (Spiderpool's rules):")
		for _, line := range traces {
			fmt.Fprintln(w, line)
		}
	}
	return got, nil
}

// selects reports whether some interface of req leaves its pools to
// Spiderpool's rules.
func selects(req ipam.Request) bool {
	for _, ifc := range req.Interfaces {
		if len(ifc.Pools) == 0 {
			return true
		}
	}
	return false
}

// rangeString writes a single-address range as that address.
func rangeString(from, to netip.Addr) string {
	if from == to {
		return from.String()
	}
	return from.String() + "-" + to.String()
}

// requested reports whether the request asked for ip's address by name.
func requested(req ipam.Request, ip ipam.IPConfig) bool {
	for _, ifc := range req.Interfaces {
		if ifc.Name != ip.Interface {
			continue
		}
		for _, a := range ifc.IPs {
			if a == ip.Address.Addr() {
				return true
			}
		}
	}
	return false
}

// describe summarises the addresses a pool hands out.
func describe(p *ipam.Pool) string {
	if len(p.Ranges) > 0 {
		rs, err := p.RangeSet()
		if err != nil {
			return err.Error()
		}
		parts := make([]string, len(rs))
		for i, r := range rs {
			parts[i] = fmt.Sprintf("%s %s gateway %s", r.Subnet, r, r.Gateway)
		}
		return strings.Join(parts, "; ")
	}
	var b strings.Builder
	b.WriteString(p.Subnet.String())
	for i, r := range p.IPs {
		if i == 0 {
			b.WriteString(" ")
		} else {
			b.WriteString(",")
		}
		b.WriteString(rangeString(r.From(), r.To()))
	}
	for _, r := range p.ExcludeIPs {
		b.WriteString(" except ")
		b.WriteString(rangeString(r.From(), r.To()))
	}
	if p.Gateway.IsValid() {
		b.WriteString(" gateway ")
		b.WriteString(p.Gateway.String())
	}
	if p.Vlan != 0 {
		fmt.Fprintf(&b, " vlan %d", p.Vlan)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
