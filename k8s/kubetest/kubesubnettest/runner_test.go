package kubesubnettest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubesubnet"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/subnet"
)

// TestRunnerLifecycle follows one application through its life on the real
// API server: its pool is created when it appears, grows and shrinks with
// it, serves its pods and only them, waits for its pods before it shrinks
// past their addresses, and goes with it, terminating while a pod holds an
// address.
func TestRunnerLifecycle(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "life-6", "10.60.0.0/16", "10.60.168.101-10.60.168.120", "10.60.0.1")
	r, logs := startRunner(t, kubesubnet.Options{})
	a := startAgent(t)

	// A pod of an application the runner has not seen: told to retry, at
	// once.
	ghost := ipam.AppRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "life", Name: "ghost", UID: "u-ghost-00000"}
	start := time.Now()
	_, err := a.alloc.Allocate(ctx, request("life", "ghost-0", ghost, subnetAnn("life-6")))
	require.ErrorIs(t, err, ipam.ErrNotReady)
	require.ErrorContains(t, err, "the application has no pool of this interface and family yet")
	require.Less(t, time.Since(start), 20*time.Second, "no waiting loop (20 s: a loaded machine)")

	db := statefulSet(t, "life", "db", 2, subnetAnn("life-6"))
	name := spiderpoolName(t, appOf(db))
	waitIPs(t, name, "10.60.168.101-10.60.168.103")

	// The object is what Spiderpool's controller writes.
	u, err := dyn(t).Resource(kubesubnet.IPPoolResource).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		subnet.LabelOwnerSubnet: "life-6", subnet.LabelOwnerAppGV: "apps_v1", subnet.LabelOwnerAppKind: "StatefulSet",
		subnet.LabelOwnerAppNamespace: "life", subnet.LabelOwnerAppName: "db", subnet.LabelOwnerAppUID: string(db.UID),
		subnet.LabelInterface: "eth0", subnet.LabelIPVersion: "IPv4", subnet.LabelReclaim: "true", subnet.LabelCIDR: "10-60-0-0-16",
	}, u.GetLabels())
	require.Equal(t, map[string]string{subnet.AnnotationIPNumber: "+1"}, u.GetAnnotations())
	require.Equal(t, []string{subnet.Finalizer}, u.GetFinalizers())
	require.Len(t, u.GetOwnerReferences(), 1)
	require.Equal(t, "SpiderSubnet", u.GetOwnerReferences()[0].Kind)
	require.Equal(t, "life-6", u.GetOwnerReferences()[0].Name)
	gw, _, _ := unstructured.NestedString(u.Object, "spec", "gateway")
	require.Equal(t, "10.60.0.1", gw)
	aff, _, _ := unstructured.NestedStringMap(u.Object, "spec", "podAffinity", "matchLabels")
	require.Equal(t, map[string]string{ipam.LabelAppAPIGroup: "apps", ipam.LabelAppAPIVersion: "v1", ipam.LabelAppKind: "StatefulSet",
		ipam.LabelAppNamespace: "life", ipam.LabelAppName: "db"}, aff)

	// Its pods are served from it; another application's pod that names it
	// is refused, as in Spiderpool.
	eventually(t, "the agent sees the pool", func() (bool, string) {
		_, err := a.pools.AutoPool(&ipam.Request{App: appOf(db)}, "eth0", 4, "life-6")
		return err == nil, fmt.Sprint(err)
	})
	res, err := a.alloc.Allocate(ctx, request("life", "db-0", appOf(db), subnetAnn("life-6")))
	require.NoError(t, err)
	require.Equal(t, name, res.IPs[0].Pool)
	require.Equal(t, ipam.SourceSubnet, res.Trace[0].Source)
	held := res.IPs[0].Address.Addr()
	other := ipam.AppRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "life", Name: "web", UID: "u-web-11111"}
	_, err = a.alloc.Allocate(ctx, request("life", "web-0", other, map[string]string{ipam.AnnotationIPPool: `{"ipv4":["` + name + `"]}`}))
	require.ErrorIs(t, err, ipam.ErrNoCandidates)
	require.ErrorContains(t, err, "pod's application StatefulSet life/web (apps/v1) does not match the podAffinity of an auto-created pool")

	// Scale up: the pool grows by the lowest free addresses.
	statefulSet(t, "life", "db", 4, subnetAnn("life-6"))
	waitIPs(t, name, "10.60.168.101-10.60.168.105")

	// Scale down to 1 (+1 = 2): the lowest free addresses go back; the one
	// db-0 holds stays.
	statefulSet(t, "life", "db", 1, subnetAnn("life-6"))
	var want []string
	for _, ip := range []string{"10.60.168.101", "10.60.168.102", "10.60.168.103", "10.60.168.104", "10.60.168.105"} {
		if ip == held.String() || ip == "10.60.168.105" {
			want = append(want, ip)
		}
	}
	if held.String() == "10.60.168.104" {
		want = []string{"10.60.168.104-10.60.168.105"}
	}
	waitIPs(t, name, want...)
	require.Equal(t, int64(2), statusOf(t, r, "life-6").AllocatedIPCount)

	// The application goes while db-0 holds its address: the pool
	// terminates (no new allocation), then goes once the pod is gone.
	pod, err := kube(t).CoreV1().Pods("life").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "life", Name: "db-0"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, kube(t).AppsV1().StatefulSets("life").Delete(ctx, "db", metav1.DeleteOptions{}))
	eventually(t, "the pool terminating", func() (bool, string) {
		_, ok, term := poolIPs(t, name)
		return ok && term, logs.String()
	})
	require.NoError(t, a.alloc.Release(ctx, store.Owner{UID: "uid-life-db-0"}))
	require.NoError(t, kube(t).CoreV1().Pods("life").Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	eventually(t, "the pool gone", func() (bool, string) {
		_, ok, _ := poolIPs(t, name)
		return !ok, logs.String()
	})
	eventually(t, "the subnet's addresses back", func() (bool, string) {
		st := statusOf(t, r, "life-6")
		return st.AllocatedIPCount == 0, mustJSON(st)
	})
	// No claim is left behind.
	cs, err := a.store.List(ctx, name)
	require.NoError(t, err)
	require.Empty(t, cs)
	checkDisjoint(t)
}

func statusOf(t testing.TB, r *kubesubnet.Runner, name string) subnet.Status {
	t.Helper()
	for _, s := range r.Status() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no subnet %s in the runner's status", name)
	return subnet.Status{}
}

// TestRunnerBadInput: an application whose annotations ask for what cannot
// be done gets no pool, and the runner says why, naming the annotation and
// the value; a pod of it is told its pool does not exist.
func TestRunnerBadInput(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "bad-6", "10.61.0.0/16", "10.61.0.10-10.61.0.19", "")
	r, logs := startRunner(t, kubesubnet.Options{})
	for _, tc := range []struct {
		name string
		ann  map[string]string
		want string
	}{
		{"bad-number", subnetAnn("bad-6", subnet.AnnotationIPNumber, "1+"), `annotation \"ipam.spidernet.io/ippool-ip-number\" \"1+\": invalid input`},
		{"unknown-subnet", subnetAnn("bad-x"), `ipv4[0] \"bad-x\": no SpiderSubnet of that name`},
		{"two-interfaces", map[string]string{ipam.AnnotationSubnets: `[{"interface":"eth0","ipv4":["bad-6"]},{"interface":"net1","ipv4":["bad-6"]}]`},
			`subnet used by two interfaces`},
		{"too-big", subnetAnn("bad-6", subnet.AnnotationIPNumber, "11"), `a pool of 11 addresses cannot fit: the subnet has 10 in all`},
	} {
		s := statefulSet(t, "bad", tc.name, 1, tc.ann)
		eventually(t, tc.name+" refused in the log", func() (bool, string) {
			return strings.Contains(logs.String(), tc.want), logs.String()
		})
		for _, a := range r.AutoPools() {
			require.NotEqual(t, string(s.UID), a.App.UID, "no pool for %s", tc.name)
		}
	}
	list, err := dyn(t).Resource(kubesubnet.IPPoolResource).List(ctx, metav1.ListOptions{LabelSelector: subnet.LabelOwnerSubnet + "=bad-6"})
	require.NoError(t, err)
	require.Empty(t, list.Items, "nothing created")
	require.Equal(t, int64(0), statusOf(t, r, "bad-6").AllocatedIPCount)
}

// TestRunnerReplicas runs two Runners with one lock: one leads and writes;
// when it stops, the other takes over, reads the cluster afresh and carries
// on; no address is ever in two pools.
func TestRunnerReplicas(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "rep-6", "10.62.0.0/16", "10.62.0.10-10.62.0.250", "")
	ns, err := kube(t).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ipam-system"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, kube(t).CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}))
	})
	lock := func(id string) *kubesubnet.AnnotationLock {
		return &kubesubnet.AnnotationLock{Client: dyn(t), Resource: nsResource, Name: ns.Name, Key: "ipam.ipamkit.io/subnet-runner", ID: id}
	}
	timing := kubesubnet.Options{LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}

	optsA, optsB := timing, timing
	optsA.Lock, optsB.Lock = lock("a"), lock("b")
	ra, _ := newRunner(t, optsA)
	rb, _ := newRunner(t, optsB)
	ctxA, stopA := context.WithCancel(ctx)
	ctxB, stopB := context.WithCancel(ctx)
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- ra.Run(ctxA) }()
	<-ra.Ready()
	go func() { doneB <- rb.Run(ctxB) }()
	t.Cleanup(func() { stopB(); <-doneB })

	apps := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, n := range apps {
		statefulSet(t, "rep", n, 3, subnetAnn("rep-6"))
	}
	eventually(t, "the leader's pools", func() (bool, string) {
		return len(ra.AutoPools()) == len(apps), mustJSON(ra.Status())
	})
	require.Nil(t, rb.AutoPools(), "the other replica stands by")

	// The leader stops (releasing its lease); the other takes over.
	stopA()
	require.ErrorIs(t, <-doneA, context.Canceled)
	select {
	case <-rb.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the standby did not take over")
	}
	eventually(t, "the new leader knows the pools", func() (bool, string) {
		return len(rb.AutoPools()) == len(apps), mustJSON(rb.Status())
	})
	for _, n := range apps {
		statefulSet(t, "rep", n, 6, subnetAnn("rep-6"))
	}
	statefulSet(t, "rep", "a6", 2, subnetAnn("rep-6"))
	eventually(t, "the pools grown by the new leader", func() (bool, string) {
		n := 0
		for _, a := range rb.AutoPools() {
			if a.Size() == 7 {
				n++
			}
		}
		return n == len(apps) && len(rb.AutoPools()) == len(apps)+1, mustJSON(rb.Status())
	})
	checkDisjoint(t)
}

// TestRunnerRestart stops the runner, changes the applications while none
// runs, and starts a new one: it reads the pools back and applies what
// changed, growing one application's pool and reclaiming the pool of one
// that went.
func TestRunnerRestart(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "rst-6", "10.63.0.0/16", "10.63.0.10-10.63.0.50", "")
	r1, _ := newRunner(t, kubesubnet.Options{})
	ctx1, stop1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- r1.Run(ctx1) }()
	<-r1.Ready()
	keep := statefulSet(t, "rst", "keep", 2, subnetAnn("rst-6"))
	gone := statefulSet(t, "rst", "gone", 2, subnetAnn("rst-6"))
	keepPool := spiderpoolName(t, appOf(keep))
	gonePool := spiderpoolName(t, appOf(gone))
	waitIPs(t, keepPool, "10.63.0.10-10.63.0.12")
	waitIPs(t, gonePool, "10.63.0.13-10.63.0.15")
	stop1()
	require.True(t, errors.Is(<-done1, context.Canceled))

	statefulSet(t, "rst", "keep", 4, subnetAnn("rst-6"))
	require.NoError(t, kube(t).AppsV1().StatefulSets("rst").Delete(ctx, "gone", metav1.DeleteOptions{}))
	startRunner(t, kubesubnet.Options{})
	eventually(t, "the pool of the application that went deleted", func() (bool, string) {
		_, ok, _ := poolIPs(t, gonePool)
		return !ok, gonePool
	})
	// Its addresses are free again: the grown pool takes the lowest.
	waitIPs(t, keepPool, "10.63.0.10-10.63.0.14")
	checkDisjoint(t)
}

// TestRunnerThirdParty: an application the runner does not follow (an
// OpenKruise CloneSet) is given by the caller, with the replica count of its
// scale subresource; its pool is created, survives a rebuild of the
// runner's view (a pool written by hand appears), and goes with it.
func TestRunnerThirdParty(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "tp-6", "10.64.0.0/16", "10.64.0.10-10.64.0.50", "")
	r, logs := startRunner(t, kubesubnet.Options{})
	replicas := 3
	clone := subnet.Application{
		AppRef:      ipam.AppRef{APIVersion: "apps.kruise.io/v1alpha1", Kind: "CloneSet", Namespace: "tp", Name: "front", UID: "7c10e000-0000-4000-8000-c10e5e700001"},
		Annotations: subnetAnn("tp-6", subnet.AnnotationIPNumber, "+2"),
		Replicas:    &replicas,
	}
	ds, err := r.SetApplication(ctx, clone)
	require.NoError(t, err)
	require.Equal(t, subnet.Create, ds[0].Action)
	name := ds[0].PoolName()
	waitIPs(t, name, "10.64.0.10-10.64.0.14")

	// A pool written by hand makes the runner read the cluster again; the
	// CloneSet's pool is not taken for an orphan.
	manual := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
		"metadata": map[string]any{"name": "tp-manual", "labels": map[string]any{subnet.LabelOwnerSubnet: "tp-6"}},
		"spec":     map[string]any{"ipVersion": int64(4), "subnet": "10.64.0.0/16", "ips": []any{"10.64.0.40-10.64.0.41"}},
	}}
	_, err = dyn(t).Resource(kubesubnet.IPPoolResource).Create(ctx, manual, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually(t, "the runner counts the pool written by hand", func() (bool, string) {
		return statusOf(t, r, "tp-6").AllocatedIPCount == 7, logs.String()
	})
	_, ok, _ := poolIPs(t, name)
	require.True(t, ok)

	_, err = r.DeleteApplication(ctx, clone.AppRef)
	require.NoError(t, err)
	eventually(t, "the CloneSet's pool gone", func() (bool, string) {
		_, ok, _ := poolIPs(t, name)
		return !ok, name
	})
	checkDisjoint(t)
}

// TestRunnerNameCollision pins issue 26 case 6 on the real API server: two
// applications "front" in two namespaces whose UIDs share the five
// characters Spiderpool keeps in a pool's name both get a SpiderIPPool (the
// second under a longer name) and both serve their pods; the second used to
// wait forever ("one being deleted, perhaps"). Third-party applications,
// because their UIDs are the caller's to give.
func TestRunnerNameCollision(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "clash-6", "10.65.0.0/16", "10.65.0.10-10.65.0.50", "")
	r, _ := startRunner(t, kubesubnet.Options{})
	a := startAgent(t)
	replicas := 1
	app := func(ns, uid string) subnet.Application {
		return subnet.Application{
			AppRef:      ipam.AppRef{APIVersion: "apps.kruise.io/v1alpha1", Kind: "CloneSet", Namespace: ns, Name: "front", UID: uid},
			Annotations: subnetAnn("clash-6", subnet.AnnotationIPNumber, "2"),
			Replicas:    &replicas,
		}
	}
	apps := []subnet.Application{app("clash-a", "11111111-1111-4111-8111-abcde0000001"), app("clash-b", "22222222-2222-4222-8222-abcde0000002")}
	var names []string
	for _, x := range apps {
		ds, err := r.SetApplication(ctx, x)
		require.NoError(t, err)
		require.Equal(t, subnet.Create, ds[0].Action)
		names = append(names, ds[0].PoolName())
	}
	require.Equal(t, []string{"auto4-front-eth0-abcde", "auto4-front-eth0-abcde0000002"}, names)
	waitIPs(t, names[0], "10.65.0.10-10.65.0.11")
	waitIPs(t, names[1], "10.65.0.12-10.65.0.13")
	for i, x := range apps {
		eventually(t, "the agent sees the pool", func() (bool, string) {
			_, err := a.pools.AutoPool(&ipam.Request{App: x.AppRef}, "eth0", 4, "clash-6")
			return err == nil, fmt.Sprint(err)
		})
		res, err := a.alloc.Allocate(ctx, request(x.Namespace, "front-0", x.AppRef, subnetAnn("clash-6")))
		require.NoError(t, err)
		require.Equal(t, names[i], res.IPs[0].Pool)
		require.NoError(t, a.alloc.Release(ctx, store.Owner{UID: "uid-" + x.Namespace + "-front-0"}))
	}
	for _, x := range apps {
		_, err := r.DeleteApplication(ctx, x.AppRef)
		require.NoError(t, err)
	}
	eventually(t, "both pools gone", func() (bool, string) {
		_, ok0, _ := poolIPs(t, names[0])
		_, ok1, _ := poolIPs(t, names[1])
		return !ok0 && !ok1, fmt.Sprint(ok0, ok1)
	})
	checkDisjoint(t)
}
