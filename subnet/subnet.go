package subnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/internal/u128"
)

// This file holds the SpiderSubnet model: the Subnet type, its JSON and
// validation, the admission rules between subnets and the pools in their
// CIDRs, and the subnet's status counts. Auto-created pools are in
// autopool.go, the decisions about them in decide.go.

// Subnet is a SpiderSubnet spec: a CIDR and the addresses in it (IPs less
// ExcludeIPs) that SpiderSubnet hands to the pools it controls, the pools
// created for applications (auto-pools) and the pools written by hand in the
// same CIDR. Gateway and Routes are inherited by those pools.
//
// JSON is the SpiderSubnet spec as Spiderpool writes it ({"ipVersion",
// "subnet", "ips", "excludeIPs", "gateway", "vlan", "routes"}), with "name"
// optionally inside it; ips and excludeIPs are single addresses and "a-b"
// ranges.
//
// The zero Subnet is invalid. A Subnet is a plain value: treat it as
// immutable once shared, and it is safe for concurrent reads.
type Subnet struct {
	Name string
	// IPVersion is 4 or 6; zero means "from Subnet".
	IPVersion  int
	Subnet     netip.Prefix
	IPs        []netipx.IPRange
	ExcludeIPs []netipx.IPRange
	Gateway    netip.Addr
	Routes     []ipam.Route
	// Vlan is spec.vlan; auto-pools do not inherit it (Spiderpool's copy of
	// it is commented out).
	Vlan int
	// Terminating marks a subnet being deleted: it creates and grows no pool.
	Terminating bool
}

// Parse parses a SpiderSubnet spec from JSON and validates it (see
// Validate), returning every problem at once, each naming the field and the
// value.
func Parse(data []byte) (*Subnet, error) {
	s, fe, err := parseSubnet(data)
	if err != nil {
		return nil, err
	}
	if err := fe.withValidation(s.Validate()); err != nil {
		return nil, err
	}
	return s, nil
}

// MustParse is like Parse but panics on error. For tests and
// literals.
func MustParse(s string) *Subnet {
	sn, err := Parse([]byte(s))
	if err != nil {
		panic(err)
	}
	return sn
}

// UnmarshalJSON reads a SpiderSubnet spec. It parses every field, reporting
// every unparsable value at once, and leaves the checks that relate fields to
// each other to Validate. Unknown fields are ignored.
func (s *Subnet) UnmarshalJSON(data []byte) error {
	q, fe, err := parseSubnet(data)
	if err != nil {
		return err
	}
	if err := fe.err(); err != nil {
		return err
	}
	*s = *q
	return nil
}

// parseSubnet parses data as a pool spec (ipam.ParsePoolFields: a subnet
// spec's fields are a subset of a pool's), naming the subnet in the problems.
func parseSubnet(data []byte) (*Subnet, *fieldErrors, error) {
	p, problems, err := ipam.ParsePoolFields(data)
	if err != nil {
		return nil, nil, err
	}
	fe := &fieldErrors{}
	if problems != nil {
		fe.errs = unjoin(problems)
	}
	s := &Subnet{Name: p.Name, IPVersion: p.IPVersion, Subnet: p.Subnet, IPs: p.IPs, ExcludeIPs: p.ExcludeIPs,
		Gateway: p.Gateway, Routes: p.Routes, Vlan: p.Vlan, Terminating: p.Terminating}
	fe.object = s.object()
	for _, e := range fe.errs {
		if f, ok := e.(*ipam.FieldError); ok {
			f.Object = fe.object
		}
	}
	return s, fe, nil
}

// MarshalJSON writes the SpiderSubnet spec form; single addresses in IPs and
// ExcludeIPs are written without "-".
func (s Subnet) MarshalJSON() ([]byte, error) {
	return json.Marshal(s.pool())
}

// pool returns the subnet's spec fields as a pool spec of the same name.
func (s *Subnet) pool() ipam.Pool {
	return ipam.Pool{Name: s.Name, IPVersion: s.IPVersion, Subnet: s.Subnet, IPs: s.IPs, ExcludeIPs: s.ExcludeIPs,
		Gateway: s.Gateway, Routes: s.Routes, Vlan: s.Vlan, Terminating: s.Terminating}
}

func (s *Subnet) object() string {
	if s.Name == "" {
		return "subnet"
	}
	return fmt.Sprintf("subnet %q", s.Name)
}

// Family returns 4 or 6, or 0 if the subnet names no CIDR.
func (s *Subnet) Family() int {
	switch {
	case s.IPVersion != 0:
		return s.IPVersion
	case s.Subnet.IsValid():
		return familyOf(s.Subnet.Addr())
	}
	return 0
}

// Validate checks the subnet alone and returns every problem at once, each a
// *FieldError naming the field path and value: a name; a subnet that is a
// canonical CIDR of ipVersion; ips, excludeIPs, gateway and route gateways
// inside it; the gateway not among the addresses handed out unless excluded;
// routes with valid, distinct destinations of the family that are not
// default routes (the rules Spiderpool's webhook applies to both SpiderSubnet
// and SpiderIPPool). Rules across subnets and pools are in ValidateAll.
func (s *Subnet) Validate() error {
	fe := &fieldErrors{object: s.object()}
	validateObjectName(fe, s.Name)
	if s.IPVersion != 0 && s.IPVersion != 4 && s.IPVersion != 6 {
		fe.add("ipVersion", fmt.Sprint(s.IPVersion), "must be 4 or 6")
	}
	if !s.Subnet.IsValid() {
		fe.add("subnet", "", "required")
	} else {
		p := s.pool()
		if err := ipam.ValidateSpiderSpec(&p, fe.object, "subnet"); err != nil {
			fe.errs = append(fe.errs, unjoin(err)...)
		}
	}
	if s.Vlan < 0 || s.Vlan > 4094 {
		fe.add("vlan", fmt.Sprint(s.Vlan), "must be between 0 and 4094")
	}
	return fe.err()
}

// Usable returns the addresses the subnet hands to pools: IPs less
// ExcludeIPs. Its size is Spiderpool's totalIPCount; reserved addresses are
// not taken out (they are when free addresses are chosen).
func (s *Subnet) Usable() *netipx.IPSet {
	var b netipx.IPSetBuilder
	for _, r := range s.IPs {
		b.AddRange(r)
	}
	for _, r := range s.ExcludeIPs {
		b.RemoveRange(r)
	}
	set, _ := b.IPSet()
	return set
}

// Controls reports whether the subnet controls pool p: p is a SpiderIPPool
// whose subnet is the same CIDR. Spiderpool's admission webhook then gives p
// an owner reference to the subnet, the label
// ipam.spidernet.io/owner-spider-subnet, and the subnet's gateway and routes
// where p sets none (see Adopt).
func (s *Subnet) Controls(p *ipam.Pool) bool {
	return p != nil && p.Subnet.IsValid() && s.Subnet.IsValid() && p.Subnet == s.Subnet
}

// Adopt returns the pool as the subnet's admission rules leave it: with the
// subnet's gateway when p has none, and the subnet's routes when p has none.
// p is not changed; when the subnet does not control p, p itself is returned.
func (s *Subnet) Adopt(p *ipam.Pool) *ipam.Pool {
	if !s.Controls(p) {
		return p
	}
	needGateway := !p.Gateway.IsValid() && s.Gateway.IsValid()
	needRoutes := len(p.Routes) == 0 && len(s.Routes) > 0
	if !needGateway && !needRoutes {
		return p
	}
	q := *p
	if needGateway {
		q.Gateway = s.Gateway
	}
	if needRoutes {
		q.Routes = slices.Clone(s.Routes)
	}
	return &q
}

// PoolLabels returns the labels Spiderpool's admission webhook gives a pool
// the subnet controls: ipam.spidernet.io/owner-spider-subnet and
// ipam.spidernet.io/ippool-cidr.
func (s *Subnet) PoolLabels() map[string]string {
	return map[string]string{LabelOwnerSubnet: s.Name, LabelCIDR: cidrLabel(s.Subnet)}
}

// cidrLabel writes a CIDR as a label value: "10.6.0.0/16" is "10-6-0-0-16".
func cidrLabel(p netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
}

// ValidateAll checks each subnet alone (Validate) and the subnets against
// each other and against the pools, as Spiderpool's admission webhooks do,
// returning every problem at once:
//
//   - subnet names are unique, and no two subnets of a family overlap;
//   - a SpiderIPPool whose subnet overlaps a subnet's must have the same
//     CIDR;
//   - a pool the subnet controls (same CIDR) has its addresses (ips less
//     excludeIPs) among the subnet's (see Usable).
//
// The pools are not validated here (see ValidatePools); invalid ones are
// skipped. The cost is O(n log n) in the number of subnets and pools.
func ValidateAll(subnets []*Subnet, pools []*ipam.Pool) error {
	var errs []error
	names := make(map[string]int, len(subnets))
	valid := make([]*Subnet, 0, len(subnets))
	for i, s := range subnets {
		if s == nil {
			errs = append(errs, &ipam.FieldError{Field: fmt.Sprintf("subnets[%d]", i), Reason: "nil subnet"})
			continue
		}
		if err := s.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := names[s.Name]; dup {
			errs = append(errs, &ipam.FieldError{Object: s.object(), Field: "name", Value: s.Name, Reason: fmt.Sprintf("duplicate: also subnets[%d]", j)})
			continue
		}
		names[s.Name] = i
		valid = append(valid, s)
	}
	byCIDR := func(a, b *Subnet) int {
		if c := a.Subnet.Addr().Compare(b.Subnet.Addr()); c != 0 {
			return c
		}
		return a.Subnet.Bits() - b.Subnet.Bits()
	}
	slices.SortStableFunc(valid, byCIDR)
	// Prefixes nest, so a subnet overlaps an earlier one iff it overlaps the
	// last kept one: the kept subnets are disjoint and sorted.
	kept := valid[:0]
	for _, s := range valid {
		if n := len(kept); n > 0 && kept[n-1].Subnet.Overlaps(s.Subnet) {
			a := kept[n-1]
			errs = append(errs, &ipam.FieldError{Object: s.object(), Field: "subnet", Value: s.Subnet.String(),
				Reason: fmt.Sprintf("overlaps subnet %q whose subnet is %s", a.Name, a.Subnet)})
			continue
		}
		kept = append(kept, s)
	}
	errs = append(errs, checkPoolsInSubnets(kept, pools)...)
	return errors.Join(errs...)
}

// checkPoolsInSubnets checks every valid SpiderIPPool against the subnets,
// which are disjoint and sorted by address.
func checkPoolsInSubnets(subnets []*Subnet, pools []*ipam.Pool) []error {
	if len(subnets) == 0 {
		return nil
	}
	var errs []error
	usable := make(map[*Subnet]*netipx.IPSet)
	for _, p := range pools {
		if p == nil || !p.Subnet.IsValid() || p.Subnet.Masked() != p.Subnet || p.Validate() != nil {
			continue
		}
		pr := netipx.RangeOfPrefix(p.Subnet)
		k, _ := slices.BinarySearchFunc(subnets, pr.From(), func(s *Subnet, a netip.Addr) int {
			if u128.LastAddr(s.Subnet).Less(a) {
				return -1
			}
			return 1
		})
		for ; k < len(subnets) && !pr.To().Less(subnets[k].Subnet.Addr()); k++ {
			s := subnets[k]
			if s.Subnet != p.Subnet {
				errs = append(errs, &ipam.FieldError{Object: poolObject(p), Field: "subnet", Value: p.Subnet.String(),
					Reason: fmt.Sprintf("overlaps subnet %q whose subnet is %s: a pool in a SpiderSubnet's CIDR must have that CIDR", s.Name, s.Subnet)})
				continue
			}
			u, ok := usable[s]
			if !ok {
				u = s.Usable()
				usable[s] = u
			}
			var b netipx.IPSetBuilder
			b.AddSet(p.Addresses())
			b.RemoveSet(u)
			outside, _ := b.IPSet()
			if rs := outside.Ranges(); len(rs) > 0 {
				errs = append(errs, &ipam.FieldError{Object: poolObject(p), Field: "ips", Value: strings.Join(formatIPRanges(rs), ","),
					Reason: fmt.Sprintf("not among the addresses of subnet %q (its ips less excludeIPs)", s.Name)})
			}
		}
	}
	return errs
}

// ValidateUpdate checks a change of a subnet from old to new, as
// Spiderpool's webhook does: new is valid; subnet and ipVersion do not
// change; and every pool new controls keeps its addresses among new's (see
// ValidateAll; autoPools are checked by their addresses too). It returns
// every problem at once.
func ValidateUpdate(old, new *Subnet, pools []*ipam.Pool, autoPools []*AutoPool) error {
	if old == nil || new == nil {
		return &ipam.FieldError{Object: "subnet", Field: "(subnet)", Reason: "nil subnet"}
	}
	if err := new.Validate(); err != nil {
		return err
	}
	fe := &fieldErrors{object: new.object()}
	if old.Subnet != new.Subnet {
		fe.add("subnet", new.Subnet.String(), "cannot change: was %s", old.Subnet)
	}
	if old.Family() != new.Family() {
		fe.add("ipVersion", fmt.Sprint(new.IPVersion), "cannot change: was %d", old.Family())
	}
	if err := fe.err(); err != nil {
		return err
	}
	all := slices.Clone(pools)
	for _, a := range autoPools {
		if a != nil && a.Subnet == new.Name {
			all = append(all, a.Pool)
		}
	}
	var errs []error
	for _, err := range checkPoolsInSubnets([]*Subnet{new}, all) {
		var f *ipam.FieldError
		if errors.As(err, &f) && f.Field == "ips" {
			f.Reason = fmt.Sprintf("held by a pool the subnet controls, so %q cannot remove it", new.Name)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Status is the status Spiderpool's subnet controller writes on a
// SpiderSubnet: how many addresses it has, how many it handed to pools, and
// to which.
//
// The zero Status counts nothing. It is a plain value.
type Status struct {
	Name string `json:"name"`
	// TotalIPCount is the number of the subnet's usable addresses (IPs less
	// ExcludeIPs; reserved addresses are counted, as Spiderpool counts them).
	// A count beyond math.MaxInt64 (an IPv6 subnet wider than a /65, say) is
	// written as math.MaxInt64, and Saturated says so.
	TotalIPCount int64 `json:"totalIPCount"`
	// AllocatedIPCount is the number of addresses handed to pools (not the
	// number pods use): the sum over ControlledIPPools, counted as
	// TotalIPCount is.
	AllocatedIPCount int64 `json:"allocatedIPCount"`
	// Saturated reports that a count stands for more addresses than an
	// int64 holds: that count is math.MaxInt64, meaning at least that many.
	// Spiderpool's status has no such field; it is omitted from JSON when
	// false.
	Saturated bool `json:"saturated,omitempty"`
	// ControlledIPPools lists, per pool name, the pool's addresses in the
	// subnet and, for an auto-pool, its application as
	// "<group>_<version>_<Kind>_<namespace>_<name>" (no group part for the
	// core group). Spiderpool stores this map as one JSON string on the
	// SpiderSubnet; here it is a field of the value, and whoever stores it
	// decides where it lives.
	ControlledIPPools map[string]ControlledIPs `json:"controlledIPPools,omitempty"`
}

// ControlledIPs is one entry of Status.ControlledIPPools.
//
// The zero ControlledIPs holds no address. It is a plain value.
type ControlledIPs struct {
	IPs         []netipx.IPRange `json:"-"`
	Application string           `json:"application,omitempty"`
}

// MarshalJSON writes {"ips": ["a-b", ...], "application": "..."}, with ips
// as Spiderpool writes them.
func (c ControlledIPs) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		IPs         []string `json:"ips"`
		Application string   `json:"application,omitempty"`
	}{formatIPRanges(c.IPs), c.Application})
}

// StatusOf computes subnet s's status from the pools it controls: the
// pools of pools with s's CIDR (Controls), counted by their addresses among
// s's; and the auto-pools of autoPools whose Subnet is s's name, counted by
// their addresses. Other pools are ignored.
func StatusOf(s *Subnet, pools []*ipam.Pool, autoPools []*AutoPool) Status {
	u := s.Usable()
	total := setCount(u)
	var allocated u128.U128
	st := Status{Name: s.Name}
	add := func(name string, set *netipx.IPSet, app string) {
		if st.ControlledIPPools == nil {
			st.ControlledIPPools = make(map[string]ControlledIPs)
		}
		st.ControlledIPPools[name] = ControlledIPs{IPs: set.Ranges(), Application: app}
		if sum := allocated.Add(setCount(set)); sum.Less(allocated) {
			allocated = u128.Max
		} else {
			allocated = sum
		}
	}
	for _, p := range pools {
		if !s.Controls(p) {
			continue
		}
		var b netipx.IPSetBuilder
		b.AddSet(p.Addresses())
		b.Intersect(u)
		set, _ := b.IPSet()
		add(p.Name, set, "")
	}
	for _, a := range autoPools {
		if a == nil || a.Subnet != s.Name || a.Pool == nil {
			continue
		}
		add(a.Pool.Name, a.Pool.Addresses(), a.App.StatusName())
	}
	st.TotalIPCount, st.AllocatedIPCount = clampInt64(total), clampInt64(allocated)
	st.Saturated = total.Cmp(u128.U128{Lo: math.MaxInt64}) > 0 || allocated.Cmp(u128.U128{Lo: math.MaxInt64}) > 0
	return st
}

// setSize returns the number of addresses in set, at most math.MaxInt64.
func setSize(set *netipx.IPSet) int64 {
	return clampInt64(setCount(set))
}

// setCount returns the number of addresses in set, exactly, except that the
// whole IPv6 space (2^128) counts one less.
func setCount(set *netipx.IPSet) u128.U128 {
	var n u128.U128
	for _, r := range set.Ranges() {
		next := n.Add(u128.Span(r.From(), r.To()))
		if next.Less(n) || next == u128.Max {
			return u128.Max
		}
		n = next.AddOne()
	}
	return n
}

// clampInt64 returns n, or math.MaxInt64 if n is larger.
func clampInt64(n u128.U128) int64 {
	if n.Hi != 0 || n.Lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(n.Lo)
}

// clampInt returns n, or math.MaxInt if n is larger.
func clampInt(n u128.U128) int {
	if n.Hi != 0 || n.Lo > math.MaxInt {
		return math.MaxInt
	}
	return int(n.Lo)
}
