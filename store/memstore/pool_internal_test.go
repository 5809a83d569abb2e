package memstore

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

// TestChunkKeys checks that a block's key survives the trip through its
// chunk's key and slot, at the ends of both families and at random, and that
// an IPv4 address and its IPv4-mapped IPv6 form never share a chunk.
func TestChunkKeys(t *testing.T) {
	ips := []netip.Addr{
		netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("255.255.255.255"),
		netip.MustParseAddr("10.0.1.255"),
		netip.MustParseAddr("::"),
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
		netip.MustParseAddr("::ffff:10.0.1.255"),
		netip.MustParseAddr("2001:db8::1:0:0:1ff"),
		netip.MustParseAddr("0:0:0:1ff::"), // a carry from lo into hi
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		var a [16]byte
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		ips = append(ips, netip.AddrFrom16(a), netip.AddrFrom4([4]byte(a[:4])))
	}
	for _, ip := range ips {
		k, slot := keyOf(ip)
		ck, i := chunkOf(k)
		if got := blockOf(ck, i); got != k {
			t.Fatalf("%s: block %x, through chunk %x slot %d back to %x", ip, k, ck, i, got)
		}
		if got := k.addr(slot); got != ip {
			t.Fatalf("%s: block %x slot %d is %s", ip, k, slot, got)
		}
		if ip.Is4() {
			mk, _ := keyOf(netip.AddrFrom16(ip.As16()))
			if mc, _ := chunkOf(mk); mc == ck {
				t.Fatalf("%s and its IPv4-mapped form share chunk %x", ip, ck)
			}
		}
	}
	// The blocks on either side of a chunk's boundary are in two chunks,
	// next to each other.
	below, _ := keyOf(netip.MustParseAddr("10.0.1.255"))
	above, _ := keyOf(netip.MustParseAddr("10.0.2.0"))
	cb, ib := chunkOf(below)
	ca, ia := chunkOf(above)
	if cb == ca || ib != chunkSize-1 || ia != 0 || ca.lo != cb.lo+1 {
		t.Errorf("blocks %x and %x: chunks %x slot %d and %x slot %d", below, above, cb, ib, ca, ia)
	}
}
