// Package etcdtest runs etcd members on 127.0.0.1, inside the test process
// or each in a child process of its own, for the tests of package etcdstore
// and of programs that use it: one member, or a cluster of several whose
// members a test stops and restarts.
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
//
// With Options.Processes, each member runs in a child process: the test
// binary run again (os.Executable) with the environment variable
// ETCDTEST_MEMBER set to the member's settings. This package's init notices
// the variable and runs the member instead of the program, so the test
// binary needs no wiring: init runs before TestMain and main. Killing such a
// member is a real crash (SIGKILL). A member's process exits when the
// process that started it does.
package etcdtest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	// Processes runs each member in a child process of its own (see the
	// package comment), rather than in this one: Member.Kill kills it with
	// SIGKILL, a real crash, where in this process it can only stop the
	// server at once, which etcd does not always survive (a watch may read
	// the closed backend and panic: etcd-io/etcd#14256, #17223). Starting
	// and restarting members is slower, and the leader is found by asking
	// the members over their client ports. It cannot be used with TLS.
	Processes bool
	// Fsync makes members sync their write-ahead log and database to disk
	// before they acknowledge a write, as members in production do. By
	// default they do not (etcd's UnsafeNoFsync): tests need no durability
	// across a crash of the machine, and run faster without it.
	Fsync bool
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

// Cluster is a set of etcd members, in this process or in child processes.
// Its methods are safe for concurrent use.
type Cluster struct {
	Members []*Member
	tempDir string           // removed by Close
	status  *clientv3.Client // with Processes: asks members their status
}

// Member is one etcd member of a Cluster, running or stopped. Its methods are
// safe for concurrent use.
type Member struct {
	Name      string
	clientURL url.URL
	peerURL   url.URL
	settings  memberSettings
	tls       *TLS
	// status, with Options.Processes, asks members their status; nil
	// when members run in this process.
	status *clientv3.Client

	mu      sync.Mutex
	e       *embed.Etcd    // nil while stopped, or with Processes
	p       *process       // with Processes: nil while stopped
	closing sync.WaitGroup // Close calls of killed servers
}

// memberSettings are a member's configuration: everything of its
// embed.Config that this package sets but TLS. A member in a child process
// gets them as JSON.
type memberSettings struct {
	Name, Dir                             string
	ClientURL, PeerURL                    string
	InitialCluster                        string
	TickMs, ElectionMs                    uint
	CompactEvery                          time.Duration
	SnapshotCount, SnapshotCatchUpEntries uint64
	Fsync                                 bool
}

// config returns the embed.Config of the member that s describes.
func (s *memberSettings) config() (*embed.Config, error) {
	cu, err := url.Parse(s.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("member %s: client URL: %w", s.Name, err)
	}
	pu, err := url.Parse(s.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("member %s: peer URL: %w", s.Name, err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = s.Name, s.Dir
	cfg.UnsafeNoFsync = !s.Fsync // without Fsync: test data only
	cfg.TickMs, cfg.ElectionMs = s.TickMs, s.ElectionMs
	cfg.SnapshotCount, cfg.SnapshotCatchUpEntries = s.SnapshotCount, s.SnapshotCatchUpEntries
	if s.CompactEvery > 0 {
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = s.CompactEvery.String()
	}
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = s.InitialCluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.ClusterState = embed.ClusterStateFlagNew
	return cfg, nil
}

// newConfig returns m's embed.Config.
func (m *Member) newConfig() (*embed.Config, error) {
	cfg, err := m.settings.config()
	if err != nil {
		return nil, err
	}
	if m.tls != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       m.tls.CertFile,
			KeyFile:        m.tls.KeyFile,
			TrustedCAFile:  m.tls.TrustedCAFile,
			ClientCertAuth: m.tls.ClientCertAuth,
		}
	}
	return cfg, nil
}

// Start starts a cluster and waits until every member is ready (a leader is
// elected and every member has joined).
func Start(opts Options) (*Cluster, error) {
	if opts.Processes && opts.TLS != nil {
		// The members would serve over TLS, but asking them their status
		// needs a client that trusts them, and maybe a client
		// certificate: etcdtest has neither.
		return nil, errors.New("etcdtest: Options.Processes and Options.TLS cannot be used together")
	}
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
		m.settings = memberSettings{
			Name:           m.Name,
			Dir:            filepath.Join(dir, m.Name),
			ClientURL:      m.clientURL.String(),
			PeerURL:        m.peerURL.String(),
			InitialCluster: strings.Join(initial, ","),
			TickMs:         tick,
			ElectionMs:     election,
			CompactEvery:   opts.CompactEvery,
			Fsync:          opts.Fsync,
			// Snapshot often, so that a restart replays a short log.
			SnapshotCount:          2000,
			SnapshotCatchUpEntries: 1000,
		}
		m.tls = opts.TLS
	}
	if opts.Processes {
		cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), Logger: zap.NewNop()})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("etcdtest: status client: %w", err)
		}
		c.status = cli
		for _, m := range c.Members {
			m.status = cli
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

// startTimeout bounds how long a member may take to become ready: a
// restart that waits for a quorum took 18 s on a 2-CPU machine loaded by
// other builds and tests.
const startTimeout = 2 * time.Minute

// start starts m's server, or its process, without waiting for it to be
// ready. Binding the ports is tried again for a while: a port this process
// just closed, or that another took for a moment, can be busy.
func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status != nil {
		if m.p != nil && !m.p.exited() {
			return fmt.Errorf("member %s: already running", m.Name)
		}
		p, err := m.startProcess()
		if err != nil {
			return err
		}
		m.p = p
		return nil
	}
	if m.e != nil {
		return fmt.Errorf("member %s: already running", m.Name)
	}
	e, err := startEmbed(m.newConfig)
	if err != nil {
		return fmt.Errorf("member %s: start: %w", m.Name, err)
	}
	m.e = e
	return nil
}

// waitReady waits until m serves clients.
func (m *Member) waitReady() error {
	m.mu.Lock()
	e, p := m.e, m.p
	m.mu.Unlock()
	if p != nil {
		return m.waitProcessReady(p)
	}
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
	if c.status != nil {
		return c.agreeProcesses(l)
	}
	l.mu.Lock()
	if l.e == nil { // killed since
		l.mu.Unlock()
		return false
	}
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

// agreeProcesses is agree for members in child processes: it asks each
// member whom it knows as the leader.
func (c *Cluster) agreeProcesses(l *Member) bool {
	st := l.processStatus()
	if st == nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
		return false
	}
	for _, m := range c.Members {
		if m == l || !m.Running() {
			continue
		}
		// A member killed meanwhile does not answer: WaitLeader asks
		// again.
		if s := m.processStatus(); s == nil || s.Leader != st.Leader {
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
	if c.status != nil {
		c.status.Close()
	}
	if c.tempDir != "" {
		os.RemoveAll(c.tempDir)
	}
}

// ClientURL returns the member's client URL.
func (m *Member) ClientURL() string { return m.clientURL.String() }

// Running reports whether the member is running: started and not stopped
// since, and with Options.Processes, its process has not exited.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.p != nil {
		return !m.p.exited()
	}
	return m.e != nil
}

// IsLeader reports whether the member is running and is the leader. With
// Options.Processes it asks the member, and reports false if it does not
// answer within a second.
func (m *Member) IsLeader() bool {
	if m.status != nil {
		st := m.processStatus()
		return st != nil && st.Leader != 0 && st.Leader == st.Header.MemberId
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.e != nil && m.e.Server.Leader() == m.e.Server.MemberID()
}

// Kill stops the member at once, without handing over leadership or
// finishing its requests: the nearest thing to a crash in one process. Its
// data stays for Restart. Killing a stopped member does nothing.
//
// In this process, Kill returns once the server has stopped and its ports
// are closed, so that Restart can have them again at once. Its connections
// are closed in the background: the server waits up to a second for its
// peers to hang up, and up to its request timeout (about 5 s) for streams
// such as watches to end; meanwhile, what clients send on them fails, as
// the server has stopped.
//
// With Options.Processes, Kill kills the member's process with SIGKILL, a
// real crash, and returns once it has exited: its connections are closed
// then, and its ports free.
func (m *Member) Kill() {
	m.mu.Lock()
	e, p := m.e, m.p
	m.e, m.p = nil, nil
	m.mu.Unlock()
	if p != nil {
		p.kill()
		return
	}
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
//
// With Options.Processes, Close sends the member's process SIGTERM and
// waits until it has exited; if it takes more than 10 s, it kills it.
// Close reports on os.Stderr a process that did not exit cleanly.
func (m *Member) Close() {
	m.mu.Lock()
	e, p := m.e, m.p
	m.e, m.p = nil, nil
	m.mu.Unlock()
	if p != nil {
		p.close(m.Name)
	}
	if e != nil {
		e.Close()
	}
	m.closing.Wait()
}

// Restart starts a stopped member again on its data and its ports, and
// waits until it serves clients (which needs a quorum). With
// Options.Processes, it starts a new process.
func (m *Member) Restart() error {
	if err := m.start(); err != nil {
		return err
	}
	return m.waitReady()
}
