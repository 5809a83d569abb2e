// Package etcdtest runs etcd members inside the test process, on 127.0.0.1,
// for the tests of package etcdstore and of programs that use it: one member,
// or a cluster of several whose members a test stops and restarts.
//
// It is a module of its own, apart from etcdstore, because it imports the etcd
// server (go.etcd.io/etcd/server/v3/embed): users of etcdstore never compile
// the server, nor find it in their go.sum.
//
// Starting a member takes tens of milliseconds with the fast ticks it uses by
// default, and closing one up to a second or two: start one cluster per test
// package (in TestMain) and give each test a key prefix of its own. Members
// store their data in a directory the caller names, with fsync off: test
// data only.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options configure a cluster. The zero Options is one member with fast ticks
// and no TLS, its data in a new temporary directory.
type Options struct {
	// Members is the number of members. Zero means one.
	Members int
	// Dir is where the members keep their data, one subdirectory each. Empty
	// means a new temporary directory, removed by Close.
	Dir string
	// TickMs and ElectionMs are the members' heartbeat interval and election
	// timeout in milliseconds. Zero means 10 and 100: fast starts and fast
	// elections. ElectionMs must be at least 5 times TickMs.
	TickMs, ElectionMs uint
	// TLS, if set, makes the members serve clients over TLS only.
	TLS *TLS
	// CompactEvery, if set, makes the members compact their history every
	// so often, keeping that much of it (etcd's periodic
	// auto-compaction). Zero keeps every revision.
	CompactEvery time.Duration
}

// TLS is how members serve their clients over TLS: PEM files of the server
// certificate and key, and of the certificate authorities that client
// certificates are checked against when ClientCertAuth is set.
type TLS struct {
	CertFile, KeyFile, TrustedCAFile string
	// ClientCertAuth refuses clients without a certificate signed by one
	// of TrustedCAFile's authorities.
	ClientCertAuth bool
}

// Cluster is a set of etcd members in this process. Its methods are safe for
// concurrent use.
type Cluster struct {
	Members []*Member
	tempDir string // removed by Close
}

// Member is one etcd member of a Cluster, running or stopped. Its methods are
// safe for concurrent use.
type Member struct {
	Name      string
	clientURL url.URL
	peerURL   url.URL
	newConfig func() *embed.Config

	mu      sync.Mutex
	e       *embed.Etcd    // nil while stopped
	closing sync.WaitGroup // Close calls of killed servers
}

// Start starts a cluster and waits until every member is ready (a leader is
// elected and every member has joined).
func Start(opts Options) (*Cluster, error) {
	n := max(opts.Members, 1)
	tick, election := opts.TickMs, opts.ElectionMs
	if tick == 0 {
		tick = 10
	}
	if election == 0 {
		election = 10 * tick
	}
	c := &Cluster{}
	dir := opts.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "etcdtest-"); err != nil {
			return nil, err
		}
		c.tempDir = dir
	}
	scheme := "http"
	if opts.TLS != nil {
		scheme = "https"
	}
	var initial []string
	for i := range n {
		m := &Member{Name: fmt.Sprintf("m%d", i)}
		cu, err := freeAddr()
		if err != nil {
			return nil, err
		}
		pu, err := freeAddr()
		if err != nil {
			return nil, err
		}
		m.clientURL = url.URL{Scheme: scheme, Host: cu}
		m.peerURL = url.URL{Scheme: "http", Host: pu}
		initial = append(initial, m.Name+"="+m.peerURL.String())
		c.Members = append(c.Members, m)
	}
	for _, m := range c.Members {
		m.newConfig = func() *embed.Config {
			cfg := embed.NewConfig()
			cfg.Name, cfg.Dir = m.Name, filepath.Join(dir, m.Name)
			cfg.UnsafeNoFsync = true // test data only
			cfg.TickMs, cfg.ElectionMs = tick, election
			// Snapshot often, so that a restart replays a short log.
			cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = 2000, 1000
			if opts.CompactEvery > 0 {
				cfg.AutoCompactionMode = "periodic"
				cfg.AutoCompactionRetention = opts.CompactEvery.String()
			}
			cfg.Logger = "zap"
			cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{m.clientURL}, []url.URL{m.clientURL}
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{m.peerURL}, []url.URL{m.peerURL}
			cfg.InitialCluster = strings.Join(initial, ",")
			cfg.InitialClusterToken = "etcdtest"
			cfg.ClusterState = embed.ClusterStateFlagNew
			if opts.TLS != nil {
				cfg.ClientTLSInfo = transport.TLSInfo{
					CertFile:       opts.TLS.CertFile,
					KeyFile:        opts.TLS.KeyFile,
					TrustedCAFile:  opts.TLS.TrustedCAFile,
					ClientCertAuth: opts.TLS.ClientCertAuth,
				}
			}
			return cfg
		}
	}
	// One after another, not at once: a member that has bound its peer port
	// but does not serve yet makes the next one wait a second per peer.
	for _, m := range c.Members {
		if err := m.start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitReady(); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// freeAddr returns a free port on 127.0.0.1 as host:port. Another process
// may take it before the member binds it; start tries again then.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startTimeout bounds how long a member may take to become ready.
const startTimeout = 30 * time.Second

// start starts m's server, without waiting for it to be ready. Binding the
// ports is tried again for a while: a port this process just closed, or
// that another took for a moment, can be busy.
func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.e != nil {
		return fmt.Errorf("member %s: already running", m.Name)
	}
	var err error
	for try := 0; try < 50; try++ {
		var e *embed.Etcd
		if e, err = embed.StartEtcd(m.newConfig()); err == nil {
			m.e = e
			return nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("member %s: start: %w", m.Name, err)
}

// waitReady waits until m serves clients.
func (m *Member) waitReady() error {
	m.mu.Lock()
	e := m.e
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("member %s: not running", m.Name)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("member %s: %w", m.Name, err)
	case <-time.After(startTimeout):
		return fmt.Errorf("member %s: not ready after %s", m.Name, startTimeout)
	}
}

// Endpoints returns the client URLs of every member, running or not.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL())
	}
	return eps
}

// Leader returns the running member that is the leader, or nil if none is.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Members {
		if m.IsLeader() {
			return m
		}
	}
	return nil
}

// WaitLeader waits until a running member is the leader and every running
// member knows it, for at most timeout, and returns it.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Member, error) {
	deadline := time.Now().Add(timeout)
	for {
		if l := c.Leader(); l != nil && c.agree(l) {
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader after %s", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// agree reports whether every running member names l as the leader.
func (c *Cluster) agree(l *Member) bool {
	l.mu.Lock()
	id := l.e.Server.MemberID()
	l.mu.Unlock()
	for _, m := range c.Members {
		m.mu.Lock()
		ok := m.e == nil || m.e.Server.Leader() == id
		m.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// Close stops every member and removes the data directory if Start made
// it.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		wg.Go(m.Close)
	}
	wg.Wait()
	if c.tempDir != "" {
		os.RemoveAll(c.tempDir)
	}
}

// ClientURL returns the member's client URL.
func (m *Member) ClientURL() string { return m.clientURL.String() }

// Running reports whether the member is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil
}

// IsLeader reports whether the member is running and is the leader.
func (m *Member) IsLeader() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID()
}

// Kill stops the member at once, without handing over leadership or
// finishing its requests: the nearest thing to a crash in one process. Its
// data stays for Restart. Killing a stopped member does nothing.
//
// Kill returns once the server has stopped and its ports are closed, so
// that Restart can have them again at once. Its connections are closed in
// the background: the server waits up to a second for its peers to hang up,
// and up to its request timeout (about 5 s) for streams such as watches to
// end; meanwhile, what clients send on them fails, as the server has
// stopped.
func (m *Member) Kill() {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e == nil {
		return
	}
	e.Server.HardStop()
	for _, l := range e.Clients {
		l.Close()
	}
	for _, p := range e.Peers {
		p.Listener.Close()
	}
	m.closing.Go(e.Close)
}

// Close stops the member gracefully, handing over leadership if it leads,
// and waits until its listeners are closed. Closing a stopped member only
// waits for that.
func (m *Member) Close() {
	m.mu.Lock()
	e := m.e
	m.e = nil
	m.mu.Unlock()
	if e != nil {
		e.Close()
	}
	m.closing.Wait()
}

// Restart starts a stopped member again on its data and its ports, and
// waits until it serves clients (which needs a quorum).
func (m *Member) Restart() error {
	if err := m.start(); err != nil {
		return err
	}
	return m.waitReady()
}
