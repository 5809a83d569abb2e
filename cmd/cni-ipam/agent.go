//go:build kubernetes

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/cmd/internal/buildinfo"
	"github.com/ipamkit/ipam/cmd/internal/kubeconfig"
	"github.com/ipamkit/ipam/k8s/kubeclient"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// The node agent: "cni-ipam agent --node $NODE_NAME", a long-lived process
// on each node that serves the CNI calls the plugin forwards to it
// (agentclient.go) with the plugin's own code (plugin.go), over one Store,
// one Allocator and caches fed by informers:
//
//   - SpiderIPPools and SpiderReservedIPs (kubepools.Source, followed);
//   - the pods of its node (field selector spec.nodeName), the namespaces,
//     and its node; a pod not in the cache yet, or cached with another UID,
//     is read from the API server, as are another node's pod and node;
//   - no IPClaims: it neither watches nor lists the claims of the cluster
//     (no Allocator.Follow), so its memory and its start do not grow with
//     the claims of other nodes. The Store answers each call as it answers
//     the per-call plugin.
//
// Calls run concurrently, but one at a time for one container ID.

// agentOptions are the flags of "cni-ipam agent".
type agentOptions struct {
	node, socket        string
	kubeconfig, context string
	qps                 float64
	burst               int
	spread, probe       bool
	logLevel            slog.Level
}

// parseAgentFlags reads the arguments after "agent"; errors name the flag
// and its value.
func parseAgentFlags(args []string, stderr io.Writer) (*agentOptions, error) {
	fs := flag.NewFlagSet("cni-ipam agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &agentOptions{}
	fs.StringVar(&o.node, "node", os.Getenv("NODE_NAME"), "`name` of this node; default: $NODE_NAME (the DaemonSet sets it from spec.nodeName)")
	fs.StringVar(&o.socket, "socket", defaultAgentSocket, "unix socket `path` to serve the CNI calls on (mode 0600)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig `file`; default: $KUBECONFIG, then ~/.kube/config, then the pod's service account (in-cluster)")
	fs.StringVar(&o.context, "context", "", "kubeconfig `context` to use; default: its current context")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "requests per second to the API server (client-side limit)")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "burst of requests to the API server")
	fs.BoolVar(&o.spread, "spread", true, "start each pool's round-robin at a place worked out from the node's name (ipam.Options.Spread), so that the agents of many nodes seldom race for an address, and read no pool cursor")
	fs.BoolVar(&o.probe, "probe", false, "ask the agent on --socket whether it is ready, and exit 0 if it is (a readiness probe)")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	if err := o.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel))
	}
	if !filepath.IsAbs(o.socket) {
		errs = append(errs, fmt.Errorf("--socket %q: want an absolute path", o.socket))
	}
	if o.probe {
		return o, errors.Join(errs...)
	}
	if o.node == "" {
		errs = append(errs, errors.New("--node: empty: give this node's name (or set $NODE_NAME)"))
	}
	if o.qps <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: must be positive", o.qps))
	}
	if o.burst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: must be positive", o.burst))
	}
	return o, errors.Join(errs...)
}

// runAgent is "cni-ipam agent": it serves until SIGTERM or SIGINT, then
// finishes the calls in flight, removes its socket and returns 0.
func runAgent(args []string, stdout, stderr io.Writer) int {
	o, err := parseAgentFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "cni-ipam agent:", err)
		return 2
	}
	if o.probe {
		reply, err := askAgent(o.socket, agentRequest{Command: "READY"}, statusTimeout)
		switch {
		case err != nil:
			fmt.Fprintln(stderr, err)
			return 1
		case reply.Error != nil:
			fmt.Fprintf(stderr, "cni-ipam agent at %s: %s\n", o.socket, reply.Error.Msg)
			return 1
		}
		fmt.Fprintf(stdout, "cni-ipam agent at %s: ready\n", o.socket)
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	cfg, err := agentRestConfig(o)
	if err != nil {
		log.Error("cni-ipam agent", "err", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := serveAgent(ctx, cfg, o, log); err != nil {
		log.Error("cni-ipam agent", "err", err)
		return 1
	}
	log.Info("cni-ipam agent: stopped")
	return 0
}

// agentRestConfig applies client-go's default loading rules: --kubeconfig,
// else $KUBECONFIG, else ~/.kube/config, else the pod's service account;
// --context picks a context. The rate limits are the flags'.
func agentRestConfig(o *agentOptions) (*rest.Config, error) {
	if o.kubeconfig != "" {
		// client-go reads the file, and those it names, whole.
		if err := kubeconfig.Check(o.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig %w", err)
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "cni-ipam-agent/" + buildinfo.Version()
	return cfg, nil
}

// serveAgent listens on o.socket and serves the calls of the cluster cfg
// names, as the agent of node o.node, until ctx is done; then it stops
// accepting, waits for the calls in flight and removes the socket.
func serveAgent(ctx context.Context, cfg *rest.Config, o *agentOptions, log *slog.Logger) error {
	a, err := newAgent(cfg, o, log)
	if err != nil {
		return err
	}
	ln, err := listenAgent(o.socket)
	if err != nil {
		return err
	}
	defer ln.Close() // removes the socket
	// The caches outlive ctx until the calls in flight are done.
	follow, unfollow := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer unfollow()
	a.start(follow, &wg)
	log.Info("cni-ipam agent: serving", "socket", o.socket, "node", o.node, "qps", cfg.QPS, "burst", cfg.Burst)
	return a.serve(ctx, ln)
}

// agent is what serveAgent keeps: the plugin's Store and Allocator, the
// caches, and the locks of the container IDs in flight. It is the plugin's
// kubeSessions and the calls' cluster. The zero agent is not usable;
// newAgent makes one, start starts it, and from then on it is safe for
// concurrent use.
type agent struct {
	log    *slog.Logger
	node   string
	client *kubeclient.Client
	store  *kubestore.Store
	pools  *kubepools.Source
	alloc  *ipam.Allocator
	// pods (of this node), namespaces, and this node.
	pods, namespaces, nodes cache.SharedIndexInformer
	ready                   atomic.Bool
	started                 time.Time
	locks                   keyLocks
}

// newAgent builds the agent's clients and informers; it does not contact
// the server.
func newAgent(cfg *rest.Config, o *agentOptions, log *slog.Logger) (*agent, error) {
	a := &agent{log: log, node: o.node}
	var err error
	if a.client, err = kubeclient.New(cfg); err != nil {
		return nil, err
	}
	// The Store's round-robin cursors are this node's (the per-call plugin
	// learns the node from the pod; the agent's pods are its node's).
	if a.store, err = kubestore.New(cfg, kubestore.Options{Logger: log, Node: o.node}); err != nil {
		return nil, err
	}
	if a.pools, err = kubepools.New(cfg, kubepools.Options{Logger: log}); err != nil {
		return nil, err
	}
	opts := ipam.Options{Pools: a.pools, Store: a.store, Logger: log}
	if o.spread {
		opts.Spread = o.node
	}
	if a.alloc, err = ipam.NewAllocator(opts); err != nil {
		return nil, err
	}
	core := a.client.Core()
	a.pods = informer(cache.NewListWatchFromClient(core, "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", o.node)), &corev1.Pod{}, slimPod)
	a.namespaces = informer(cache.NewListWatchFromClient(core, "namespaces", metav1.NamespaceAll, fields.Everything()),
		&corev1.Namespace{}, slimMeta)
	a.nodes = informer(cache.NewListWatchFromClient(core, "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", o.node)), &corev1.Node{}, slimMeta)
	return a, nil
}

// informer returns an informer of the objects lw lists, kept as transform
// makes them.
func informer(lw *cache.ListWatch, obj runtime.Object, transform cache.TransformFunc) cache.SharedIndexInformer {
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	inf.SetTransform(transform) // fails only once the informer runs
	return inf
}

// start runs the informers until ctx is done, and marks the agent ready
// once each has listed its objects.
func (a *agent) start(ctx context.Context, wg *sync.WaitGroup) {
	a.started = time.Now()
	wg.Go(func() { a.pools.Run(ctx) })
	for _, inf := range []cache.SharedIndexInformer{a.pods, a.namespaces, a.nodes} {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Go(func() {
		if err := a.pools.WaitForSync(ctx); err != nil {
			return
		}
		if !cache.WaitForCacheSync(ctx.Done(), a.pods.HasSynced, a.namespaces.HasSynced, a.nodes.HasSynced) {
			return
		}
		a.ready.Store(true)
		var m goruntime.MemStats
		goruntime.ReadMemStats(&m)
		a.log.Info("cni-ipam agent: ready", "after", time.Since(a.started).Round(time.Millisecond),
			"pods", len(a.pods.GetStore().ListKeys()), "namespaces", len(a.namespaces.GetStore().ListKeys()),
			"heapInuse", m.HeapInuse)
	})
}

// slimPod keeps of a pod what a request is made of (k8s.Request): its
// metadata but managed fields, and its node.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}

// slimMeta drops the managed fields of a namespace or a node.
func slimMeta(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// listenAgent listens on the unix socket path, mode 0600, in a directory it
// creates with mode 0700 if missing. A socket left there by an agent that
// did not stop cleanly is replaced; one that another agent serves, or a
// file that is not a socket, is an error.
func listenAgent(path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("--socket %s: another agent is serving it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--socket %s: removing the socket of an agent gone: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("--socket %s: %w", path, err)
	}
	return ln, nil
}

// serve accepts calls on ln until ctx is done, then closes ln and waits
// for the calls in flight.
func (a *agent) serve(ctx context.Context, ln *net.UnixListener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				a.log.Info("cni-ipam agent: stopping: finishing the calls in flight")
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			a.log.Warn("cni-ipam agent: accept", "err", err)
			time.Sleep(100 * time.Millisecond) // out of file descriptors, for one
			continue
		}
		wg.Go(func() { a.handle(conn) })
	}
}

// agentReadTimeout bounds the reading of a request: the plugin sends it
// at once.
const agentReadTimeout = 10 * time.Second

// handle serves one connection: one request, one reply.
func (a *agent) handle(conn *net.UnixConn) {
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(agentReadTimeout))
	req, err := readAgentRequest(conn)
	var reply agentReply
	if err != nil {
		reply.Error = types.NewError(types.ErrDecodingFailure, fmt.Sprintf("cni-ipam agent: %v", err), "")
	} else {
		reply = a.answer(req)
	}
	conn.SetWriteDeadline(time.Now().Add(agentReadTimeout))
	if err := json.NewEncoder(conn).Encode(reply); err != nil {
		a.log.Warn("cni-ipam agent: writing a reply", "command", req.Command, "err", err)
	}
}

// answer runs one call with the plugin's code and returns what it printed.
func (a *agent) answer(req agentRequest) agentReply {
	if req.Command == "READY" {
		if !a.ready.Load() {
			return agentReply{Error: a.notReady(types.ErrPluginNotAvailable)}
		}
		return agentReply{}
	}
	var out, warn bytes.Buffer
	p := &plugin{open: openState, stdout: &out, warn: &warn, timeout: defaultTimeout, kube: a}
	cmds := map[string]func(*skel.CmdArgs) error{"ADD": p.cmdAdd, "DEL": p.cmdDel, "CHECK": p.cmdCheck, "GC": p.cmdGC, "STATUS": p.cmdStatus}
	cmd, ok := cmds[req.Command]
	if !ok || req.Args == nil {
		return agentReply{Error: types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("cni-ipam agent: CNI_COMMAND %q: not one the agent serves (ADD, DEL, CHECK, GC, STATUS)", req.Command), "")}
	}
	if sock, err := agentSocket(req.Args.StdinData); err != nil || sock == "" {
		// The plugin forwards only such configs; anything else would use
		// the agent's file system for a state directory.
		return agentReply{Error: types.NewError(types.ErrInvalidNetworkConfig,
			"cni-ipam agent: serves network configs whose ipam.kubernetes section names it (agent) only", "")}
	}
	start := time.Now()
	if id := req.Args.ContainerID; id != "" {
		defer a.locks.lock(id)()
	}
	err := cmd(req.Args)
	reply := agentReply{Stdout: out.Bytes(), Stderr: warn.Bytes()}
	if err != nil {
		var e *types.Error
		if !errors.As(err, &e) {
			e = types.NewError(types.ErrInternal, err.Error(), "")
		}
		reply.Error = e
		a.log.Debug("cni-ipam agent: call", "command", req.Command, "container", req.Args.ContainerID, "args", req.Args.Args,
			"took", time.Since(start), "code", e.Code, "msg", e.Msg)
	} else {
		a.log.Debug("cni-ipam agent: call", "command", req.Command, "container", req.Args.ContainerID, "args", req.Args.Args,
			"took", time.Since(start))
	}
	return reply
}

// notReady is the answer of an agent whose caches are not synced yet.
func (a *agent) notReady(code uint) *types.Error {
	msg := fmt.Sprintf("cni-ipam agent: not ready: the caches of pools, pods and namespaces are not synced yet (started %s ago)",
		time.Since(a.started).Round(time.Millisecond))
	if code == types.ErrTryAgainLater {
		msg = "try again later: " + msg
	}
	return types.NewError(code, msg, "")
}

// session gives a call the agent's Store and Allocator and itself as the
// cluster, once its caches are synced.
func (a *agent) session(_ context.Context, raw json.RawMessage) (store.Store, *ipam.Allocator, cluster, error) {
	if _, _, err := parseKubernetes(raw); err != nil {
		return nil, nil, nil, err
	}
	if !a.ready.Load() {
		return nil, nil, nil, a.notReady(types.ErrTryAgainLater)
	}
	return a.store, a.alloc, a, nil
}

// status answers STATUS: ready, and the API server answers.
func (a *agent) status(raw json.RawMessage, limit time.Duration) error {
	timeout, err := kubernetesTimeout(raw)
	if err != nil {
		return toCNI(nil, err)
	}
	if !a.ready.Load() {
		return a.notReady(types.ErrPluginNotAvailable)
	}
	return storeStatus(a.store, min(limit, timeout, statusTimeout))
}

// request is the cluster's: the pod read from the caches where they have
// it.
func (a *agent) request(ctx context.Context, pod podArgs, containerID, ifname string, nc ipam.NetConf) (ipam.Request, error) {
	return podRequest(ctx, cachedReader{a, pod.UID}, pod, containerID, ifname, nc)
}

// cachedReader reads from the agent's caches, and from the API server what
// they do not hold: a pod not seen yet (the informer trails the binding by
// a moment) or cached with another UID than the call's (replaced), another
// node's pod, a namespace created a moment ago, another node.
type cachedReader struct {
	a   *agent
	uid string // the call's K8S_POD_UID, if any
}

func (r cachedReader) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	if p, ok := cached[*corev1.Pod](r.a.pods, namespace+"/"+name); ok && (r.uid == "" || string(p.UID) == r.uid) {
		return p, nil
	}
	return r.a.client.Pod(ctx, namespace, name)
}

func (r cachedReader) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	if ns, ok := cached[*corev1.Namespace](r.a.namespaces, name); ok {
		return ns, nil
	}
	return r.a.client.Namespace(ctx, name)
}

func (r cachedReader) Node(ctx context.Context, name string) (*corev1.Node, error) {
	if n, ok := cached[*corev1.Node](r.a.nodes, name); ok {
		return n, nil
	}
	return r.a.client.Node(ctx, name)
}

// cached returns the object of key in inf's cache, if it is there. The
// caller must not change it.
func cached[T any](inf cache.SharedIndexInformer, key string) (T, bool) {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// keyLocks serializes the calls of one container ID. The zero keyLocks is
// ready to use.
type keyLocks struct {
	mu   sync.Mutex
	held map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int // calls holding or waiting for it
}

// lock waits until no other call holds key, and returns its unlock.
func (k *keyLocks) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.held == nil {
		k.held = map[string]*keyLock{}
	}
	l := k.held[key]
	if l == nil {
		l = &keyLock{}
		k.held[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.held, key)
		}
		k.mu.Unlock()
	}
}
