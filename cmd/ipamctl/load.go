package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// This file reads Kubernetes manifests into a cluster: it splits files into
// documents, unrolls List documents, decodes each object of a known kind, and
// records every problem with the place it was found. A bad document never
// stops the others from being read.

// Kinds ipamctl reads.
const (
	kindPool        = "SpiderIPPool"
	kindReservedIP  = "SpiderReservedIP"
	kindSubnet      = "SpiderSubnet"
	kindNamespace   = "Namespace"
	kindNode        = "Node"
	kindPod         = "Pod"
	kindStatefulSet = "StatefulSet"
	kindDeployment  = "Deployment"
	kindReplicaSet  = "ReplicaSet"
	kindDaemonSet   = "DaemonSet"
	kindJob         = "Job"
	kindCronJob     = "CronJob"
	kindList        = "List"
)

var knownKinds = []string{kindPool, kindReservedIP, kindSubnet, kindNamespace, kindNode, kindPod,
	kindStatefulSet, kindDeployment, kindReplicaSet, kindDaemonSet, kindJob, kindCronJob, kindList}

// namespacedKinds are the kinds read whose objects live in a namespace
// ("default" when the document names none).
var namespacedKinds = []string{kindPod, kindStatefulSet, kindDeployment, kindReplicaSet, kindDaemonSet, kindJob, kindCronJob}

// origin says where an object was read: a file, the document's position in
// it, the List item it is, and the object's kind and name once known.
type origin struct {
	file string
	doc  int // 1-based, counting non-empty documents
	line int // the line the document starts on
	item int // index in a List's items, or -1
	kind string
	// namespace and name are the object's, once decoded.
	namespace, name string
}

// String returns, for example, `cluster.yaml:12: document 2 (Pod default/web-0)`
// or `list.yaml:1: document 1, items[3] (Node worker-1)`.
func (o origin) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s:%d: document %d", o.file, o.line, o.doc)
	if o.item >= 0 {
		fmt.Fprintf(&b, ", items[%d]", o.item)
	}
	if o.kind != "" || o.name != "" {
		b.WriteString(" (")
		b.WriteString(orDefault(o.kind, "no kind"))
		if o.name != "" {
			b.WriteString(" ")
			if o.namespace != "" {
				b.WriteString(o.namespace + "/")
			}
			b.WriteString(o.name)
		}
		b.WriteString(")")
	}
	return b.String()
}

// problem is one thing wrong with the input.
type problem struct {
	at origin
	// text names the field and says what is wrong, such as
	// `spec.subnet "10.0.0.0/33": invalid CIDR address`.
	text string
}

func (p problem) String() string {
	switch {
	case p.at.file == "":
		return p.text
	case p.at.doc == 0: // the file as a whole
		return p.at.file + ": " + p.text
	}
	return p.at.String() + ": " + p.text
}

// cluster is everything read from the input files, in file order.
type cluster struct {
	pools      []*poolObj
	reserved   []*reservedObj
	namespaces map[string]*corev1.Namespace
	nodes      map[string]*corev1.Node
	pods       []*podObj
	sets       []*setObj
	subnets    []*subnetObj
	// apps are the applications of SpiderSubnet: the controllers read
	// (ReplicaSets and Jobs under a Deployment or a CronJob are not).
	apps []*appObj
	// owners are the ReplicaSets and Jobs read, by kind/namespace/name:
	// the controllers whose own controller makes a pod's application.
	owners   map[string]metav1.Object
	problems []problem
	// live reports a cluster read through its API server (--kubeconfig),
	// whose IPClaims are liveClaims.
	live       bool
	liveClaims []store.Claim

	seen  map[string]origin // kind/namespace/name → where first read
	files []string          // the files read, in order, as messages name them

	podIndex map[string]*podObj // namespace/name → pod
	// leftOut says why each pool that is not in pools was left out, and where
	// it was read.
	leftOut map[string]string
	// skipped counts the objects of kinds ipamctl does not read, by kind, in
	// the order they were first met.
	skipped []skippedKind
}

// skippedKind is how many objects of a kind were skipped, and where the first
// was.
type skippedKind struct {
	kind  string
	n     int
	first origin
}

// sortedProblems returns the problems in input order: by file, document and
// List item, problems of one place in the order they were found.
func (c *cluster) sortedProblems() []problem {
	out := slices.Clone(c.problems)
	slices.SortStableFunc(out, func(a, b problem) int {
		return cmp.Or(
			cmp.Compare(slices.Index(c.files, a.at.file), slices.Index(c.files, b.at.file)),
			cmp.Compare(a.at.doc, b.at.doc),
			cmp.Compare(a.at.item, b.at.item))
	})
	return out
}

type poolObj struct {
	at     origin
	pool   *ipam.Pool
	claims []claimObj
	// labels and annotations are the object's: an auto-pool's say whose it
	// is and how it was sized.
	labels, annotations map[string]string
}

type subnetObj struct {
	at     origin
	subnet *subnet.Subnet
}

type appObj struct {
	at  origin
	app subnet.Application
}

// claimObj is one entry of a SpiderIPPool's status.allocatedIPs.
type claimObj struct {
	ip             netip.Addr
	namespace, pod string
	uid            string
}

type reservedObj struct {
	at origin
	r  *ipam.ReservedIP
}

type podObj struct {
	at  origin
	pod *corev1.Pod
}

type setObj struct {
	at  origin
	set *appsv1.StatefulSet
}

func newCluster() *cluster {
	return &cluster{
		namespaces: make(map[string]*corev1.Namespace),
		nodes:      make(map[string]*corev1.Node),
		seen:       make(map[string]origin),
		podIndex:   make(map[string]*podObj),
		leftOut:    make(map[string]string),
		owners:     make(map[string]metav1.Object),
	}
}

// place returns where o starts: "file:line".
func (o origin) place() string { return fmt.Sprintf("%s:%d", o.file, o.line) }

// skip counts an object of a kind ipamctl does not read.
func (c *cluster) skip(at origin) {
	for i := range c.skipped {
		if c.skipped[i].kind == at.kind {
			c.skipped[i].n++
			return
		}
	}
	c.skipped = append(c.skipped, skippedKind{kind: at.kind, n: 1, first: at})
}

// printNotes writes what was read but not used: the objects skipped for
// their kind.
func (c *cluster) printNotes(w io.Writer) {
	if len(c.skipped) == 0 {
		return
	}
	n := 0
	for _, k := range c.skipped {
		n += k.n
	}
	fmt.Fprintf(w, "ipamctl: note: %s skipped: ipamctl does not read their kinds (%s are read)\n",
		plural(n, "object"), strings.Join(knownKinds[:len(knownKinds)-1], ", "))
	for _, k := range c.skipped {
		fmt.Fprintf(w, "  %s: %d, the first at %s\n", k.kind, k.n, k.first.place())
	}
}

// leaveOut records why the pool named name is left out: the problems found
// since the first problems of the input, which are its own.
func (c *cluster) leaveOut(name string, at origin, first int) {
	if name == "" || len(c.problems) == first {
		return
	}
	texts := make([]string, 0, len(c.problems)-first)
	for _, p := range c.problems[first:] {
		texts = append(texts, p.text)
	}
	c.leftOut[name] = strings.Join(texts, "; ") + " (" + at.place() + ")"
}

func (c *cluster) addProblem(at origin, format string, args ...any) {
	c.problems = append(c.problems, problem{at: at, text: fmt.Sprintf(format, args...)})
}

// addError records every problem err holds, each field path prefixed with
// prefix (such as "spec.").
func (c *cluster) addError(at origin, prefix string, err error) {
	for _, text := range errorLines(prefix, err) {
		c.problems = append(c.problems, problem{at: at, text: text})
	}
}

// load reads every file in order. Problems are recorded in the cluster,
// never returned: what can be read is read.
func (in *input) load() *cluster {
	c := newCluster()
	for _, path := range in.files {
		name, data, err := in.read(path)
		c.files = append(c.files, name)
		if err != nil {
			c.addProblem(origin{file: name}, "cannot read: %v", err)
			continue
		}
		c.load(name, data)
	}
	return c
}

// rawDoc is one document of a file, or one item of a List, as JSON.
type rawDoc struct {
	line int
	json []byte
	err  string // why the document could not be turned into JSON
	// items are a List's items, each with its own line, when the document
	// was split into them; json is then the List without them.
	items []rawDoc
	// split reports that the document is a List split into items.
	split bool
}

// load reads the documents of one file.
func (c *cluster) load(file string, data []byte) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	docs := splitJSON(data)
	if docs == nil {
		docs = splitYAML(data)
	}
	for i, d := range docs {
		at := origin{file: file, doc: i + 1, line: d.line, item: -1}
		switch {
		case d.err != "":
			c.addProblem(at, "%s", d.err)
		case d.split:
			h, _ := listHeader(d.json)
			at.kind, at.name = h.Kind, h.Metadata.Name
			c.list(at, h.Kind, d.items)
		default:
			c.object(at, d.json, "")
		}
	}
}

// listHeader decodes the header of a List document and reports whether it is
// a List: kind List, or a typed list such as PodList.
func listHeader(data []byte) (header, bool) {
	var h header
	if json.Unmarshal(data, &h) != nil {
		return h, false
	}
	return h, h.Kind == kindList || strings.HasSuffix(h.Kind, "List")
}

// splitJSON splits a stream of JSON values, or returns nil if data does not
// start like JSON.
func splitJSON(data []byte) []rawDoc {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[') {
		return nil
	}
	var docs []rawDoc
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		start := dec.InputOffset()
		// Skip the white space before the value, to find its line.
		for start < int64(len(data)) && strings.IndexByte(" \t\r\n", data[start]) >= 0 {
			start++
		}
		var v json.RawMessage
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs
		}
		line := 1 + bytes.Count(data[:start], []byte("\n"))
		if err != nil {
			msg := "malformed JSON: " + err.Error()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				msg = fmt.Sprintf("malformed JSON at line %d: %v", 1+bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n")), se)
			}
			return append(docs, rawDoc{line: line, err: msg})
		}
		if string(v) == "null" {
			continue
		}
		docs = append(docs, jsonList(v, line))
	}
}

// jsonList returns the document v, starting on line first, split into its
// items when it is a List whose items are an array; otherwise whole.
func jsonList(v []byte, first int) rawDoc {
	whole := rawDoc{line: first, json: v}
	if h, ok := listHeader(v); !ok || h.Kind == "" {
		return whole
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return whole
	}
	head := map[string]json.RawMessage{}
	var items []rawDoc
	lines := lineCounter{data: v, line: first}
	itemsLine, readWhole := 0, false
	for dec.More() {
		t, err := dec.Token()
		key, ok := t.(string)
		if err != nil || !ok {
			return whole
		}
		if key == "items" {
			line := lines.at(int(dec.InputOffset()))
			if itemsLine != 0 {
				return twoItems(first, itemsLine, line)
			}
			itemsLine = line
		}
		if key != "items" {
			var val json.RawMessage
			if dec.Decode(&val) != nil {
				return whole
			}
			head[key] = val
			continue
		}
		switch t, err := dec.Token(); {
		case err != nil || t == json.Delim('{'):
			return whole // read whole, which says what is wrong
		case t != json.Delim('['):
			// null, or another scalar: read whole, which says so, once
			// the other keys are checked for a second items.
			readWhole = true
			continue
		}
		for dec.More() {
			start := dec.InputOffset()
			var item json.RawMessage
			if dec.Decode(&item) != nil {
				return whole
			}
			items = append(items, rawDoc{line: lines.at(valueStart(v, start)), json: item})
		}
		if _, err := dec.Token(); err != nil {
			return whole
		}
	}
	data, err := json.Marshal(head)
	if err != nil || readWhole {
		return whole
	}
	return rawDoc{line: first, json: data, items: items, split: true}
}

// twoItems is a List document, starting on line first, with an items key
// on line a and another on line b: refused, as YAML and JSON parsers
// disagree on which one counts (the first, the last, or both).
func twoItems(first, a, b int) rawDoc {
	return rawDoc{line: first, err: fmt.Sprintf("items: given twice, on lines %d and %d: a List has one items key", a, b)}
}

// valueStart returns where the JSON value after offset i of data starts:
// past white space and a separating comma.
func valueStart(data []byte, i int64) int {
	for i < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[i]) >= 0 {
		i++
	}
	return int(i)
}

// lineCounter gives the line of offsets into data, asked in increasing order,
// counting each newline once.
type lineCounter struct {
	data []byte
	pos  int
	line int // the line at pos
}

func (l *lineCounter) at(offset int) int {
	if offset > l.pos {
		l.line += bytes.Count(l.data[l.pos:offset], []byte("\n"))
		l.pos = offset
	}
	return l.line
}

// yamlLine matches the line number in the YAML parser's messages.
var yamlLine = regexp.MustCompile(`line (\d+)`)

// splitYAML splits a YAML stream on "---" lines and converts each
// non-empty document to JSON, a List item by item.
func splitYAML(data []byte) []rawDoc {
	var docs []rawDoc
	flush := func(start int, lines []string) {
		if d, ok := yamlList(lines, start); ok {
			docs = append(docs, d)
			return
		}
		d := yamlToJSON(strings.Join(lines, ""), start)
		if d.err != "" || string(d.json) != "null" { // null: only comments or blank lines
			docs = append(docs, d)
		}
	}
	start, n := 1, 0
	var cur []string
	for line := range strings.Lines(string(data)) {
		n++
		t := strings.TrimRight(line, " \t\r\n")
		if t == "---" || strings.HasPrefix(t, "--- ") {
			flush(start, cur)
			cur = cur[:0]
			start = n
			if rest := strings.TrimPrefix(t, "---"); strings.TrimSpace(rest) != "" {
				cur = append(cur, rest+"\n")
			} else {
				start = n + 1
			}
			continue
		}
		cur = append(cur, line)
	}
	flush(start, cur)
	return docs
}

// yamlToJSON converts one YAML document or List item, text, that starts on
// line first of its file.
func yamlToJSON(text string, first int) rawDoc {
	j, err := yaml.YAMLToJSON([]byte(text))
	if err != nil {
		// Make the parser's line numbers the file's.
		msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
			n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
			return fmt.Sprintf("line %d", n+first-1)
		})
		msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
		return rawDoc{line: first, err: "malformed YAML: " + msg}
	}
	return rawDoc{line: first, json: j}
}

// yamlList splits a YAML document, lines starting on line first, that is a
// List as kubectl prints it (a mapping whose "items:" key at column 0 holds
// a block sequence) into the List without its items and each item, which is
// converted on its own and keeps its own line. Converting item by item also
// never holds a whole large List as one tree. ok is false for any other
// shape, which is then read whole; and when an item does not convert alone
// but the whole document does (an alias to another item, say).
func yamlList(lines []string, first int) (doc rawDoc, ok bool) {
	var keys []int // the lines of top-level items keys
	for i, l := range lines {
		if key, _, ok := strings.Cut(l, ":"); ok && (key == "items" || key == `"items"` || key == "'items'") {
			keys = append(keys, i)
		}
	}
	if len(keys) > 1 {
		return twoItems(first, first+keys[0], first+keys[1]), true
	}
	k := slices.IndexFunc(lines, func(l string) bool { return strings.TrimRight(l, " \t\r\n") == "items:" })
	if k < 0 {
		return rawDoc{}, false
	}
	var (
		items  []rawDoc
		cur    []string // the current item's lines
		start  int      // its first line
		indent = -1     // the column of the items' "-"
		end    = len(lines)
	)
	flushItem := func() {
		if cur != nil {
			items = append(items, yamlToJSON(strings.Join(cur, ""), start))
		}
	}
	for i := k + 1; i < len(lines) && end == len(lines); i++ {
		l := lines[i]
		t := strings.TrimRight(l, " \t\r\n")
		text := strings.TrimLeft(t, " ")
		n := len(t) - len(text)
		dash := strings.HasPrefix(text, "-") && (len(text) == 1 || text[1] == ' ')
		switch {
		case text == "" || text[0] == '#':
			if cur != nil {
				cur = append(cur, l)
			}
		case n == 0 && !(dash && indent <= 0):
			end = i // the List's next key
		case indent < 0 && dash:
			indent = n
			fallthrough
		case n == indent && dash:
			flushItem()
			// The item's mapping, its "-" turned into a blank.
			cur, start = []string{l[:n] + " " + l[n+1:]}, first+i
		case n > indent && cur != nil:
			cur = append(cur, l)
		default:
			return rawDoc{}, false
		}
	}
	flushItem()
	head := yamlToJSON(strings.Join(lines[:k], "")+strings.Join(lines[end:], ""), first)
	if h, list := listHeader(head.json); head.err != "" || !list || h.Kind == "" {
		return rawDoc{}, false
	}
	for _, it := range items {
		if it.err != "" {
			if whole := yamlToJSON(strings.Join(lines, ""), first); whole.err == "" {
				return rawDoc{}, false
			}
			break
		}
	}
	return rawDoc{line: first, json: head.json, items: items, split: true}, true
}

// header is what every object has.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
}

// object decodes one object, or the items of a List. itemKind is the kind
// implied by a typed list (PodList → Pod) for items that do not say theirs.
func (c *cluster) object(at origin, data []byte, itemKind string) {
	var h header
	if err := json.Unmarshal(data, &h); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			c.addProblem(at, "not a Kubernetes object: a JSON %s where a mapping with apiVersion, kind and metadata is wanted", te.Value)
			return
		}
		c.addError(at, "", jsonError(err))
		return
	}
	if h.Kind == "" {
		h.Kind = itemKind
	}
	at.kind, at.name, at.namespace = h.Kind, h.Metadata.Name, h.Metadata.Namespace
	if h.Kind == "" {
		c.addProblem(at, "kind: required")
		return
	}
	var l struct {
		Items *[]json.RawMessage `json:"items"`
	}
	if h.Kind == kindList || (strings.HasSuffix(h.Kind, "List") && json.Unmarshal(data, &l) == nil && l.Items != nil) {
		if at.item >= 0 {
			c.addProblem(at, "kind %q: a List inside a List is not read", h.Kind)
			return
		}
		if err := json.Unmarshal(data, &l); err != nil {
			c.addError(at, "", jsonError(err))
			return
		}
		if l.Items == nil {
			return
		}
		items := make([]rawDoc, len(*l.Items))
		for i, item := range *l.Items {
			items[i] = rawDoc{line: at.line, json: item}
		}
		c.list(at, h.Kind, items)
		return
	}
	if !slices.Contains(knownKinds, h.Kind) {
		c.skip(at)
		return
	}
	if h.Metadata.Name == "" {
		c.addProblem(at, "metadata.name: required")
		return
	}
	if slices.Contains(namespacedKinds, h.Kind) {
		if at.namespace == "" {
			at.namespace = "default"
		}
	} else {
		at.namespace = ""
	}
	key := h.Kind + "/" + at.namespace + "/" + at.name
	if first, dup := c.seen[key]; dup {
		c.addProblem(at, "duplicate %s: also at %s; this one is ignored", h.Kind, first)
		return
	}
	c.seen[key] = at

	// Each object is kept with only the fields ipamctl reads (see slim.go):
	// a List of a large cluster is mostly what it does not read.
	switch h.Kind {
	case kindPool:
		c.pool(at, data)
	case kindReservedIP:
		c.reservedIP(at, data)
	case kindNamespace:
		var ns corev1.Namespace
		if c.decode(at, data, &ns) {
			c.namespaces[ns.Name] = slimNamespace(&ns)
		}
	case kindNode:
		var n corev1.Node
		if c.decode(at, data, &n) {
			c.nodes[n.Name] = slimNode(&n)
		}
	case kindPod:
		var p corev1.Pod
		if c.decode(at, data, &p) {
			p.Namespace = at.namespace
			po := &podObj{at: at, pod: slimPod(&p)}
			c.pods = append(c.pods, po)
			c.podIndex[p.Namespace+"/"+p.Name] = po
		}
	case kindStatefulSet:
		var s appsv1.StatefulSet
		if c.decode(at, data, &s) {
			s.Namespace = at.namespace
			n := len(c.problems)
			c.checkStatefulSet(at, &s)
			if len(c.problems) == n {
				c.app(at, &s) // not with the values checkStatefulSet corrected
			}
			c.sets = append(c.sets, &setObj{at: at, set: slimStatefulSet(&s)})
		}
	case kindSubnet:
		c.subnet(at, data)
	case kindDeployment:
		c.decodeApp(at, data, new(appsv1.Deployment))
	case kindReplicaSet:
		c.decodeApp(at, data, new(appsv1.ReplicaSet))
	case kindDaemonSet:
		c.decodeApp(at, data, new(appsv1.DaemonSet))
	case kindJob:
		c.decodeApp(at, data, new(batchv1.Job))
	case kindCronJob:
		c.decodeApp(at, data, new(batchv1.CronJob))
	}
}

// decodeApp decodes a controller into obj and reads it (see app).
func (c *cluster) decodeApp(at origin, data []byte, obj metav1.Object) {
	if c.decode(at, data, obj) {
		obj.SetNamespace(at.namespace)
		c.app(at, obj)
	}
}

// app reads a controller: as an application of SpiderSubnet unless a
// Deployment or a CronJob controls it (k8s.Application), and, for a
// ReplicaSet or a Job, as the owner a pod's application is found through
// (k8s.App). Only the fields those read are kept.
func (c *cluster) app(at origin, obj metav1.Object) {
	switch obj.(type) {
	case *appsv1.ReplicaSet, *batchv1.Job:
		m := &metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: obj.GetName(), UID: obj.GetUID()}
		if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
			m.OwnerReferences = []metav1.OwnerReference{*ref}
		}
		c.owners[at.kind+"/"+m.Namespace+"/"+m.Name] = m
	}
	app, ok, err := k8s.Application(obj)
	if err != nil {
		c.addProblem(at, "%v", err)
		return
	}
	if !ok {
		return
	}
	if app.UID == "" {
		app.UID = placeholderAppUID(app.AppRef)
	}
	delete(app.Annotations, lastApplied)
	if err := app.Validate(); err != nil {
		c.addError(at, "", err)
		return
	}
	c.apps = append(c.apps, &appObj{at: at, app: app})
}

// placeholderAppUID stands for the UID of a controller that has none (a
// manifest written by hand): "nouid-" and ten hexadecimal digits of a hash
// of its kind, namespace and name, so that it is the same on every run,
// differs between controllers, and can be written in a label.
func placeholderAppUID(r ipam.AppRef) string {
	sum := sha256.Sum256([]byte(r.APIVersion + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name))
	return "nouid-" + hex.EncodeToString(sum[:5])
}

// subnet reads a SpiderSubnet: its spec as a subnet.Subnet.
func (c *cluster) subnet(at origin, data []byte) {
	s := new(subnet.Subnet)
	obj, ok := c.spec(at, data, s)
	if !ok {
		return
	}
	s.Name, s.Terminating = obj.Metadata.Name, obj.terminating()
	if err := s.Validate(); err != nil {
		c.addError(at, "spec.", err)
		return
	}
	c.subnets = append(c.subnets, &subnetObj{at: at, subnet: s})
}

// list reads the items of a List of the given kind found at at, each at its
// own line when it has one.
func (c *cluster) list(at origin, kind string, items []rawDoc) {
	implied := ""
	if kind != kindList {
		implied = strings.TrimSuffix(kind, "List")
	}
	for i, item := range items {
		it := at
		it.item, it.line, it.kind, it.name, it.namespace = i, item.line, "", "", ""
		if item.err != "" {
			c.addProblem(it, "%s", item.err)
			continue
		}
		c.object(it, item.json, implied)
	}
}

// decode unmarshals a Kubernetes object, recording a problem if it cannot.
func (c *cluster) decode(at origin, data []byte, v any) bool {
	err := json.Unmarshal(data, v)
	if err == nil {
		return true
	}
	// A timestamp that does not parse: find the field that holds it.
	var pe *time.ParseError
	if errors.As(err, &pe) {
		var doc any
		if json.Unmarshal(data, &doc) == nil {
			if path := findString(doc, "", pe.Value); path != "" {
				c.addProblem(at, "%s %q: not an RFC 3339 time", path, pe.Value)
				return false
			}
		}
	}
	c.addError(at, "", jsonError(err))
	return false
}

// findString returns the path of the first string value s in a decoded JSON
// document, in key order, or "".
func findString(v any, path string, s string) string {
	switch x := v.(type) {
	case string:
		if x == s {
			return path
		}
	case []any:
		for i, e := range x {
			if p := findString(e, fmt.Sprintf("%s[%d]", path, i), s); p != "" {
				return p
			}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if p := findString(x[k], p, s); p != "" {
				return p
			}
		}
	}
	return ""
}

func (c *cluster) checkStatefulSet(at origin, s *appsv1.StatefulSet) {
	if s.Spec.Replicas != nil && *s.Spec.Replicas < 0 {
		c.addProblem(at, "spec.replicas %d: negative", *s.Spec.Replicas)
		s.Spec.Replicas = new(int32)
	}
	if o := s.Spec.Ordinals; o != nil && o.Start < 0 {
		c.addProblem(at, "spec.ordinals.start %d: negative", o.Start)
		o.Start = 0
	}
}

// specObject is what a SpiderIPPool or SpiderReservedIP document holds
// besides its spec's fields.
type specObject struct {
	Metadata struct {
		Name              string            `json:"name"`
		DeletionTimestamp json.RawMessage   `json:"deletionTimestamp"`
		Labels            map[string]string `json:"labels"`
		Annotations       map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec   json.RawMessage `json:"spec"`
	Status struct {
		AllocatedIPs json.RawMessage `json:"allocatedIPs"`
	} `json:"status"`
}

func (o *specObject) terminating() bool {
	return len(o.Metadata.DeletionTimestamp) > 0 && string(o.Metadata.DeletionTimestamp) != "null"
}

// spec decodes a document with a spec, and its spec into into, reporting
// what is wrong against at.
func (c *cluster) spec(at origin, data []byte, into json.Unmarshaler) (*specObject, bool) {
	obj := new(specObject)
	if err := json.Unmarshal(data, obj); err != nil {
		c.addError(at, "", jsonError(err))
		return nil, false
	}
	if len(obj.Spec) == 0 || string(obj.Spec) == "null" {
		c.addProblem(at, "spec: required")
		return nil, false
	}
	if err := into.UnmarshalJSON(obj.Spec); err != nil {
		c.addError(at, "spec.", err)
		return nil, false
	}
	return obj, true
}

// pool reads a SpiderIPPool: its spec as an ipam.Pool and its
// status.allocatedIPs as existing claims.
func (c *cluster) pool(at origin, data []byte) {
	first := len(c.problems)
	p := new(ipam.Pool)
	obj, ok := c.spec(at, data, p)
	if !ok {
		c.leaveOut(at.name, at, first)
		return
	}
	p.Name, p.Terminating = obj.Metadata.Name, obj.terminating()
	if err := p.Validate(); err != nil {
		c.addError(at, "spec.", err)
		c.leaveOut(p.Name, at, first)
		return
	}
	po := &poolObj{at: at, pool: p, labels: obj.Metadata.Labels, annotations: obj.Metadata.Annotations}
	delete(po.annotations, lastApplied)
	po.claims = c.allocatedIPs(at, p, obj.Status.AllocatedIPs)
	c.pools = append(c.pools, po)
}

// allocatedIPs reads status.allocatedIPs: Spiderpool stores it as a JSON
// string holding a map from address to {"pod": "ns/name", "podUid": "..."};
// the map itself, not in a string, is taken too. Entries that are not
// addresses of the pool are reported and skipped.
func (c *cluster) allocatedIPs(at origin, p *ipam.Pool, raw json.RawMessage) []claimObj {
	const field = "status.allocatedIPs"
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		raw = json.RawMessage(s)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		c.addProblem(at, "%s: want a JSON object mapping each address to its pod: %v", field, jsonError(err))
		return nil
	}
	rs, _ := p.RangeSet()
	ips := make([]string, 0, len(m))
	for k := range m {
		ips = append(ips, k)
	}
	slices.SortFunc(ips, compareIPStrings)
	var out []claimObj
	for _, k := range ips {
		path := fmt.Sprintf("%s[%q]", field, k)
		ip, err := netip.ParseAddr(k)
		if err != nil {
			c.addProblem(at, "%s: invalid IP address", path)
			continue
		}
		if !slices.ContainsFunc(rs, func(r ipam.Range) bool { return r.Contains(ip) }) {
			c.addProblem(at, "%s: not an address of the pool's ips", path)
			continue
		}
		var v struct {
			Pod    string `json:"pod"`
			PodUID string `json:"podUid"`
		}
		if err := json.Unmarshal(m[k], &v); err != nil {
			c.addError(at, path+".", jsonError(err))
			continue
		}
		ns, name, ok := strings.Cut(v.Pod, "/")
		if !ok || ns == "" || name == "" {
			c.addProblem(at, "%s.pod %q: want namespace/name", path, v.Pod)
			continue
		}
		out = append(out, claimObj{ip: ip, namespace: ns, pod: name, uid: v.PodUID})
	}
	return out
}

// compareIPStrings orders addresses by value, anything unparsable last.
func compareIPStrings(a, b string) int {
	x, errx := netip.ParseAddr(a)
	y, erry := netip.ParseAddr(b)
	switch {
	case errx == nil && erry == nil:
		return x.Compare(y)
	case errx == nil:
		return -1
	case erry == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// reservedIP reads a SpiderReservedIP.
func (c *cluster) reservedIP(at origin, data []byte) {
	r := new(ipam.ReservedIP)
	obj, ok := c.spec(at, data, r)
	if !ok {
		return
	}
	r.Name, r.Terminating = obj.Metadata.Name, obj.terminating()
	c.reserved = append(c.reserved, &reservedObj{at: at, r: r})
}

// dropOverlaps checks the pools against each other (ipam.ValidatePools) and,
// if they do not go together, keeps them in input order, dropping each pool
// that conflicts with one kept before it, so that the rest still make a
// catalog. Each dropped pool's problems are recorded at its document.
func (c *cluster) dropOverlaps() {
	if ipam.ValidatePools(c.poolList()) == nil {
		return
	}
	var kept []*poolObj
	var pools []*ipam.Pool
	for _, po := range c.pools {
		err := ipam.ValidatePools(append(slices.Clip(pools), po.pool))
		if err == nil {
			kept = append(kept, po)
			pools = append(pools, po.pool)
			continue
		}
		// ValidatePools reports a conflict from both sides; the kept pool's
		// side says nothing about this one.
		errs := leafErrors(err)
		if own := slices.DeleteFunc(slices.Clone(errs), func(e error) bool {
			var fe *ipam.FieldError
			return errors.As(e, &fe) && fe.Object != "" && fe.Object != poolObject(po.pool.Name)
		}); len(own) > 0 {
			errs = own
		}
		first := len(c.problems)
		for _, e := range errs {
			c.addProblem(po.at, "%s; the pool is left out", c.crossText(po, e))
		}
		c.leaveOut(po.pool.Name, po.at, first)
	}
	c.pools = kept
}

// crossCheck records every problem of the pools taken together, each at the
// document of the pool it names.
func (c *cluster) crossCheck() {
	for _, e := range leafErrors(ipam.ValidatePools(c.poolList())) {
		var fe *ipam.FieldError
		i := -1
		if errors.As(e, &fe) {
			i = slices.IndexFunc(c.pools, func(po *poolObj) bool { return fe.Object == poolObject(po.pool.Name) })
		}
		if i < 0 {
			c.addProblem(origin{}, "pools: %v", e)
			continue
		}
		c.addProblem(c.pools[i].at, "%s", c.crossText(c.pools[i], e))
	}
}

// crossText renders a problem of ValidatePools for pool po's document: the
// field path gets "spec.", and the pool is named if the problem is another
// pool's.
func (c *cluster) crossText(po *poolObj, e error) string {
	var fe *ipam.FieldError
	if errors.As(e, &fe) && fe.Object != "" && fe.Object != poolObject(po.pool.Name) {
		x := *fe
		x.Field = "spec." + x.Field
		return x.Error()
	}
	return strings.Join(errorLines("spec.", e), "; ")
}

func poolObject(name string) string { return fmt.Sprintf("pool %q", name) }

func (c *cluster) poolList() []*ipam.Pool {
	out := make([]*ipam.Pool, len(c.pools))
	for i, po := range c.pools {
		out[i] = po.pool
	}
	return out
}

// leafErrors flattens errors.Join trees.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// errorLines renders every problem in err, one line each. A FieldError loses
// its object (the origin names it) and gets prefix before its field path.
func errorLines(prefix string, err error) []string {
	var out []string
	for _, e := range leafErrors(err) {
		var fe *ipam.FieldError
		if errors.As(e, &fe) {
			x := *fe
			x.Object = ""
			if x.Field != "" && x.Field != "(document)" && !strings.HasPrefix(x.Field, "offset ") {
				x.Field = prefix + x.Field
			} else if x.Field == "(document)" && prefix != "" {
				x.Field = strings.TrimSuffix(prefix, ".")
			}
			out = append(out, x.Error())
			continue
		}
		out = append(out, strings.ReplaceAll(e.Error(), "\n", "; "))
	}
	return out
}

// jsonError turns the json package's type errors into a FieldError naming
// the field; other errors are returned as they are.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "(document)"
		}
		if reason, ok := outOfRange(te); ok {
			return &ipam.FieldError{Field: field, Reason: reason}
		}
		return &ipam.FieldError{Field: field, Reason: fmt.Sprintf("wrong type: a JSON %s where %s is wanted", te.Value, jsonKind(te.Type))}
	}
	return err
}

// outOfRange says why an integer does not fit an integer field, such as
// spec.replicas 2147483648 (an int32): the json package calls that a type
// error too.
func outOfRange(te *json.UnmarshalTypeError) (string, bool) {
	num, ok := strings.CutPrefix(te.Value, "number ")
	t := te.Type
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if !ok || t == nil || strings.ContainsAny(num, ".eE") {
		return "", false
	}
	var lo, hi string
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := t.Bits()
		lo, hi = strconv.FormatInt(-1<<(bits-1), 10), strconv.FormatInt(1<<(bits-1)-1, 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		lo, hi = "0", strconv.FormatUint(1<<t.Bits()-1, 10)
	default:
		return "", false
	}
	return fmt.Sprintf("%s: out of range: an integer from %s to %s is wanted", num, lo, hi), true
}

// jsonKind names the JSON shape a Go type takes.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a " + t.String()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
