// Package kubeclient reads the built-in objects the library needs from a
// cluster (pods, namespaces, nodes, StatefulSets), and finds a cluster's
// client config in a kubeconfig file or in the pod it runs in.
//
// It talks REST with a scheme of core/v1 and apps/v1 only, rather than
// client-go's generated clientset, which registers every API group when a
// program starts and compiles a few hundred more packages: the CNI plugin,
// which starts once per call, and ipamctl use it.
package kubeclient

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipamkit/ipam/k8s/internal/kubeerr"
)

// ErrUnavailable is returned (wrapped) by every call that could not get an
// answer from the API server: it cannot be reached, it answered that it is
// overloaded or failing (429, 5xx), or the call's context ended first. It
// is the same error as kubestore.ErrUnavailable.
var ErrUnavailable = kubeerr.ErrUnavailable

// scheme holds the kinds the clients decode.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := appsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

var codecs = serializer.NewCodecFactory(scheme)

// Config returns the client config of the cluster a kubeconfig file names
// (its current context), or, with an empty path, of the cluster the program
// runs in as a pod (its service account). Rate limits are left at
// client-go's defaults (5 requests per second, bursts of 10); set QPS and
// Burst on the result to change them.
func Config(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeclient: in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: kubeconfig %q: %w", kubeconfig, err)
	}
	return cfg, nil
}

// Client reads pods, namespaces, nodes and StatefulSets. The zero Client is
// not usable; create one with New. A *Client is safe for concurrent use.
type Client struct {
	core, apps *rest.RESTClient
}

// New returns a Client for the cluster cfg names, with cfg's rate limits.
// It does not contact the server.
func New(cfg *rest.Config) (*Client, error) {
	if cfg == nil {
		return nil, errors.New("kubeclient: nil *rest.Config")
	}
	core, err := restClient(cfg, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	apps, err := restClient(cfg, appsv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &Client{core: core, apps: apps}, nil
}

func restClient(cfg *rest.Config, gv schema.GroupVersion, path string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = path
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	return client, nil
}

// Core returns the client of the core/v1 API (pods, namespaces, nodes),
// for list-watches.
func (c *Client) Core() rest.Interface { return c.core }

// Apps returns the client of the apps/v1 API (StatefulSets).
func (c *Client) Apps() rest.Interface { return c.apps }

// Pod reads pod namespace/name from the API server (a quorum read). It
// returns nil and no error if there is no such pod. Like every method of
// Client, it returns an error wrapping ErrUnavailable when the server gives
// no usable answer within ctx.
func (c *Client) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return get(ctx, c.core, &corev1.Pod{}, "pods", namespace, name)
}

// Namespace reads a namespace; nil and no error if there is none.
func (c *Client) Namespace(ctx context.Context, name string) (*corev1.Namespace, error) {
	return get(ctx, c.core, &corev1.Namespace{}, "namespaces", "", name)
}

// Node reads a node; nil and no error if there is none.
func (c *Client) Node(ctx context.Context, name string) (*corev1.Node, error) {
	return get(ctx, c.core, &corev1.Node{}, "nodes", "", name)
}

// StatefulSet reads StatefulSet namespace/name; nil and no error if there
// is none.
func (c *Client) StatefulSet(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, error) {
	return get(ctx, c.apps, &appsv1.StatefulSet{}, "statefulsets", namespace, name)
}

func get[T runtime.Object](ctx context.Context, c *rest.RESTClient, into T, resource, namespace, name string) (T, error) {
	var zero T
	req := c.Get().Resource(resource).Name(name)
	if namespace != "" {
		req = req.Namespace(namespace)
	}
	err := req.Do(ctx).Into(into)
	switch {
	case kubeerr.ObjectNotFound(err, name):
		return zero, nil
	case err != nil:
		what := resource + " " + name
		if namespace != "" {
			what = resource + " " + namespace + "/" + name
		}
		return zero, fmt.Errorf("kubeclient: get %s: %w", what, kubeerr.Wrap(ctx, err))
	}
	return into, nil
}

// listPage is the page size of the lists.
const listPage = 500

// Pods lists every pod of the cluster, in pages, with a consistent read.
func (c *Client) Pods(ctx context.Context) ([]corev1.Pod, error) {
	return list(ctx, c.core, "pods", func(l *corev1.PodList) ([]corev1.Pod, string) { return l.Items, l.Continue })
}

// Nodes lists every node.
func (c *Client) Nodes(ctx context.Context) ([]corev1.Node, error) {
	return list(ctx, c.core, "nodes", func(l *corev1.NodeList) ([]corev1.Node, string) { return l.Items, l.Continue })
}

// Namespaces lists every namespace.
func (c *Client) Namespaces(ctx context.Context) ([]corev1.Namespace, error) {
	return list(ctx, c.core, "namespaces", func(l *corev1.NamespaceList) ([]corev1.Namespace, string) { return l.Items, l.Continue })
}

// StatefulSets lists every StatefulSet.
func (c *Client) StatefulSets(ctx context.Context) ([]appsv1.StatefulSet, error) {
	return list(ctx, c.apps, "statefulsets", func(l *appsv1.StatefulSetList) ([]appsv1.StatefulSet, string) { return l.Items, l.Continue })
}

func list[L any, PL interface {
	*L
	runtime.Object
}, T any](ctx context.Context, c *rest.RESTClient, resource string, items func(PL) ([]T, string)) ([]T, error) {
	var out []T
	opts := metav1.ListOptions{Limit: listPage}
	for {
		var l PL = new(L)
		err := c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(l)
		if err != nil {
			return nil, fmt.Errorf("kubeclient: list %s: %w", resource, kubeerr.Wrap(ctx, err))
		}
		page, cont := items(l)
		out = append(out, page...)
		if cont == "" {
			return out, nil
		}
		opts.Continue = cont
	}
}

// Informers gives a part of a program the shared informer of a resource
// (pods, nodes, SpiderIPPools, ...), so that the parts of one program keep
// one cache of each. A client-go factory answers it:
//
//	func(r schema.GroupVersionResource) (cache.SharedIndexInformer, error) {
//		i, err := factory.ForResource(r)
//		if err != nil {
//			return nil, err
//		}
//		return i.Informer(), nil
//	}
//
// It is a function rather than the factory itself so that the packages a
// CNI plugin links (kubepools, kubestore) do without client-go's generated
// clientset and informers, which register every API group at start-up.
type Informers func(resource schema.GroupVersionResource) (cache.SharedIndexInformer, error)

// DynamicInformer returns a new informer of resource's objects, as
// unstructured, from dyn: for a part of a program that is given no shared
// Informers. It has no indexers and no resync; the caller adds its handlers
// and runs it.
func DynamicInformer(dyn dynamic.Interface, resource schema.GroupVersionResource) cache.SharedIndexInformer {
	r := dyn.Resource(resource)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return r.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return r.Watch(ctx, o)
		},
	}
	return cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
}

// EventRecorder records Kubernetes Events: client-go's events.EventRecorder
// (k8s.io/client-go/tools/events) has this method. The packages a CNI plugin
// links take it as this interface, for the reason given on Informers.
type EventRecorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...interface{})
}
