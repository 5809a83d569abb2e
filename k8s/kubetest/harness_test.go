package kubetest_test

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestBuiltinKinds(t *testing.T) {
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", Labels: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{NodeName: "n1"}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	l, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=n1"})
	if err != nil || len(l.Items) != 1 {
		t.Fatal(l, err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.AppsV1().StatefulSets("default").Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestSpiderpool(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	gvr := schema.GroupVersionResource{Group: "spiderpool.spidernet.io", Version: "v2beta1", Resource: "spiderippools"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": "SpiderIPPool",
		"metadata": map[string]any{"name": "pool1"},
		"spec":     map[string]any{"subnet": "10.0.0.0/24", "ips": []any{"10.0.0.1-10.0.0.9"}, "ipVersion": int64(4)},
	}}
	start := time.Now()
	if _, err := dyn.Resource(gvr).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Log("first create", time.Since(start))
	start = time.Now()
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	t.Log("stop", time.Since(start))
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := dyn.Resource(gvr).Get(ctx, "pool1", metav1.GetOptions{})
	cancel()
	t.Log("while stopped:", err)
	if err == nil {
		t.Fatal("get succeeded while stopped")
	}
	start = time.Now()
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	t.Log("start", time.Since(start))
	got, err := dyn.Resource(gvr).Get(t.Context(), "pool1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(got.GetResourceVersion())
}

// TestKubeconfig reaches the server through the kubeconfig it writes, as a
// program in another process would.
func TestKubeconfig(t *testing.T) {
	kc, err := srv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{}); err != nil {
		t.Fatalf("listing namespaces through the kubeconfig: %v", err)
	}
}
