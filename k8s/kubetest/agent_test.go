package kubetest_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/store"
)

// The node agent, "cni-ipam agent" (cmd/cni-ipam/agent.go), run as a
// process of its own from the plugin's binary built with -tags kubernetes,
// and the plugin forwarding to it when ipam.kubernetes.agent names its
// socket.

// agentProc is a running "cni-ipam agent".
type agentProc struct {
	cmd    *exec.Cmd
	socket string
	done   chan error
	ready  time.Duration // from its start until its probe said ready
}

// socketDir returns a short directory for sockets (a unix socket's path is
// limited to 108 bytes; t.TempDir's can be longer), removed at the end.
func socketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startAgent runs the agent of node on socket, with kubeconfig, its log in
// t's, and waits until it is ready (its --probe says so).
func startAgent(t testing.TB, kubeconfig, node, socket string) *agentProc {
	t.Helper()
	a := &agentProc{socket: socket, done: make(chan error, 1)}
	a.cmd = exec.Command(filepath.Join(programs(t), "cni-ipam"), "agent",
		"--kubeconfig", kubeconfig, "--node", node, "--socket", socket, "--log-level", "debug")
	stderr, err := a.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if !strings.Contains(sc.Text(), "level=DEBUG") {
				t.Log("agent: " + sc.Text())
			}
		}
		a.done <- a.cmd.Wait()
	}()
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			<-a.done
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		probe := exec.Command(filepath.Join(programs(t), "cni-ipam"), "agent", "--probe", "--socket", socket)
		if probe.Run() == nil {
			a.ready = time.Since(start)
			return a
		}
		select {
		case err := <-a.done:
			t.Fatalf("the agent exited before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent is not ready after a minute")
		}
	}
}

// kill ends the agent with SIGKILL, leaving its socket behind.
func (a *agentProc) kill(t testing.TB) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-a.done
}

// stop ends the agent with SIGTERM and reports how it exited.
func (a *agentProc) stop(t testing.TB) error {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the agent did not stop a minute after SIGTERM")
		return nil
	}
}

// agentConf is a network config whose ipam.kubernetes section names the
// agent at socket, and a kubeconfig that does not exist (a plugin that
// forwards never reads it), with extra ipam fields.
func agentConf(socket, extra string) []byte {
	return fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan",
		"ipam": {"type": "cni-ipam", "kubernetes": {"agent": %q, "kubeconfig": "/nonexistent/kubeconfig"}%s}}`, socket, extra)
}

// code returns the CNI error code r printed, 0 for none.
func (r cniRun) code(t testing.TB) uint {
	t.Helper()
	var e struct {
		Code uint `json:"code"`
	}
	if r.stdout != "" {
		if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
			t.Fatalf("output %q: %v", r.stdout, err)
		}
	}
	return e.Code
}

// TestAgent: the same calls, per call and through the agent, print the
// same (ADD, ADD again, CHECK, the errors of a missing and a replaced pod,
// DEL, CHECK after it, GC, STATUS); a pod created after the agent started
// is served; every request the agent made is allowed by
// deploy/rbac-plugin.yaml; SIGTERM stops the agent and removes its socket; an agent that
// is gone (no socket, or a socket nobody listens on) makes ADD, DEL and
// CHECK fail at once with 11 naming the socket, and STATUS with 50.
func TestAgent(t *testing.T) {
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	c, socket := agentFixture(t, "agent-a", "10.60.0.")
	web := c.pod(podSpec{name: "web", node: "agent-a-node", phase: corev1.PodRunning})
	agent := startAgent(t, kubeconfig, "agent-a-node", socket)
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's socket: %v, %v; want mode 0600", fi, err)
	}

	const pools = `, "default_ipv4_ippool": ["agent-a"]`
	call := func(command, container string, pod *corev1.Pod, prev string) cniCall {
		return cniCall{command: command, container: container, ifname: "eth0", args: podArgs(pod),
			conf: pluginConf(t, kubeconfig, prev+pools)}
	}
	viaAgent := func(c cniCall) cniCall {
		c.conf = bytes.Replace(c.conf, fmt.Appendf(nil, `"kubeconfig": %q`, kubeconfig),
			fmt.Appendf(nil, `"agent": %q, "kubeconfig": "/nonexistent/kubeconfig"`, socket), 1)
		return c
	}
	same := func(what string, c cniCall) cniRun {
		t.Helper()
		direct, through := c.runRaw(t), viaAgent(c).runRaw(t)
		if direct.stdout != through.stdout || direct.exit != through.exit {
			t.Errorf("%s: per call: exit %d, %s\nthrough the agent: exit %d, %s (stderr %s)", what,
				direct.exit, direct.stdout, through.exit, through.stdout, through.stderr)
		}
		return direct
	}

	// ADD per call, then through the agent: the agent returns what the pod
	// holds, byte for byte; and the other way round for a second pod.
	add := call("ADD", "c-web", web, "")
	first := add.runRaw(t)
	if first.exit != 0 {
		t.Fatalf("ADD: %+v", first)
	}
	if again := viaAgent(add).runRaw(t); again.stdout != first.stdout || again.exit != 0 {
		t.Fatalf("ADD per call printed %s\nADD again through the agent %s (stderr %s)", first.stdout, again.stdout, again.stderr)
	}
	// The default build, without the Kubernetes client, forwards alike.
	lean := viaAgent(add)
	lean.bin = "cni-ipam-lean"
	if again := lean.runRaw(t); again.stdout != first.stdout || again.exit != 0 {
		t.Fatalf("ADD per call printed %s\nADD again through the agent from the default build %s (stderr %s)", first.stdout, again.stdout, again.stderr)
	}
	ip := addrOf(t, first.stdout)
	api := c.pod(podSpec{name: "api", node: "agent-a-node", phase: corev1.PodRunning}) // after the agent started
	apiAdd := call("ADD", "c-api", api, "")
	through := viaAgent(apiAdd).runRaw(t)
	if through.exit != 0 {
		t.Fatalf("ADD through the agent of a pod created after it started: %+v", through)
	}
	if direct := apiAdd.runRaw(t); direct.stdout != through.stdout {
		t.Errorf("ADD through the agent printed %s\nADD again per call %s", through.stdout, direct.stdout)
	}
	if ip2 := addrOf(t, through.stdout); ip2 == ip {
		t.Fatalf("two pods got %s", ip)
	}

	prev := fmt.Sprintf(`, "prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "%s/24"}]}`, ip)
	if r := same("CHECK", call("CHECK", "c-web", web, prev)); r.exit != 0 {
		t.Errorf("CHECK: %+v", r)
	}
	missing := call("ADD", "c-x", web, "")
	missing.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=agent-a;K8S_POD_NAME=nobody"
	if r := same("ADD of a missing pod", missing); !strings.Contains(r.stdout, "agent-a/nobody does not exist") {
		t.Errorf("ADD of a missing pod: %+v", r)
	}
	replaced := call("ADD", "c-web", web, "")
	replaced.args = strings.Replace(podArgs(web), string(web.UID), "old-uid", 1)
	if r := same("ADD of a replaced pod", replaced); !strings.Contains(r.stdout, "the pod was replaced") {
		t.Errorf("ADD of a replaced pod: %+v", r)
	}
	noPod := call("ADD", "c-x", web, "")
	noPod.args = ""
	if r := same("ADD without K8S_POD_*", noPod); r.code(t) != 4 {
		t.Errorf("ADD without K8S_POD_*: %+v, want code 4", r)
	}

	// DEL through the agent releases; CHECK after it fails alike.
	if r := viaAgent(call("DEL", "c-web", web, prev)).runRaw(t); r.exit != 0 {
		t.Fatalf("DEL through the agent: %+v", r)
	}
	if _, err := newStore(t).Get(ctx, "agent-a", ip); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the claim of %s after DEL through the agent: %v, want it gone", ip, err)
	}
	if r := same("CHECK after DEL", call("CHECK", "c-web", web, prev)); r.exit == 0 {
		t.Errorf("CHECK after DEL succeeded")
	}
	if r := same("DEL again", call("DEL", "c-web", web, prev)); r.exit != 0 {
		t.Errorf("DEL again: %+v", r)
	}
	gcConf := fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan", "cni.dev/valid-attachments": [],
		"ipam": {"type": "cni-ipam", "kubernetes": {"kubeconfig": %q}}}`, kubeconfig)
	gc := cniCall{command: "GC", conf: gcConf}
	if r := same("GC", gc); r.exit != 0 {
		t.Errorf("GC: %+v", r)
	}
	if r := viaAgent(gc).runRaw(t); !strings.Contains(r.stderr, "nothing released") {
		t.Errorf("GC through the agent said %q on stderr, want the per-call note", r.stderr)
	}
	status := cniCall{command: "STATUS", conf: pluginConf(t, kubeconfig, "")}
	if r := same("STATUS", status); r.exit != 0 {
		t.Errorf("STATUS: %+v", r)
	}

	// Every request the agent made is allowed by the RBAC it ships with.
	checkRBAC(t, "cni-ipam-agent", "../../deploy/rbac-plugin.yaml", "cni-ipam")

	// SIGTERM: the agent exits 0 and removes its socket.
	if err := agent.stop(t); err != nil {
		t.Errorf("the agent's exit after SIGTERM: %v, want status 0", err)
	}
	if _, err := os.Lstat(socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket after SIGTERM: %v, want it removed", err)
	}
	down := func(what string) {
		t.Helper()
		for _, c := range []cniCall{viaAgent(add), viaAgent(call("DEL", "c-web", web, "")), viaAgent(call("CHECK", "c-web", web, prev))} {
			r := c.runRaw(t)
			if r.code(t) != 11 || !strings.Contains(r.stdout, socket) {
				t.Errorf("%s %s: %+v, want code 11 naming %s", c.command, what, r, socket)
			}
			if r.took > 5*time.Second {
				t.Errorf("%s %s took %s", c.command, what, r.took)
			}
		}
		if r := viaAgent(status).runRaw(t); r.code(t) != 50 {
			t.Errorf("STATUS %s: %+v, want code 50", what, r)
		}
	}
	down("with no agent socket")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	down("with a socket nobody listens on")
}

// agentFixture starts a test of the agent: no claims in the cluster, a
// pool name of the addresses prefix10 to prefix250 (prefix is the first
// three bytes of an IPv4 address and a dot), a namespace name for the
// test's pods, a node name+"-node", and the path of a socket.
func agentFixture(t *testing.T, name, prefix string) (*gcCluster, string) {
	t.Helper()
	emptyBackend(t)
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", name, map[string]any{
		"ipVersion": int64(4), "subnet": prefix + "0/24", "ips": []any{prefix + "10-" + prefix + "250"}, "gateway": prefix + "1",
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, name) })
	c := newGCCluster(t, name)
	c.node(name+"-node", true)
	return c, filepath.Join(socketDir(t), "agent.sock")
}

// addrOf returns the one address of a CNI result.
func addrOf(t *testing.T, stdout string) netip.Addr {
	t.Helper()
	var r cniResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("result %q: %v", stdout, err)
	}
	return r.addr(t)
}

// TestAgentKilled: agents killed with SIGKILL while ADDs are in flight,
// and restarted on the socket left behind: ADD fails with 11 while no
// agent serves, every pod's retried ADD then succeeds, each pod holds one
// address, no address is held twice, and ADD again returns what the pod
// holds.
func TestAgentKilled(t *testing.T) {
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	c, socket := agentFixture(t, "agent-k", "10.61.0.")
	conf := agentConf(socket, `, "default_ipv4_ippool": ["agent-k"]`)
	const pods = 12
	var calls []cniCall
	for i := range pods {
		p := c.pod(podSpec{name: fmt.Sprintf("p%d", i), node: "agent-k-node", phase: corev1.PodRunning})
		calls = append(calls, cniCall{command: "ADD", container: fmt.Sprintf("c%d", i), ifname: "eth0", args: podArgs(p), conf: conf})
	}
	results := make([]string, pods)
	var mu sync.Mutex
	agent := startAgent(t, kubeconfig, "agent-k-node", socket)
	for round := range 3 {
		// Every pod's ADD at once; the agent is killed once the first
		// answer comes, with the others in flight.
		answered := make(chan struct{}, pods)
		var wg sync.WaitGroup
		for i, call := range calls {
			wg.Go(func() {
				r := call.runRaw(t)
				if r.exit == 0 {
					mu.Lock()
					if results[i] != "" && results[i] != r.stdout {
						t.Errorf("round %d: pod %d: ADD printed %s, before %s", round, i, r.stdout, results[i])
					}
					results[i] = r.stdout
					mu.Unlock()
				} else if code := r.code(t); code != 11 {
					t.Errorf("round %d: pod %d: ADD failed with %+v, want success or 11", round, i, r)
				}
				answered <- struct{}{}
			})
		}
		<-answered
		agent.kill(t)
		wg.Wait()
		if _, err := os.Lstat(socket); err != nil {
			t.Fatalf("after SIGKILL the socket should be left behind: %v", err)
		}
		if r := calls[0].runRaw(t); r.code(t) != 11 {
			t.Fatalf("ADD with the agent killed: %+v, want 11", r)
		}
		agent = startAgent(t, kubeconfig, "agent-k-node", socket)
	}
	// The runtime retries each ADD until it succeeds.
	for i, call := range calls {
		r := call.runRaw(t)
		if r.exit != 0 {
			t.Fatalf("pod %d: ADD after the restarts: %+v", i, r)
		}
		if results[i] != "" && results[i] != r.stdout {
			t.Errorf("pod %d: ADD after the restarts printed %s, an earlier ADD %s", i, r.stdout, results[i])
		}
		results[i] = r.stdout
	}
	st := newStore(t)
	claims, err := st.List(ctx, "agent-k")
	if err != nil {
		t.Fatal(err)
	}
	byUID := map[string][]store.Claim{}
	for _, cl := range claims {
		byUID[cl.Owner.UID] = append(byUID[cl.Owner.UID], cl)
	}
	seen := map[netip.Addr]int{}
	extra := 0
	for i, call := range calls {
		uid := call.args[strings.Index(call.args, "K8S_POD_UID=")+len("K8S_POD_UID="):]
		held := byUID[uid]
		slices.SortFunc(held, func(a, b store.Claim) int { return cmp.Compare(a.Revision, b.Revision) })
		ip := addrOf(t, results[i])
		// An allocation creates its claim, then checks that the pod holds
		// no older one, and deletes its own if it does: an agent killed
		// between the two leaves the younger claim to the pod, which its
		// DEL releases (below). The pod's answer is always the oldest.
		if len(held) == 0 || held[0].IP != ip {
			t.Errorf("pod %d holds %v, its ADD returned %s: want its oldest claim", i, held, ip)
		}
		extra += max(len(held)-1, 0)
		if j, ok := seen[ip]; ok {
			t.Errorf("pods %d and %d both got %s", j, i, ip)
		}
		seen[ip] = i
	}
	t.Logf("%d pods, %d claims: %d left by ADDs killed between their create and the check", pods, len(claims), extra)
	// DEL through the agent releases every claim of the pod.
	for i, call := range calls {
		call.command = "DEL"
		if r := call.runRaw(t); r.exit != 0 {
			t.Errorf("pod %d: DEL: %+v", i, r)
		}
	}
	if claims, err := st.List(ctx, "agent-k"); err != nil || len(claims) != 0 {
		t.Errorf("after every pod's DEL the pool holds %v, %v; want nothing", claims, err)
	}
	if err := agent.stop(t); err != nil {
		t.Errorf("SIGTERM: %v", err)
	}
}

// proxyLog is a TLS proxy in front of the test server that records the
// requests made through it (a program of its own cannot be given a
// WrapTransport, as flat_test.go's requestLog is).
type proxyLog struct {
	srv *httptest.Server
	mu  sync.Mutex
	log []string
	// holdIf, when set, names the requests to hold: each is announced on
	// held, then waits until release is closed.
	holdIf  func(*http.Request) bool
	held    chan struct{}
	release chan struct{}
}

// hold makes the proxy hold the requests for which match reports true,
// from now until the returned release is called.
func (l *proxyLog) hold(match func(*http.Request) bool) (held <-chan struct{}, release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.holdIf, l.held, l.release = match, make(chan struct{}, 100), make(chan struct{})
	rel := l.release
	return l.held, sync.OnceFunc(func() { close(rel) })
}

func newProxyLog(t testing.TB) *proxyLog {
	t.Helper()
	rt, err := rest.TransportFor(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse("https://" + srv.Addr())
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = rt
	proxy.FlushInterval = -1 // watches stream
	l := &proxyLog{}
	l.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.log = append(l.log, requestKey(r))
		hold := l.holdIf != nil && l.holdIf(r)
		held, release := l.held, l.release
		l.mu.Unlock()
		if hold {
			held <- struct{}{}
			<-release
		}
		proxy.ServeHTTP(w, r)
	}))
	l.srv.TLS = &tls.Config{}
	l.srv.StartTLS()
	t.Cleanup(l.srv.Close)
	return l
}

// requestKey is what a request does, without the names and values that
// differ from one pod to the next: the method, the resource, whether it
// names an object, and the names of its query parameters.
func requestKey(r *http.Request) string {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 3 {
		return r.Method + " " + r.URL.Path
	}
	// /api/v1/[namespaces/NS/]RESOURCE[/NAME] or /apis/GROUP/VERSION/...
	rest := parts[2:]
	if parts[0] == "apis" && len(parts) > 3 {
		rest = parts[3:]
	}
	if len(rest) > 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	key := r.Method + " " + rest[0]
	if len(rest) > 1 {
		key += "/{name}"
	}
	var params []string
	for k := range r.URL.Query() {
		params = append(params, k)
	}
	slices.Sort(params)
	if len(params) > 0 {
		key += "?" + strings.Join(params, "&")
	}
	return key
}

// since returns the requests logged after the first n.
func (l *proxyLog) since(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.log[n:])
}

func (l *proxyLog) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.log)
}

// kubeconfig returns a kubeconfig file naming the proxy.
func (l *proxyLog) kubeconfig(t testing.TB) string {
	t.Helper()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster: {server: %q, insecure-skip-tls-verify: true}
  name: proxy
contexts:
- context: {cluster: proxy, user: proxy}
  name: proxy
current-context: proxy
users:
- name: proxy
`, l.srv.URL)
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAgentRequests: the agent, started in a cluster with no other claims
// and again with 2,000 claims of other nodes' pods, lists no IPClaims at
// start-up (it neither watches nor lists the cluster's claims), makes the
// same requests at start-up both times, and its first ADD makes the same
// requests both times, none a list of IPClaims.
func TestAgentRequests(t *testing.T) {
	c, socket := agentFixture(t, "agent-r", "10.62.0.")
	proxy := newProxyLog(t)
	kubeconfig := proxy.kubeconfig(t)
	conf := agentConf(socket, `, "default_ipv4_ippool": ["agent-r"]`)

	firstAdd := func(name string) (startup, add []string) {
		t.Helper()
		p := c.pod(podSpec{name: name, node: "agent-r-node", phase: corev1.PodRunning})
		n := proxy.len()
		agent := startAgent(t, kubeconfig, "agent-r-node", socket)
		t.Logf("%s: the agent was ready %s after its start", name, agent.ready)
		startup = proxy.since(n)
		n = proxy.len()
		call := cniCall{command: "ADD", container: "c-" + name, ifname: "eth0", args: podArgs(p), conf: conf}
		if r := call.runRaw(t); r.exit != 0 {
			t.Fatalf("ADD: %+v", r)
		}
		add = proxy.since(n)
		call.command = "DEL"
		if r := call.runRaw(t); r.exit != 0 {
			t.Fatalf("DEL: %+v", r)
		}
		if err := agent.stop(t); err != nil {
			t.Fatalf("SIGTERM: %v", err)
		}
		for _, r := range startup {
			if strings.Contains(r, "ipclaims") {
				t.Errorf("the agent's start-up made %s", r)
			}
		}
		return startup, add
	}
	// The first allocation in a cluster writes kubestore's layout marker
	// (a list of at most one claim first): once per cluster, not per
	// agent. An agent's run before the two measured ones writes it.
	firstAdd("warm")
	startup0, add0 := firstAdd("empty")
	t.Cleanup(func() {
		_ = dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	seedClaims(t, 2000)
	startupN, addN := firstAdd("full")
	t.Logf("start-up with 0 other claims: %q\nfirst ADD: %q", startup0, add0)
	for _, r := range append(slices.Clone(add0), addN...) {
		if strings.HasPrefix(r, "GET ipclaims?") {
			t.Errorf("the first ADD listed IPClaims: %s", r)
		}
	}
	if !slices.Equal(sortedCopy(add0), sortedCopy(addN)) {
		t.Errorf("the first ADD with 0 other claims made %q\nwith 2,000 %q", add0, addN)
	}
	if len(startupN) == 0 {
		t.Errorf("no request recorded at start-up")
	}
	if !slices.Equal(sortedCopy(startup0), sortedCopy(startupN)) {
		t.Errorf("the start-up with 0 other claims made %q\nwith 2,000 %q", startup0, startupN)
	}
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// BenchmarkAgentAddDel: one pod's ADD then DEL, each a run of the plugin's
// binary, per call (exec: built with -tags kubernetes, it reads the
// cluster itself) and through the node agent (agent: the same binary
// forwards; agent-lean: the default build, without the Kubernetes client,
// forwards), with 0 and 1,000 claims of other pods in the cluster. One op
// is an ADD and a DEL; add-ms/op and del-ms/op are each call's run.
func BenchmarkAgentAddDel(b *testing.B) {
	emptyBackend(b)
	ctx := b.Context()
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	const ns, node = "agentb", "agentb-node"
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bench"},
		Spec: corev1.PodSpec{NodeName: node}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		bg := context.Background()
		_ = cs.CoreV1().Pods(ns).Delete(bg, "bench", metav1.DeleteOptions{})
		_ = cs.CoreV1().Nodes().Delete(bg, node, metav1.DeleteOptions{})
		_ = dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).DeleteCollection(bg, metav1.DeleteOptions{}, metav1.ListOptions{})
	})
	dyn := dynamic.NewForConfigOrDie(srv.Config()).Resource(kubepools.IPPoolResource)
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool", "metadata": map[string]any{"name": "agent-bench"},
		"spec": map[string]any{"ipVersion": int64(4), "subnet": "10.64.0.0/16", "ips": []any{"10.64.0.10-10.64.255.250"}, "gateway": "10.64.0.1"},
	}}
	if _, err := dyn.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = dyn.Delete(context.Background(), "agent-bench", metav1.DeleteOptions{}) })
	kubeconfig := kubeconfigFile(b)
	socket := filepath.Join(socketDir(b), "agent.sock")
	startAgent(b, kubeconfig, node, socket)
	const pools = `, "default_ipv4_ippool": ["agent-bench"]`
	confs := map[string][]byte{
		"exec":  fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan", "ipam": {"type": "cni-ipam", "kubernetes": {"kubeconfig": %q}%s}}`, kubeconfig, pools),
		"agent": agentConf(socket, pools),
	}
	seeded := 0
	for _, n := range []int{0, 1000} {
		if n > seeded {
			seedClaims(b, n)
			seeded = n
		}
		for _, mode := range []string{"exec", "agent", "agent-lean"} {
			b.Run(fmt.Sprintf("claims=%d/%s", n, mode), func(b *testing.B) {
				add := cniCall{command: "ADD", container: "c-bench", ifname: "eth0", args: podArgs(pod), conf: confs[mode]}
				if mode == "agent-lean" {
					add.bin, add.conf = "cni-ipam-lean", confs["agent"]
				}
				del := add
				del.command = "DEL"
				var addTook, delTook time.Duration
				n := 0
				for b.Loop() {
					r := add.runRaw(b)
					if r.exit != 0 {
						b.Fatalf("ADD: %+v", r)
					}
					addTook += r.took
					if r = del.runRaw(b); r.exit != 0 {
						b.Fatalf("DEL: %+v", r)
					}
					delTook += r.took
					n++
				}
				b.ReportMetric(float64(addTook.Milliseconds())/float64(n), "add-ms/op")
				b.ReportMetric(float64(delTook.Milliseconds())/float64(n), "del-ms/op")
			})
		}
	}
}

// BenchmarkForward: what the plugin's own run costs when it forwards a
// call (a DEL) to an agent that answers at once (here a stand-in that
// reads the request and answers success): the process's start and the
// round trip on the socket, for the build with the Kubernetes client
// (cni-ipam) and the default build (cni-ipam-lean).
func BenchmarkForward(b *testing.B) {
	programs(b) // built before the clock starts
	socket := filepath.Join(socketDir(b), "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if _, err := io.Copy(io.Discard, conn); err == nil {
					conn.Write([]byte("{}"))
				}
			}()
		}
	}()
	for _, bin := range []string{"cni-ipam", "cni-ipam-lean"} {
		b.Run(bin, func(b *testing.B) {
			del := cniCall{command: "DEL", container: "c-fwd", ifname: "eth0", conf: agentConf(socket, ""), bin: bin}
			for b.Loop() {
				if r := del.runRaw(b); r.exit != 0 {
					b.Fatalf("DEL: %+v", r)
				}
			}
		})
	}
}

// TestAgentAPIRestart: while the API server is down, the agent answers ADD
// with 11 (it stays up, its socket stays); once the server is back, the
// same agent serves again, pods created since included, and a pod's ADD
// again returns what it holds.
func TestAgentAPIRestart(t *testing.T) {
	kubeconfig := kubeconfigFile(t)
	c, socket := agentFixture(t, "agent-s", "10.66.0.")
	conf := agentConf(socket, `, "default_ipv4_ippool": ["agent-s"]`)
	agent := startAgent(t, kubeconfig, "agent-s-node", socket)
	add := func(p *corev1.Pod) cniCall {
		return cniCall{command: "ADD", container: "c-" + p.Name, ifname: "eth0", args: podArgs(p), conf: conf}
	}
	before := add(c.pod(podSpec{name: "before", node: "agent-s-node", phase: corev1.PodRunning}))
	first := before.runRaw(t)
	if first.exit != 0 {
		t.Fatalf("ADD: %+v", first)
	}
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	started := false
	t.Cleanup(func() {
		if !started {
			if err := srv.StartAPI(); err != nil {
				t.Error(err)
			}
		}
	})
	if r := before.runRaw(t); r.code(t) != 11 {
		t.Errorf("ADD with the API server down: %+v, want 11", r)
	}
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	started = true
	after := add(c.pod(podSpec{name: "after", node: "agent-s-node", phase: corev1.PodRunning}))
	deadline := time.Now().Add(time.Minute)
	for {
		r := after.runRaw(t)
		if r.exit == 0 {
			break
		}
		if r.code(t) != 11 || time.Now().After(deadline) {
			t.Fatalf("ADD after the API server came back: %+v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r := before.runRaw(t); r.stdout != first.stdout {
		t.Errorf("ADD again after the restart printed %s, before %s (stderr %s)", r.stdout, first.stdout, r.stderr)
	}
	if agent.cmd.ProcessState != nil {
		t.Errorf("the agent exited: %v", agent.cmd.ProcessState)
	}
}

// TestAgentDrain: SIGTERM while a call is in flight (its create of a claim
// held at the API server): the agent stops accepting at once (its socket
// is gone, a new call gets 11), finishes the call, which succeeds, and
// exits 0.
func TestAgentDrain(t *testing.T) {
	c, socket := agentFixture(t, "agent-d", "10.67.0.")
	proxy := newProxyLog(t)
	conf := agentConf(socket, `, "default_ipv4_ippool": ["agent-d"]`)
	agent := startAgent(t, proxy.kubeconfig(t), "agent-d-node", socket)
	p := c.pod(podSpec{name: "web", node: "agent-d-node", phase: corev1.PodRunning})
	add := cniCall{command: "ADD", container: "c-web", ifname: "eth0", args: podArgs(p), conf: conf}
	held, release := proxy.hold(func(r *http.Request) bool {
		return r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/ipclaims")
	})
	defer release()
	result := make(chan cniRun, 1)
	go func() { result <- add.runRaw(t) }()
	select {
	case <-held:
	case r := <-result:
		t.Fatalf("ADD returned before its create reached the server: %+v", r)
	}
	if err := agent.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the socket removed after SIGTERM", func() bool {
		_, err := os.Lstat(socket)
		return errors.Is(err, os.ErrNotExist)
	})
	other := add
	other.container = "c-other"
	if r := other.runRaw(t); r.code(t) != 11 {
		t.Errorf("a call after SIGTERM: %+v, want 11", r)
	}
	release()
	if r := <-result; r.exit != 0 {
		t.Errorf("the call in flight at SIGTERM: %+v, want success", r)
	}
	if err := <-agent.done; err != nil {
		t.Errorf("the agent's exit after draining: %v, want status 0", err)
	}
}
