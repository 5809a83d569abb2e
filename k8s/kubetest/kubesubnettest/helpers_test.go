package kubesubnettest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go4.org/netipx"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/subnet"
)

func dyn(t testing.TB) dynamic.Interface {
	t.Helper()
	d, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func kube(t testing.TB) kubernetes.Interface {
	t.Helper()
	k, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// createSubnet creates a SpiderSubnet in the form Spiderpool's webhook
// leaves it.
func createSubnet(t testing.TB, name, cidr, ips, gateway string) {
	t.Helper()
	spec := map[string]any{"subnet": cidr, "ips": []any{ips}}
	if p := netip.MustParsePrefix(cidr); p.Addr().Is4() {
		spec["ipVersion"] = int64(4)
	} else {
		spec["ipVersion"] = int64(6)
	}
	if gateway != "" {
		spec["gateway"] = gateway
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderSubnet",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
	if _, err := dyn(t).Resource(kubesubnet.SubnetResource).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating SpiderSubnet %s: %v", name, err)
	}
	t.Cleanup(func() { deleteSubnet(t, name) })
}

// deleteSubnet deletes a SpiderSubnet and every pool labelled with it,
// finalizers and all, so that a test can run again on the same server.
func deleteSubnet(t testing.TB, name string) {
	ctx := context.Background()
	pools := dyn(t).Resource(kubesubnet.IPPoolResource)
	list, err := pools.List(ctx, metav1.ListOptions{LabelSelector: subnet.LabelOwnerSubnet + "=" + name})
	if err != nil {
		t.Error(err)
		return
	}
	for _, u := range list.Items {
		if len(u.GetFinalizers()) > 0 {
			u.SetFinalizers(nil)
			if _, err := pools.Update(ctx, &u, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
		if err := pools.Delete(ctx, u.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	}
	if err := dyn(t).Resource(kubesubnet.SubnetResource).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}

// statefulSet creates (or, if it exists, updates the replicas and
// annotations of) a StatefulSet whose pod template has ann.
func statefulSet(t testing.TB, ns, name string, replicas int32, ann map[string]string) *appsv1.StatefulSet {
	t.Helper()
	ctx := context.Background()
	c := kube(t).AppsV1().StatefulSets(ns)
	cur, err := c.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		cur.Spec.Replicas = &replicas
		cur.Spec.Template.Annotations = ann
		out, err := c.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("updating StatefulSet %s/%s: %v", ns, name, err)
		}
		return out
	}
	if !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	out, err := c.Create(ctx, statefulSetObject(ns, name, replicas, ann), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating StatefulSet %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() {
		if err := c.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
	})
	return out
}

// statefulSetObject is a StatefulSet whose pod template has ann.
func statefulSetObject(ns, name string, replicas int32, ann map[string]string) *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas,
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: ann}},
		},
	}
}

func subnetAnn(subnet string, kv ...string) map[string]string {
	m := map[string]string{ipam.AnnotationSubnet: `{"ipv4":["` + subnet + `"]}`}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func appOf(s *appsv1.StatefulSet) ipam.AppRef {
	return ipam.AppRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name, UID: string(s.UID)}
}

// logBuffer is a log sink safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startRunner runs a Runner until the test ends and returns it once it has
// read the cluster.
func startRunner(t testing.TB, opts kubesubnet.Options) (*kubesubnet.Runner, *logBuffer) {
	t.Helper()
	r, logs := newRunner(t, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatalf("the runner did not read the cluster in 30 s; its log:\n%s", logs)
	}
	return r, logs
}

func newRunner(t testing.TB, opts kubesubnet.Options) (*kubesubnet.Runner, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	if opts.Claims == nil {
		st, err := kubestore.New(srv.Config(), kubestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		opts.Claims = st
	}
	if opts.Kinds == nil {
		opts.Kinds = []string{kubesubnet.KindStatefulSet} // the kind these tests make applications of
	}
	if opts.SyncPeriod == 0 {
		opts.SyncPeriod = 500 * time.Millisecond
	}
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := kubesubnet.New(srv.Config(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return r, logs
}

// agent is an allocator as a CNI plugin's agent runs it: claims in IPClaim
// objects, pools from the SpiderIPPools, auto-pools found by
// kubesubnet.Pools.
type agent struct {
	alloc *ipam.Allocator
	pools *kubesubnet.Pools
	store *kubestore.Store
}

func startAgent(t testing.TB) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	src, err := kubepools.New(srv.Config(), kubepools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pools, err := kubesubnet.NewPools(srv.Config(), src)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = src.Run(ctx) })
	wg.Go(func() { _ = pools.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if err := src.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	if err := pools.WaitForSync(wctx); err != nil {
		t.Fatal(err)
	}
	st, err := kubestore.New(srv.Config(), kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := ipam.NewAllocator(ipam.Options{Pools: pools, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return &agent{alloc: alloc, pools: pools, store: st}
}

// request is a pod's request for eth0.
func request(ns, name string, app ipam.AppRef, ann map[string]string) ipam.Request {
	return ipam.Request{Namespace: ns, Name: name, UID: "uid-" + ns + "-" + name, App: app, Annotations: ann,
		Interfaces: []ipam.NIC{{Name: "eth0"}}}
}

// eventually waits until cond holds, checking every 10 ms for up to 20 s;
// cond says what it saw, for the failure message.
func eventually(t testing.TB, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 20 s; last saw %s", what, saw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// poolIPs returns the spec.ips of the SpiderIPPool named name, and whether
// it exists, with its deletionTimestamp set (terminating).
func poolIPs(t testing.TB, name string) (ips []string, exists, terminating bool) {
	t.Helper()
	u, err := dyn(t).Resource(kubesubnet.IPPoolResource).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	ips, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "ips")
	return ips, true, u.GetDeletionTimestamp() != nil
}

// waitIPs waits until pool name has exactly ips.
func waitIPs(t testing.TB, name string, want ...string) {
	t.Helper()
	eventually(t, fmt.Sprintf("SpiderIPPool %s with ips %v", name, want), func() (bool, string) {
		ips, ok, _ := poolIPs(t, name)
		return ok && fmt.Sprint(ips) == fmt.Sprint(want), fmt.Sprintf("exists %v, ips %v", ok, ips)
	})
}

// checkDisjoint fails if two SpiderIPPools share an address.
func checkDisjoint(t testing.TB) {
	t.Helper()
	list, err := dyn(t).Resource(kubesubnet.IPPoolResource).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[netip.Addr]string{}
	for _, u := range list.Items {
		p, _, err := kubesubnet.Pool(&u)
		if err != nil {
			t.Fatalf("SpiderIPPool %s: %v", u.GetName(), err)
		}
		var b netipx.IPSetBuilder
		for _, r := range p.IPs {
			b.AddRange(r)
		}
		set, _ := b.IPSet()
		for _, r := range set.Ranges() {
			for ip := r.From(); r.Contains(ip); ip = ip.Next() {
				if o, dup := owner[ip]; dup {
					t.Fatalf("address %s is in pools %s and %s", ip, o, u.GetName())
				}
				owner[ip] = u.GetName()
			}
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// nsResource is the Namespaces resource, for locks kept on a namespace.
var nsResource = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// spiderpoolName is the name Spiderpool gives the IPv4 auto-pool of app's
// eth0: the first of subnet.AutoPoolNames.
func spiderpoolName(t testing.TB, app ipam.AppRef) string {
	t.Helper()
	names, err := subnet.AutoPoolNames(4, app, "eth0")
	if err != nil {
		t.Fatal(err)
	}
	return names[0]
}
