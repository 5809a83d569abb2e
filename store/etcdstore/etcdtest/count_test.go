package etcdtest_test

import (
	"net/netip"
	"testing"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/storetest"
)

// TestCount runs storetest.RunCount on real etcd, and checks that corrupt
// keys of a pool are counted, as they hold their addresses, while another
// pool's keys and a pool whose name extends this one's are not.
func TestCount(t *testing.T) {
	prefix := newPrefix(t)
	addrs := []netip.Addr{addr4(1), addr4(2), addr4(300), netip.MustParseAddr("2001:db8::1")}
	storetest.RunCount(t, func() store.Store { return open(t, single, prefix) }, "blue", addrs)

	s := open(t, single, prefix)
	cli := rawClient(t, single.Endpoints())
	ctx := t.Context()
	if _, err := s.Create(ctx, claimOf("blue", "10.0.0.1", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, claimOf("blue2", "10.0.0.2", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, claimKey(prefix, "blue", addr4(3)), "not json"); err != nil {
		t.Fatal(err)
	}
	n, err := s.Count(ctx, "blue")
	if err != nil || n != 2 {
		t.Fatalf("Count(blue) = %d, %v; want 2 (one claim, one corrupt key)", n, err)
	}
}
