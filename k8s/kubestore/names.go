package kubestore

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"

	"github.com/ipamkit/ipam/store"
)

// Label keys of an IPClaim. Their values are the plain identity when it is a
// valid label value, else its hash (see labelValue).
const (
	// LabelPool holds the claim's pool.
	LabelPool = Group + "/pool"
	// LabelUID holds the owner's pod UID, when it has one.
	LabelUID = Group + "/uid"
	// LabelStable holds a stable owner's "namespace.name" (a StatefulSet
	// or KubeVirt pod); claims of other owners do not have it.
	LabelStable = Group + "/stable"
	// LabelContainer holds the owner's container ID, when it has one.
	LabelContainer = Group + "/container"
	// LabelIP holds the claim's address, for selectors of people and
	// tools (the Store finds an address's claim by its name): the
	// address's bytes in lower-case hex, 8 digits for IPv4 and 32 for
	// IPv6.
	LabelIP = Group + "/ip"
	// AnnotationToken holds the token of the claim's entries in its owner
	// indexes (IPOwner objects): a Delete prunes the entries of the token
	// of the claim it deleted, and no other.
	AnnotationToken = Group + "/token"
)

// Limits of Kubernetes names and label values.
const (
	maxNameLen       = 253 // a DNS-1123 subdomain, the name of a custom resource
	maxLabelValueLen = 63
	hashLen          = 40 // hex digits of SHA-256 kept in hashed names and values
)

// ClaimName returns the name of the IPClaim object of ip: the address
// alone, such as "10.0.0.1" or "2001-0db8-0000-0000-0000-0000-0000-0001"
// (an IPv6 address as all eight groups of four hex digits joined by "-", as
// ":" is not allowed in a name), as Kubernetes names its IPAddress objects
// for Service IPs. The pool is in the object's spec.pool, not its name, so
// an address is claimed in one pool at a time, cluster-wide. Names parse
// back to the address (ParseClaimName).
//
// ok is false for an address that cannot be named: the zero Addr or one with
// an IPv6 zone.
func ClaimName(ip netip.Addr) (name string, ok bool) {
	if !ip.IsValid() || ip.Zone() != "" {
		return "", false
	}
	return addrLabel(ip), true
}

// ParseClaimName returns the address of an IPClaim name made by ClaimName.
func ParseClaimName(name string) (netip.Addr, bool) {
	if len(name) == 39 && strings.Count(name, "-") == 7 {
		ip, err := netip.ParseAddr(strings.ReplaceAll(name, "-", ":"))
		if err != nil || !ip.Is6() || addrLabel(ip) != name {
			return netip.Addr{}, false
		}
		return ip, true
	}
	ip, err := netip.ParseAddr(name)
	if err != nil || !ip.Is4() || ip.String() != name {
		return netip.Addr{}, false
	}
	return ip, true
}

// LegacyClaimName returns the name an IPClaim of ip in pool had before
// claims were named by their address alone (layout 1): the pool's name, a
// dot and the address, such as "blue.10.0.0.1", the pool replaced by the
// first 40 hex digits of its SHA-256 when it is not a DNS-1123 subdomain or
// too long to fit. Migrate renames such objects.
func LegacyClaimName(pool string, ip netip.Addr) (name string, ok bool) {
	if !ip.IsValid() || ip.Zone() != "" {
		return "", false
	}
	addr := addrLabel(ip)
	if len(pool)+1+len(addr) <= maxNameLen && isDNSSubdomain(pool) {
		return pool + "." + addr, true
	}
	return hash(pool) + "." + addr, true
}

// ParseLegacyClaimName returns the pool part (the pool's name, or its hash)
// and the address of an IPClaim name made by LegacyClaimName.
func ParseLegacyClaimName(name string) (poolPart string, ip netip.Addr, ok bool) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return "", netip.Addr{}, false
	}
	if last := name[dot+1:]; len(last) == 39 && strings.Count(last, "-") == 7 {
		ip, err := netip.ParseAddr(strings.ReplaceAll(last, "-", ":"))
		if err != nil || !ip.Is6() || addrLabel(ip) != last {
			return "", netip.Addr{}, false
		}
		return name[:dot], ip, dot > 0
	}
	// IPv4: the last four labels.
	i := len(name)
	for range 4 {
		i = strings.LastIndexByte(name[:i], '.')
		if i < 0 {
			return "", netip.Addr{}, false
		}
	}
	ip, err := netip.ParseAddr(name[i+1:])
	if err != nil || !ip.Is4() || ip.String() != name[i+1:] {
		return "", netip.Addr{}, false
	}
	return name[:i], ip, i > 0
}

// OwnerIndexName returns the name of the IPOwner object that indexes the
// claims of q's identity (its Interface aside): "uid." or "name." followed
// by the pod UID or the stable owner's "namespace.name", or by the first
// 40 hex digits of its SHA-256 when that is not a DNS-1123 subdomain or too
// long. (The Store indexes no container IDs; one would be named
// "container." and the ID.) Two
// identities whose names collide (a deliberate hash collision) share one
// object, which costs nothing but a longer index: readers check every
// claim the index lists against the query.
func OwnerIndexName(q store.OwnerQuery) string {
	var prefix, id string
	switch q.Kind {
	case store.KindUID:
		prefix, id = "uid.", q.ID
	case store.KindName:
		prefix, id = "name.", strings.Replace(q.ID, "/", ".", 1)
	default:
		prefix, id = "container.", q.ID
	}
	if len(prefix)+len(id) <= maxNameLen && isDNSSubdomain(id) {
		return prefix + id
	}
	return prefix + hash(q.ID)
}

// addrLabel is the address part of a claim's name.
func addrLabel(ip netip.Addr) string {
	if ip.Is4() {
		return ip.String()
	}
	b := ip.As16()
	var out [39]byte
	for g := range 8 {
		if g > 0 {
			out[g*5-1] = '-'
		}
		hex.Encode(out[g*5:g*5+4], b[g*2:g*2+2])
	}
	return string(out[:])
}

// labelValue returns s as a label value: s itself when it is a valid one,
// else the first 40 hex digits of its SHA-256. A hash may equal some other
// string's plain value only by a (deliberate) collision; readers therefore
// check a found claim's spec, never the label alone.
func labelValue(s string) string {
	if isLabelValue(s) {
		return s
	}
	return hash(s)
}

// ipValue is the LabelIP value of ip.
func ipValue(ip netip.Addr) string {
	if ip.Is4() {
		a := ip.As4()
		return hex.EncodeToString(a[:])
	}
	a := ip.As16()
	return hex.EncodeToString(a[:])
}

// stableValue is the LabelStable value of a stable owner.
func stableValue(namespace, name string) string {
	return labelValue(namespace + "." + name)
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:hashLen/2])
}

// isDNSSubdomain reports whether s is a DNS-1123 subdomain: at most 253
// characters in labels separated by ".", each of lower-case letters, digits
// and "-", starting and ending with a letter or digit.
func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > maxNameLen || !isAlnumLower(s[0]) || !isAlnumLower(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case isAlnumLower(c), c == '-':
		case c == '.':
			// Not first or last (checked above): both neighbours must end
			// and start a label.
			if !isAlnumLower(s[i-1]) || !isAlnumLower(s[i+1]) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// isLabelValue reports whether s is a valid label value: empty, or at most 63
// letters, digits, "-", "_" and ".", starting and ending with a letter or
// digit.
func isLabelValue(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > maxLabelValueLen || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnumLower(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }
func isAlnum(c byte) bool      { return isAlnumLower(c) || 'A' <= c && c <= 'Z' }

// formatRevision and parseRevision convert between a Claim's Revision and
// the resourceVersion the API server gives; see the package documentation.
func formatRevision(rev int64) string { return strconv.FormatInt(rev, 10) }

func parseRevision(rv string) (int64, bool) {
	n, err := strconv.ParseInt(rv, 10, 64)
	return n, err == nil && n > 0
}
