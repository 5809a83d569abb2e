package memstore_test

import (
	"net/netip"
	"testing"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/memstore"
	"github.com/ipamkit/ipam/store/storetest"
)

func TestCount(t *testing.T) {
	s := memstore.New()
	addrs := []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"),
		netip.MustParseAddr("10.0.1.200"), netip.MustParseAddr("fe80::1%eth0"), netip.MustParseAddr("2001:db8::1")}
	storetest.RunCount(t, func() store.Store { return s.Open() }, "blue", addrs)
}
