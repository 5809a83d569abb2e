package kubetest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/store"
)

// gcCluster writes the pods, nodes and StatefulSets of a garbage
// collection test, and removes them at the end.
type gcCluster struct {
	t  *testing.T
	cs kubernetes.Interface
	ns string
}

func newGCCluster(t *testing.T, ns string) *gcCluster {
	c := &gcCluster{t: t, cs: kubernetes.NewForConfigOrDie(srv.Config()), ns: ns}
	t.Cleanup(c.clean)
	return c
}

// clean removes the finalizers that hold terminating pods, and deletes
// every pod and StatefulSet of the namespace.
func (c *gcCluster) clean() {
	ctx := context.Background()
	pods, err := c.cs.CoreV1().Pods(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Errorf("cleaning up: %v", err)
		return
	}
	for _, p := range pods.Items {
		if len(p.Finalizers) > 0 {
			p.Finalizers = nil
			if _, err := c.cs.CoreV1().Pods(c.ns).Update(ctx, &p, metav1.UpdateOptions{}); err != nil {
				c.t.Errorf("cleaning up %s: %v", p.Name, err)
			}
		}
	}
	_ = c.cs.CoreV1().Pods(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = c.cs.AppsV1().StatefulSets(c.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

func (c *gcCluster) node(name string, ready bool) {
	c.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}}}
	if _, err := c.cs.CoreV1().Nodes().Create(c.t.Context(), n, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = c.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func (c *gcCluster) statefulSet(name string, replicas int32) {
	c.t.Helper()
	ctx := c.t.Context()
	s, err := c.cs.AppsV1().StatefulSets(c.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		s = &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name}, Spec: appsv1.StatefulSetSpec{Replicas: &replicas}}
		_, err = c.cs.AppsV1().StatefulSets(c.ns).Create(ctx, s, metav1.CreateOptions{})
	} else {
		s.Spec.Replicas = &replicas
		_, err = c.cs.AppsV1().StatefulSets(c.ns).Update(ctx, s, metav1.UpdateOptions{})
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// podSpec describes a pod of the test.
type podSpec struct {
	name, node string
	phase      corev1.PodPhase
	noIPs      bool
	set        string        // controlling StatefulSet
	finished   time.Duration // for a finished pod: how long ago
	grace      int64         // spec.terminationGracePeriodSeconds
	hold       bool          // a finalizer, so that a Delete leaves it terminating
}

func (c *gcCluster) pod(s podSpec) *corev1.Pod {
	c.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: s.name},
		Spec:       corev1.PodSpec{NodeName: s.node, TerminationGracePeriodSeconds: &s.grace},
		Status:     corev1.PodStatus{Phase: s.phase},
	}
	if !s.noIPs {
		p.Status.PodIPs = []corev1.PodIP{{IP: "192.0.2.1"}}
	}
	if s.set != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: s.set, UID: "set-uid", Controller: new(true)}}
	}
	if s.finished > 0 {
		at := metav1.NewTime(time.Now().Add(-s.finished))
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: at}}}}
	}
	if s.hold {
		p.Finalizers = []string{"kubetest/hold"}
	}
	got, err := c.cs.CoreV1().Pods(c.ns).Create(c.t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return got
}

func (c *gcCluster) deletePod(name string) {
	c.t.Helper()
	if err := c.cs.CoreV1().Pods(c.ns).Delete(c.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// passLog gathers the passes of several Runners.
type passLog struct {
	mu     sync.Mutex
	passes map[int][]kubegc.Pass
}

func (l *passLog) observe(replica int) func(kubegc.Pass) {
	return func(p kubegc.Pass) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.passes[replica] = append(l.passes[replica], p)
	}
}

// releases returns, per claim (key@revision), the decisions that released
// it, and the number of releases tried that found the claim gone or
// changed.
func (l *passLog) releases() (map[string][]gc.Decision, int, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]gc.Decision{}
	lost := 0
	var errs []error
	for _, ps := range l.passes {
		for _, p := range ps {
			if p.Err != nil {
				errs = append(errs, p.Err)
			}
			for _, d := range p.Decisions {
				switch {
				case d.Applied:
					k := fmt.Sprintf("%s@%d", d.Claim.Key(), d.Claim.Revision)
					out[k] = append(out[k], d)
				case d.Release && d.Err != nil:
					lost++
				}
			}
		}
	}
	return out, lost, errs
}

// TestGCRunner runs two garbage collectors at once against pods deleted,
// terminating past their grace period (on a Ready node, and on a node that
// is not Ready, whose pods' claims the options keep), finished, re-created
// with a new UID, StatefulSet members (valid, and scaled away), on a node
// not Ready, and pods created while they run: every claim gc.Decide releases
// is released once, by one of them, and no other claim is touched.
func TestGCRunner(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	c := newGCCluster(t, "gc")
	c.node("gc-ready", true)
	c.node("gc-notready", false)
	c.statefulSet("db", 2)

	pool := &ipam.Pool{Name: "gc", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.40.0.0/24")}}}
	cat, err := ipam.NewCatalog(pool)
	if err != nil {
		t.Fatal(err)
	}
	// The allocator of the node agents, which claims addresses for pods.
	agent, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	claims := map[string]store.Claim{} // by pod name (and "again-old")
	claim := func(key string, p *corev1.Pod) {
		t.Helper()
		res, err := agent.Allocate(ctx, k8s.Request(p, nil, nil, ipam.NIC{Name: "eth0", Pools: []string{"gc"}}))
		if err != nil {
			t.Fatal(err)
		}
		got, err := newStore(t).Get(ctx, "gc", res.IPs[0].Address.Addr())
		if err != nil {
			t.Fatal(err)
		}
		claims[key] = got
	}
	for _, s := range []podSpec{
		{name: "web", node: "gc-ready", phase: corev1.PodRunning},
		{name: "pending", node: "gc-ready", phase: corev1.PodPending, noIPs: true},
		{name: "gone", node: "gc-ready", phase: corev1.PodRunning},
		{name: "term", node: "gc-ready", phase: corev1.PodRunning, hold: true},
		{name: "term-nr", node: "gc-notready", phase: corev1.PodRunning, hold: true},
		{name: "run-nr", node: "gc-notready", phase: corev1.PodRunning},
		{name: "done", node: "gc-ready", phase: corev1.PodSucceeded, finished: time.Hour},
		{name: "failed", node: "gc-ready", phase: corev1.PodFailed, finished: time.Second, grace: 3600},
		{name: "again", node: "gc-ready", phase: corev1.PodRunning},
		{name: "db-0", node: "gc-ready", phase: corev1.PodRunning, set: "db"},
		{name: "db-1", node: "gc-ready", phase: corev1.PodRunning, set: "db"},
	} {
		claim(s.name, c.pod(s))
	}

	// Two replicas, each with its own Allocator and client.
	var log passLog
	log.passes = map[int][]kubegc.Pass{}
	// No periodic pass but the first: what happens later is found by
	// events and deadlines alone.
	opts := kubegc.Options{
		GC:          gc.Options{AdditionalGraceDelay: 2 * time.Second, DisableTerminatingOnNotReadyNode: true},
		Period:      time.Hour,
		MinInterval: 20 * time.Millisecond,
	}
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	var runners []*kubegc.Runner
	for i := range 2 {
		a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: newStore(t)})
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Observe = log.observe(i)
		o.Logger = slog.New(slog.NewTextHandler(tlogWriter{t}, nil))
		r, err := kubegc.New(srv.Config(), a, o)
		if err != nil {
			t.Fatal(err)
		}
		runners = append(runners, r)
		wg.Go(func() {
			if err := r.Run(rctx); err != context.Canceled {
				t.Errorf("Run: %v, want context.Canceled", err)
			}
		})
	}

	// Meanwhile: deleted; terminating (held by a finalizer); deleted and
	// created again with a new UID, which is claimed; a StatefulSet
	// member deleted; a pod created and claimed.
	c.deletePod("gone")
	c.deletePod("term")
	c.deletePod("term-nr")
	// term-nr is kept as terminating until its delay has passed, and then
	// for its node (DisableTerminatingOnNotReadyNode); the deletion
	// timestamp has whole seconds.
	termNrSettled := time.Now().Add(time.Second + opts.GC.AdditionalGraceDelay + 100*time.Millisecond)
	c.deletePod("again")
	claims["again-old"] = claims["again"]
	claim("again", c.pod(podSpec{name: "again", node: "gc-ready", phase: corev1.PodRunning}))
	c.deletePod("db-1")
	claim("fresh", c.pod(podSpec{name: "fresh", node: "gc-ready", phase: corev1.PodRunning}))

	// What must go, with the reasons gc.Decide may give (a re-created pod's
	// old claim is judged uid-mismatch or, if judged between the delete and
	// the create, pod-gone).
	released := map[string][]gc.Reason{
		"gone":      {gc.ReleasePodGone},
		"term":      {gc.ReleaseTerminating},
		"done":      {gc.ReleaseFinished},
		"again-old": {gc.ReleaseUIDMismatch, gc.ReleasePodGone},
	}
	check := func(stage string, released map[string][]gc.Reason) {
		t.Helper()
		want := map[string]bool{}
		for name, cl := range claims {
			if _, ok := released[name]; !ok {
				want[fmt.Sprintf("%s@%d", cl.Key(), cl.Revision)] = true
			}
		}
		st := newStore(t)
		var got map[string]bool
		// Every release logged: a runner logs a release once its Delete
		// returns, which prunes the owner's index after the claim is gone.
		logged := func() bool {
			byClaim, _, _ := log.releases()
			for name := range released {
				cl := claims[name]
				if len(byClaim[fmt.Sprintf("%s@%d", cl.Key(), cl.Revision)]) == 0 {
					return false
				}
			}
			return true
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			all, err := st.List(ctx, "gc")
			if err != nil {
				t.Fatal(err)
			}
			got = map[string]bool{}
			for _, cl := range all {
				got[fmt.Sprintf("%s@%d", cl.Key(), cl.Revision)] = true
			}
			if fmt.Sprint(got) == fmt.Sprint(want) && logged() || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: claims left %v, want %v", stage, sorted(got), sorted(want))
		}
		// Each released once, for a reason gc.Decide gives, and nothing else.
		byClaim, lost, errs := log.releases()
		for _, err := range errs {
			t.Errorf("%s: a pass failed: %v", stage, err)
		}
		names := map[string]string{}
		for name, cl := range claims {
			names[fmt.Sprintf("%s@%d", cl.Key(), cl.Revision)] = name
		}
		for k, ds := range byClaim {
			name := names[k]
			reasons, ok := released[name]
			switch {
			case !ok:
				t.Errorf("%s: claim %s of %s released, which must be kept: %s", stage, k, name, ds[0].Message)
			case len(ds) != 1:
				t.Errorf("%s: claim %s of %s released %d times", stage, k, name, len(ds))
			case !containsReason(reasons, ds[0].Reason):
				t.Errorf("%s: claim %s of %s released for %s (%s), want one of %v", stage, k, name, ds[0].Reason, ds[0].Message, reasons)
			}
		}
		for name := range released {
			cl := claims[name]
			if len(byClaim[fmt.Sprintf("%s@%d", cl.Key(), cl.Revision)]) == 0 {
				t.Errorf("%s: claim of %s gone, but no pass says it released it", stage, name)
			}
		}
		t.Logf("%s: %d claims released, %d releases found the claim already gone", stage, len(byClaim), lost)
	}
	check("first", released)

	// Scaled away: db-1, gone, is no longer a valid member.
	c.statefulSet("db", 1)
	released["db-1"] = []gc.Reason{gc.ReleasePodGone}
	check("after the StatefulSet scaled down", released)

	// The kept claims' reasons, as a full pass judges them now.
	want := map[string]gc.Reason{
		"web": gc.KeepRunning, "pending": gc.KeepPending, "term-nr": gc.KeepNotReadyNode,
		"run-nr": gc.KeepRunning, "failed": gc.KeepFinished, "again": gc.KeepRunning,
		"db-0": gc.KeepRunning, "fresh": gc.KeepRunning,
	}
	got := map[string]gc.Reason{}
	time.Sleep(time.Until(termNrSettled))
	last := runners[0].CollectAll(ctx)
	if last.Err != nil {
		t.Fatal(last.Err)
	}
	for _, d := range last.Decisions {
		got[d.Claim.Owner.Name] = d.Reason
	}
	for name, reason := range want {
		if got[name] != reason {
			t.Errorf("last full pass kept %s for %q, want %q", name, got[name], reason)
		}
	}
}

func containsReason(rs []gc.Reason, r gc.Reason) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

func sorted(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, " ")
}

type tlogWriter struct{ t *testing.T }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
