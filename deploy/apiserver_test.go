package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam/k8s/kubetest"
)

// startServer starts k8s/kubetest's in-process API server (embedded etcd,
// the apiextensions server, the built-in kinds of install manifests) for
// one test.
func startServer(t *testing.T, opts kubetest.Options) *kubetest.Server {
	t.Helper()
	srv, err := kubetest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// typedClient is what every typed client of client-go offers for one kind.
type typedClient[T runtime.Object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

// createGet creates obj through c and reads it back.
func createGet[T runtime.Object](ctx context.Context, c typedClient[T], obj T) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if _, err := c.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return c.Get(ctx, m.GetName(), metav1.GetOptions{})
}

// dynamicClient is a dynamic client as a typedClient of unstructured
// objects.
type dynamicClient struct{ dynamic.ResourceInterface }

func (c dynamicClient) Create(ctx context.Context, obj *unstructured.Unstructured, opts metav1.CreateOptions) (*unstructured.Unstructured, error) {
	return c.ResourceInterface.Create(ctx, obj, opts)
}

func (c dynamicClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*unstructured.Unstructured, error) {
	return c.ResourceInterface.Get(ctx, name, opts)
}

// withoutServerFields returns a copy of obj without what the API server
// adds on create (resourceVersion, uid, creation time, managed fields,
// generation) and without its type meta (a typed client's answer has none),
// as JSON: what was sent and what was read back must then be equal.
func withoutServerFields(t *testing.T, obj runtime.Object) string {
	t.Helper()
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	m.SetResourceVersion("")
	m.SetUID("")
	m.SetCreationTimestamp(metav1.Time{})
	m.SetManagedFields(nil)
	m.SetGeneration(0)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	delete(v, "apiVersion")
	delete(v, "kind")
	if md, ok := v["metadata"].(map[string]any); ok && len(md) == 0 {
		delete(v, "metadata")
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestManifestsOnAPIServer creates every object of deploy/ and its
// monitoring/ component on the in-process API server, as kubectl apply -k
// would: the CustomResourceDefinitions first (with a minimal ServiceMonitor
// CRD, testdata/servicemonitor-crd.yaml, in place of the
// prometheus-operator's), waiting until each is established, then every
// other object through client-go's typed client of its kind (the
// ServiceMonitor through the dynamic client), and reads each back: what the
// server stored is what was sent (the server has no defaulting: a field
// it dropped or changed is a defect of the manifest).
func TestManifestsOnAPIServer(t *testing.T) {
	srv := startServer(t, kubetest.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	objs := buildWithMonitoring(t)

	monitorCRD, err := os.ReadFile("testdata/servicemonitor-crd.yaml")
	must(t, err)
	manifests := [][]byte{monitorCRD}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, o := range objs {
		if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok {
			b, err := json.Marshal(crd)
			must(t, err)
			manifests = append(manifests, b)
			crds = append(crds, crd)
		}
	}
	if err := srv.InstallCRDs(ctx, manifests...); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	ext := apiextensionsclient.NewForConfigOrDie(srv.Config())
	for _, want := range crds {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("CRD %s: %v", want.Name, err)
		}
		if !reflect.DeepEqual(got.Spec.Names, want.Spec.Names) || got.Spec.Group != want.Spec.Group || got.Spec.Scope != want.Spec.Scope {
			t.Errorf("CRD %s read back as %+v", want.Name, got.Spec)
		}
	}

	cs := kubernetes.NewForConfigOrDie(srv.Config())
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	// The namespace before what is in it (kube-apiserver's admission
	// refuses objects in a namespace that does not exist).
	ordered := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		if _, ok := o.(*corev1.Namespace); ok {
			ordered = append([]runtime.Object{o}, ordered...)
		} else if _, ok := o.(*apiextensionsv1.CustomResourceDefinition); !ok {
			ordered = append(ordered, o)
		}
	}
	created := 0
	for _, o := range ordered {
		var got runtime.Object
		var err error
		switch o := o.(type) {
		case *corev1.Namespace:
			got, err = createGet(ctx, cs.CoreV1().Namespaces(), o)
		case *corev1.ServiceAccount:
			got, err = createGet(ctx, cs.CoreV1().ServiceAccounts(o.Namespace), o)
		case *corev1.ConfigMap:
			got, err = createGet(ctx, cs.CoreV1().ConfigMaps(o.Namespace), o)
		case *corev1.Service:
			got, err = createGet(ctx, cs.CoreV1().Services(o.Namespace), o)
		case *rbacv1.ClusterRole:
			got, err = createGet(ctx, cs.RbacV1().ClusterRoles(), o)
		case *rbacv1.ClusterRoleBinding:
			got, err = createGet(ctx, cs.RbacV1().ClusterRoleBindings(), o)
		case *rbacv1.Role:
			got, err = createGet(ctx, cs.RbacV1().Roles(o.Namespace), o)
		case *rbacv1.RoleBinding:
			got, err = createGet(ctx, cs.RbacV1().RoleBindings(o.Namespace), o)
		case *appsv1.DaemonSet:
			got, err = createGet(ctx, cs.AppsV1().DaemonSets(o.Namespace), o)
		case *appsv1.Deployment:
			got, err = createGet(ctx, cs.AppsV1().Deployments(o.Namespace), o)
		case *policyv1.PodDisruptionBudget:
			got, err = createGet(ctx, cs.PolicyV1().PodDisruptionBudgets(o.Namespace), o)
		case *unstructured.Unstructured:
			if o.GroupVersionKind() != serviceMonitorGVR.GroupVersion().WithKind("ServiceMonitor") {
				t.Fatalf("%s %s: no client for it", o.GroupVersionKind(), o.GetName())
			}
			got, err = createGet(ctx, dynamicClient{dyn.Resource(serviceMonitorGVR).Namespace(o.GetNamespace())}, o)
		default:
			t.Fatalf("%T: no typed client for it in this test", o)
		}
		m, _ := meta.Accessor(o)
		what := fmt.Sprintf("%T %s/%s", o, m.GetNamespace(), m.GetName())
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		created++
		if sent, stored := withoutServerFields(t, o), withoutServerFields(t, got); sent != stored {
			t.Errorf("%s: the API server stored\n%s\nbut the manifest says\n%s", what, stored, sent)
		}
	}
	t.Logf("%d CRDs and %d objects created and read back", len(crds)+1, created)
}
