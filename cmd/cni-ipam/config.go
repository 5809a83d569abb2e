package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/cmd/internal/limited"
	"github.com/ipamkit/ipam/hostlocal"
	"github.com/ipamkit/ipam/store/filestore"
)

// config is one invocation's network configuration, in either form:
//
//   - host-local's (ipam.ranges, the legacy top-level range, runtimeConfig.ipRanges),
//     read by hostlocal.Load: every range set is a pool named "<net>/<index>"
//     that the request names, one address from each;
//   - Spiderpool's (ipam.pools, SpiderIPPool specs with a name, with
//     default_ipv4_ippool, default_ipv6_ippool and clean_gateway): the request
//     names no pool, and the library's selection pipeline picks them.
type config struct {
	CNIVersion string
	Name       string
	// Pools are every pool of the network, in range-set (or ipam.pools) order;
	// a pool's position is its index for last_reserved_ip.<index>.
	Pools []*ipam.Pool
	// Selects reports the Spiderpool form: the request names no pool.
	Selects bool
	// Requested are the requested addresses (host-local form only).
	Requested []netip.Addr
	// NetConf is the Spiderpool form's pool defaults.
	NetConf ipam.NetConf
	// Routes are ipam.routes, copied into every result.
	Routes     []ipam.Route
	DataDir    string
	ResolvConf string
	// Sync is ipam.sync: the state directory's writes are fsynced, so that
	// they survive a power loss, not only a crash.
	Sync bool
	// Etcd is the ipam.etcd section: the claims live in etcd instead of the
	// state directory (see etcd.go). Nil if absent.
	Etcd json.RawMessage
	// Kubernetes is the ipam.kubernetes section: the claims live in the
	// cluster's API as IPClaims, and the pools are its SpiderIPPools (see
	// kube.go). Nil if absent.
	Kubernetes json.RawMessage
	// Pod is the pod the K8S_POD_* CNI_ARGS name, if any.
	Pod podArgs

	// PrevResult is the prevResult of a CHECK or DEL, if any.
	PrevResult *prevResult
	// PrevResultErr says why the prevResult sent could not be read; the call
	// goes on as if none had been sent.
	PrevResultErr error
	// ValidAttachments is the GC list; nil if the key is absent.
	ValidAttachments []types.GCAttachment
}

// sharedStore names the section whose store the nodes of a cluster share
// (ipam.etcd, ipam.kubernetes), or "" for the node's state directory.
func (c *config) sharedStore() string {
	switch {
	case c.Kubernetes != nil:
		return "ipam.kubernetes"
	case c.Etcd != nil:
		return "ipam.etcd"
	}
	return ""
}

// Dir returns the state directory of the network: <dataDir>/<name>.
func (c *config) Dir() string { return filepath.Join(c.DataDir, c.Name) }

// PoolNames returns the names of the pools, in order.
func (c *config) PoolNames() []string {
	out := make([]string, len(c.Pools))
	for i, p := range c.Pools {
		out[i] = p.Name
	}
	return out
}

// poolLoc says which addresses of the state directory belong to a pool: the
// filestore's mapping of files to pools.
type poolLoc = filestore.Pool

// Locations returns where each pool's claims live: the prefixes covering its
// ranges (start to end), which are disjoint across pools because the pools'
// ranges are (hostlocal.FileStorePools).
func (c *config) Locations() ([]poolLoc, error) {
	return hostlocal.FileStorePools(c.Pools)
}

// poolAt returns the pool of c whose ranges contain ip, or nil.
func (c *config) poolAt(ip netip.Addr) *ipam.Pool {
	for _, p := range c.Pools {
		rs, err := p.RangeSet()
		if err != nil {
			continue
		}
		for _, r := range rs {
			if r.IPRange().Contains(ip) {
				return p
			}
		}
	}
	return nil
}

// poolIndex returns the position of the named pool, or -1.
func (c *config) poolIndex(name string) int {
	for i, p := range c.Pools {
		if p.Name == name {
			return i
		}
	}
	return -1
}

// podArgs are the Kubernetes CNI_ARGS a runtime passes.
type podArgs struct {
	Namespace, Name, UID string
}

// stdinConf is what the plugin reads of stdin itself; hostlocal.Load reads the
// rest.
type stdinConf struct {
	CNIVersion    string          `json:"cniVersion"`
	Name          string          `json:"name"`
	IPAM          json.RawMessage `json:"ipam"`
	RawPrevResult json.RawMessage `json:"prevResult"`
	RuntimeConfig struct {
		IPRanges json.RawMessage `json:"ipRanges"`
		IPs      []string        `json:"ips"`
	} `json:"runtimeConfig"`
	Args struct {
		CNI struct {
			IPs []string `json:"ips"`
		} `json:"cni"`
	} `json:"args"`
	ValidAttachments *[]types.GCAttachment `json:"cni.dev/valid-attachments"`
	// Attachments is the key's first spelling in the 1.1.0 spec text
	// (containernetworking/cni#1101); libcni sends both.
	Attachments *[]types.GCAttachment `json:"cni.dev/attachments"`
}

// ipamConf is the ipam section, as far as the plugin reads it itself.
type ipamConf struct {
	Ranges     json.RawMessage   `json:"ranges"`
	Subnet     string            `json:"subnet"`
	Pools      []json.RawMessage `json:"pools"`
	DataDir    string            `json:"dataDir"`
	ResolvConf string            `json:"resolvConf"`
	Routes     []ipam.Route      `json:"routes"`
	Etcd       json.RawMessage   `json:"etcd"`
	Kubernetes json.RawMessage   `json:"kubernetes"`
	// Sync fsyncs the state directory's writes (filestore.Options.Sync).
	Sync bool `json:"sync"`
	ipam.NetConf
}

// codedError is a problem with its CNI error code: a configuration problem
// (4, 6, 7), or a state directory that cannot be opened (5).
type codedError struct {
	code uint
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }

// decodeError returns the code for a JSON problem: 6 (cannot decode) for
// malformed JSON or a value of the wrong JSON type, 7 (invalid network config)
// otherwise.
func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &te) {
		return &codedError{types.ErrDecodingFailure, err}
	}
	return &codedError{types.ErrInvalidNetworkConfig, err}
}

// loadConfig reads stdin and CNI_ARGS. Errors are *codedError.
func loadConfig(stdin []byte, cniArgs string) (*config, error) {
	var sc stdinConf
	if err := json.Unmarshal(stdin, &sc); err != nil {
		return nil, &codedError{types.ErrDecodingFailure, fmt.Errorf("network config: %w", err)}
	}
	if len(sc.IPAM) == 0 || string(sc.IPAM) == "null" {
		return nil, &codedError{types.ErrInvalidNetworkConfig, errors.New("IPAM config missing 'ipam' key")}
	}
	var ic ipamConf
	if err := json.Unmarshal(sc.IPAM, &ic); err != nil {
		return nil, decodeError(fmt.Errorf("ipam: %w", err))
	}
	if err := checkSections(&ic); err != nil {
		return nil, err
	}
	var c *config
	var err error
	switch {
	case present(ic.Kubernetes):
		c, err = loadKubernetes(&sc, &ic, cniArgs)
	case len(ic.Pools) > 0:
		c, err = loadPools(&sc, &ic, cniArgs)
	default:
		c, err = loadRanges(stdin, cniArgs, &ic)
	}
	if err != nil {
		return nil, err
	}
	c.Pod = parsePodArgs(cniArgs)
	c.Sync = ic.Sync
	if present(ic.Etcd) {
		if ic.DataDir != "" {
			return nil, &codedError{types.ErrInvalidNetworkConfig,
				errors.New("ipam: etcd and dataDir are mutually exclusive: the claims live in one or the other")}
		}
		c.Etcd = ic.Etcd
	}
	if len(sc.RawPrevResult) > 0 && string(sc.RawPrevResult) != "null" {
		// A prevResult that does not parse is ignored, as host-local ignores
		// every prevResult: a runtime that sends the same broken one again
		// could otherwise never tear the container down.
		if pr, err := parsePrevResult(sc.RawPrevResult); err != nil {
			c.PrevResultErr = fmt.Errorf("prevResult: %w", err)
		} else {
			c.PrevResult = pr
		}
	}
	switch {
	case sc.ValidAttachments != nil:
		c.ValidAttachments = *sc.ValidAttachments
	case sc.Attachments != nil:
		c.ValidAttachments = *sc.Attachments
	}
	if c.ValidAttachments == nil && (sc.ValidAttachments != nil || sc.Attachments != nil) {
		c.ValidAttachments = []types.GCAttachment{} // present and empty: nothing is valid
	}
	return c, nil
}

// loadRanges reads host-local's form through hostlocal.Load.
func loadRanges(stdin []byte, cniArgs string, ic *ipamConf) (*config, error) {
	hc, err := hostlocal.Load(stdin, cniArgs)
	if err != nil {
		if _, aerr := hostlocal.ParseArgs(cniArgs); aerr != nil && aerr.Error() == err.Error() {
			// CNI_ARGS is an environment variable: code 4, naming it.
			return nil, &codedError{types.ErrInvalidEnvironmentVariables, fmt.Errorf("CNI_ARGS: %s", trimPkg(err))}
		}
		return nil, decodeError(unprefixed{err})
	}
	if err := checkName(hc.Name); err != nil {
		return nil, err
	}
	// The pools get the plugin's own names, whatever the network's name:
	// they never show (toCNI says "range set <index>", as host-local does).
	pools := make([]*ipam.Pool, len(hc.Pools))
	for i, p := range hc.Pools {
		q := *p
		q.Name = rangeSetPool(i)
		pools[i] = &q
	}
	return &config{
		CNIVersion: hc.CNIVersion,
		Name:       hc.Name,
		Pools:      pools,
		Requested:  hc.Requested,
		Routes:     hc.Routes,
		DataDir:    hc.DataDir,
		ResolvConf: hc.ResolvConf,
	}, nil
}

// rangeSetPool is the name of the pool of range set i in host-local's form.
func rangeSetPool(i int) string { return rangeSetPrefix + strconv.Itoa(i) }

const rangeSetPrefix = "range-set-"

// userText rewrites a message for the user: in host-local's form, the pools
// are the plugin's, named after their range set, and the message names the
// range set instead, as host-local's messages do.
func (c *config) userText(s string) string {
	if c == nil || c.Selects || !strings.Contains(s, rangeSetPrefix) {
		return s
	}
	// From the last, so that range-set-1 is not taken for part of range-set-10.
	for i := len(c.Pools) - 1; i >= 0; i-- {
		name, set := rangeSetPool(i), "range set "+strconv.Itoa(i)
		s = strings.ReplaceAll(s, "pool "+strconv.Quote(name), set)
		s = strings.ReplaceAll(s, name, set)
	}
	return s
}

// present reports whether a section is in the config: not absent, not null
// (checkSections refuses a null one).
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// checkSections refuses an etcd or kubernetes section that is null or not
// an object. A null section is what a template renders for an unset value:
// read as no section, the claims would go to each node's state directory,
// and two nodes would hand out one address.
func checkSections(ic *ipamConf) error {
	for _, s := range []struct {
		field string
		raw   json.RawMessage
	}{{"ipam.etcd", ic.Etcd}, {"ipam.kubernetes", ic.Kubernetes}} {
		raw := bytes.TrimSpace(s.raw)
		switch {
		case len(raw) == 0:
		case bytes.Equal(raw, []byte("null")):
			return &codedError{types.ErrInvalidNetworkConfig,
				fmt.Errorf("%s: null: give the section as an object or leave the key out (without it, the claims live in the node's state directory)", s.field)}
		case raw[0] != '{':
			return &codedError{types.ErrDecodingFailure,
				fmt.Errorf("%s: %s is not an object", s.field, abbrev(raw))}
		}
	}
	return nil
}

// abbrev returns raw, cut to a length a message can quote.
func abbrev(raw []byte) string {
	const max = 40
	if len(raw) > max {
		return string(raw[:max]) + "..."
	}
	return string(raw)
}

// loadKubernetes reads the Spiderpool form whose pools and claims live in a
// cluster (ipam.kubernetes): the defaults, with no pools, ranges, state
// directory or etcd section beside it.
func loadKubernetes(sc *stdinConf, ic *ipamConf, cniArgs string) (*config, error) {
	invalid := func(format string, args ...any) error {
		return &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf(format, args...)}
	}
	switch {
	case len(ic.Pools) > 0, ic.Subnet != "", hasItems(ic.Ranges), hasItems(sc.RuntimeConfig.IPRanges):
		return nil, invalid("ipam.kubernetes takes the cluster's SpiderIPPools: ipam.pools and ranges (ipam.ranges, ipam.subnet, runtimeConfig.ipRanges) cannot be given with it")
	case ic.DataDir != "" || present(ic.Etcd):
		return nil, invalid("ipam: kubernetes, etcd and dataDir are mutually exclusive: the claims live in one of them")
	}
	if ip, err := hostlocal.ParseArgs(ignoreUnknown(cniArgs)); err != nil {
		return nil, &codedError{types.ErrInvalidEnvironmentVariables, fmt.Errorf("CNI_ARGS: %s", trimPkg(err))}
	} else if ip.IsValid() || len(sc.Args.CNI.IPs) > 0 || len(sc.RuntimeConfig.IPs) > 0 {
		return nil, invalid("ipam: requested IPs (CNI_ARGS IP, args.cni.ips, runtimeConfig.ips) need ipam.ranges; with ipam.kubernetes the pools are chosen as Spiderpool chooses them")
	}
	return &config{
		CNIVersion: sc.CNIVersion,
		Name:       sc.Name,
		Selects:    true,
		NetConf:    ic.NetConf,
		Routes:     ic.Routes,
		ResolvConf: ic.ResolvConf,
		Kubernetes: ic.Kubernetes,
	}, nil
}

// loadPools reads the Spiderpool form: named pools inline, and the defaults.
func loadPools(sc *stdinConf, ic *ipamConf, cniArgs string) (*config, error) {
	invalid := func(format string, args ...any) error {
		return &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf(format, args...)}
	}
	if ic.Subnet != "" || hasItems(ic.Ranges) || hasItems(sc.RuntimeConfig.IPRanges) {
		return nil, invalid("ipam: pools and ranges (ipam.ranges, ipam.subnet, runtimeConfig.ipRanges) are mutually exclusive")
	}
	if ip, err := hostlocal.ParseArgs(ignoreUnknown(cniArgs)); err != nil {
		return nil, &codedError{types.ErrInvalidEnvironmentVariables, fmt.Errorf("CNI_ARGS: %s", trimPkg(err))}
	} else if ip.IsValid() || len(sc.Args.CNI.IPs) > 0 || len(sc.RuntimeConfig.IPs) > 0 {
		return nil, invalid("ipam: requested IPs (CNI_ARGS IP, args.cni.ips, runtimeConfig.ips) need ipam.ranges; with ipam.pools the pools are chosen by default_ipv4_ippool and default_ipv6_ippool")
	}
	if err := checkName(sc.Name); err != nil {
		return nil, err
	}
	c := &config{
		CNIVersion: sc.CNIVersion,
		Name:       sc.Name,
		Selects:    true,
		NetConf:    ic.NetConf,
		Routes:     ic.Routes,
		DataDir:    ic.DataDir,
		ResolvConf: ic.ResolvConf,
	}
	if c.DataDir == "" {
		c.DataDir = hostlocal.DefaultDataDir
	}
	var errs []error
	for i, raw := range ic.Pools {
		p := new(ipam.Pool)
		if err := p.UnmarshalJSON(raw); err != nil {
			errs = append(errs, fmt.Errorf("ipam.pools[%d]: %w", i, err))
			continue
		}
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("ipam.pools[%d]: name: required", i))
			continue
		}
		c.Pools = append(c.Pools, p)
	}
	if len(errs) == 0 {
		if _, err := ipam.NewCatalog(c.Pools...); err != nil {
			errs = append(errs, fmt.Errorf("ipam.pools: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &codedError{types.ErrInvalidNetworkConfig, err}
	}
	return c, nil
}

// checkName rejects a network name that is not a single path element: it
// names the state directory. skel's own check already rejects most.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return &codedError{types.ErrInvalidNetworkConfig, fmt.Errorf("network name %q cannot name a state directory", name)}
	}
	return nil
}

// unprefixed is an error of package hostlocal without its "hostlocal: "
// prefix: the plugin's messages name no Go package. It unwraps to the original.
type unprefixed struct{ err error }

func (u unprefixed) Error() string { return trimPkg(u.err) }
func (u unprefixed) Unwrap() error { return u.err }

func trimPkg(err error) string { return strings.TrimPrefix(err.Error(), "hostlocal: ") }

func hasItems(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) && !bytes.Equal(raw, []byte("[]"))
}

// ignoreUnknown lets hostlocal.ParseArgs check only the IP key: the Spiderpool
// form reads the K8S_POD_* keys itself.
func ignoreUnknown(s string) string {
	if s == "" {
		return s
	}
	return s + ";IgnoreUnknown=1"
}

// parsePodArgs reads the K8S_POD_* keys of CNI_ARGS, if any. Malformed pairs
// are reported by hostlocal.ParseArgs, in host-local's words.
func parsePodArgs(s string) podArgs {
	var p podArgs
	if s == "" {
		return p
	}
	for kv := range strings.SplitSeq(s, ";") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			p.Namespace = v
		case "K8S_POD_NAME":
			p.Name = v
		case "K8S_POD_UID":
			p.UID = v
		}
	}
	return p
}

// readResolvConf reads a resolv.conf as host-local does: nameserver (repeated),
// domain (the last wins), search (every word of every line) and options.
func readResolvConf(path string) (*types.DNS, error) {
	data, err := limited.ReadFile(path, limited.MaxFile)
	if errors.Is(err, limited.ErrTooLarge) {
		return nil, fmt.Errorf("%q: %w", path, err)
	} else if err != nil {
		return nil, err
	}
	dns := &types.DNS{}
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			dns.Nameservers = append(dns.Nameservers, f[1])
		case "domain":
			dns.Domain = f[1]
		case "search":
			dns.Search = append(dns.Search, f[1:]...)
		case "options":
			dns.Options = append(dns.Options, f[1:]...)
		}
	}
	return dns, nil
}

// prevResult is the addresses of a prevResult.
type prevResult struct {
	IPs []netip.Addr
}

// parsePrevResult reads the addresses of a prevResult of any version.
func parsePrevResult(raw json.RawMessage) (*prevResult, error) {
	// A 0.1.0/0.2.0 result has ip4/ip6; later ones have ips.
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
		IP4 *struct {
			IP string `json:"ip"`
		} `json:"ip4"`
		IP6 *struct {
			IP string `json:"ip"`
		} `json:"ip6"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	var addrs []string
	for _, ip := range r.IPs {
		addrs = append(addrs, ip.Address)
	}
	if r.IP4 != nil {
		addrs = append(addrs, r.IP4.IP)
	}
	if r.IP6 != nil {
		addrs = append(addrs, r.IP6.IP)
	}
	pr := &prevResult{}
	for i, s := range addrs {
		// An address should have its prefix length; one without is read all
		// the same.
		ip, err := netip.ParseAddr(s)
		if p, perr := netip.ParsePrefix(s); perr == nil {
			ip, err = p.Addr(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("ips[%d].address %q: not an address with a prefix length", i, s)
		}
		pr.IPs = append(pr.IPs, ip.Unmap())
	}
	return pr, nil
}
