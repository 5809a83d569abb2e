// Package hostlocalvectors reads the host-local conformance vectors of
// testdata/conformance (operations recorded by running CNI host-local
// v1.9.1) and the table of this project's deliberate differences from them,
// for the two tests that replay them: the library's (hostlocal) and the CNI
// plugin's (cmd/cni-ipam). It also holds what both check in the same way:
// requested addresses written into a config, and errors that name the values
// host-local's name.
package hostlocalvectors

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// Vector is one recorded scenario: a config, the state directory it starts
// from, the operations and what host-local answered to each, and the state
// afterwards.
type Vector struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	Seed   *struct {
		Allocated    map[string]string `json:"allocated"`
		Files        map[string]string `json:"files"`
		LastReserved map[string]string `json:"lastReserved"`
	} `json:"seed"`
	Ops        []Op              `json:"ops"`
	Expect     []json.RawMessage `json:"expect"`
	FinalState struct {
		Allocations  map[string]string `json:"allocations"`
		LastReserved map[string]string `json:"lastReserved"`
	} `json:"finalState"`
}

// Op is one CNI operation of a Vector.
type Op struct {
	Op         string   `json:"op"`
	ID         string   `json:"id"`
	Ifname     string   `json:"ifname"`
	RequestIPs []string `json:"requestIPs"`
	CNIArgs    string   `json:"cniArgs"`
}

// IPOut is an address of a result, in the forms of CNI 0.3.0 and later.
type IPOut struct {
	Address string `json:"address"`
	Gateway string `json:"gateway"`
}

// IP020 is an address of a CNI 0.2.0 result.
type IP020 struct {
	IP      string `json:"ip"`
	Gateway string `json:"gateway"`
}

// Route is a route of a result.
type Route struct {
	Dst string `json:"dst"`
	GW  string `json:"gw"`
}

// Expectation is what an operation answered: a result, success, or an error
// (whole, or its first part).
type Expectation struct {
	IPs         []IPOut `json:"ips,omitempty"`
	IP4         *IP020  `json:"ip4,omitempty"`
	IP6         *IP020  `json:"ip6,omitempty"`
	Routes      []Route `json:"routes,omitempty"`
	OK          bool    `json:"ok,omitempty"`
	Error       string  `json:"error,omitempty"`
	ErrorPrefix string  `json:"errorPrefix,omitempty"`
}

// Difference overrides what host-local did in one vector, where
// testdata/conformance/README.md lists a deliberate difference. Every
// override names the difference in Why.
type Difference struct {
	Why    string              `json:"why"`
	Expect map[int]Expectation `json:"expect,omitempty"` // op index -> what we do instead
	Final  map[string]string   `json:"final,omitempty"`  // allocations afterwards, if different
	// Cursor is the last-reserved address of each range set afterwards
	// (last_reserved_ip.<index>), by index, where ours differ from
	// host-local's: what we leave instead, which the tests assert.
	Cursor map[string]string `json:"cursor,omitempty"`
}

// Want returns what op i of v must answer with difference d applied, and the
// reason when d overrides host-local's answer.
func (v Vector) Want(i int, d Difference) (Expectation, string, error) {
	if e, ok := d.Expect[i]; ok {
		return e, d.Why, nil
	}
	var e Expectation
	if err := json.Unmarshal(v.Expect[i], &e); err != nil {
		return e, "", fmt.Errorf("vector %s: expect[%d]: %w", v.Name, i, err)
	}
	return e, "", nil
}

// FinalAllocations returns the allocations v must end with, d applied.
func (v Vector) FinalAllocations(d Difference) map[string]string {
	if d.Final != nil {
		return d.Final
	}
	return v.FinalState.Allocations
}

// FinalCursors returns the last-reserved address of each range set that v
// must end with, by index, d applied: host-local's, or ours where d says
// they differ. It is an error for d to leave a cursor host-local chose at
// random (recorded as "... (random)") unstated.
func (v Vector) FinalCursors(d Difference) (map[string]string, error) {
	if d.Cursor != nil {
		return d.Cursor, nil
	}
	for idx, ip := range v.FinalState.LastReserved {
		if strings.Contains(ip, "random") {
			return nil, fmt.Errorf("vector %s: host-local's last_reserved_ip.%s was random (%q): the differences must state ours", v.Name, idx, ip)
		}
	}
	return v.FinalState.LastReserved, nil
}

// dir is testdata/conformance, found from this file's place in the tree.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "conformance")
}

// Load reads the vectors, each with one expectation per operation.
func Load() ([]Vector, error) {
	data, err := os.ReadFile(filepath.Join(dir(), "host-local-vectors.json"))
	if err != nil {
		return nil, err
	}
	var vs []Vector
	if err := json.Unmarshal(data, &vs); err != nil {
		return nil, fmt.Errorf("host-local-vectors.json: %w", err)
	}
	if len(vs) == 0 {
		return nil, errors.New("host-local-vectors.json: no vectors")
	}
	for _, v := range vs {
		if len(v.Expect) != len(v.Ops) {
			return nil, fmt.Errorf("vector %s: %d expectations for %d operations", v.Name, len(v.Expect), len(v.Ops))
		}
	}
	return vs, nil
}

// LoadDifferences reads the overrides, by vector name. Each must give its
// reason and name a vector of vs.
func LoadDifferences(vs []Vector) (map[string]Difference, error) {
	data, err := os.ReadFile(filepath.Join(dir(), "host-local-differences.json"))
	if err != nil {
		return nil, err
	}
	var ds map[string]Difference
	if err := json.Unmarshal(data, &ds); err != nil {
		return nil, fmt.Errorf("host-local-differences.json: %w", err)
	}
	return ds, checkDifferences(ds, vs)
}

// checkDifferences checks that each difference gives its reason, names a
// vector of vs, and states cursors only where they differ from host-local's.
func checkDifferences(ds map[string]Difference, vs []Vector) error {
	var errs []error
	for name, d := range ds {
		if d.Why == "" {
			errs = append(errs, fmt.Errorf("override %s gives no reason", name))
		}
		i := slices.IndexFunc(vs, func(v Vector) bool { return v.Name == name })
		if i < 0 {
			errs = append(errs, fmt.Errorf("difference for %q names no vector", name))
			continue
		}
		if d.Cursor != nil && maps.Equal(d.Cursor, vs[i].FinalState.LastReserved) {
			errs = append(errs, fmt.Errorf("difference for %q states host-local's own cursors %v: drop it", name, d.Cursor))
		}
	}
	return errors.Join(errs...)
}

// WithRequests returns config with ips as its runtimeConfig's requested
// addresses, or config itself if there are none.
func WithRequests(config json.RawMessage, ips []string) ([]byte, error) {
	if len(ips) == 0 {
		return config, nil
	}
	var m map[string]any
	if err := json.Unmarshal(config, &m); err != nil {
		return nil, err
	}
	rc, _ := m["runtimeConfig"].(map[string]any)
	if rc == nil {
		rc = map[string]any{}
	}
	rc["ips"] = ips
	m["runtimeConfig"] = rc
	return json.Marshal(m)
}

var addrToken = regexp.MustCompile(`[0-9A-Fa-f:.]*[.:][0-9A-Fa-f:.]*(/[0-9]+)?`)

// splitTokens splits an address token at range and list separators.
func splitTokens(tok string) []string {
	return strings.FieldsFunc(tok, func(r rune) bool { return r == '-' || r == ',' })
}

// CheckErrorNames checks that our error message names the values that
// host-local's (want.Error, or want.ErrorPrefix) names: every address, range
// bound and CIDR in it appears in ours as a whole token. A message that names
// no value must match in wording ("host-local: " in host-local's messages is
// its name, not wording). It returns nil or what does not match.
func CheckErrorNames(ours string, want Expectation) error {
	theirs := want.Error
	prefix := false
	if theirs == "" {
		theirs, prefix = want.ErrorPrefix, true
	}
	var tokens []string
	for _, tok := range addrToken.FindAllString(theirs, -1) {
		for _, part := range splitTokens(tok) {
			switch {
			case prefix && strings.HasSuffix(part, "."):
				tokens = append(tokens, part) // a truncated address: match as a prefix
			case strings.ContainsAny(part, "0123456789") && len(part) > 3:
				// An address, range bound or CIDR, valid or not (the bad input).
				tokens = append(tokens, strings.TrimRight(part, ".:"))
			}
		}
	}
	if len(tokens) == 0 {
		theirs = strings.TrimPrefix(theirs, "host-local: ")
		if !strings.Contains(strings.ToLower(ours), strings.ToLower(theirs)) {
			return fmt.Errorf("our error %q does not say %q", ours, theirs)
		}
		return nil
	}
	var oursParts []string
	for _, tok := range addrToken.FindAllString(ours, -1) {
		oursParts = append(oursParts, splitTokens(tok)...)
	}
	for _, tok := range tokens {
		found := slices.ContainsFunc(oursParts, func(p string) bool {
			p = strings.TrimRight(p, ".:")
			if strings.HasSuffix(tok, ".") {
				return strings.HasPrefix(p, tok)
			}
			return p == tok
		})
		if !found {
			return fmt.Errorf("our error %q does not name %s (host-local: %q)", ours, tok, theirs)
		}
	}
	return nil
}
