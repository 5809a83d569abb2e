package ipam

import (
	"errors"
	"fmt"
	"iter"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Source names the rule of the candidate chain that made a pool a candidate.
type Source string

// Sources, from the highest rule of Spiderpool's chain to the lowest, plus
// SourceRequest for pools a request names itself (host-local style).
const (
	SourceRequest        Source = "request"
	SourceSubnet         Source = "pod annotation ipam.spidernet.io/subnet"
	SourceSubnets        Source = "pod annotation ipam.spidernet.io/subnets"
	SourcePodIPPools     Source = "pod annotation ipam.spidernet.io/ippools"
	SourcePodIPPool      Source = "pod annotation ipam.spidernet.io/ippool"
	SourceNamespace      Source = "namespace annotation"
	SourceNetConf        Source = "CNI network config"
	SourceClusterDefault Source = "cluster default pools"
)

// Annotation keys read by Select and Filter.
const (
	AnnotationSubnet         = "ipam.spidernet.io/subnet"
	AnnotationSubnets        = "ipam.spidernet.io/subnets"
	AnnotationIPPools        = "ipam.spidernet.io/ippools"
	AnnotationIPPool         = "ipam.spidernet.io/ippool"
	AnnotationNSDefaultIPv4  = "ipam.spidernet.io/default-ipv4-ippool"
	AnnotationNSDefaultIPv6  = "ipam.spidernet.io/default-ipv6-ippool"
	AnnotationMultusDefault  = "v1.multus-cni.io/default-network"
	AnnotationMultusNetworks = "k8s.v1.cni.cncf.io/networks"
)

// AppPoolSource is an optional capability of a PoolSource: it serves
// SpiderSubnet auto-pools. Select finds it by type assertion when a pod has
// the subnet annotations; without it they are refused with ErrNotSupported,
// as Spiderpool refuses them when its auto-pool feature is off.
// subnet.Manager implements it. Implementations must be safe for concurrent
// use.
type AppPoolSource interface {
	PoolSource
	// AutoPool returns the name of the pool that serves interface iface, IP
	// family family (4 or 6), of the pod req describes, from the SpiderSubnet
	// named subnet: the auto-pool of the pod's application (req.App), which
	// it may create or resize first; Pool must then know it, with a
	// podAffinity that admits req.App (see IsAutoPool), or none. It never
	// waits: when the pool cannot serve yet, it returns at once an error
	// wrapping ErrNotReady that says why. A pod without a controller (req.App
	// is zero) gets an error wrapping ErrNotSupported; an unknown subnet,
	// ErrNotFound. req is only read.
	AutoPool(req *Request, iface string, family int, subnet string) (string, error)
}

// Candidates is what the chain chose for one interface and one IP family:
// the pools to try, in the order they were named. The zero Candidates has no
// pools. It is a plain value, safe for concurrent reads.
type Candidates struct {
	Interface string
	// Family is 4 or 6.
	Family int
	// Source is the rule that chose the pools.
	Source Source
	// Pools are the pool names, wildcards expanded, duplicates dropped.
	Pools []string
	// CleanGateway asks for no default route through the pool's gateway.
	CleanGateway bool
}

// IPPoolAnnotation is the value of the pod annotation ipam.spidernet.io/ippool,
// such as {"ipv4":["blue","backup-*"],"ipv6":["blue6"]}: the pools of the
// interfaces a request leaves to selection. Names may be wildcards (see expand).
//
// The zero IPPoolAnnotation names no pool, which ParseIPPoolAnnotation rejects.
// It is a plain value, safe for concurrent reads.
type IPPoolAnnotation struct {
	IPv4 []string `json:"ipv4,omitempty"`
	IPv6 []string `json:"ipv6,omitempty"`
}

// IPPoolsEntry is one element of the pod annotation ipam.spidernet.io/ippools:
// the pools of one interface. Interface is empty when the annotation binds its
// entries to interfaces by position (see Select).
//
// The zero IPPoolsEntry names no pool, which ParseIPPoolsAnnotation rejects.
// It is a plain value, safe for concurrent reads.
type IPPoolsEntry struct {
	Interface string   `json:"interface,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
	IPv6      []string `json:"ipv6,omitempty"`
	// CleanGateway, when set, overrides NetConf.CleanGateway for this interface.
	CleanGateway *bool `json:"cleangateway,omitempty"`
}

// NICSubnets is the value of the pod annotation ipam.spidernet.io/subnet,
// or one element of ipam.spidernet.io/subnets: the SpiderSubnets from which
// an auto-created pool would serve one interface (NIC), per family. Spiderpool uses only
// the first name of each family, so the parsers keep only that one; subnet
// names are never wildcards.
//
// The zero NICSubnets names no subnet, which the parsers reject.
// It is a plain value, safe for concurrent reads.
type NICSubnets struct {
	Interface string   `json:"interface,omitempty"`
	IPv4      []string `json:"ipv4,omitempty"`
	IPv6      []string `json:"ipv6,omitempty"`
}

// AnnotationError says what is wrong with one pool-selection annotation of a
// pod or a namespace. It unwraps to ErrInvalid (a malformed or contradictory
// value) or ErrNotSupported (a valid value asking for what the library does
// not do yet).
//
// The zero AnnotationError is not useful; Select and the Parse functions build
// them. An AnnotationError is not modified after it is returned, so it is safe
// to read from several goroutines.
type AnnotationError struct {
	// Object names the annotated object, such as "pod default/web-0" or
	// "namespace default"; empty when a Parse function was called directly.
	Object string
	// Key is the annotation key, such as "ipam.spidernet.io/ippool"; empty when
	// ParsePoolList was called directly.
	Key string
	// Value is the raw annotation value, cut to about 200 bytes.
	Value string
	// Reason says what is wrong, in lower case, with the JSON path of the
	// offending element when there is one, such as `[1].ipv4[0]: empty pool name`.
	Reason string
	// Err is ErrInvalid or ErrNotSupported.
	Err error
}

// Error returns, for example,
// `pod default/web-0: annotation "ipam.spidernet.io/ippool" "{ipv4: bad": invalid JSON: ...`.
func (e *AnnotationError) Error() string {
	var b strings.Builder
	if e.Object != "" {
		b.WriteString(e.Object)
		b.WriteString(": ")
	}
	b.WriteString("annotation ")
	if e.Key != "" {
		b.WriteString(strconv.Quote(e.Key))
		b.WriteByte(' ')
	}
	b.WriteString(quoteAnnotationValue(e.Value))
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap returns Err.
func (e *AnnotationError) Unwrap() error { return e.Err }

// quoteAnnotationValue quotes s for an error message: between backquotes
// when it holds double quotes (JSON reads better unescaped), else with
// strconv.Quote.
func quoteAnnotationValue(s string) string {
	if strings.Contains(s, `"`) && !strings.ContainsAny(s, "`\n\r") && utf8.ValidString(s) {
		return "`" + s + "`"
	}
	return strconv.Quote(s)
}

// maxAnnotationValueLen is about how much of a raw annotation an
// AnnotationError keeps.
const maxAnnotationValueLen = 200

// cutAnnotationValue shortens s to about maxAnnotationValueLen bytes, on a
// rune boundary.
func cutAnnotationValue(s string) string {
	if len(s) <= maxAnnotationValueLen {
		return s
	}
	n := maxAnnotationValueLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

// maxAnnotationProblems bounds how many problems one annotation reports.
const maxAnnotationProblems = 10

// annotationParser is one annotation being parsed, with the problems found so
// far. Select names the annotated object afterwards (see setAnnotationObject),
// so that the name is built only when there is an error.
type annotationParser struct {
	key, value string
	errs       []error
}

// invalid records a problem that makes the value invalid.
func (a *annotationParser) invalid(reason string, args ...any) {
	if len(a.errs) >= maxAnnotationProblems {
		return
	}
	if len(args) > 0 {
		reason = fmt.Sprintf(reason, args...)
	}
	a.errs = append(a.errs, a.newError(reason, ErrInvalid))
}

func (a *annotationParser) newError(reason string, err error) *AnnotationError {
	return &AnnotationError{Key: a.key, Value: cutAnnotationValue(a.value), Reason: reason, Err: err}
}

func (a *annotationParser) err() error {
	switch len(a.errs) {
	case 0:
		return nil
	case 1:
		return a.errs[0]
	}
	return errors.Join(a.errs...)
}

// decode unmarshals the value into v. It reports whether that worked; if not,
// the problem is recorded.
func (a *annotationParser) decode(v any) bool {
	if strings.TrimSpace(a.value) == "" {
		a.invalid("empty value: JSON is required")
		return false
	}
	err := decodeJSON([]byte(a.value), v, "")
	if err == nil {
		return true
	}
	var fe *FieldError
	switch {
	case !errors.As(err, &fe):
		a.invalid("invalid JSON: %s", err.Error())
	case strings.HasPrefix(fe.Reason, "malformed JSON: "):
		reason := "invalid JSON: " + strings.TrimPrefix(fe.Reason, "malformed JSON: ")
		if strings.HasPrefix(fe.Field, "offset ") {
			reason += " (at " + fe.Field + ")"
		}
		if fe.Value != "" {
			reason += ": " + quoteAnnotationValue(fe.Value)
		}
		a.invalid("%s", reason)
	default:
		msg := strings.NewReplacer(" a array", " an array", " a object", " an object").Replace(fe.Error())
		a.invalid("%s", msg)
	}
	return false
}

// names checks a list of pool names at JSON path field: each non-empty, each
// pattern valid, no name written twice.
func (a *annotationParser) names(field string, names []string) {
	if fe := checkPoolNames(names); fe != nil {
		fe.Field = field + fe.Field
		a.invalid("%s", fe.Error())
	}
}

// isPoolPattern reports whether a pool name is a wildcard pattern, as
// Spiderpool decides it: it holds '*' or '?', or both '[' and ']'.
func isPoolPattern(name string) bool {
	return strings.ContainsAny(name, "*?") || (strings.Contains(name, "[") && strings.Contains(name, "]"))
}

// smallNameList is the list length up to which duplicates are found by a
// linear search rather than a map.
const smallNameList = 16

// checkPoolNames returns the first problem of a list of pool names: an empty
// name, an invalid pattern, or a name (not a pattern) written twice. The
// FieldError has no Object and its Field is the index, such as "[2]".
func checkPoolNames(names []string) *FieldError {
	var seen map[string]int
	if len(names) > smallNameList {
		seen = make(map[string]int, len(names))
	}
	for i, n := range names {
		switch {
		case n == "":
			return &FieldError{Field: jsonIndex(i), Reason: "empty pool name"}
		case isPoolPattern(n):
			if _, err := path.Match(n, ""); err != nil {
				return &FieldError{Field: jsonIndex(i), Value: n, Reason: "invalid wildcard pattern: " + err.Error()}
			}
			continue
		}
		j := -1
		if seen != nil {
			if k, ok := seen[n]; ok {
				j = k
			} else {
				seen[n] = i
			}
		} else {
			j = slices.Index(names[:i], n)
		}
		if j >= 0 {
			return &FieldError{Field: jsonIndex(i), Value: n, Reason: "pool named twice (also at " + jsonIndex(j) + ")"}
		}
	}
	return nil
}

func jsonIndex(i int) string { return "[" + strconv.Itoa(i) + "]" }

// nilIfNoNames turns an empty list into nil, so that a parsed value and its
// JSON round trip are equal.
func nilIfNoNames(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// ParseIPPoolAnnotation parses the value of the pod annotation
// ipam.spidernet.io/ippool. It must name at least one pool; names must be
// non-empty, written once each, and wildcards must be valid path.Match
// patterns. Pool existence is not checked. Errors are *AnnotationError values
// (joined when there are several) that unwrap to ErrInvalid.
func ParseIPPoolAnnotation(s string) (IPPoolAnnotation, error) {
	a := annotationParser{key: AnnotationIPPool, value: s}
	var v IPPoolAnnotation
	if !a.decode(&v) {
		return IPPoolAnnotation{}, a.err()
	}
	v.IPv4, v.IPv6 = nilIfNoNames(v.IPv4), nilIfNoNames(v.IPv6)
	if v.IPv4 == nil && v.IPv6 == nil {
		a.invalid("names no pool: ipv4 and ipv6 are both empty")
	}
	a.names("ipv4", v.IPv4)
	a.names("ipv6", v.IPv6)
	if err := a.err(); err != nil {
		return IPPoolAnnotation{}, err
	}
	return v, nil
}

// ParseIPPoolsAnnotation parses the value of the pod annotation
// ipam.spidernet.io/ippools, a JSON array with one entry per interface. The
// array must not be empty; the entries name their interface all or none (then
// Select binds them by position); no interface is listed twice; each entry
// names at least one pool, with the same rules for names as
// ParseIPPoolAnnotation. Entries are returned as written. Errors are
// *AnnotationError values (joined when there are several) that unwrap to
// ErrInvalid.
func ParseIPPoolsAnnotation(s string) ([]IPPoolsEntry, error) {
	a := annotationParser{key: AnnotationIPPools, value: s}
	var v []IPPoolsEntry
	if !a.decode(&v) {
		return nil, a.err()
	}
	if len(v) == 0 {
		a.invalid("value requires at least one item")
		return nil, a.err()
	}
	named := v[0].Interface != ""
	for i := range v {
		e := &v[i]
		e.IPv4, e.IPv6 = nilIfNoNames(e.IPv4), nilIfNoNames(e.IPv6)
		if (e.Interface != "") != named {
			a.invalid("%s.interface: set on some entries and not on others; name the interface of every entry or of none", jsonIndex(i))
		} else if named {
			for j := range i {
				if v[j].Interface == e.Interface {
					a.invalid("%s.interface %s: duplicate interface (also at %s)", jsonIndex(i), strconv.Quote(e.Interface), jsonIndex(j))
					break
				}
			}
		}
		if e.IPv4 == nil && e.IPv6 == nil {
			a.invalid("%s: entry names no pool: ipv4 and ipv6 are both empty", jsonIndex(i))
		}
		a.names(jsonIndex(i)+".ipv4", e.IPv4)
		a.names(jsonIndex(i)+".ipv6", e.IPv6)
	}
	if err := a.err(); err != nil {
		return nil, err
	}
	return v, nil
}

// ParseSubnetAnnotation parses the value of the pod annotation
// ipam.spidernet.io/subnet. Only the first subnet of each family is kept, as
// Spiderpool uses only that one; it must not be empty nor a wildcard, and at
// least one family must name a subnet. Interface defaults to "eth0". Errors
// are *AnnotationError values (joined when there are several) that unwrap to
// ErrInvalid.
func ParseSubnetAnnotation(s string) (NICSubnets, error) {
	a := annotationParser{key: AnnotationSubnet, value: s}
	var v NICSubnets
	if !a.decode(&v) {
		return NICSubnets{}, a.err()
	}
	a.subnetItem("", &v)
	if v.Interface == "" {
		v.Interface = "eth0"
	}
	if err := a.err(); err != nil {
		return NICSubnets{}, err
	}
	return v, nil
}

// ParseSubnetsAnnotation parses the value of the pod annotation
// ipam.spidernet.io/subnets, a JSON array with one entry per interface. The
// array must not be empty; every entry names its interface, no interface is
// listed twice, and no subnet serves two interfaces. Each entry follows the
// rules of ParseSubnetAnnotation. Errors are *AnnotationError values (joined
// when there are several) that unwrap to ErrInvalid.
func ParseSubnetsAnnotation(s string) ([]NICSubnets, error) {
	a := annotationParser{key: AnnotationSubnets, value: s}
	var v []NICSubnets
	if !a.decode(&v) {
		return nil, a.err()
	}
	if len(v) == 0 {
		a.invalid("value requires at least one item")
		return nil, a.err()
	}
	for i := range v {
		e := &v[i]
		a.subnetItem(jsonIndex(i)+".", e)
		if e.Interface == "" {
			a.invalid("%s.interface: required", jsonIndex(i))
		}
		for j := range i {
			if e.Interface != "" && v[j].Interface == e.Interface {
				a.invalid("%s.interface %s: duplicate interface (also at %s)", jsonIndex(i), strconv.Quote(e.Interface), jsonIndex(j))
				break
			}
		}
		for j := range i {
			if len(e.IPv4) > 0 && len(v[j].IPv4) > 0 && e.IPv4[0] == v[j].IPv4[0] && e.IPv4[0] != "" {
				a.invalid("%s.ipv4[0] %s: subnet used by two interfaces (also at %s)", jsonIndex(i), strconv.Quote(e.IPv4[0]), jsonIndex(j))
			}
			if len(e.IPv6) > 0 && len(v[j].IPv6) > 0 && e.IPv6[0] == v[j].IPv6[0] && e.IPv6[0] != "" {
				a.invalid("%s.ipv6[0] %s: subnet used by two interfaces (also at %s)", jsonIndex(i), strconv.Quote(e.IPv6[0]), jsonIndex(j))
			}
		}
	}
	if err := a.err(); err != nil {
		return nil, err
	}
	return v, nil
}

// subnetItem keeps the first subnet of each family of v and checks it; field
// is the JSON path prefix of v, such as "[1].".
func (a *annotationParser) subnetItem(field string, v *NICSubnets) {
	first := func(fam string, names []string) []string {
		if len(names) == 0 {
			return nil
		}
		switch n := names[0]; {
		case n == "":
			a.invalid("%s%s[0]: empty subnet name", field, fam)
		case isPoolPattern(n):
			a.invalid("%s%s[0] %s: subnet names cannot be wildcards", field, fam, strconv.Quote(n))
		}
		return names[:1:1]
	}
	v.IPv4, v.IPv6 = first("ipv4", v.IPv4), first("ipv6", v.IPv6)
	if v.IPv4 == nil && v.IPv6 == nil {
		where := "names no subnet"
		if field != "" {
			where = strings.TrimSuffix(field, ".") + ": entry names no subnet"
		}
		a.invalid("%s: ipv4 and ipv6 are both empty", where)
	}
}

// ParsePoolList parses a JSON array of pool names, the value of the namespace
// annotations ipam.spidernet.io/default-ipv4-ippool and -ipv6-. An empty
// array (or null) is valid and gives nil. Names follow the rules of
// ParseIPPoolAnnotation. Errors are *AnnotationError values, without Key, that
// unwrap to ErrInvalid.
func ParsePoolList(s string) ([]string, error) {
	return parsePoolList("", s)
}

func parsePoolList(key, s string) ([]string, error) {
	a := annotationParser{key: key, value: s}
	var v []string
	if !a.decode(&v) {
		return nil, a.err()
	}
	a.names("", v)
	if err := a.err(); err != nil {
		return nil, err
	}
	return nilIfNoNames(v), nil
}

// expand returns names with every wildcard replaced by the names of the pools
// of the given family (4 or 6) that it matches (path.Match), in the order
// pools.Pools yields them. Other names are kept as written and are not looked
// up. A pool named more than once, by a wildcard and explicitly or by two
// wildcards, is kept at its first position only; a wildcard matching nothing
// adds nothing. An empty name, an invalid pattern or a name written twice is an
// error (a *FieldError naming the index). pools may be nil: wildcards then
// match nothing. The result never shares memory with names.
func expand(names []string, family int, pools PoolSource) ([]string, error) {
	if family != 4 && family != 6 {
		return nil, &FieldError{Field: "family", Value: strconv.Itoa(family), Reason: "must be 4 or 6"}
	}
	if fe := checkPoolNames(names); fe != nil {
		return nil, fe
	}
	return expandNames(names, family, pools, false), nil
}

// expandNames is expand for names that checkPoolNames accepts. If owned and the list
// has no pattern, names itself is returned; otherwise the result is new.
func expandNames(names []string, family int, pools PoolSource, owned bool) []string {
	if !slices.ContainsFunc(names, isPoolPattern) {
		if owned {
			return nilIfNoNames(names)
		}
		return nilIfNoNames(slices.Clone(names))
	}
	out := poolNameSet{list: make([]string, 0, len(names))}
	for _, n := range names {
		if !isPoolPattern(n) {
			out.add(n)
			continue
		}
		if pools == nil {
			continue
		}
		for p := range pools.Pools() {
			if p == nil || p.Family() != family {
				continue
			}
			if ok, _ := path.Match(n, p.Name); ok {
				out.add(p.Name)
			}
		}
	}
	return nilIfNoNames(out.list)
}

// poolNameSet is a list of names without duplicates, in the order first added.
type poolNameSet struct {
	list []string
	seen map[string]struct{} // built once the list outgrows smallNameList
}

func (u *poolNameSet) add(n string) {
	if u.seen != nil {
		if _, ok := u.seen[n]; ok {
			return
		}
		u.seen[n] = struct{}{}
	} else if slices.Contains(u.list, n) {
		return
	}
	u.list = append(u.list, n)
	if u.seen == nil && len(u.list) > smallNameList {
		u.seen = make(map[string]struct{}, 2*len(u.list))
		for _, m := range u.list {
			u.seen[m] = struct{}{}
		}
	}
}

// Select runs Spiderpool's candidate chain for the interfaces of req that
// leave their pools to selection (those with no Pools) and returns, per
// interface and family, the pools to try and the rule that chose them.
//
// The rules, highest first; the first that applies decides for the whole
// request, and lower rules are not consulted, not even for a family the
// winning rule leaves out:
//
//  1. The pod annotations ipam.spidernet.io/subnets, else
//     ipam.spidernet.io/subnet (SpiderSubnet auto-pools): for every interface
//     and family they name, the auto-pool of the pod's application, as
//     pools' AppPoolSource finds it (its errors are returned as they are:
//     ErrNotReady to retry later, ErrNotSupported for a pod without a
//     controller). Like ippools, they serve every interface they list, and
//     every interface of req that needs selection must be listed. An invalid
//     value gives its parsing error; a PoolSource that is not an
//     AppPoolSource gives an *AnnotationError wrapping ErrNotSupported
//     (Spiderpool's auto-pool feature off).
//  2. The pod annotation ipam.spidernet.io/ippools: candidates for every
//     interface it lists, including interfaces not in req (Spiderpool serves
//     every listed interface on the first CNI ADD). Entries without interface
//     names bind by position to Multus's default interface names: "eth0"
//     for entry 0 and "net<i>" for entry i > 0, whichever interface the
//     request is for (Spiderpool calls them "0", "1", ... until each CNI ADD
//     claims one, so a CNI ADD for net1 finds the address the ADD for eth0
//     allocated for it). Every interface of req that needs selection must be
//     listed, named or by position. An entry's cleangateway overrides
//     NetConf.CleanGateway.
//  3. The pod annotation ipam.spidernet.io/ippool: the same pools for every
//     interface of req that needs selection.
//  4. The namespace annotations ipam.spidernet.io/default-ipv4-ippool and
//     -ipv6- (req.NamespaceAnnotations), when either names a pool.
//  5. NetConf.DefaultIPv4Pools and DefaultIPv6Pools, when either is non-empty.
//  6. The cluster defaults: every pool with Default set, by family, in the
//     order of pools (from DefaultPoolSource when pools has it, else by a scan
//     of pools.Pools).
//
// A pod annotation applies as soon as it is present, whatever its value, as in
// Spiderpool. Interfaces that name their own Pools are served by the
// Allocator host-local style: Select returns nothing for them, even when the
// ippools annotation lists them (explicit pools win), and returns nil when no
// interface of req needs selection, without reading any annotation.
//
// Wildcards are expanded and duplicates dropped as expand does; pool names are
// otherwise not looked up (the Allocator reports unknown pools).
// NetConf.DisableIPv4 and DisableIPv6 drop that family's candidates. A family
// left with no pool (its wildcards matched nothing, or it is disabled) is
// omitted; an interface left with no family at all is an error wrapping
// ErrNoCandidates, as is a request that no rule names a pool for.
//
// The result lists interfaces in the order of the ippools annotation for rule
// 2 and of req.Interfaces otherwise, IPv4 before IPv6 within an interface.
// Candidates of different interfaces never share a Pools slice. pools may be
// nil; req is only read.
func Select(req *Request, pools PoolSource) ([]Candidates, error) {
	if req == nil {
		return nil, &FieldError{Object: "request", Field: "(request)", Reason: "nil request"}
	}
	need := 0
	for i, ifc := range req.Interfaces {
		if ifc.Name == "" {
			return nil, &FieldError{Object: "request", Field: "interfaces" + jsonIndex(i) + ".name", Reason: "required"}
		}
		for j := range i {
			if req.Interfaces[j].Name == ifc.Name {
				return nil, &FieldError{Object: "request", Field: "interfaces" + jsonIndex(i) + ".name", Value: ifc.Name, Reason: "duplicate interface"}
			}
		}
		if len(ifc.Pools) == 0 {
			need++
		}
	}
	if need == 0 {
		return nil, nil
	}
	s := chain{req: req, pools: pools, need: need}

	// 1. SpiderSubnet.
	if v, ok := req.Annotations[AnnotationSubnets]; ok {
		entries, err := ParseSubnetsAnnotation(v)
		if err != nil {
			return nil, s.podError(err)
		}
		return s.autoPools(AnnotationSubnets, v, SourceSubnets, entries)
	}
	if v, ok := req.Annotations[AnnotationSubnet]; ok {
		entry, err := ParseSubnetAnnotation(v)
		if err != nil {
			return nil, s.podError(err)
		}
		return s.autoPools(AnnotationSubnet, v, SourceSubnet, []NICSubnets{entry})
	}

	// 2. ippools, 3. ippool.
	if v, ok := req.Annotations[AnnotationIPPools]; ok {
		return s.ipPools(v)
	}
	if v, ok := req.Annotations[AnnotationIPPool]; ok {
		a, err := ParseIPPoolAnnotation(v)
		if err != nil {
			return nil, s.podError(err)
		}
		v4, v6 := s.expandPair(a.IPv4, a.IPv6, true)
		return s.emit(SourcePodIPPool, v4, v6)
	}

	// 4. The namespace.
	if v4, v6, applies, err := s.namespaceDefaults(); err != nil {
		return nil, err
	} else if applies {
		return s.emit(SourceNamespace, v4, v6)
	}

	// 5. The CNI network config.
	if nc := &req.NetConf; len(nc.DefaultIPv4Pools) > 0 || len(nc.DefaultIPv6Pools) > 0 {
		// Both lists are checked, as Spiderpool expands wildcards before
		// it drops a disabled family.
		for _, l := range [2]struct {
			field string
			names []string
		}{{"default_ipv4_ippool", nc.DefaultIPv4Pools}, {"default_ipv6_ippool", nc.DefaultIPv6Pools}} {
			if fe := checkPoolNames(l.names); fe != nil {
				fe.Object, fe.Field = "CNI network config", l.field+fe.Field
				return nil, fe
			}
		}
		v4, v6 := s.expandPair(nc.DefaultIPv4Pools, nc.DefaultIPv6Pools, false)
		return s.emit(SourceNetConf, v4, v6)
	}

	// 6. The cluster defaults.
	if v4, v6, ok := s.clusterDefaults(); ok {
		return s.emit(SourceClusterDefault, v4, v6)
	}
	return nil, s.noCandidates("", "no pool selection rule of any kind names a pool: no ippool(s) pod annotation, no namespace default pools, no CNI config default pools and no cluster default pool")
}

// chain holds one run of Select.
type chain struct {
	req   *Request
	pools PoolSource
	need  int // interfaces that need selection
}

// podError names the pod in the AnnotationErrors of err, and returns err.
func (s *chain) podError(err error) error {
	obj := "pod"
	switch {
	case s.req.Namespace != "" && s.req.Name != "":
		obj = "pod " + s.req.Namespace + "/" + s.req.Name
	case s.req.Name != "":
		obj = "pod " + s.req.Name
	}
	setAnnotationObject(err, obj)
	return err
}

// namespaceError names the namespace in the AnnotationErrors of err, and
// returns err.
func (s *chain) namespaceError(err error) error {
	obj := "namespace"
	if s.req.Namespace != "" {
		obj = "namespace " + s.req.Namespace
	}
	setAnnotationObject(err, obj)
	return err
}

// setAnnotationObject sets Object in every AnnotationError of err, which this file
// built (so may change), alone or joined.
func setAnnotationObject(err error, object string) {
	switch e := err.(type) {
	case *AnnotationError:
		e.Object = object
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			setAnnotationObject(x, object)
		}
	}
}

// autoPools applies the subnet annotations: the auto-pool of each interface
// and family they name.
func (s *chain) autoPools(key, value string, src Source, entries []NICSubnets) ([]Candidates, error) {
	a := annotationParser{key: key, value: value}
	aps, ok := s.pools.(AppPoolSource)
	if !ok {
		return nil, s.podError(a.newError("SpiderSubnet auto-pools are not enabled: the pool source serves none (it is not an ipam.AppPoolSource), "+
			"as Spiderpool refuses the annotation when its auto-pool feature is off", ErrNotSupported))
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Interface
	}
	for _, ifc := range s.req.Interfaces {
		if len(ifc.Pools) == 0 && !slices.Contains(names, ifc.Name) {
			a.invalid("interface %s has no subnet: the annotation serves %s", strconv.Quote(ifc.Name), strings.Join(names, ", "))
		}
	}
	if err := a.err(); err != nil {
		return nil, s.podError(err)
	}
	out := make([]Candidates, 0, 2*len(entries))
	for _, e := range entries {
		if hasExplicitPools(s.req.Interfaces, e.Interface) {
			continue // explicit pools win
		}
		var v4, v6 []string
		for _, f := range [...]struct {
			fam      int
			subnets  []string
			disabled bool
			pools    *[]string
		}{{4, e.IPv4, s.req.NetConf.DisableIPv4, &v4}, {6, e.IPv6, s.req.NetConf.DisableIPv6, &v6}} {
			if len(f.subnets) == 0 || f.disabled {
				continue
			}
			name, err := aps.AutoPool(s.req, e.Interface, f.fam, f.subnets[0])
			if err != nil {
				return nil, err
			}
			*f.pools = []string{name}
		}
		if len(v4) == 0 && len(v6) == 0 {
			return nil, s.noCandidates(e.Interface, "the "+string(src)+" rule applies but leaves no pool for this interface: the families it names are disabled")
		}
		out = appendCandidates(out, e.Interface, src, s.req.NetConf.CleanGateway, v4, v6)
	}
	return out, nil
}

// expandPair expands an IPv4 and an IPv6 list whose names are checked,
// dropping disabled families.
func (s *chain) expandPair(v4, v6 []string, owned bool) ([]string, []string) {
	if s.req.NetConf.DisableIPv4 {
		v4 = nil
	} else {
		v4 = expandNames(v4, 4, s.pools, owned)
	}
	if s.req.NetConf.DisableIPv6 {
		v6 = nil
	} else {
		v6 = expandNames(v6, 6, s.pools, owned)
	}
	return v4, v6
}

// namespaceDefaults parses and expands the namespace annotations; applies
// reports whether either names a pool (before expansion).
func (s *chain) namespaceDefaults() (v4, v6 []string, applies bool, err error) {
	var lists [2][]string
	var errs []error
	for i, k := range [2]string{AnnotationNSDefaultIPv4, AnnotationNSDefaultIPv6} {
		v, ok := s.req.NamespaceAnnotations[k]
		if !ok {
			continue
		}
		if lists[i], err = parsePoolList(k, v); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, nil, false, s.namespaceError(errors.Join(errs...))
	}
	if len(lists[0]) == 0 && len(lists[1]) == 0 {
		return nil, nil, false, nil
	}
	v4, v6 = s.expandPair(lists[0], lists[1], true)
	return v4, v6, true, nil
}

// emit applies one pair of expanded lists to every interface of req that
// needs selection.
func (s *chain) emit(src Source, v4, v6 []string) ([]Candidates, error) {
	if len(v4) == 0 && len(v6) == 0 {
		return nil, s.noCandidates("", "the "+string(src)+" rule applies but leaves no pool: its wildcards match no pool of the family, or the family is disabled")
	}
	per := 0
	if len(v4) > 0 {
		per++
	}
	if len(v6) > 0 {
		per++
	}
	out := make([]Candidates, 0, per*s.need)
	first := true
	for _, ifc := range s.req.Interfaces {
		if len(ifc.Pools) > 0 {
			continue
		}
		p4, p6 := v4, v6
		if !first { // never share a slice between interfaces
			p4, p6 = slices.Clone(v4), slices.Clone(v6)
		}
		first = false
		out = appendCandidates(out, ifc.Name, src, s.req.NetConf.CleanGateway, p4, p6)
	}
	return out, nil
}

func appendCandidates(out []Candidates, iface string, src Source, cleanGW bool, v4, v6 []string) []Candidates {
	if len(v4) > 0 {
		out = append(out, Candidates{Interface: iface, Family: 4, Source: src, Pools: v4, CleanGateway: cleanGW})
	}
	if len(v6) > 0 {
		out = append(out, Candidates{Interface: iface, Family: 6, Source: src, Pools: v6, CleanGateway: cleanGW})
	}
	return out
}

// ipPools applies the ippools annotation.
func (s *chain) ipPools(value string) ([]Candidates, error) {
	entries, err := ParseIPPoolsAnnotation(value)
	if err != nil {
		return nil, s.podError(err)
	}
	a := annotationParser{key: AnnotationIPPools, value: value}

	// Bind each entry to an interface name.
	names := make([]string, len(entries))
	for i, e := range entries {
		switch {
		case e.Interface != "":
			names[i] = e.Interface
		case i == 0:
			names[i] = "eth0"
		default:
			names[i] = "net" + strconv.Itoa(i)
		}
	}
	for _, ifc := range s.req.Interfaces {
		if len(ifc.Pools) == 0 && !slices.Contains(names, ifc.Name) {
			if entries[0].Interface != "" {
				a.invalid("interface %s must be listed: the request leaves its pools to selection", strconv.Quote(ifc.Name))
			} else {
				a.invalid("interface %s has no entry: the %d entries bind by position to %s", strconv.Quote(ifc.Name), len(entries), strings.Join(names, ", "))
			}
		}
	}
	if err := a.err(); err != nil {
		return nil, s.podError(err)
	}

	out := make([]Candidates, 0, 2*len(entries))
	for i, e := range entries {
		if hasExplicitPools(s.req.Interfaces, names[i]) {
			continue // hasExplicitPools pools win
		}
		v4, v6 := s.expandPair(e.IPv4, e.IPv6, true)
		if len(v4) == 0 && len(v6) == 0 {
			return nil, s.noCandidates(names[i], "the "+string(SourcePodIPPools)+" rule applies but leaves no pool for this interface: its wildcards match no pool of the family, or the family is disabled")
		}
		cg := s.req.NetConf.CleanGateway
		if e.CleanGateway != nil {
			cg = *e.CleanGateway
		}
		out = appendCandidates(out, names[i], SourcePodIPPools, cg, v4, v6)
	}
	return out, nil
}

// hasExplicitPools reports whether ifaces has an interface of that name with Pools.
func hasExplicitPools(ifaces []NIC, name string) bool {
	for _, ifc := range ifaces {
		if ifc.Name == name {
			return len(ifc.Pools) > 0
		}
	}
	return false
}

// clusterDefaults returns the names of the pools with Default set, by family,
// and whether there is any such pool, of whatever family.
func (s *chain) clusterDefaults() (v4, v6 []string, found bool) {
	no4, no6 := s.req.NetConf.DisableIPv4, s.req.NetConf.DisableIPv6
	if c, ok := s.pools.(*Catalog); ok && c != nil {
		// DefaultPools without the iterator, whose closures would escape:
		// count, then fill one array.
		n4, n6 := 0, 0
		for _, p := range c.defaults {
			switch p.Family() {
			case 4:
				n4++
			case 6:
				n6++
			}
		}
		if no4 {
			n4 = 0
		}
		if no6 {
			n6 = 0
		}
		if n4+n6 == 0 {
			return nil, nil, len(c.defaults) > 0
		}
		buf := make([]string, 0, n4+n6)
		for _, p := range c.defaults {
			if f := p.Family(); f == 4 && n4 > 0 {
				buf = append(buf, p.Name)
			}
		}
		v4 = buf[:len(buf):len(buf)]
		for _, p := range c.defaults {
			if f := p.Family(); f == 6 && n6 > 0 {
				buf = append(buf, p.Name)
			}
		}
		return nilIfNoNames(v4), nilIfNoNames(buf[len(v4):]), true
	}
	if s.pools == nil {
		return nil, nil, false
	}
	var seq iter.Seq[*Pool]
	if ds, ok := s.pools.(DefaultPoolSource); ok {
		seq = ds.DefaultPools()
	} else {
		seq = s.pools.Pools()
	}
	return defaultPoolNames(seq, no4, no6)
}

// defaultPoolNames returns the names of the pools of seq with Default set, by
// family, and whether there is any such pool.
func defaultPoolNames(seq iter.Seq[*Pool], no4, no6 bool) (v4, v6 []string, found bool) {
	var u4, u6 poolNameSet
	for p := range seq {
		if p == nil || !p.Default {
			continue
		}
		found = true
		switch p.Family() {
		case 4:
			if !no4 {
				u4.add(p.Name)
			}
		case 6:
			if !no6 {
				u6.add(p.Name)
			}
		}
	}
	return u4.list, u6.list, found
}

// noCandidates returns the error for interfaces left without a pool: iface,
// or every interface of req that needs selection when iface is empty.
func (s *chain) noCandidates(iface, reason string) error {
	if iface != "" {
		return &AllocationError{Interface: iface, Reason: reason, Err: ErrNoCandidates}
	}
	errs := make([]error, 0, s.need)
	for _, ifc := range s.req.Interfaces {
		if len(ifc.Pools) == 0 {
			errs = append(errs, &AllocationError{Interface: ifc.Name, Reason: reason, Err: ErrNoCandidates})
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
