package etcdtest_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/ipamkit/ipam/store/etcdstore"
	"github.com/ipamkit/ipam/store/etcdstore/etcdtest"
)

// single is the one-member cluster the tests of this package share.
var single *etcdtest.Cluster

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if isChild() {
		return m.Run()
	}
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting etcd:", err)
		return 1
	}
	defer c.Close()
	single = c
	return m.Run()
}

// prefixes numbers the key prefixes handed out by newPrefix.
var prefixes atomic.Int64

// newPrefix returns a key prefix no other test of this process uses.
func newPrefix(t testing.TB) string {
	return fmt.Sprintf("/test/%s/%d/", t.Name(), prefixes.Add(1))
}

// open returns a Store on c under prefix, with a client of its own, closed
// when t ends.
func open(t testing.TB, c *etcdtest.Cluster, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(etcdstore.Options{Endpoints: c.Endpoints(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
