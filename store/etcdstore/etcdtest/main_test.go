package etcdtest_test

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	defer trioCluster.close()
	defer benchCluster.close()
	defer durableCluster.close()
	defer removePlugin()
	return m.Run()
}

// sharedCluster is a cluster that the first test to ask for it starts,
// and TestMain closes.
type sharedCluster struct {
	opts etcdtest.Options
	once sync.Once
	c    *etcdtest.Cluster
	err  error
}

// get returns the cluster, started if need be, with every member running
// and a leader.
func (s *sharedCluster) get(t testing.TB) *etcdtest.Cluster {
	t.Helper()
	s.once.Do(func() { s.c, s.err = etcdtest.Start(s.opts) })
	if s.err != nil {
		t.Fatalf("starting a %d-member cluster: %v", s.opts.Members, s.err)
	}
	for _, m := range s.c.Members {
		if !m.Running() {
			if err := m.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.c.WaitLeader(leaderWait); err != nil {
		t.Fatal(err)
	}
	return s.c
}

func (s *sharedCluster) close() {
	if s.c != nil {
		s.c.Close()
	}
}

// leaderWait bounds the tests' waits for a cluster to agree on a leader:
// seconds on an idle machine, but much more on a loaded one, where members
// that miss their heartbeats hold elections again.
const leaderWait = time.Minute

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
	return openAt(t, c.Endpoints(), prefix)
}

// openAt returns a Store on endpoints under prefix, with a client of its
// own, closed when t ends.
func openAt(t testing.TB, endpoints []string, prefix string) *etcdstore.Store {
	t.Helper()
	s, err := etcdstore.New(etcdstore.Options{Endpoints: endpoints, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
