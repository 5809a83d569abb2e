package ipam

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"

	"go4.org/netipx"
)

// Range is one contiguous run of allocatable addresses inside a subnet, as in a
// host-local range: {"subnet", "rangeStart", "rangeEnd", "gateway"}.
//
// The zero Range is invalid. A Range is a plain value, safe to copy and to share.
// Canonical fills in host-local's defaults.
type Range struct {
	Subnet  netip.Prefix
	Start   netip.Addr // JSON "rangeStart"; default: network+1
	End     netip.Addr // JSON "rangeEnd"; default: broadcast-1 (IPv4), last address (IPv6)
	Gateway netip.Addr // JSON "gateway"; default: network+1, never allocated
}

type rawRange struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway,omitempty"`
}

// MarshalJSON writes the host-local form, omitting unset fields.
func (r Range) MarshalJSON() ([]byte, error) {
	raw := rawRange{}
	if r.Subnet.IsValid() {
		raw.Subnet = r.Subnet.String()
	}
	if r.Start.IsValid() {
		raw.RangeStart = r.Start.String()
	}
	if r.End.IsValid() {
		raw.RangeEnd = r.End.String()
	}
	if r.Gateway.IsValid() {
		raw.Gateway = r.Gateway.String()
	}
	return json.Marshal(raw)
}

// UnmarshalJSON reads the host-local form. It parses the addresses but does not
// apply defaults or check that they fit together; see Canonical.
func (r *Range) UnmarshalJSON(data []byte) error {
	var raw rawRange
	if err := decodeSpec(data, &raw); err != nil {
		return err
	}
	fe := &fieldErrors{}
	*r = raw.parse(fe, "")
	return fe.err()
}

func (raw rawRange) parse(fe *fieldErrors, path string) Range {
	var r Range
	if raw.Subnet == "" {
		fe.add(path+"subnet", "", "required")
	} else if p, err := netip.ParsePrefix(raw.Subnet); err != nil {
		fe.add(path+"subnet", raw.Subnet, "invalid CIDR address")
	} else {
		r.Subnet = p
	}
	r.Start = parseAddrField(fe, path+"rangeStart", raw.RangeStart)
	r.End = parseAddrField(fe, path+"rangeEnd", raw.RangeEnd)
	r.Gateway = parseAddrField(fe, path+"gateway", raw.Gateway)
	return r
}

func parseAddrField(fe *fieldErrors, field, s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		fe.add(field, s, "invalid IP address")
		return netip.Addr{}
	}
	if a.Zone() != "" {
		fe.add(field, s, "IP address must not have a zone")
		return netip.Addr{}
	}
	return a.Unmap()
}

// Canonical returns r with host-local's defaults applied and checked: the subnet
// must be a network address with room for hosts (IPv4 /31 and /32, IPv6 /127 and
// /128 are refused); start defaults to network+1, end to the last address
// before the IPv4 broadcast or to the last IPv6 address, the gateway to
// network+1; an explicit start or end must lie in the subnet and start <= end.
// The gateway is not required to lie in the subnet (host-local does not check).
func (r Range) Canonical() (Range, error) {
	fe := &fieldErrors{}
	c := r.canonical(fe, "")
	return c, fe.err()
}

func (r Range) canonical(fe *fieldErrors, path string) Range {
	p := r.Subnet
	if !p.IsValid() {
		fe.add(path+"subnet", "", "required")
		return r
	}
	if p.Addr().Is4In6() {
		fe.add(path+"subnet", p.String(), "IPv4-mapped IPv6 subnet: write it as IPv4")
		return r
	}
	if p.Addr().Zone() != "" {
		fe.add(path+"subnet", p.String(), "subnet must not have a zone")
		return r
	}
	if p.Bits() > p.Addr().BitLen()-2 {
		fe.add(path+"subnet", p.String(), "network too small to allocate from")
		return r
	}
	if p.Masked() != p {
		fe.add(path+"subnet", p.String(), "network has host bits set: for a subnet mask of length %d the network address is %s", p.Bits(), p.Masked().Addr())
		return r
	}
	is4 := p.Addr().Is4()
	first := p.Addr().Next()
	last := lastAddr(p)
	if is4 {
		last = last.Prev()
	}
	c := r
	if !c.Gateway.IsValid() {
		c.Gateway = first
	} else if c.Gateway.Is4() != is4 {
		fe.add(path+"gateway", c.Gateway.String(), "gateway is not of the subnet's IP family %s", p)
	}
	ok := true
	if !c.Start.IsValid() {
		c.Start = first
	} else if !p.Contains(c.Start) {
		fe.add(path+"rangeStart", c.Start.String(), "not in network %s", p)
		ok = false
	}
	if !c.End.IsValid() {
		c.End = last
	} else if !p.Contains(c.End) {
		fe.add(path+"rangeEnd", c.End.String(), "not in network %s", p)
		ok = false
	}
	if ok && c.End.Less(c.Start) {
		fe.add(path+"rangeStart", c.Start.String(), "after rangeEnd %s", c.End)
	}
	return c
}

// IPRange returns the addresses from r.Start to r.End. r must be canonical.
func (r Range) IPRange() netipx.IPRange { return netipx.IPRangeFrom(r.Start, r.End) }

// Contains reports whether ip lies in the subnet and between start and end; the
// gateway counts as contained (host-local's rule). r must be canonical.
func (r Range) Contains(ip netip.Addr) bool {
	return r.Subnet.Contains(ip) && !ip.Less(r.Start) && !r.End.Less(ip)
}

// String returns "start-end", host-local's form in messages.
func (r Range) String() string { return r.Start.String() + "-" + r.End.String() }

// Route is a route handed to the interface with its address, as in host-local's
// and SpiderIPPool's routes: {"dst": "10.0.0.0/16", "gw": "10.0.0.1"}. The zero
// Route is invalid; a Route is a plain value.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	GW  netip.Addr   `json:"gw,omitzero"`
}

// Strategy chooses the free address a pool hands out next.
type Strategy uint8

const (
	// RoundRobin continues after the last address reserved in the pool and wraps
	// round, trying that last address last: host-local's behaviour, and the
	// default, so that a released address is not handed out again at once.
	RoundRobin Strategy = iota
	// LowestFree hands out the lowest free address: Spiderpool's behaviour.
	LowestFree
)

// String returns "round-robin" or "lowest-free".
func (s Strategy) String() string {
	switch s {
	case RoundRobin:
		return "round-robin"
	case LowestFree:
		return "lowest-free"
	}
	return fmt.Sprintf("Strategy(%d)", uint8(s))
}

// MarshalText implements encoding.TextMarshaler.
func (s Strategy) MarshalText() ([]byte, error) {
	if s > LowestFree {
		return nil, fmt.Errorf("ipam: unknown strategy %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler; the empty string means
// RoundRobin.
func (s *Strategy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "round-robin":
		*s = RoundRobin
	case "lowest-free":
		*s = LowestFree
	default:
		return &FieldError{Field: "strategy", Value: string(b), Reason: `unknown strategy: want "round-robin" or "lowest-free"`}
	}
	return nil
}

// Pool is a named set of allocatable addresses of one IP family, with the rules
// that decide which pods it may serve.
//
// A Pool is written in one of two forms, which JSON accepts with the field names
// their users know:
//
//   - host-local's range set: Ranges, each with its own subnet, start, end and
//     gateway, filled in order;
//   - a SpiderIPPool spec: Subnet, IPs (single addresses and "a-b" ranges),
//     ExcludeIPs, Gateway, and the selection fields (Default, Disable, NodeName,
//     NodeAffinity, NamespaceName, NamespaceAffinity, PodAffinity, MultusName).
//
// ExcludeIPs, Routes, Vlan, Strategy and the selection fields apply to both.
//
// The zero Pool is invalid. Treat a Pool as immutable once it is handed to a
// PoolSource: to change a pool, build a new value and replace it. A Pool that is
// not modified is safe for concurrent reads.
type Pool struct {
	Name string

	// Ranges is a host-local range set. Mutually exclusive with Subnet.
	Ranges []Range

	// IPVersion is 4 or 6; zero means "from the subnet".
	IPVersion  int
	Subnet     netip.Prefix
	IPs        []netipx.IPRange
	ExcludeIPs []netipx.IPRange
	Gateway    netip.Addr

	Routes []Route
	Vlan   int

	// Default makes the pool a cluster default (the last rule of the chain).
	Default bool
	// Disable stops new allocations; releases still work.
	Disable bool
	// Terminating marks a pool being deleted (metadata.deletionTimestamp set).
	Terminating bool

	NodeName          []string
	NodeAffinity      *LabelSelector
	NamespaceName     []string
	NamespaceAffinity *LabelSelector
	PodAffinity       *LabelSelector
	MultusName        []string

	// Strategy chooses the next free address; the zero value is RoundRobin.
	Strategy Strategy
}

// rawPool is Pool's JSON form: strings, parsed with field paths so that every
// problem is reported at once.
type rawPool struct {
	Name              string          `json:"name,omitempty"`
	Ranges            []rawRange      `json:"ranges,omitempty"`
	IPVersion         *int64          `json:"ipVersion,omitempty"`
	Subnet            string          `json:"subnet,omitempty"`
	IPs               []string        `json:"ips,omitempty"`
	ExcludeIPs        []string        `json:"excludeIPs,omitempty"`
	Gateway           *string         `json:"gateway,omitempty"`
	Routes            []rawRoute      `json:"routes,omitempty"`
	Vlan              *int64          `json:"vlan,omitempty"`
	Default           *bool           `json:"default,omitempty"`
	Disable           *bool           `json:"disable,omitempty"`
	Terminating       bool            `json:"terminating,omitempty"`
	NodeName          []string        `json:"nodeName,omitempty"`
	NodeAffinity      *LabelSelector  `json:"nodeAffinity,omitempty"`
	NamespaceName     []string        `json:"namespaceName,omitempty"`
	NamespaceAffinity *LabelSelector  `json:"namespaceAffinity,omitempty"`
	PodAffinity       *LabelSelector  `json:"podAffinity,omitempty"`
	MultusName        []string        `json:"multusName,omitempty"`
	Strategy          json.RawMessage `json:"strategy,omitempty"`
}

type rawRoute struct {
	Dst string `json:"dst"`
	GW  string `json:"gw,omitempty"`
}

// ParsePool parses a pool from JSON: a SpiderIPPool spec or a host-local range
// set object ({"ranges": [...]}), with "name" optionally inside it. It returns
// every problem at once, each naming the field and the value, and validates the
// result (see Validate).
func ParsePool(data []byte) (*Pool, error) {
	p, fe, err := parsePool(data)
	if err != nil {
		return nil, err
	}
	if err := fe.withValidation(p.Validate()); err != nil {
		return nil, err
	}
	return p, nil
}

// withValidation returns the problems of parsing (fe) joined with those of
// validating what did parse (verr), so that one bad value does not hide the
// problems of the others; a field that did not parse is not reported again.
func (fe *fieldErrors) withValidation(verr error) error {
	if verr == nil {
		return fe.err()
	}
	bad := make(map[string]bool, len(fe.errs))
	for _, e := range fe.errs {
		var f *FieldError
		if errors.As(e, &f) {
			bad[f.Field] = true
		}
	}
	for _, e := range unjoin(verr) {
		var f *FieldError
		if errors.As(e, &f) && bad[f.Field] {
			continue
		}
		fe.errs = append(fe.errs, e)
	}
	return fe.err()
}

// unjoin returns the errors err joins, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// MustParsePool is like ParsePool but panics on error. For tests and literals.
func MustParsePool(s string) *Pool {
	p, err := ParsePool([]byte(s))
	if err != nil {
		panic(err)
	}
	return p
}

// UnmarshalJSON reads a SpiderIPPool spec or a host-local range set. It parses
// every field, reporting every unparsable value at once, but leaves the checks
// that relate fields to each other to Validate. Unknown fields are ignored.
func (p *Pool) UnmarshalJSON(data []byte) error {
	q, fe, err := parsePool(data)
	if err != nil {
		return err
	}
	if err := fe.err(); err != nil {
		return err
	}
	*p = *q
	return nil
}

// parsePool parses data as UnmarshalJSON does. It returns an error only for
// a document it cannot read at all; otherwise the pool, with every field that
// parsed, and the problems of those that did not.
func parsePool(data []byte) (*Pool, *fieldErrors, error) {
	var raw rawPool
	if err := decodeSpec(data, &raw); err != nil {
		return nil, nil, err
	}
	fe := &fieldErrors{}
	if raw.Name != "" {
		fe.object = fmt.Sprintf("pool %q", raw.Name)
	}
	q := Pool{
		Name:              raw.Name,
		Terminating:       raw.Terminating,
		NodeName:          raw.NodeName,
		NodeAffinity:      raw.NodeAffinity,
		NamespaceName:     raw.NamespaceName,
		NamespaceAffinity: raw.NamespaceAffinity,
		PodAffinity:       raw.PodAffinity,
		MultusName:        raw.MultusName,
	}
	for i, r := range raw.Ranges {
		q.Ranges = append(q.Ranges, r.parse(fe, fmt.Sprintf("ranges[%d].", i)))
	}
	if raw.IPVersion != nil {
		q.IPVersion = int(*raw.IPVersion)
		if q.IPVersion != 4 && q.IPVersion != 6 {
			fe.add("ipVersion", fmt.Sprint(*raw.IPVersion), "must be 4 or 6")
		}
	}
	if raw.Subnet != "" {
		if s, err := netip.ParsePrefix(raw.Subnet); err != nil {
			fe.add("subnet", raw.Subnet, "invalid CIDR address")
		} else {
			q.Subnet = s
		}
	}
	q.IPs = parseIPRanges(fe, "ips", raw.IPs)
	q.ExcludeIPs = parseIPRanges(fe, "excludeIPs", raw.ExcludeIPs)
	if raw.Gateway != nil {
		if *raw.Gateway == "" {
			fe.add("gateway", "", "empty gateway: omit the field instead")
		}
		q.Gateway = parseAddrField(fe, "gateway", *raw.Gateway)
	}
	for i, r := range raw.Routes {
		path := fmt.Sprintf("routes[%d].", i)
		var rt Route
		if d, err := netip.ParsePrefix(r.Dst); err != nil {
			fe.add(path+"dst", r.Dst, "invalid CIDR address")
		} else {
			rt.Dst = d
		}
		rt.GW = parseAddrField(fe, path+"gw", r.GW)
		q.Routes = append(q.Routes, rt)
	}
	if raw.Vlan != nil {
		if *raw.Vlan < 0 || *raw.Vlan > 4094 {
			fe.add("vlan", fmt.Sprint(*raw.Vlan), "must be between 0 and 4094")
		} else {
			q.Vlan = int(*raw.Vlan)
		}
	}
	q.Default = raw.Default != nil && *raw.Default
	q.Disable = raw.Disable != nil && *raw.Disable
	if len(raw.Strategy) > 0 && string(raw.Strategy) != "null" {
		var s string
		if err := json.Unmarshal(raw.Strategy, &s); err != nil {
			fe.add("strategy", string(raw.Strategy), "must be a string")
		} else if err := q.Strategy.UnmarshalText([]byte(s)); err != nil {
			fe.add("strategy", s, `unknown strategy: want "round-robin" or "lowest-free"`)
		}
	}
	return &q, fe, nil
}

// MarshalJSON writes the pool in the form it was written in; single addresses
// in IPs and ExcludeIPs are written without "-".
func (p Pool) MarshalJSON() ([]byte, error) {
	raw := rawPool{
		Name:              p.Name,
		Terminating:       p.Terminating,
		NodeName:          p.NodeName,
		NodeAffinity:      p.NodeAffinity,
		NamespaceName:     p.NamespaceName,
		NamespaceAffinity: p.NamespaceAffinity,
		PodAffinity:       p.PodAffinity,
		MultusName:        p.MultusName,
		IPs:               formatIPRanges(p.IPs),
		ExcludeIPs:        formatIPRanges(p.ExcludeIPs),
	}
	for _, r := range p.Ranges {
		b, _ := r.MarshalJSON()
		var rr rawRange
		_ = json.Unmarshal(b, &rr)
		raw.Ranges = append(raw.Ranges, rr)
	}
	if p.IPVersion != 0 {
		v := int64(p.IPVersion)
		raw.IPVersion = &v
	}
	if p.Subnet.IsValid() {
		raw.Subnet = p.Subnet.String()
	}
	if p.Gateway.IsValid() {
		g := p.Gateway.String()
		raw.Gateway = &g
	}
	for _, r := range p.Routes {
		rr := rawRoute{Dst: r.Dst.String()}
		if r.GW.IsValid() {
			rr.GW = r.GW.String()
		}
		raw.Routes = append(raw.Routes, rr)
	}
	if p.Vlan != 0 {
		v := int64(p.Vlan)
		raw.Vlan = &v
	}
	if p.Default {
		raw.Default = &p.Default
	}
	if p.Disable {
		raw.Disable = &p.Disable
	}
	if p.Strategy != RoundRobin {
		s, err := p.Strategy.MarshalText()
		if err != nil {
			return nil, err
		}
		raw.Strategy, _ = json.Marshal(string(s))
	}
	return json.Marshal(raw)
}

// parseIPRange parses an "a" or "a-b" range, or says what is wrong with it.
func parseIPRange(s string) (netipx.IPRange, string) {
	from, to, isRange := strings.Cut(s, "-")
	a, err := netip.ParseAddr(strings.TrimSpace(from))
	if err != nil {
		return netipx.IPRange{}, "invalid IP address"
	}
	b := a
	if isRange {
		if b, err = netip.ParseAddr(strings.TrimSpace(to)); err != nil {
			return netipx.IPRange{}, fmt.Sprintf("invalid IP address %q after \"-\"", to)
		}
	}
	if a.Zone() != "" || b.Zone() != "" {
		return netipx.IPRange{}, "addresses must not have a zone"
	}
	a, b = a.Unmap(), b.Unmap()
	if a.Is4() != b.Is4() {
		return netipx.IPRange{}, "mixes IPv4 and IPv6"
	}
	if b.Less(a) {
		return netipx.IPRange{}, "start after end"
	}
	return netipx.IPRangeFrom(a, b), ""
}

func parseIPRanges(fe *fieldErrors, field string, ss []string) []netipx.IPRange {
	var out []netipx.IPRange
	for i, s := range ss {
		r, reason := parseIPRange(s)
		if reason != "" {
			fe.add(fmt.Sprintf("%s[%d]", field, i), s, "%s", reason)
			continue
		}
		out = append(out, r)
	}
	return out
}

func formatIPRanges(rs []netipx.IPRange) []string {
	var out []string
	for _, r := range rs {
		if r.From() == r.To() {
			out = append(out, r.From().String())
		} else {
			out = append(out, r.String())
		}
	}
	return out
}

// decodeJSON unmarshals data into v, turning the json package's errors into
// FieldErrors that name the field.
// decodeSpec decodes a Kubernetes-style spec (a pool, a range, a reserved IP)
// as decodeJSON does, and refuses field names in the wrong case.
func decodeSpec(data []byte, v any) error {
	if err := decodeJSON(data, v, ""); err != nil {
		return err
	}
	return checkFieldCase(data, v, "")
}

// checkFieldCase reports the object keys of data that match a field of v's
// type only when case is ignored, such as "NodeAffinity" for "nodeAffinity".
// encoding/json would take them; the Kubernetes API server does not (it drops
// or, with strict validation, refuses them), so a pool spec that relies on one
// would mean something else once stored in a cluster. Unknown keys are ignored,
// as Kubernetes clients ignore them. data must be valid JSON.
func checkFieldCase(data []byte, v any, object string) error {
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil // decodeJSON reports it
	}
	fe := &fieldErrors{object: object}
	walkFieldCase(fe, doc, reflect.TypeOf(v), "")
	return fe.err()
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func walkFieldCase(fe *fieldErrors, doc any, t reflect.Type, path string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := doc.(map[string]any)
		if !ok {
			return
		}
		fields := make(map[string]reflect.Type, t.NumField())
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.IsExported() && name != "" && name != "-" {
				fields[name] = f.Type
			}
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if ft, ok := fields[key]; ok {
				walkFieldCase(fe, obj[key], ft, joinPath(path, key))
				continue
			}
			for name := range fields {
				if strings.EqualFold(name, key) {
					fe.add(joinPath(path, key), "", fmt.Sprintf("unknown field; field names are case-sensitive: did you mean %q?", name))
				}
			}
		}
	case reflect.Slice, reflect.Array:
		if arr, ok := doc.([]any); ok {
			for i, x := range arr {
				walkFieldCase(fe, x, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
		}
	case reflect.Map:
		if obj, ok := doc.(map[string]any); ok {
			for _, key := range slices.Sorted(maps.Keys(obj)) {
				walkFieldCase(fe, obj[key], t.Elem(), joinPath(path, key))
			}
		}
	}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func decodeJSON(data []byte, v any, object string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			path, raw := jsonValueAt(data, te.Offset)
			if path == "" {
				path = te.Field
			}
			if path == "" {
				path = "(document)"
			}
			return &FieldError{Object: object, Field: path, Value: raw, Reason: "wrong JSON type: a " + te.Value + " where " + jsonKind(te.Type) + " is wanted"}
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &FieldError{Object: object, Field: fmt.Sprintf("offset %d", se.Offset), Reason: "malformed JSON: " + se.Error()}
		}
		var fe *FieldError
		if errors.As(err, &fe) {
			return err
		}
		return &FieldError{Object: object, Field: "(document)", Reason: "malformed JSON: " + err.Error()}
	}
	var rest json.RawMessage
	if err := dec.Decode(&rest); err != io.EOF {
		tail := strings.TrimSpace(string(data[dec.InputOffset()-int64(len(rest)):]))
		if len(tail) > 40 {
			tail = tail[:40] + "..."
		}
		return &FieldError{Object: object, Field: "(document)", Value: tail, Reason: "malformed JSON: trailing data after the object"}
	}
	return nil
}

// Family returns 4 or 6: the IP family of the pool's addresses, or 0 if the pool
// names none.
func (p *Pool) Family() int {
	switch {
	case p.IPVersion != 0:
		return p.IPVersion
	case p.Subnet.IsValid():
		return familyOf(p.Subnet.Addr())
	case len(p.Ranges) > 0 && p.Ranges[0].Subnet.IsValid():
		return familyOf(p.Ranges[0].Subnet.Addr())
	}
	return 0
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// RangeSet returns the pool's allocatable ranges in allocation order, canonical
// (host-local defaults applied). For the SpiderIPPool form it is the merged and
// sorted IPs, each with the pool's subnet and gateway, as Spiderpool's admission
// webhook stores them; excluded addresses are not removed here.
func (p *Pool) RangeSet() ([]Range, error) {
	fe := &fieldErrors{object: p.object()}
	rs := p.rangeSet(fe)
	if err := fe.err(); err != nil {
		return nil, err
	}
	return rs, nil
}

func (p *Pool) object() string {
	if p.Name == "" {
		return "pool"
	}
	return fmt.Sprintf("pool %q", p.Name)
}

func (p *Pool) rangeSet(fe *fieldErrors) []Range {
	if len(p.Ranges) > 0 {
		out := make([]Range, 0, len(p.Ranges))
		for i, r := range p.Ranges {
			out = append(out, r.canonical(fe, fmt.Sprintf("ranges[%d].", i)))
		}
		return out
	}
	if !p.Subnet.IsValid() {
		return nil
	}
	var b netipx.IPSetBuilder
	for _, r := range p.IPs {
		b.AddRange(r)
	}
	set, _ := b.IPSet()
	out := make([]Range, 0, len(set.Ranges()))
	for _, r := range set.Ranges() {
		out = append(out, Range{Subnet: p.Subnet, Start: r.From(), End: r.To(), Gateway: p.Gateway})
	}
	return out
}

// Validate checks the pool alone and returns every problem at once, each a
// *FieldError naming the field path and value. It covers host-local's range
// checks (see Range.Canonical; one family; no overlap inside the set) and
// Spiderpool's admission rules about one pool: ipVersion matches the subnet; the
// subnet is canonical; ips, excludeIPs, gateway and route gateways lie inside the
// subnet; the gateway is not allocatable unless excluded; routes have valid,
// distinct destinations of the pool's family and are not default routes;
// podAffinity, when set, is not empty. Checks across pools are in ValidatePools.
func (p *Pool) Validate() error {
	fe := &fieldErrors{object: p.object()}
	validateObjectName(fe, p.Name)
	switch {
	case len(p.Ranges) > 0 && p.Subnet.IsValid():
		fe.add("subnet", p.Subnet.String(), "ranges and subnet are exclusive: write a host-local range set or a SpiderIPPool spec, not both")
	case len(p.Ranges) > 0:
		if len(p.IPs) > 0 {
			fe.add("ips", formatIPRanges(p.IPs)[0], "ranges and ips are exclusive: a host-local range set lists its addresses in ranges")
		}
		if p.Gateway.IsValid() {
			fe.add("gateway", p.Gateway.String(), "ranges and gateway are exclusive: a host-local range sets its gateway per range")
		}
		p.validateRanges(fe)
	case p.Subnet.IsValid():
		p.validateSpider(fe, "pool")
	default:
		fe.add("subnet", "", "required (or ranges)")
	}
	if p.Strategy > LowestFree {
		fe.add("strategy", p.Strategy.String(), "unknown strategy")
	}
	if p.Vlan < 0 || p.Vlan > 4094 {
		fe.add("vlan", fmt.Sprint(p.Vlan), "must be between 0 and 4094")
	}
	for i, n := range p.NodeName {
		if n == "" {
			fe.add(fmt.Sprintf("nodeName[%d]", i), n, "empty name")
		}
	}
	for i, n := range p.NamespaceName {
		if n == "" {
			fe.add(fmt.Sprintf("namespaceName[%d]", i), n, "empty name")
		}
	}
	for i, n := range p.MultusName {
		if n == "" || strings.Count(n, "/") > 1 {
			fe.add(fmt.Sprintf("multusName[%d]", i), n, "want <namespace>/<name> or <name>")
		}
	}
	if p.PodAffinity != nil && p.PodAffinity.IsEmpty() {
		fe.add("podAffinity", "{}", "empty podAffinity is invalid: it would match every pod")
	}
	p.NodeAffinity.validate(fe, "nodeAffinity")
	p.NamespaceAffinity.validate(fe, "namespaceAffinity")
	p.PodAffinity.validate(fe, "podAffinity")
	return fe.err()
}

// validateObjectName checks the name of a pool or a subnet: required, at most
// 253 characters, no white space.
func validateObjectName(fe *fieldErrors, name string) {
	if name == "" {
		fe.add("name", "", "required")
	} else if len(name) > 253 || strings.ContainsAny(name, " \t\r\n") {
		fe.add("name", name, "must be at most 253 characters without white space")
	}
}

func (p *Pool) validateRanges(fe *fieldErrors) {
	rs := p.rangeSet(fe)
	fam := 0
	for i, r := range rs {
		if !r.Subnet.IsValid() {
			continue
		}
		f := familyOf(r.Subnet.Addr())
		if fam == 0 {
			fam = f
		} else if f != fam {
			fe.add(fmt.Sprintf("ranges[%d].subnet", i), r.Subnet.String(), "mixed address families in one range set")
		}
	}
	if p.IPVersion != 0 && fam != 0 && p.IPVersion != fam {
		fe.add("ipVersion", fmt.Sprint(p.IPVersion), "does not match the ranges' IP family IPv%d", fam)
	}
	// Overlaps are checked in the same round as the ranges' own problems:
	// an invalid range counts as what it would be with its invalid fields
	// unset (see overlapProbe).
	probes := make([]netipx.IPRange, len(p.Ranges))
	for i, r := range p.Ranges {
		probes[i] = overlapProbe(r)
	}
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			a, b := probes[i], probes[j]
			if !a.IsValid() || !b.IsValid() || a.From().Is4() != b.From().Is4() || !a.Overlaps(b) {
				continue
			}
			fe.add(fmt.Sprintf("ranges[%d]", j), rangeText(rs[j], b), "overlaps ranges[%d] %s", i, rangeText(rs[i], a))
		}
	}
	p.validateExcludes(fe, fam, netip.Prefix{})
}

// overlapProbe returns the addresses of host-local range r for the overlap
// check, or an invalid IPRange if they cannot be told: r's canonical range,
// or, if r is invalid, the range it would have with a subnet with host bits
// masked, and a rangeStart, rangeEnd or gateway that is not valid for its
// subnet left unset.
func overlapProbe(r Range) netipx.IPRange {
	if r.Subnet.IsValid() {
		r.Subnet = r.Subnet.Masked()
		for _, a := range []*netip.Addr{&r.Start, &r.End, &r.Gateway} {
			if a.IsValid() && !r.Subnet.Contains(*a) {
				*a = netip.Addr{}
			}
		}
	}
	var fe fieldErrors
	c := r.canonical(&fe, "")
	if fe.err() != nil || !c.Start.IsValid() || c.End.Less(c.Start) {
		return netipx.IPRange{}
	}
	return c.IPRange()
}

// rangeText returns r as the overlap message writes it: its canonical form,
// or its addresses as the overlap check took them (probe) if r is invalid.
func rangeText(r Range, probe netipx.IPRange) string {
	if r.Start.IsValid() && r.End.IsValid() && !r.End.Less(r.Start) && r.IPRange() == probe {
		return r.String()
	}
	return probe.String() + " (with its invalid fields unset)"
}

func (p *Pool) validateExcludes(fe *fieldErrors, fam int, subnet netip.Prefix) {
	for i, r := range p.ExcludeIPs {
		field := fmt.Sprintf("excludeIPs[%d]", i)
		if fam != 0 && familyOf(r.From()) != fam {
			fe.add(field, formatIPRanges([]netipx.IPRange{r})[0], "not of the pool's IP family IPv%d", fam)
		} else if subnet.IsValid() && !(subnet.Contains(r.From()) && subnet.Contains(r.To())) {
			fe.add(field, formatIPRanges([]netipx.IPRange{r})[0], "not inside subnet %s", subnet)
		}
	}
}

// validateSpider checks a SpiderIPPool-form spec; noun names what it is
// ("pool", "subnet") in messages.
func (p *Pool) validateSpider(fe *fieldErrors, noun string) {
	s := p.Subnet
	fam := familyOf(s.Addr())
	if p.IPVersion != 0 && p.IPVersion != fam {
		fe.add("ipVersion", fmt.Sprint(p.IPVersion), "does not match subnet %s", s)
	}
	if s.Addr().Is4In6() {
		fe.add("subnet", s.String(), "IPv4-mapped IPv6 subnet: write it as IPv4")
		return
	}
	if s.Masked() != s {
		fe.add("subnet", s.String(), "unformatted subnet: want %s", s.Masked())
		return
	}
	for i, r := range p.IPs {
		field := fmt.Sprintf("ips[%d]", i)
		v := formatIPRanges([]netipx.IPRange{r})[0]
		if familyOf(r.From()) != fam {
			fe.add(field, v, "not of the %s's IP family IPv%d", noun, fam)
		} else if !(s.Contains(r.From()) && s.Contains(r.To())) {
			fe.add(field, v, "not inside subnet %s", s)
		}
	}
	p.validateExcludes(fe, fam, s)
	if p.Gateway.IsValid() {
		if !s.Contains(p.Gateway) {
			fe.add("gateway", p.Gateway.String(), "not inside subnet %s", s)
		} else if !rangesContain(p.ExcludeIPs, p.Gateway) {
			for i, r := range p.IPs {
				if r.Contains(p.Gateway) {
					fe.add(fmt.Sprintf("ips[%d]", i), formatIPRanges([]netipx.IPRange{r})[0],
						"conflicts with gateway %s: add the gateway to excludeIPs or remove it from ips", p.Gateway)
				}
			}
		}
	}
	seen := map[netip.Prefix]int{}
	for i, rt := range p.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		if !rt.Dst.IsValid() {
			fe.add(path+".dst", "", "required")
			continue
		}
		if familyOf(rt.Dst.Addr()) != fam {
			fe.add(path+".dst", rt.Dst.String(), "not of the %s's IP family IPv%d", noun, fam)
		}
		if rt.Dst.Bits() == 0 {
			fe.add(path+".dst", rt.Dst.String(), "default route not allowed in routes: set gateway to get a default route")
		}
		if j, dup := seen[rt.Dst.Masked()]; dup {
			fe.add(path+".dst", rt.Dst.String(), "duplicate route with the same dst as routes[%d]", j)
		}
		seen[rt.Dst.Masked()] = i
		if rt.GW.IsValid() && !s.Contains(rt.GW) {
			fe.add(path+".gw", rt.GW.String(), "not inside subnet %s", s)
		}
	}
}

func rangesContain(rs []netipx.IPRange, ip netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}

// ValidatePools checks each pool alone (Validate) and the pools against each
// other: names are unique, SpiderIPPool subnets of one family are identical or
// disjoint, and no address is allocatable from two pools. It returns every
// problem at once. The cost is O(n log n) in the number of ranges.
func ValidatePools(pools []*Pool) error {
	var errs []error
	names := make(map[string]int, len(pools))
	type span struct {
		r    netipx.IPRange
		pool int
	}
	var spans []span
	for i, p := range pools {
		if p == nil {
			errs = append(errs, &FieldError{Field: fmt.Sprintf("pools[%d]", i), Reason: "nil pool"})
			continue
		}
		// A pool with problems of its own is still checked against the
		// others as far as its ranges can be worked out, so that every
		// problem is reported at once.
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
		if j, dup := names[p.Name]; dup {
			errs = append(errs, &FieldError{Object: p.object(), Field: "name", Value: p.Name, Reason: fmt.Sprintf("duplicate: also pools[%d]", j)})
			continue
		}
		names[p.Name] = i
		if _, err := p.RangeSet(); err != nil {
			continue
		}
		usable := p.usable(nil)
		for _, r := range usable.Ranges() {
			spans = append(spans, span{r, i})
		}
	}
	// Subnet overlap between SpiderIPPool-form pools with different subnets.
	var subnets []span
	for i, p := range pools {
		if p != nil && p.Subnet.IsValid() && p.Subnet.Masked() == p.Subnet {
			subnets = append(subnets, span{netipx.RangeOfPrefix(p.Subnet), i})
		}
	}
	byFrom := func(a, b span) int {
		if c := a.r.From().Compare(b.r.From()); c != 0 {
			return c
		}
		return a.pool - b.pool
	}
	slices.SortFunc(subnets, byFrom)
	for i := 1; i < len(subnets); i++ {
		// Compare with every earlier subnet that still overlaps; prefixes nest, so
		// walking back while overlapping is enough.
		for j := i - 1; j >= 0 && subnets[j].r.Overlaps(subnets[i].r); j-- {
			a, b := pools[subnets[j].pool], pools[subnets[i].pool]
			if a.Subnet != b.Subnet {
				errs = append(errs, &FieldError{Object: b.object(), Field: "subnet", Value: b.Subnet.String(),
					Reason: fmt.Sprintf("overlaps pool %q whose subnet is %s", a.Name, a.Subnet)})
			}
		}
	}
	slices.SortFunc(spans, byFrom)
	type open struct {
		to   netip.Addr
		pool int
	}
	var active []open // spans whose end is not yet passed, at most a few
	for _, s := range spans {
		kept := active[:0]
		for _, o := range active {
			if !o.to.Less(s.r.From()) {
				kept = append(kept, o)
			}
		}
		active = kept
		for _, o := range active {
			if o.pool == s.pool || o.to.Is4() != s.r.From().Is4() {
				continue
			}
			a, b := pools[o.pool], pools[s.pool]
			to := o.to
			if s.r.To().Less(to) {
				to = s.r.To()
			}
			field := "ips"
			if rs, err := b.RangeSet(); err == nil && len(b.Ranges) > 0 {
				field = "ranges"
				for k, r := range rs {
					if r.IPRange().Contains(s.r.From()) {
						field = fmt.Sprintf("ranges[%d]", k)
						break
					}
				}
			}
			errs = append(errs, &FieldError{Object: b.object(), Field: field, Value: netipx.IPRangeFrom(s.r.From(), to).String(),
				Reason: fmt.Sprintf("overlaps the addresses of pool %q", a.Name)})
		}
		active = append(active, open{s.r.To(), s.pool})
	}
	return errors.Join(errs...)
}

// usable returns the pool's allocatable addresses: its range set minus its
// excluded addresses, its gateways and the reserved set (which may be nil). The
// pool must be valid.
func (p *Pool) usable(reserved *netipx.IPSet) *netipx.IPSet {
	var b netipx.IPSetBuilder
	rs, _ := p.RangeSet()
	for _, r := range rs {
		b.AddRange(r.IPRange())
	}
	for _, r := range rs {
		b.Remove(r.Gateway)
	}
	for _, r := range p.ExcludeIPs {
		b.RemoveRange(r)
	}
	if reserved != nil {
		b.RemoveSet(reserved)
	}
	s, _ := b.IPSet()
	return s
}

// ReservedIP is a cluster-wide exclusion, as a SpiderReservedIP: addresses of one
// family that no pool hands out while the object exists. The zero ReservedIP
// reserves nothing. It is a plain value, safe for concurrent reads.
type ReservedIP struct {
	Name string
	// IPVersion is 4 or 6; zero means "from the first address".
	IPVersion int
	IPs       []netipx.IPRange
	// Terminating objects no longer reserve anything (Spiderpool's rule).
	Terminating bool
}

type rawReservedIP struct {
	Name        string   `json:"name,omitempty"`
	IPVersion   *int64   `json:"ipVersion,omitempty"`
	IPs         []string `json:"ips"`
	Terminating bool     `json:"terminating,omitempty"`
}

// UnmarshalJSON reads a SpiderReservedIP spec ({"ipVersion": 4, "ips": [...]}),
// with "name" optionally inside it, and validates it.
func (r *ReservedIP) UnmarshalJSON(data []byte) error {
	var raw rawReservedIP
	if err := decodeSpec(data, &raw); err != nil {
		return err
	}
	fe := &fieldErrors{}
	if raw.Name != "" {
		fe.object = fmt.Sprintf("reservedIP %q", raw.Name)
	}
	q := ReservedIP{Name: raw.Name, Terminating: raw.Terminating}
	if raw.IPVersion != nil {
		q.IPVersion = int(*raw.IPVersion)
	}
	q.IPs = parseIPRanges(fe, "ips", raw.IPs)
	if err := fe.err(); err != nil {
		return err
	}
	if err := q.Validate(); err != nil {
		return err
	}
	*r = q
	return nil
}

// MarshalJSON writes the SpiderReservedIP spec form.
func (r ReservedIP) MarshalJSON() ([]byte, error) {
	raw := rawReservedIP{Name: r.Name, IPs: formatIPRanges(r.IPs), Terminating: r.Terminating}
	if r.IPVersion != 0 {
		v := int64(r.IPVersion)
		raw.IPVersion = &v
	}
	return json.Marshal(raw)
}

// Validate checks that the version is 4 or 6 and every range is of it.
func (r *ReservedIP) Validate() error {
	fe := &fieldErrors{object: "reservedIP"}
	if r.Name != "" {
		fe.object = fmt.Sprintf("reservedIP %q", r.Name)
	}
	fam := r.IPVersion
	if fam != 0 && fam != 4 && fam != 6 {
		fe.add("ipVersion", fmt.Sprint(fam), "must be 4 or 6")
		fam = 0
	}
	for i, x := range r.IPs {
		if fam == 0 {
			fam = familyOf(x.From())
		}
		if familyOf(x.From()) != fam {
			fe.add(fmt.Sprintf("ips[%d]", i), formatIPRanges([]netipx.IPRange{x})[0], "not of IP family IPv%d", fam)
		}
	}
	return fe.err()
}

// jsonValueAt returns the path (such as "ranges[1].subnet") and the raw text of
// the JSON value that ends at off, or whose opening bracket ends at off: the
// offset the json package reports with a type error.
func jsonValueAt(data []byte, off int64) (path, raw string) {
	type frame struct {
		array   bool
		idx     int
		key     string
		wantKey bool
	}
	var st []frame
	next := func() { // a value of the top frame is complete
		if len(st) == 0 {
			return
		}
		f := &st[len(st)-1]
		if f.array {
			f.idx++
		} else {
			f.wantKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return "", ""
		}
		d, isDelim := tok.(json.Delim)
		if len(st) > 0 && !st[len(st)-1].array && st[len(st)-1].wantKey && !(isDelim && d == '}') {
			key, _ := tok.(string)
			st[len(st)-1].key, st[len(st)-1].wantKey = key, false
			continue
		}
		if isDelim && (d == '}' || d == ']') {
			st = st[:len(st)-1]
			next()
			continue
		}
		if dec.InputOffset() >= off {
			var b strings.Builder
			for _, f := range st {
				if f.array {
					fmt.Fprintf(&b, "[%d]", f.idx)
				} else {
					if b.Len() > 0 {
						b.WriteByte('.')
					}
					b.WriteString(f.key)
				}
			}
			text := strings.TrimLeft(string(data[start:dec.InputOffset()]), " \t\r\n,:")
			if isDelim { // the whole array or object
				pos := dec.InputOffset() - 1
				var whole json.RawMessage
				if json.NewDecoder(bytes.NewReader(data[pos:])).Decode(&whole) == nil {
					text = string(whole)
				}
			} else if s, ok := tok.(string); ok {
				text = s
			}
			if len(text) > 60 {
				text = text[:60] + "..."
			}
			return b.String(), text
		}
		if isDelim {
			st = append(st, frame{array: d == '[', wantKey: d == '{'})
			continue
		}
		next()
	}
}
