// Package hostlocal reads a CNI network configuration written for the host-local
// IPAM plugin, together with the CNI_ARGS of one call, into the library's pools
// and requested addresses. It speaks no CNI protocol and imports no CNI
// package: a plugin passes it the bytes of stdin and the CNI_ARGS string.
//
// The range sets are merged in host-local's order (runtimeConfig.ipRanges, then
// the legacy top-level range, then ipam.ranges), and each becomes one ipam.Pool
// named PoolName(network, index), so that the index is host-local's range-set
// index (its last_reserved_ip.<index> file). Requested addresses come from
// CNI_ARGS IP=, then args.cni.ips, then runtimeConfig.ips, duplicates dropped.
// Every check host-local makes at load time is made here, in the same order, and
// its error names the same offending value.
package hostlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ipamkit/ipam"
)

// DefaultDataDir is where host-local keeps its state when dataDir is not set.
const DefaultDataDir = "/var/lib/cni/networks"

// Config is a loaded host-local network configuration. The zero Config has no
// pools. A Config is a plain value; its pools must not be modified.
type Config struct {
	CNIVersion string
	// Name is the network name, the state directory below DataDir.
	Name string
	// Pools are the range sets in host-local's merged order.
	Pools []*ipam.Pool
	// Requested are the requested addresses, in host-local's order.
	Requested []netip.Addr
	// Routes are ipam.routes, copied verbatim into every result.
	Routes []ipam.Route
	// DataDir is ipam.dataDir, or DefaultDataDir.
	DataDir string
	// ResolvConf is ipam.resolvConf, a path; empty if unset.
	ResolvConf string
}

// maxPoolName is the longest pool name ipam.Pool.Validate accepts.
const maxPoolName = 253

// PoolName returns the name of range set index of a network: "<network>/<index>".
// A network name too long for that to be a valid pool name (host-local accepts
// names up to the 255 bytes of a directory name) is cut, and ended with a hash
// of the whole name so that two long names still give two pool names:
// "<network prefix>~<8 hex digits>/<index>".
func PoolName(network string, index int) string {
	suffix := "/" + strconv.Itoa(index)
	if len(network)+len(suffix) <= maxPoolName {
		return network + suffix
	}
	h := fnv.New32a()
	h.Write([]byte(network))
	tag := fmt.Sprintf("~%08x", h.Sum32())
	return network[:maxPoolName-len(suffix)-len(tag)] + tag + suffix
}

// PoolNames returns the names of c's pools, in order.
func (c *Config) PoolNames() []string {
	out := make([]string, len(c.Pools))
	for i, p := range c.Pools {
		out[i] = p.Name
	}
	return out
}

type netConf struct {
	CNIVersion    string          `json:"cniVersion"`
	Name          string          `json:"name"`
	IPAM          json.RawMessage `json:"ipam"`
	RuntimeConfig struct {
		IPs      []string            `json:"ips"`
		IPRanges [][]json.RawMessage `json:"ipRanges"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
}

type ipamConf struct {
	Type       string              `json:"type"`
	Ranges     [][]json.RawMessage `json:"ranges"`
	Subnet     string              `json:"subnet"`
	RangeStart string              `json:"rangeStart"`
	RangeEnd   string              `json:"rangeEnd"`
	Gateway    string              `json:"gateway"`
	Routes     []ipam.Route        `json:"routes"`
	DataDir    string              `json:"dataDir"`
	ResolvConf string              `json:"resolvConf"`
}

// Load reads a network configuration (the bytes a plugin gets on stdin) and the
// CNI_ARGS string of the call. Errors name the offending value; range-set errors
// read "invalid range set <i>: ...", as host-local's do.
func Load(netconf []byte, cniArgs string) (*Config, error) {
	var nc netConf
	if err := json.Unmarshal(netconf, &nc); err != nil {
		return nil, fmt.Errorf("hostlocal: network config: %w", err)
	}
	if len(nc.IPAM) == 0 || string(nc.IPAM) == "null" {
		return nil, errors.New("hostlocal: IPAM config missing 'ipam' key")
	}
	var ic ipamConf
	if err := json.Unmarshal(nc.IPAM, &ic); err != nil {
		return nil, fmt.Errorf("hostlocal: ipam: %w", err)
	}
	c := &Config{CNIVersion: nc.CNIVersion, Name: nc.Name, Routes: ic.Routes, DataDir: ic.DataDir, ResolvConf: ic.ResolvConf}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}

	argIP, err := ParseArgs(cniArgs)
	if err != nil {
		return nil, err
	}
	seen := map[netip.Addr]bool{}
	addReq := func(field, s string) error {
		ip, err := parseRequested(s)
		if err != nil {
			return fmt.Errorf("hostlocal: %s: %w", field, err)
		}
		if !seen[ip] {
			seen[ip] = true
			c.Requested = append(c.Requested, ip)
		}
		return nil
	}
	if argIP.IsValid() {
		if err := addReq("CNI_ARGS IP", argIP.String()); err != nil {
			return nil, err
		}
	}
	for _, s := range nc.Args.CNI.IPs {
		if err := addReq("args.cni.ips", s); err != nil {
			return nil, err
		}
	}
	for _, s := range nc.RuntimeConfig.IPs {
		if err := addReq("runtimeConfig.ips", s); err != nil {
			return nil, err
		}
	}

	var sets [][]ipam.Range
	rt, err := parseRangeSets("runtimeConfig.ipRanges", nc.RuntimeConfig.IPRanges)
	if err != nil {
		return nil, err
	}
	sets = append(sets, rt...)
	if ic.Subnet != "" {
		legacy := []byte(fmt.Sprintf(`{"subnet":%q,"rangeStart":%q,"rangeEnd":%q,"gateway":%q}`, ic.Subnet, ic.RangeStart, ic.RangeEnd, ic.Gateway))
		var r ipam.Range
		if err := json.Unmarshal(legacy, &r); err != nil {
			return nil, fmt.Errorf("hostlocal: ipam: %w", err)
		}
		sets = append(sets, []ipam.Range{r})
	}
	rs, err := parseRangeSets("ipam.ranges", ic.Ranges)
	if err != nil {
		return nil, err
	}
	sets = append(sets, rs...)
	if len(sets) == 0 {
		return nil, errors.New("hostlocal: no IP ranges specified")
	}

	canon := make([][]ipam.Range, len(sets))
	for i, set := range sets {
		if len(set) == 0 {
			return nil, fmt.Errorf("hostlocal: invalid range set %d: empty range set", i)
		}
		p := &ipam.Pool{Name: PoolName(c.Name, i), Ranges: set}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("hostlocal: invalid range set %d: %w", i, withoutObject(err))
		}
		canon[i], _ = p.RangeSet()
		c.Pools = append(c.Pools, p)
	}

	if olderThan030(c.CNIVersion) {
		var n4, n6 int
		for _, set := range canon {
			if set[0].Start.Is4() {
				n4++
			} else {
				n6++
			}
		}
		if n4 > 1 || n6 > 1 {
			return nil, fmt.Errorf("hostlocal: CNI version %s does not support more than 1 address per family", c.CNIVersion)
		}
	}

	for i := range canon {
		for j := i + 1; j < len(canon); j++ {
			if a, b, ok := overlap(canon[i], canon[j]); ok {
				return nil, fmt.Errorf("hostlocal: range set %d overlaps with %d: %s and %s", i, j, a, b)
			}
		}
	}
	return c, nil
}

// parseRangeSets decodes range sets, naming the path of a bad one.
func parseRangeSets(field string, raw [][]json.RawMessage) ([][]ipam.Range, error) {
	out := make([][]ipam.Range, len(raw))
	for i, set := range raw {
		out[i] = make([]ipam.Range, len(set))
		for j, r := range set {
			if err := json.Unmarshal(r, &out[i][j]); err != nil {
				return nil, fmt.Errorf("hostlocal: %s[%d][%d]: %w", field, i, j, err)
			}
		}
	}
	return out, nil
}

func overlap(x, y []ipam.Range) (ipam.Range, ipam.Range, bool) {
	for _, a := range x {
		for _, b := range y {
			if a.Start.Is4() == b.Start.Is4() && a.IPRange().Overlaps(b.IPRange()) {
				return a, b, true
			}
		}
	}
	return ipam.Range{}, ipam.Range{}, false
}

// parseRequested accepts "a.b.c.d" or "a.b.c.d/len" (the prefix is ignored) and
// turns IPv4-mapped IPv6 into IPv4.
func parseRequested(s string) (netip.Addr, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Addr().Unmap(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("invalid IP address %q", s)
	}
	return ip.Unmap(), nil
}

// ParseArgs parses a CNI_ARGS string ("K=V;K=V") as host-local does: the key IP
// (case-sensitive) is a requested address, IgnoreUnknown=1 or =true allows other
// keys, and any other key is an error without it. It returns the requested
// address (the last IP= wins), or the zero Addr.
func ParseArgs(s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	pairs := strings.Split(s, ";")
	ignoreUnknown := false
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == "IgnoreUnknown" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("hostlocal: ARGS: error parsing value of pair %q: %w", kv, err)
			}
			ignoreUnknown = b
		}
	}
	var ip netip.Addr
	var unknown []string
	for _, kv := range pairs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return netip.Addr{}, fmt.Errorf("hostlocal: ARGS: invalid pair %q", kv)
		}
		switch k {
		case "IgnoreUnknown":
		case "IP":
			a, err := parseRequested(v)
			if err != nil {
				return netip.Addr{}, fmt.Errorf("hostlocal: ARGS: error parsing value of pair %q: %w", kv, err)
			}
			ip = a
		default:
			unknown = append(unknown, kv)
		}
	}
	if len(unknown) > 0 && !ignoreUnknown {
		q := make([]string, len(unknown))
		for i, u := range unknown {
			q[i] = strconv.Quote(u)
		}
		return netip.Addr{}, fmt.Errorf("hostlocal: ARGS: unknown args [%s]", strings.Join(q, " "))
	}
	return ip, nil
}

// olderThan030 reports whether a CNI version string is below 0.3.0.
func olderThan030(v string) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major == 0 && minor < 3
}

// withoutObject returns err with the pool named by none of its FieldErrors: a
// range set's problems are reported as "invalid range set <index>: ...", and its
// pool's name is the library's, not one the user wrote.
func withoutObject(err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = withoutObject(e)
		}
		return errors.Join(out...)
	}
	if fe, ok := err.(*ipam.FieldError); ok && fe.Object != "" {
		x := *fe
		x.Object = ""
		return &x
	}
	return err
}
