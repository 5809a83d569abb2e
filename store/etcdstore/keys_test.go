package etcdstore

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ipamkit/ipam/store"
)

func TestEscape(t *testing.T) {
	for _, s := range []string{"blue", "", "a/b", "%", "%2F", "a%/b//", "ns/name", "ünïcode"} {
		e := escape(s)
		if strings.Contains(e, "/") {
			t.Errorf("escape(%q) = %q contains a slash", s, e)
		}
		got, err := unescape(e)
		if err != nil || got != s {
			t.Errorf("unescape(escape(%q) = %q) = %q, %v", s, e, got, err)
		}
	}
	for _, bad := range []string{"%", "%2", "%41", "a%zz"} {
		if got, err := unescape(bad); err == nil {
			t.Errorf("unescape(%q) = %q, want an error", bad, got)
		}
	}
}

// Key order is address order within a family, IPv4 first.
func TestClaimKeyOrder(t *testing.T) {
	k := keys{prefix: "/p/"}
	addrs := []string{"0.0.0.0", "9.255.255.255", "10.0.0.1", "10.0.0.2", "10.0.1.0", "255.255.255.255",
		"::", "::ffff:10.0.0.1", "2001:db8::1", "2001:db8::10", "fe80::1", "ffff::"}
	var ks []string
	for _, a := range addrs {
		ks = append(ks, k.claim("blue", netip.MustParseAddr(a)))
	}
	if !slices.IsSorted(ks) {
		t.Errorf("claim keys are not in address order:\n%s", strings.Join(ks, "\n"))
	}
	for i, key := range ks {
		pool, ip, err := k.parseClaimKey(key)
		if err != nil || pool != "blue" || ip != netip.MustParseAddr(addrs[i]) {
			t.Errorf("parseClaimKey(%q) = %q, %v, %v; want blue, %s", key, pool, ip, err, addrs[i])
		}
	}
}

// A pool's keys never fall under the prefix of a pool whose name it starts
// with, nor under a pool whose name contains a slash.
func TestPoolPrefixes(t *testing.T) {
	k := keys{prefix: "/p/"}
	ip := netip.MustParseAddr("10.0.0.1")
	pools := []string{"p1", "p10", "p1/0", "p1%", "p1-", "p"}
	for _, a := range pools {
		for _, b := range pools {
			if a != b && strings.HasPrefix(k.claim(b, ip), k.poolPrefix(a)) {
				t.Errorf("claim key %q of pool %q is under the prefix %q of pool %q", k.claim(b, ip), b, k.poolPrefix(a), a)
			}
		}
		pool, _, err := k.parseClaimKey(k.claim(a, ip))
		if err != nil || pool != a {
			t.Errorf("parseClaimKey(claim(%q)) = %q, %v", a, pool, err)
		}
	}
}

func TestParseClaimKeyBad(t *testing.T) {
	k := keys{prefix: "/p/"}
	for _, key := range []string{
		"/q/claims/blue/4/0a000001",   // another prefix
		"/p/claims/blue/4/0a00001",    // short
		"/p/claims/blue/4/0a0000011",  // long
		"/p/claims/blue/6/0a000001",   // IPv6 with 8 digits
		"/p/claims/blue/5/0a000001",   // no such family
		"/p/claims/blue/4/0a0000zz",   // not hex
		"/p/claims//4/0a000001",       // no pool
		"/p/claims/bl%ue/4/0a000001",  // bad escape
		"/p/claims/blue/x/4/0a000001", // extra segment
		"/p/claims/blue/4/0a000001/x", // extra segment
		"/p/claims/blue",              // no address
		"/p/pools/blue",               // not a claim
		"/p/claims/blue/4/0A000001",   // upper case: a second key for 10.0.0.1
	} {
		if pool, ip, err := k.parseClaimKey(key); !errors.Is(err, errBadKey) {
			t.Errorf("parseClaimKey(%q) = %q, %v, %v; want an error wrapping errBadKey", key, pool, ip, err)
		}
	}
}

// The owner key ranges that CreateExclusive compares cover exactly the owner
// keys of the claims store.Conflicts names.
func TestHeldRanges(t *testing.T) {
	k := keys{prefix: "/p/"}
	pod := store.Owner{Namespace: "ns", Name: "web-0", UID: "u1", ContainerID: "c1"}
	stable := store.Owner{Namespace: "ns", Name: "db-0", UID: "u2", ContainerID: "c2", Stable: true}
	on := func(o store.Owner, iface string) store.Owner { o.Interface = iface; return o }
	var held []store.Claim
	for _, o := range []store.Owner{pod, stable, {ContainerID: "c3"}} {
		for _, iface := range []string{"", "eth0", "eth0/x", "eth", "eth00", "net1"} {
			for _, ip := range []string{"10.0.0.1", "2001:db8::1", "::ffff:10.0.0.2"} {
				for _, pool := range []string{"blue", "b/lue"} {
					held = append(held, store.Claim{Pool: pool, IP: netip.MustParseAddr(ip), Owner: on(o, iface)})
				}
			}
		}
	}
	for _, c := range held {
		in := func(key string) bool {
			for _, r := range k.heldRanges(c) {
				if r[0] <= key && key < r[1] {
					return true
				}
			}
			return false
		}
		for _, h := range held {
			// Of h's owner keys, the one under c's primary identity (if
			// h's owner has it) must be in a range exactly when h
			// conflicts with c.
			var found bool
			for _, key := range k.owners(h) {
				if in(key) {
					found = true
				}
			}
			if want := store.Conflicts(c, h); found != want {
				t.Errorf("claim %s of %s for a new %s of %s: in a held range %t, store.Conflicts %t",
					h.Key(), h.Owner, c.Key(), c.Owner, found, want)
			}
		}
	}
}

func TestParseOwnerKey(t *testing.T) {
	k := keys{prefix: "/p/"}
	c := store.Claim{Pool: "b/lue", IP: netip.MustParseAddr("2001:db8::7"),
		Owner: store.Owner{Namespace: "n/s", Name: "x", UID: "u", ContainerID: "c", Interface: "e/th0", Stable: true}}
	ks := k.owners(c)
	if len(ks) != 3 {
		t.Fatalf("owners(%+v) = %q, want 3 keys (uid, name, container)", c, ks)
	}
	for _, key := range ks {
		pool, ip, err := k.parseOwnerKey(key)
		if err != nil || pool != c.Pool || ip != c.IP {
			t.Errorf("parseOwnerKey(%q) = %q, %v, %v; want %q, %v", key, pool, ip, err, c.Pool, c.IP)
		}
	}
}

// FuzzKeys: escaping round-trips and never leaves a "/", and parsing any key
// never panics and gives back what a claim key was built from.
func FuzzKeys(f *testing.F) {
	f.Add("blue", "10.0.0.1", "/p/claims/blue/4/0a000001")
	f.Add("a/b%c", "2001:db8::1", "/p/claims/a%2Fb%25c/6/20010db8000000000000000000000001")
	f.Add("", "::ffff:1.2.3.4", "/p/owners/uid/u/4/eth0/blue/0a000001")
	f.Fuzz(func(t *testing.T, pool, addr, key string) {
		k := keys{prefix: "/p/"}
		e := escape(pool)
		if strings.Contains(e, "/") {
			t.Fatalf("escape(%q) = %q", pool, e)
		}
		if got, err := unescape(e); err != nil || got != pool {
			t.Fatalf("unescape(escape(%q)) = %q, %v", pool, got, err)
		}
		k.parseClaimKey(key) // must not panic
		k.parseOwnerKey(key)
		ip, err := netip.ParseAddr(addr)
		if err != nil || ip.Zone() != "" || pool == "" {
			return
		}
		gotPool, gotIP, err := k.parseClaimKey(k.claim(pool, ip))
		if err != nil || gotPool != pool || gotIP != ip {
			t.Fatalf("parseClaimKey(claim(%q, %s)) = %q, %s, %v", pool, ip, gotPool, gotIP, err)
		}
	})
}
