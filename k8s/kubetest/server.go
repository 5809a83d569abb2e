package kubetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/klog/v2"
)

// Options configure Start. The zero Options are the usual ones.
type Options struct {
	// Log receives the API server's log (klog, which is global to the
	// process: Start redirects it). Nil discards it.
	Log io.Writer
	// Tokens, when set, authenticates requests that carry a bearer
	// token: it returns the user name a token stands for, or false for a
	// token the server must refuse (401), such as an expired one. Requests
	// without a token stay allowed, as anonymous. Nil: no authentication,
	// tokens are ignored.
	Tokens func(token string) (user string, ok bool)
}

// etcdPrefix is where the API server keeps its objects in etcd.
const etcdPrefix = "/kubetest"

// Timeouts of the harness's own waits.
const (
	healthTimeout  = 60 * time.Second
	stopTimeout    = 60 * time.Second
	rebindTimeout  = 10 * time.Second
	pollInterval   = 10 * time.Millisecond
	requestTimeout = 5 * time.Second
)

// Server is an API server and the etcd that holds its data, both in this
// process and listening on 127.0.0.1 only. The API server can be stopped and
// started again (StopAPI, StartAPI) on the same address, with the same
// certificate and data, while etcd keeps running.
//
// A Server is safe for concurrent use by multiple goroutines. Create one
// with Start; the zero Server is not usable.
type Server struct {
	dir      string
	etcd     *embed.Etcd
	etcdURL  string
	addr     string // host:port of the API server, fixed at Start
	certFile string
	caData   []byte
	tokens   func(string) (string, bool)
	log      requestLog

	mu     sync.Mutex
	api    *apiServer // nil while the API server is stopped
	closed bool

	requests requestCounts
}

// apiServer is one run of the API server.
type apiServer struct {
	ln      *cutListener
	cancel  context.CancelFunc
	done    chan error // receives RunWithContext's result
	destroy []func()   // releases the built-in kinds' storage
}

// Start starts etcd and the API server, and returns when the API server
// answers /healthz. Call Close when done, even if a test failed.
func Start(opts Options) (*Server, error) {
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	klog.LogToStderr(false)
	klog.SetOutput(log)

	dir, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s := &Server{dir: dir, tokens: opts.Tokens}
	s.etcd, s.etcdURL, err = startEtcd(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s.addr = ln.Addr().String()
	if err := s.startAPI(ln); err != nil {
		s.Close()
		return nil, err
	}
	if s.caData, err = os.ReadFile(s.certFile); err != nil {
		s.Close()
		return nil, fmt.Errorf("kubetest: reading the serving certificate: %w", err)
	}
	if err := s.waitHealthy(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Config returns a new client config for the API server: HTTPS to its
// address, trusting its self-signed certificate, without credentials (the
// server authorizes every request) and without client-side rate limits
// (QPS -1). It stays valid across StopAPI and StartAPI. The caller may
// change the copy it gets.
func (s *Server) Config() *rest.Config {
	return &rest.Config{
		Host:            "https://" + s.addr,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), s.caData...)},
		QPS:             -1,
		UserAgent:       "kubetest",
	}
}

// Addr returns the API server's host:port, the same for its whole life.
func (s *Server) Addr() string { return s.addr }

// EtcdURL returns the client URL of the etcd that holds the API server's
// data, for tests that look beneath the API.
func (s *Server) EtcdURL() string { return s.etcdURL }

// StopAPI stops the API server as if it crashed: its connections are cut
// (open watches included) and it stops listening; etcd and its data stay.
// Clients then fail to connect until StartAPI. Stopping a stopped server
// does nothing.
func (s *Server) StopAPI() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopAPILocked()
}

func (s *Server) stopAPILocked() error {
	a := s.api
	if a == nil {
		return nil
	}
	s.api = nil
	a.cancel()
	a.ln.cutAll()
	var err error
	select {
	case err = <-a.done:
	case <-time.After(stopTimeout):
		err = fmt.Errorf("kubetest: the API server did not stop within %s", stopTimeout)
	}
	for _, d := range a.destroy {
		d()
	}
	return err
}

// StartAPI starts the API server again, on the same address and with the
// same certificate, after StopAPI, and returns when it answers /healthz.
// Custom resource definitions and objects are kept in etcd and served again.
// Starting a running server does nothing.
func (s *Server) StartAPI() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("kubetest: the server is closed")
	}
	if s.api != nil {
		s.mu.Unlock()
		return nil
	}
	ln, err := listenAgain(s.addr)
	if err == nil {
		err = s.startAPILocked(ln)
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.waitHealthy()
}

// listenAgain listens on addr, which the stopped API server held, retrying
// while the port is not yet released.
func listenAgain(addr string) (net.Listener, error) {
	deadline := time.Now().Add(rebindTimeout)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				err = fmt.Errorf("kubetest: listening on %s again: %w", addr, err)
			}
			return ln, err
		}
		time.Sleep(pollInterval)
	}
}

// Close stops the API server, then etcd (in that order: an API server left
// running would keep redialling etcd), and removes their data.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stopAPILocked()
	if s.etcd != nil {
		s.etcd.Close()
	}
	return errors.Join(err, os.RemoveAll(s.dir))
}

func (s *Server) startAPI(ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startAPILocked(ln)
}

// startAPILocked builds and runs an API server on ln: the apiextensions
// server with the built-in kinds installed beside it.
func (s *Server) startAPILocked(ln net.Listener) error {
	o := options.NewCustomResourceDefinitionsServerOptions(io.Discard, io.Discard)
	// A registry of its own, so that servers started one after another (or
	// side by side) do not share feature gates and versions.
	reg := basecompatibility.NewComponentGlobalsRegistry()
	if err := reg.Register(basecompatibility.DefaultKubeComponent,
		compatibility.DefaultKubeEffectiveVersionForTest(),
		utilfeature.DefaultMutableFeatureGate.DeepCopy()); err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := reg.Set(); err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	o.ServerRunOptions.ComponentGlobalsRegistry = reg

	cut := newCutListener(ln)
	ro := o.RecommendedOptions
	ro.Etcd.StorageConfig.Transport.ServerList = []string{s.etcdURL}
	ro.Etcd.StorageConfig.Prefix = etcdPrefix
	ro.SecureServing.Listener = cut
	ro.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	ro.SecureServing.ServerCert.CertDirectory = filepath.Join(s.dir, "certs") // kept across restarts
	ro.Authentication, ro.Authorization, ro.Admission = nil, nil, nil         // allow everything, no webhooks
	ro.Features.EnablePriorityAndFairness = false
	kubeconfig, err := s.deadKubeconfig()
	if err != nil {
		ln.Close()
		return err
	}
	ro.CoreAPI.CoreAPIKubeconfigPath = kubeconfig

	if err := o.Complete(); err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	if err := o.Validate(); err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	cfg, err := o.Config()
	if err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	s.certFile = ro.SecureServing.ServerCert.CertKey.CertFile
	groups, err := builtinGroups()
	if err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	stubOpenAPI(cfg.GenericConfig.OpenAPIV3Config, groups)
	if s.tokens != nil {
		var loopback string
		if lc := cfg.GenericConfig.LoopbackClientConfig; lc != nil {
			loopback = lc.BearerToken
		}
		cfg.GenericConfig.Authentication.Authenticator = tokenAuthenticator(s.tokens, loopback)
	}
	cfg.GenericConfig.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return genericapiserver.DefaultBuildHandlerChain(s.recording(s.requests.count(h)), c)
	}
	srv, err := cfg.Complete().New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		ln.Close()
		return fmt.Errorf("kubetest: %w", err)
	}
	a := &apiServer{ln: cut, done: make(chan error, 1)}
	for _, g := range groups {
		d, err := g.install(srv.GenericAPIServer, s.etcdURL, etcdPrefix)
		a.destroy = append(a.destroy, d...)
		if err != nil {
			for _, d := range a.destroy {
				d()
			}
			ln.Close()
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	prepared := srv.GenericAPIServer.PrepareRun()
	go func() { a.done <- prepared.RunWithContext(ctx) }()
	s.api = a
	return nil
}

// deadKubeconfig writes, once, a kubeconfig that points nowhere: the
// apiextensions server wants one for the core API it would watch Services
// in, and needs none of it here.
func (s *Server) deadKubeconfig() (string, error) {
	path := filepath.Join(s.dir, "kubeconfig")
	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster:
    server: http://127.0.0.1:1
  name: none
contexts:
- context:
    cluster: none
    user: none
  name: none
current-context: none
users:
- name: none
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		return "", fmt.Errorf("kubetest: %w", err)
	}
	return path, nil
}

// waitHealthy polls /healthz until it answers 200. (/readyz never does: its
// informer-sync check waits for a core API this server does not have.)
func (s *Server) waitHealthy() error {
	client, err := rest.HTTPClientFor(s.Config())
	if err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(healthTimeout)
	url := "https://" + s.addr + "/healthz"
	var last error
	for time.Now().Before(deadline) {
		s.mu.Lock()
		a := s.api
		s.mu.Unlock()
		if a == nil {
			return errors.New("kubetest: the API server was stopped while starting")
		}
		select {
		case err := <-a.done:
			a.done <- err // for stopAPILocked
			return fmt.Errorf("kubetest: the API server stopped while starting: %w", err)
		default:
		}
		if last = healthz(client, url); last == nil {
			return nil
		}
		time.Sleep(pollInterval)
	}
	return fmt.Errorf("kubetest: the API server is not healthy after %s: %w", healthTimeout, last)
}

func healthz(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz: %s: %s", strconv.Itoa(resp.StatusCode), body)
	}
	return nil
}

// Kubeconfig returns a kubeconfig file for the API server, with the same
// address and trust as Config, for programs a test runs in another process
// (a CNI plugin, ipamctl) or that read one.
func (s *Server) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: "https://" + s.addr, CertificateAuthorityData: s.caData}
	cfg.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	cfg.CurrentContext = "kubetest"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	return b, nil
}
