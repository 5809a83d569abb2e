package etcdstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ipamkit/ipam/store"
)

// The key layout is described in the package documentation.
const (
	claimsDir = "claims/"
	ownersDir = "owners/"
	poolsDir  = "pools/"
)

// keys builds and parses the keys of one Store's prefix.
type keys struct {
	prefix string // ends in "/"
}

// escape makes s fit for one segment of a key: "%" becomes "%25" and "/"
// becomes "%2F", so that no segment contains "/" and a pool "p1" never lists
// the keys of a pool "p1/x" or "p10". Everything else is kept, so keys stay
// readable with etcdctl.
func escape(s string) string {
	if !strings.ContainsAny(s, "%/") {
		return s
	}
	return strings.NewReplacer("%", "%25", "/", "%2F").Replace(s)
}

// unescape reverses escape.
func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch s[i:min(i+3, len(s))] {
		case "%25":
			b.WriteByte('%')
		case "%2F":
			b.WriteByte('/')
		default:
			return "", fmt.Errorf("segment %q: bad escape at byte %d", s, i)
		}
		i += 2
	}
	return b.String(), nil
}

// family returns "4" for an IPv4 address and "6" for every other, IPv4-mapped
// IPv6 addresses included, as store.Conflicts tells families apart.
func family(ip netip.Addr) string {
	if ip.Is4() {
		return "4"
	}
	return "6"
}

// addrSegment returns "<family>/<hex>" for ip, which must be valid and have no
// zone.
func addrSegment(ip netip.Addr) string {
	if ip.Is4() {
		a := ip.As4()
		return "4/" + hex.EncodeToString(a[:])
	}
	a := ip.As16()
	return "6/" + hex.EncodeToString(a[:])
}

// parseAddrSegment reverses addrSegment.
func parseAddrSegment(fam, h string) (netip.Addr, error) {
	var buf [16]byte
	want := 4
	if fam == "6" {
		want = 16
	} else if fam != "4" {
		return netip.Addr{}, fmt.Errorf("family %q is not 4 or 6", fam)
	}
	if len(h) != 2*want {
		return netip.Addr{}, fmt.Errorf("address %q: want %d hex digits", h, 2*want)
	}
	if _, err := hex.Decode(buf[:want], []byte(h)); err != nil {
		return netip.Addr{}, fmt.Errorf("address %q: %w", h, err)
	}
	if hex.EncodeToString(buf[:want]) != h {
		// Upper case would name an address twice.
		return netip.Addr{}, fmt.Errorf("address %q: not lower-case hex", h)
	}
	if want == 4 {
		return netip.AddrFrom4([4]byte(buf[:4])), nil
	}
	return netip.AddrFrom16(buf), nil
}

// claimsPrefix is the prefix of every claim key.
func (k keys) claimsPrefix() string { return k.prefix + claimsDir }

// poolPrefix is the prefix of the claim keys of pool, ending in "/".
func (k keys) poolPrefix(pool string) string {
	return k.prefix + claimsDir + escape(pool) + "/"
}

// claim is the key of the claim of ip in pool.
func (k keys) claim(pool string, ip netip.Addr) string {
	return k.poolPrefix(pool) + addrSegment(ip)
}

// pool is the key of pool's record: its cursor as text, empty if it has
// none; its ModRevision is the pool's version (store.PoolVersioner). Every
// write of a claim of the pool puts it, so that the records list every pool
// that has had a claim (AddressClaims).
func (k keys) pool(pool string) string {
	return k.poolsPrefix() + escape(pool)
}

// poolsPrefix is the prefix of every pool record.
func (k keys) poolsPrefix() string { return k.prefix + poolsDir }

// parsePoolKey returns the pool named by a pool record's key.
func (k keys) parsePoolKey(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, k.poolsPrefix())
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", errBadKey
	}
	pool, err := unescape(rest)
	if err != nil {
		return "", fmt.Errorf("%w: pool %w", errBadKey, err)
	}
	return pool, nil
}

// identity is the prefix of the owner keys of one identity (q's Kind and
// ID), ending in "/".
func (k keys) identity(q store.OwnerQuery) string {
	return k.prefix + ownersDir + q.Kind.String() + "/" + escape(q.ID) + "/"
}

// owner is the key under identity q of the claim of ip in pool on interface
// iface.
func (k keys) owner(q store.OwnerQuery, iface, pool string, ip netip.Addr) string {
	fam, h, _ := strings.Cut(addrSegment(ip), "/")
	return k.identity(q) + fam + "/" + escape(iface) + "/" + escape(pool) + "/" + h
}

// owners returns the owner keys of c: one per identity of its owner.
func (k keys) owners(c store.Claim) []string {
	var out []string
	for q := range c.Owner.Identities {
		out = append(out, k.owner(q, c.Owner.Interface, c.Pool, c.IP))
	}
	return out
}

// heldRanges returns the key ranges [start, end) of the owner keys that would
// make CreateExclusive refuse c (store.Conflicts): under the primary identity
// of c's owner, of c's family, on c's interface and on none; or, for a claim
// without an interface, on every interface.
func (k keys) heldRanges(c store.Claim) [][2]string {
	q := c.Owner.Query()
	base := k.identity(q) + family(c.IP) + "/"
	if c.Owner.Interface == "" {
		return [][2]string{{base, prefixEnd(base)}}
	}
	on := base + escape(c.Owner.Interface) + "/"
	none := base + "/"
	return [][2]string{{on, prefixEnd(on)}, {none, prefixEnd(none)}}
}

// prefixEnd returns the end of the range of keys that start with p, which
// ends in "/": the same with the last byte incremented.
func prefixEnd(p string) string {
	return p[:len(p)-1] + string(p[len(p)-1]+1)
}

// errBadKey is wrapped by the errors of parseClaimKey and parseOwnerKey.
var errBadKey = errors.New("key not in the store's layout")

// parseClaimKey returns the pool and address of a claim key.
func (k keys) parseClaimKey(key string) (pool string, ip netip.Addr, err error) {
	rest, ok := strings.CutPrefix(key, k.prefix+claimsDir)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 3 {
		return "", netip.Addr{}, errBadKey
	}
	return parseTail(parts)
}

// parseOwnerKey returns the pool and address named by an owner key.
func (k keys) parseOwnerKey(key string) (pool string, ip netip.Addr, err error) {
	rest, ok := strings.CutPrefix(key, k.prefix+ownersDir)
	parts := strings.Split(rest, "/")
	if !ok || len(parts) != 6 {
		return "", netip.Addr{}, errBadKey
	}
	// kind, id, family, interface, pool, address
	return parseTail([]string{parts[4], parts[2], parts[5]})
}

// parseTail parses the pool, family and address segments of a key.
func parseTail(parts []string) (string, netip.Addr, error) {
	pool, err := unescape(parts[0])
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w: pool %w", errBadKey, err)
	}
	if pool == "" {
		return "", netip.Addr{}, fmt.Errorf("%w: pool is empty", errBadKey)
	}
	ip, err := parseAddrSegment(parts[1], parts[2])
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("%w: %w", errBadKey, err)
	}
	return pool, ip, nil
}
