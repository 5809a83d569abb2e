package etcdtest_test

import (
	"testing"

	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/storetest"
)

// TestConformance runs the store conformance suite against etcd: each check
// on a prefix of its own, each Store the Opener returns with a client of its
// own.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		prefix := newPrefix(t)
		return func() store.Store { return open(t, single, prefix) }
	})
}
