package kubetest_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/store"
)

var (
	controllerOnce sync.Once
	controllerBin  string
	controllerErr  error
)

// controllerProgram builds cmd/ipam-controller once (apart from programs:
// the plugin's tests need not wait for it).
func controllerProgram(t *testing.T) string {
	t.Helper()
	controllerOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kubetest-controller-")
		if err != nil {
			controllerErr = err
			return
		}
		controllerBin = filepath.Join(dir, "ipam-controller")
		controllerErr = goBuild(controllerBin, "../../cmd/ipam-controller", "")
	})
	if controllerErr != nil {
		t.Fatal(controllerErr)
	}
	return controllerBin
}

// replica is one ipam-controller process of a test.
type replica struct {
	id       string
	cmd      *exec.Cmd
	addr     chan string // where it serves /metrics, once
	done     chan error  // its exit
	addrOnce sync.Once
	url      string
}

var servingAddr = regexp.MustCompile(`msg="ipam-controller: serving" addr=(\S+)`)

// startReplica runs ipam-controller with args, its log in t's.
func startReplica(t *testing.T, id string, args ...string) *replica {
	t.Helper()
	r := &replica{id: id, addr: make(chan string, 1), done: make(chan error, 1)}
	r.cmd = exec.Command(controllerProgram(t), append([]string{"--id", id, "--listen", "127.0.0.1:0"}, args...)...)
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			t.Log(id + ": " + line)
			if m := servingAddr.FindStringSubmatch(line); m != nil {
				r.addrOnce.Do(func() { r.addr <- m[1] })
			}
		}
		r.done <- r.cmd.Wait()
	}()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	select {
	case a := <-r.addr:
		r.url = "http://" + a
	case err := <-r.done:
		t.Fatalf("%s exited before serving: %v", id, err)
	case <-time.After(time.Minute):
		t.Fatalf("%s: not serving after a minute", id)
	}
	return r
}

// get returns the status and body of path on r.
func (r *replica) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.url + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond for up to a minute (the machine may be loaded: the
// bound is for a hang, not for speed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hasEvent reports whether namespace ns has an Event of reason about the
// object named name (of kind kind) whose note contains note.
func hasEvent(t *testing.T, cs kubernetes.Interface, ns, kind, name, reason, note string) bool {
	t.Helper()
	list, err := cs.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing events of %s: %v", ns, err)
	}
	for _, e := range list.Items {
		if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, note) {
			return true
		}
	}
	return false
}

func eventsOf(t *testing.T, cs kubernetes.Interface, ns string) []eventsv1.Event {
	list, err := cs.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestControllerProgram runs two replicas of cmd/ipam-controller, built as
// a program, against the server through a kubeconfig: both answer /healthz,
// /readyz once synced, and /metrics; one leads; a deleted pod's claim is
// released with an Event and counted in ipamkit_gc_released_total; an
// invalid SpiderIPPool gets an Event; SIGTERM stops the leader (status 0),
// the other takes the lease over and collects in its turn. Every request the
// replicas made is allowed by deploy/rbac-controller.yaml.
func TestControllerProgram(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	const ns = "ctrl"
	c := newGCCluster(t, ns)
	cs := c.cs
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	c.node("ctrl-node", true)
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "ctrl", map[string]any{
		"ipVersion": int64(4), "subnet": "10.60.0.0/24", "ips": []any{"10.60.0.10-10.60.0.20"},
	})
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "ctrl-bad", map[string]any{
		"ipVersion": int64(4), "subnet": "10.61.0.0/24", "ips": []any{"10.62.0.1"},
	})
	// The other tests share the server: leave no pool (an invalid one
	// fails ipamctl's).
	t.Cleanup(func() {
		pools := dynamic.NewForConfigOrDie(srv.Config()).Resource(kubepools.IPPoolResource)
		for _, name := range []string{"ctrl", "ctrl-bad"} {
			if err := pools.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
				t.Errorf("cleaning up SpiderIPPool %s: %v", name, err)
			}
		}
	})

	// The node agents' allocator, which claims addresses for pods.
	pool := &ipam.Pool{Name: "ctrl", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.60.0.0/24"),
		Start: netip.MustParseAddr("10.60.0.10"), End: netip.MustParseAddr("10.60.0.20")}}}
	cat, err := ipam.NewCatalog(pool)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(name string) store.Claim {
		t.Helper()
		p := c.pod(podSpec{name: name, node: "ctrl-node", phase: corev1.PodRunning})
		res, err := agent.Allocate(ctx, k8s.Request(p, nil, nil, ipam.NIC{Name: "eth0", Pools: []string{"ctrl"}}))
		if err != nil {
			t.Fatal(err)
		}
		got, err := newStore(t).Get(ctx, "ctrl", res.IPs[0].Address.Addr())
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	gone := func(cl store.Claim) func() bool {
		return func() bool {
			_, err := newStore(t).Get(ctx, cl.Pool, cl.IP)
			return errors.Is(err, store.ErrNotFound)
		}
	}
	first := claim("first")

	kubeconfig := kubeconfigFile(t)
	// The Lease where deploy/ puts it (its Role is in that namespace).
	const leaseNS = installNamespace
	t.Cleanup(func() {
		_ = cs.CoordinationV1().Leases(leaseNS).Delete(context.Background(), "ipam-controller", metav1.DeleteOptions{})
	})
	args := []string{"--kubeconfig", kubeconfig, "--lease-namespace", leaseNS, "--lease-name", "ipam-controller",
		"--lease-duration", "8s", "--renew-deadline", "6s", "--retry-period", "500ms",
		"--gc-period", "1h", "--usage-interval", "500ms"} // every --subnet-kinds, as deploy/ runs it
	replicas := map[string]*replica{}
	for _, id := range []string{"r0", "r1"} {
		replicas[id] = startReplica(t, id, args...)
	}
	for id, r := range replicas {
		waitFor(t, id+" ready", func() bool { code, _ := r.get(t, "/readyz"); return code == http.StatusOK })
		if code, body := r.get(t, "/healthz"); code != http.StatusOK {
			t.Fatalf("%s /healthz: %d %s", id, code, body)
		}
		code, body := r.get(t, "/metrics")
		if code != http.StatusOK || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "ipamkit_controller_leading") {
			t.Fatalf("%s /metrics: %d\n%s", id, code, body)
		}
	}
	holder := func() string {
		l, err := cs.CoordinationV1().Leases(leaseNS).Get(ctx, "ipam-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	waitFor(t, "a leader", func() bool { return replicas[holder()] != nil })
	leader := holder()
	other := "r0"
	if leader == "r0" {
		other = "r1"
	}
	waitFor(t, leader+" reports it leads", func() bool {
		_, body := replicas[leader].get(t, "/metrics")
		return strings.Contains(body, "ipamkit_controller_leading 1")
	})
	if _, body := replicas[other].get(t, "/metrics"); !strings.Contains(body, "ipamkit_controller_leading 0") {
		t.Fatalf("%s, standing by, does not report 0:\n%s", other, body)
	}
	// Pool usage, read from the Store at each scrape, on every replica.
	for id, r := range replicas {
		waitFor(t, id+" serves the usage of ctrl", func() bool {
			_, body := r.get(t, "/metrics")
			return strings.Contains(body, `ipamkit_pool_capacity_addresses{family="4",pool="ctrl"}`)
		})
	}

	// The count columns of the pool, written by the leader: one of 11.
	waitFor(t, "the count columns of ctrl", func() bool {
		a, tot := counts(t, kubepools.IPPoolResource, "ctrl")
		return a == 1 && tot == 11
	})

	// A deleted pod's claim goes, with an Event on the pod, counted.
	c.deletePod("first")
	waitFor(t, "the claim of the deleted pod released", gone(first))
	waitFor(t, "the IPReleased Event of pod first", func() bool {
		return hasEvent(t, cs, ns, "Pod", "first", kubegc.EventReleased, first.IP.String())
	})
	waitFor(t, leader+" counts the release", func() bool {
		_, body := replicas[leader].get(t, "/metrics")
		return strings.Contains(body, `ipamkit_gc_released_total{reason="pod-gone"} 1`)
	})
	// The invalid pool, skipped by the controller's pool source.
	waitFor(t, "the InvalidPool Event of ctrl-bad", func() bool {
		return hasEvent(t, cs, metav1.NamespaceDefault, "SpiderIPPool", "ctrl-bad", kubepools.EventInvalidPool, "10.62.0.1")
	})

	// SIGTERM: the leader stops cleanly and gives its lease up; the other
	// takes over and collects.
	if err := replicas[leader].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-replicas[leader].done:
		if err != nil {
			t.Fatalf("%s after SIGTERM: %v, want status 0", leader, err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("%s still runs a minute after SIGTERM", leader)
	}
	waitFor(t, other+" takes the lease", func() bool { return holder() == other })
	waitFor(t, "the count columns of ctrl after the release", func() bool {
		a, tot := counts(t, kubepools.IPPoolResource, "ctrl")
		return a == 0 && tot == 11
	})
	second := claim("second")
	c.deletePod("second")
	waitFor(t, "the claim of the second deleted pod released by "+other, gone(second))
	waitFor(t, other+" counts its release", func() bool {
		_, body := replicas[other].get(t, "/metrics")
		return strings.Contains(body, `ipamkit_gc_released_total{reason="pod-gone"} 1`) &&
			strings.Contains(body, "ipamkit_controller_leading 1")
	})
	if !hasEvent(t, cs, ns, "Pod", "second", kubegc.EventReleased, second.IP.String()) {
		waitFor(t, "the IPReleased Event of pod second", func() bool {
			return hasEvent(t, cs, ns, "Pod", "second", kubegc.EventReleased, second.IP.String())
		})
	}
	for _, e := range eventsOf(t, cs, ns) {
		t.Logf("event %s %s/%s: %s", e.Reason, e.Regarding.Kind, e.Regarding.Name, e.Note)
	}
	// Every request the replicas made is allowed by the RBAC deploy/
	// ships for them.
	checkRBAC(t, "ipam-controller/", "../../deploy/rbac-controller.yaml", "ipam-controller")
}
