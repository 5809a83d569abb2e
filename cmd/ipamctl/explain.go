package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/internal/texttable"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
)

// podReport is what explain found for one pod.
type podReport struct {
	pod        *podObj
	notes      []string
	skipped    string // why nothing was allocated at all, such as host network
	interfaces []*ifaceReport
}

// ifaceReport is one interface of a pod: what it got, or why not, and the
// trace of the pools considered.
type ifaceReport struct {
	name  string
	ips   []ipam.IPConfig
	err   string
	trace []ipam.TraceEntry
	// rolledBack reports that this interface was served but given back,
	// because another interface of the pod failed (all-or-nothing).
	rolledBack bool
}

func (p *podReport) iface(name string) *ifaceReport {
	for _, r := range p.interfaces {
		if r.name == name {
			return r
		}
	}
	r := &ifaceReport{name: name}
	p.interfaces = append(p.interfaces, r)
	return r
}

// explainer allocates the pods of a cluster, in order, against one
// in-memory store.
type explainer struct {
	c       *cluster
	cat     *ipam.Catalog
	alloc   *ipam.Allocator
	netConf ipam.NetConf
	now     time.Time
}

// newExplainer builds the catalog and the store, with the claims of every
// pool's status.allocatedIPs, and a live cluster's IPClaims, already in it.
func newExplainer(ctx context.Context, c *cluster, nc ipam.NetConf, now time.Time) (*explainer, error) {
	cat, err := ipam.NewCatalog(c.poolList()...)
	if err != nil {
		return nil, fmt.Errorf("pools: %w", err) // dropOverlaps left none of these
	}
	rs := make([]*ipam.ReservedIP, len(c.reserved))
	for i, r := range c.reserved {
		rs[i] = r.r
	}
	if cat, err = cat.WithReserved(rs...); err != nil {
		return nil, fmt.Errorf("reserved IPs: %w", err)
	}
	st := memstore.New()
	for _, po := range c.pools {
		for _, cl := range po.claims {
			claim := store.Claim{Pool: po.pool.Name, IP: cl.ip, Owner: c.claimOwner(cl)}
			if _, err := st.Create(ctx, claim); err != nil {
				c.addProblem(po.at, "status.allocatedIPs[%q]: %v", cl.ip.String(), err)
			}
		}
	}
	for _, cl := range c.liveClaims {
		cl.Revision = 0
		if _, err := st.Create(ctx, cl); err != nil {
			c.addProblem(origin{}, "IPClaim of pool %s address %s: %v", cl.Pool, cl.IP, err)
		}
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		return nil, err
	}
	return &explainer{c: c, cat: cat, alloc: alloc, netConf: nc, now: now}, nil
}

// claimOwner is the owner of an existing claim. Spiderpool's records carry
// the pod's name and UID only, no interface. Two things are added, each to
// work around the library (see README.md, "Limits"):
//
//   - Stable (owned by namespace and name) when the name is a StatefulSet
//     pod's: a Stable request finds only Stable claims, even under the same
//     UID;
//   - Interface "eth0" when the pod is in the input and has one interface
//     only (no ippools annotation): the library adopts only the first
//     interface-less claim of an interface, so a dual-stack pod would get a
//     new IPv6 address beside the one it holds.
func (c *cluster) claimOwner(cl claimObj) store.Owner {
	o := store.Owner{Namespace: cl.namespace, Name: cl.pod, UID: cl.uid}
	if o.UID == "" {
		o.UID = placeholderUID(cl.namespace, cl.pod)
	}
	o.Stable = c.statefulName(cl.namespace, cl.pod)
	if p := c.pod(cl.namespace, cl.pod); p != nil {
		if _, multi := p.Annotations[ipam.AnnotationIPPools]; !multi {
			o.Interface = k8s.DefaultInterface
		}
	}
	return o
}

// pod returns the input's pod namespace/name, or nil.
func (c *cluster) pod(namespace, name string) *corev1.Pod {
	if po := c.podIndex[namespace+"/"+name]; po != nil {
		return po.pod
	}
	return nil
}

// statefulName reports whether namespace/name is a StatefulSet pod's: the pod
// in the input is controlled by a StatefulSet or, if there is no such pod, a
// StatefulSet in the input would name a pod so.
func (c *cluster) statefulName(namespace, name string) bool {
	if p := c.pod(namespace, name); p != nil {
		return k8s.ControllerKind(p) == gc.KindStatefulSet
	}
	i := strings.LastIndexByte(name, '-')
	if i <= 0 || i == len(name)-1 || strings.Trim(name[i+1:], "0123456789") != "" {
		return false
	}
	return slices.ContainsFunc(c.sets, func(s *setObj) bool {
		return s.set.Namespace == namespace && s.set.Name == name[:i]
	})
}

// placeholderUID stands for the UID of a pod or claim that has none, as
// hand-written manifests do not. A real UID never contains a slash.
func placeholderUID(namespace, name string) string { return namespace + "/" + name }

func podUID(p *corev1.Pod) string {
	if p.UID != "" {
		return string(p.UID)
	}
	return placeholderUID(p.Namespace, p.Name)
}

// podApp returns the pod's application (k8s.App), its controller's
// controller found among the ReplicaSets and Jobs of the input; an error if
// that is needed and not in the input.
func (c *cluster) podApp(p *corev1.Pod) (ipam.AppRef, error) {
	var owner metav1.Object
	if ref := metav1.GetControllerOfNoCopy(p); ref != nil {
		if o, ok := c.owners[ref.Kind+"/"+p.Namespace+"/"+ref.Name]; ok {
			owner = o
		}
	}
	app, err := k8s.App(p, owner)
	if err != nil && owner == nil {
		ref := metav1.GetControllerOfNoCopy(p)
		return app, fmt.Errorf("its controller %s %s/%s is not in the input", ref.Kind, p.Namespace, ref.Name)
	}
	return app, err
}

// explainAll allocates every pod in order and hands each report to yield as
// soon as it is made, until yield returns false or an error: the reports are
// not kept, so memory does not grow with the pods' traces.
func (e *explainer) explainAll(ctx context.Context, yield func(*podReport) (more bool, err error)) error {
	for _, p := range e.c.pods {
		more, err := yield(e.explain(ctx, p))
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// request builds the allocation request for a pod: eth0, whose pools the
// library selects (it adds the interfaces the ippools annotation names).
func (e *explainer) request(p *corev1.Pod) ipam.Request {
	var ns *corev1.Namespace
	if x, ok := e.c.namespaces[p.Namespace]; ok {
		ns = x
	}
	var node *corev1.Node
	if x, ok := e.c.nodes[p.Spec.NodeName]; ok {
		node = x
	}
	req := k8s.Request(p, ns, node)
	req.App, _ = e.c.podApp(p)
	req.UID = podUID(p)
	req.NetConf = e.netConf
	return req
}

func (e *explainer) explain(ctx context.Context, po *podObj) *podReport {
	p := po.pod
	r := &podReport{pod: po}
	if p.Spec.HostNetwork {
		r.skipped = "uses the host network (spec.hostNetwork): no address is allocated for it"
		return r
	}
	switch {
	case p.Spec.NodeName == "":
		r.notes = append(r.notes, "not scheduled (spec.nodeName is empty): node rules see no node and no labels")
	case e.c.nodes[p.Spec.NodeName] == nil:
		r.notes = append(r.notes, fmt.Sprintf("node %q is not in the input: node rules see no labels", p.Spec.NodeName))
	}
	if e.c.namespaces[p.Namespace] == nil {
		r.notes = append(r.notes, fmt.Sprintf("namespace %q is not in the input: namespace rules see no labels and no annotations", p.Namespace))
	}
	if p.UID == "" {
		r.notes = append(r.notes, fmt.Sprintf("no metadata.uid: %q stands for it", podUID(p)))
	}
	req := e.request(p)
	if req.Stable {
		r.notes = append(r.notes, "StatefulSet pod: its addresses belong to its name and outlive the pod object")
	}

	// The interfaces, in the order the library serves them.
	if cands, err := ipam.Select(&req, e.cat); err == nil {
		for _, c := range cands {
			r.iface(c.Interface)
		}
	}
	for _, ifc := range req.Interfaces {
		r.iface(ifc.Name)
	}
	e.allocate(ctx, r, &req)
	if _, err := e.c.podApp(p); err != nil && e.autoPoolFiltered(r) {
		r.notes = append(r.notes, fmt.Sprintf("its application is unknown (%v), and an auto-created pool serves only its application's pods", err))
	}
	e.addLabelFacts(r, &req)
	e.leftOutTrace(r)
	return r
}

// allocate serves req and records in r what each interface got, or why
// not, with the trace.
func (e *explainer) allocate(ctx context.Context, r *podReport, req *ipam.Request) {
	res, err := e.alloc.AllocateAt(ctx, *req, e.now)
	if err == nil {
		for _, ip := range res.IPs {
			x := r.iface(ip.Interface)
			x.ips = append(x.ips, ip)
		}
		r.addTrace(res.Trace)
		return
	}

	// Which interface failed, and why; the others were rolled back.
	var general []string
	var failed []string
	traced := false
	for _, leaf := range leafErrors(err) {
		var ae *ipam.AllocationError
		if !errors.As(leaf, &ae) || ae.Interface == "" {
			general = append(general, oneLine(leaf.Error()))
			if ae != nil && !traced && ae.Trace != nil {
				r.addTrace(ae.Trace)
				traced = true
			}
			continue
		}
		x := r.iface(ae.Interface)
		x.err = joinErr(x.err, e.leftOutText(ae))
		if !slices.Contains(failed, ae.Interface) {
			failed = append(failed, ae.Interface)
		}
		if !traced && ae.Trace != nil {
			r.addTrace(ae.Trace)
			traced = true
		}
	}
	for _, x := range r.interfaces {
		switch {
		case x.err != "":
		case len(general) > 0:
			x.err = strings.Join(general, "; ")
		default:
			x.rolledBack = true
			x.err = fmt.Sprintf("not allocated: %s failed, and a pod gets all its addresses or none", strings.Join(failed, ", "))
		}
	}
}

// autoPoolFiltered reports whether the pod-affinity filter took out an
// auto-created pool in r's traces.
func (e *explainer) autoPoolFiltered(r *podReport) bool {
	for _, x := range r.interfaces {
		for _, t := range x.trace {
			if p, ok := e.cat.Pool(t.Pool); ok && t.Reason == ipam.ReasonPodAffinity && ipam.IsAutoPool(p) {
				return true
			}
		}
	}
	return false
}

// addLabelFacts completes the message of each pool an affinity filtered
// out with the labels it looked at: the values the node, namespace or pod
// has for the keys of the pool's selector.
func (e *explainer) addLabelFacts(r *podReport, req *ipam.Request) {
	for _, x := range r.interfaces {
		for i := range x.trace {
			t := &x.trace[i]
			p, ok := e.cat.Pool(t.Pool)
			if !ok || t.Status != ipam.StatusFiltered {
				continue
			}
			var (
				sel    *ipam.LabelSelector
				labels map[string]string
				what   string
			)
			switch t.Reason {
			case ipam.ReasonNodeAffinity:
				sel, labels, what = p.NodeAffinity, req.NodeLabels, "node"
			case ipam.ReasonNamespaceAffinity:
				sel, labels, what = p.NamespaceAffinity, req.NamespaceLabels, "namespace"
			case ipam.ReasonPodAffinity:
				if !ipam.IsAutoPool(p) { // else matched against the application, which the message names
					sel, labels, what = p.PodAffinity, req.Labels, "pod"
				}
			}
			if sel == nil {
				continue
			}
			var keys []string
			for k := range sel.MatchLabels {
				keys = append(keys, k)
			}
			for _, m := range sel.MatchExpressions {
				keys = append(keys, m.Key)
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
			facts := make([]string, len(keys))
			for j, k := range keys {
				if v, ok := labels[k]; ok {
					facts[j] = k + "=" + v
				} else {
					facts[j] = "no label " + k
				}
			}
			if len(facts) > 0 {
				t.Message += "; the " + what + " has " + strings.Join(facts, ", ")
			}
		}
	}
}

func (r *podReport) addTrace(trace []ipam.TraceEntry) {
	for _, t := range mergeHeld(trace) {
		x := r.iface(t.Interface)
		x.trace = append(x.trace, t)
	}
}

// leftOutTrace says, for each pool of the trace that the library did not
// find because ipamctl left it out, why it was left out.
func (e *explainer) leftOutTrace(r *podReport) {
	for _, x := range r.interfaces {
		for i := range x.trace {
			t := &x.trace[i]
			if why, ok := e.c.leftOut[t.Pool]; ok && t.Reason == ipam.ReasonNotFound {
				t.Message = fmt.Sprintf("pool %q was left out: %s", t.Pool, why)
			}
		}
	}
}

// leftOutText renders an allocation error on one line, saying why a pool
// the library did not find was left out of the input.
func (e *explainer) leftOutText(ae *ipam.AllocationError) string {
	text := oneLine(ae.Error())
	why, ok := e.c.leftOut[ae.Pool]
	if !ok || !errors.Is(ae, ipam.ErrNotFound) {
		return text
	}
	// The library's `pool "x": no such pool (named by ...)` becomes `pool
	// "x" was left out: why; named by ...`, without the parentheses.
	notFound := fmt.Sprintf("pool %q: no such pool (", ae.Pool)
	if i := strings.Index(text, notFound); i >= 0 {
		rest := text[i+len(notFound):]
		if j := strings.IndexByte(rest, ')'); j >= 0 {
			return text[:i] + fmt.Sprintf("pool %q was left out: %s; %s", ae.Pool, why, rest[:j]) + rest[j+1:]
		}
	}
	return fmt.Sprintf("%s; pool %q was left out: %s", text, ae.Pool, why)
}

// mergeHeld folds a pool that served an address already held back into its
// place in the priority order. The library reports it twice: served without
// a rank ("already held"), and again among the pools not tried, as a
// candidate with its rank. The candidate entry is dropped and its rank given
// to the served one.
func mergeHeld(trace []ipam.TraceEntry) []ipam.TraceEntry {
	out := slices.Clone(trace)
	drop := make([]bool, len(out))
	for i := range out {
		e := &out[i]
		if e.Status != ipam.StatusServed || e.Rank != 0 {
			continue
		}
		for j, c := range out {
			if c.Status == ipam.StatusCandidate && c.Interface == e.Interface && c.Family == e.Family && c.Pool == e.Pool && !drop[j] {
				e.Rank, drop[j] = c.Rank, true
				break
			}
		}
	}
	kept := out[:0]
	for i, e := range out {
		if !drop[i] {
			kept = append(kept, e)
		}
	}
	return kept
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// reportWriter writes explain's reports as they are made.
type reportWriter interface {
	write(r *podReport) error
	// close ends the output.
	close() error
}

// tableWriter writes the reports for people.
type tableWriter struct {
	w errWriter
	n int // reports written
}

func newTableWriter(w io.Writer) *tableWriter { return &tableWriter{w: errWriter{w: w}} }

func (tw *tableWriter) close() error { return tw.w.err }

func (tw *tableWriter) write(r *podReport) error {
	w := &tw.w
	if tw.n++; tw.n > 1 {
		fmt.Fprintln(w)
	}
	p := r.pod.pod
	fmt.Fprintf(w, "pod %s/%s", p.Namespace, p.Name)
	if p.Spec.NodeName != "" {
		fmt.Fprintf(w, " on node %s", p.Spec.NodeName)
	}
	fmt.Fprintln(w)
	for _, n := range r.notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	if r.skipped != "" {
		fmt.Fprintf(w, "  %s\n", r.skipped)
		return w.err
	}
	for _, x := range r.interfaces {
		fmt.Fprintf(w, "  %s:\n", x.name)
		for _, ip := range x.ips {
			fmt.Fprintf(w, "    IPv%d %s from pool %s", family(ip.Address.Addr()), ip.Address, ip.Pool)
			if ip.Gateway.IsValid() {
				fmt.Fprintf(w, ", gateway %s", ip.Gateway)
			}
			if ip.Vlan != 0 {
				fmt.Fprintf(w, ", vlan %d", ip.Vlan)
			}
			if ip.Reused {
				fmt.Fprint(w, " (already held)")
			}
			fmt.Fprintln(w)
		}
		if x.err != "" {
			fmt.Fprintf(w, "    error: %s\n", x.err)
		}
		if len(x.trace) == 0 {
			fmt.Fprintln(w, "    no pool was considered")
			continue
		}
		t := newTable(w)
		fmt.Fprintln(t, "    FAMILY\tRANK\tPOOL\tSTATUS\tRULE\tWHY")
		for _, e := range x.trace {
			rank := "-"
			if e.Rank > 0 {
				rank = fmt.Sprint(e.Rank)
			}
			status := string(e.Status)
			if x.rolledBack && e.Status == ipam.StatusServed {
				status += " (rolled back)"
			}
			fmt.Fprintf(t, "    IPv%d\t%s\t%s\t%s\t%s\t%s\n", e.Family, rank, e.Pool, status, e.Source, why(e))
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	return w.err
}

// errWriter keeps the first error of its writer, and writes nothing after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// why says why a pool was not used, or is empty.
func why(e ipam.TraceEntry) string {
	switch {
	case e.Reason == "":
		return e.Message
	case e.Message == "" || strings.HasPrefix(e.Message, string(e.Reason)):
		return cmp.Or(e.Message, string(e.Reason))
	}
	return string(e.Reason) + ": " + e.Message
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// The JSON form of explain's output. The schema is documented in README.md;
// fields are only ever added.
type (
	jsonExplain struct {
		Pods []jsonPod `json:"pods"`
	}
	jsonPod struct {
		Pod        string      `json:"pod"`
		Skipped    string      `json:"skipped,omitempty"`
		Interfaces []jsonIface `json:"interfaces"`
	}
	jsonIface struct {
		Interface string      `json:"interface"`
		IPs       []jsonIP    `json:"ips"`
		Error     string      `json:"error,omitempty"`
		Trace     []jsonTrace `json:"trace"`
	}
	jsonIP struct {
		Family  int    `json:"family"`
		Pool    string `json:"pool"`
		Address string `json:"address"`
		Gateway string `json:"gateway,omitempty"`
		Reused  bool   `json:"reused,omitempty"`
	}
	jsonTrace struct {
		Family  int    `json:"family"`
		Pool    string `json:"pool"`
		Source  string `json:"source"`
		Status  string `json:"status"`
		Reason  string `json:"reason,omitempty"`
		Message string `json:"message,omitempty"`
		Rank    int    `json:"rank"`
	}
)

// jsonWriter writes the reports as one JSON document, {"pods": [...]},
// indented as json.Encoder with SetIndent("", "  ") indents it, one pod at a
// time.
type jsonWriter struct {
	w io.Writer
	n int // pods written
}

func (jw *jsonWriter) write(r *podReport) error {
	data, err := json.MarshalIndent(jsonReport(r), "    ", "  ")
	if err != nil {
		return err
	}
	sep := ",\n    "
	if jw.n == 0 {
		sep = "{\n  \"pods\": [\n    "
	}
	jw.n++
	if _, err := io.WriteString(jw.w, sep); err != nil {
		return err
	}
	_, err = jw.w.Write(data)
	return err
}

func (jw *jsonWriter) close() error {
	end := "\n  ]\n}\n"
	if jw.n == 0 {
		end = "{\n  \"pods\": []\n}\n"
	}
	_, err := io.WriteString(jw.w, end)
	return err
}

// jsonReport is a pod's report in the JSON schema.
func jsonReport(r *podReport) jsonPod {
	jp := jsonPod{Pod: r.pod.pod.Namespace + "/" + r.pod.pod.Name, Skipped: r.skipped, Interfaces: []jsonIface{}}
	for _, x := range r.interfaces {
		ji := jsonIface{Interface: x.name, IPs: []jsonIP{}, Error: x.err, Trace: []jsonTrace{}}
		for _, ip := range x.ips {
			j := jsonIP{Family: family(ip.Address.Addr()), Pool: ip.Pool, Address: ip.Address.String(), Reused: ip.Reused}
			if ip.Gateway.IsValid() {
				j.Gateway = ip.Gateway.String()
			}
			ji.IPs = append(ji.IPs, j)
		}
		for _, e := range x.trace {
			ji.Trace = append(ji.Trace, jsonTrace{Family: e.Family, Pool: e.Pool, Source: string(e.Source),
				Status: string(e.Status), Reason: string(e.Reason), Message: e.Message, Rank: e.Rank})
		}
		jp.Interfaces = append(jp.Interfaces, ji)
	}
	return jp
}

// loadNetConf reads the pool defaults of a CNI network config: the "ipam"
// section of a single config, or of the first plugin of a config list that
// has one.
func loadNetConf(path string, data []byte) (ipam.NetConf, error) {
	var conf struct {
		IPAM    json.RawMessage `json:"ipam"`
		Plugins []struct {
			Type string          `json:"type"`
			IPAM json.RawMessage `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		return ipam.NetConf{}, fmt.Errorf("%s: %s", path, errorLines("", jsonError(err))[0])
	}
	raw, field := conf.IPAM, "ipam"
	for i, p := range conf.Plugins {
		if len(raw) > 0 {
			break
		}
		raw, field = p.IPAM, fmt.Sprintf("plugins[%d].ipam", i)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return ipam.NetConf{}, fmt.Errorf("%s: ipam: no ipam section (neither at the top nor in a plugin)", path)
	}
	var nc ipam.NetConf
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&nc); err != nil {
		return ipam.NetConf{}, fmt.Errorf("%s: %s", path, errorLines(field+".", jsonError(err))[0])
	}
	return nc, nil
}

// newTable returns an aligned table that writes to out.
func newTable(out io.Writer) *texttable.Table { return texttable.New(out) }
