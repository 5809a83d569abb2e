package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam/k8s/config/crd"
	"github.com/ipamkit/ipam/k8s/kubegc"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/k8s/kubetest"
)

var srv *kubetest.Server

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	s, err := kubetest.Start(kubetest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.InstallCRDs(ctx, append(crd.Manifests(), kubetest.SpiderpoolCRDs()...)...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	srv = s
	return m.Run()
}

// TestController runs two replicas of the controller against an API
// server: every pod gets an address of the cluster's default SpiderIPPool,
// no two pods the same, and a deleted pod's address is taken back.
func TestController(t *testing.T) {
	ctx := t.Context()
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
		"metadata": map[string]any{"name": "default-v4"},
		"spec": map[string]any{"ipVersion": int64(4), "subnet": "10.90.0.0/24", "ips": []any{"10.90.0.10-10.90.0.200"},
			"gateway": "10.90.0.1", "default": true},
	}}
	if _, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(kubepools.IPPoolResource).Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, name := range []string{"replica-a", "replica-b"} {
		ready := make(chan struct{})
		wg.Go(func() {
			err := Run(rctx, srv.Config(), Options{Name: name, Ready: func() { close(ready) },
				GC: kubegc.Options{Period: time.Second, MinInterval: 50 * time.Millisecond}})
			if err != context.Canceled {
				t.Errorf("%s: Run: %v", name, err)
			}
		})
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s not ready", name)
		}
	}

	const n = 20
	for i := range n {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("web-", i)},
			Spec: corev1.PodSpec{NodeName: "node-1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addrs := map[string]string{} // pod → address
	deadline := time.Now().Add(30 * time.Second)
	for len(addrs) < n && time.Now().Before(deadline) {
		pods, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			var got []string
			if v := p.Annotations[Annotation]; v != "" {
				if err := json.Unmarshal([]byte(v), &got); err != nil || len(got) != 1 {
					t.Fatalf("pod %s: annotation %q", p.Name, v)
				}
				addrs[p.Name] = got[0]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(addrs) != n {
		t.Fatalf("%d pods of %d have addresses", len(addrs), n)
	}
	owner := map[string]string{}
	for pod, a := range addrs {
		p, err := netip.ParsePrefix(a)
		if err != nil || !netip.MustParsePrefix("10.90.0.0/24").Contains(p.Addr()) || p.Bits() != 24 {
			t.Errorf("pod %s got %q, want an address of 10.90.0.0/24", pod, a)
		}
		if other, ok := owner[a]; ok {
			t.Errorf("pod %s and pod %s both got %s", pod, other, a)
		}
		owner[a] = pod
	}

	// Deleted: its claim is taken back.
	if err := cs.CoreV1().Pods("default").Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := kubestore.New(srv.Config(), kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ip := netip.MustParsePrefix(addrs["web-0"]).Addr()
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, err := st.Get(ctx, "default-v4", ip)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the address of the deleted pod web-0, %s, is still claimed", ip)
		}
		time.Sleep(50 * time.Millisecond)
	}
	claims, err := st.List(ctx, "default-v4")
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != n-1 {
		t.Errorf("%d claims left, want %d", len(claims), n-1)
	}
}
