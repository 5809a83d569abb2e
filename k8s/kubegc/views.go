package kubegc

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubeclient"
)

// liveView reads the API server.
type liveView struct{ c *kubeclient.Client }

func (v *liveView) pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return v.c.Pod(ctx, namespace, name)
}

func (v *liveView) node(ctx context.Context, name string) (*corev1.Node, error) {
	return v.c.Node(ctx, name)
}

func (v *liveView) statefulSet(ctx context.Context, namespace, name string) (*appsv1.StatefulSet, error) {
	return v.c.StatefulSet(ctx, namespace, name)
}

// podByUID finds a pod by UID with a list of every pod: the API server
// cannot select pods by UID. Claims without a pod name are rare.
func (v *liveView) podByUID(ctx context.Context, uid string) (*corev1.Pod, error) {
	pods, err := v.c.Pods(ctx)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if string(pods[i].UID) == uid {
			return &pods[i], nil
		}
	}
	return nil, nil
}

// uidIndex indexes the cached pods by UID.
const uidIndex = "uid"

// cacheView reads informers' caches, and tells the Runner of the changes
// that call for a pass.
type cacheView struct {
	r                 *Runner
	pods, sets, nodes cache.SharedIndexInformer
	// shared reports that the informers are a caller's (Options.Informers):
	// it starts and stops them, and others may share them.
	shared bool
}

// newCacheView returns the view of the informers of factory, or of
// informers of its own when factory is nil.
func newCacheView(c *kubeclient.Client, factory kubeclient.Informers, r *Runner) (*cacheView, error) {
	v := &cacheView{r: r, shared: factory != nil}
	if factory != nil {
		for _, f := range []struct {
			inf *cache.SharedIndexInformer
			gvr schema.GroupVersionResource
		}{
			{&v.pods, corev1.SchemeGroupVersion.WithResource("pods")},
			{&v.sets, appsv1.SchemeGroupVersion.WithResource("statefulsets")},
			{&v.nodes, corev1.SchemeGroupVersion.WithResource("nodes")},
		} {
			inf, err := factory(f.gvr)
			if err != nil {
				return nil, fmt.Errorf("the informer of %s: %w", f.gvr.Resource, err)
			}
			*f.inf = inf
		}
	} else {
		lw := func(client cache.Getter, resource string) *cache.ListWatch {
			return cache.NewListWatchFromClient(client, resource, metav1.NamespaceAll, fields.Everything())
		}
		v.pods = cache.NewSharedIndexInformer(lw(c.Core(), "pods"), &corev1.Pod{}, 0, cache.Indexers{})
		v.sets = cache.NewSharedIndexInformer(lw(c.Apps(), "statefulsets"), &appsv1.StatefulSet{}, 0, cache.Indexers{})
		v.nodes = cache.NewSharedIndexInformer(lw(c.Core(), "nodes"), &corev1.Node{}, 0, cache.Indexers{})
		if err := v.pods.SetTransform(SlimPod); err != nil {
			return nil, err
		}
	}
	// A shared informer may have the index already (another Runner's).
	if _, ok := v.pods.GetIndexer().GetIndexers()[uidIndex]; !ok {
		if err := v.pods.AddIndexers(cache.Indexers{uidIndex: podUID}); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// podUID indexes pods by UID.
func podUID(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return []string{string(p.UID)}, nil
	}
	return nil, nil
}

// run adds the Runner's event handlers to the informers and, unless they
// are shared, runs them in wg until ctx is done. The function it returns
// removes the handlers.
func (v *cacheView) run(ctx context.Context, wg *sync.WaitGroup) (func(), error) {
	r := v.r
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{v.pods, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { v.podChanged(nil, asPod(obj)) },
			UpdateFunc: func(old, obj any) { v.podChanged(asPod(old), asPod(obj)) },
			DeleteFunc: func(obj any) { v.podDeleted(asPod(obj)) },
		}},
		{v.sets, cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) { v.setChanged(asSet(old), asSet(obj)) },
			DeleteFunc: func(any) { r.judgeAll() },
		}},
		{v.nodes, cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) { v.nodeChanged(asNode(old), asNode(obj)) },
			DeleteFunc: func(any) { v.nodeChanged(nil, nil) },
		}},
	}
	var regs []func()
	stop := func() {
		for _, f := range regs {
			f()
		}
	}
	for _, x := range handlers {
		reg, err := x.inf.AddEventHandler(x.h)
		if err != nil {
			stop()
			return nil, err
		}
		regs = append(regs, func() { _ = x.inf.RemoveEventHandler(reg) })
	}
	if !v.shared {
		for _, inf := range []cache.SharedIndexInformer{v.pods, v.sets, v.nodes} {
			wg.Go(func() { inf.RunWithContext(ctx) })
		}
	}
	return stop, nil
}

func (v *cacheView) waitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), v.pods.HasSynced, v.sets.HasSynced, v.nodes.HasSynced) {
		return fmt.Errorf("kubegc: waiting for the informers: %w", context.Cause(ctx))
	}
	return nil
}

// asPod returns obj as a pod, unwrapping a delete whose final state is
// unknown; nil if it is no pod.
func asPod(obj any) *corev1.Pod {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

func asSet(obj any) *appsv1.StatefulSet {
	s, _ := obj.(*appsv1.StatefulSet)
	return s
}

func asNode(obj any) *corev1.Node {
	n, _ := obj.(*corev1.Node)
	return n
}

// podDeleted: the pod's claims are judged at once.
func (v *cacheView) podDeleted(p *corev1.Pod) {
	if p != nil {
		v.r.judgeNow(string(p.UID))
	}
}

// podChanged judges a pod's claims when what garbage collection sees of it
// changed, and again when its deadline comes: when it is terminating, when
// it finished.
func (v *cacheView) podChanged(old, p *corev1.Pod) {
	if p == nil {
		return
	}
	if old != nil && old.UID != p.UID {
		v.r.judgeNow(string(old.UID)) // replaced under the same name
	}
	g := k8s.GCPod(p, nil)
	if old == nil {
		if !g.DeletionTimestamp.IsZero() || g.Phase == gc.PodSucceeded || g.Phase == gc.PodFailed {
			v.r.judgeNow(string(p.UID))
		}
	} else if o := k8s.GCPod(old, nil); o.UID != g.UID || !o.DeletionTimestamp.Equal(g.DeletionTimestamp) ||
		o.Phase != g.Phase || o.HasIPs != g.HasIPs || !o.FinishedAt.Equal(g.FinishedAt) {
		v.r.judgeNow(string(p.UID))
	}
	// The deadline gc.Decide would apply: a finished pod's, which it tries
	// first, else a terminating pod's.
	delay := v.r.opts.GC.AdditionalGraceDelay
	switch {
	case (g.Phase == gc.PodSucceeded || g.Phase == gc.PodFailed) && !g.FinishedAt.IsZero():
		v.r.judgeAt(string(p.UID), g.FinishedAt.Add(g.TerminationGracePeriod+delay))
	case !g.DeletionTimestamp.IsZero():
		v.r.judgeAt(string(p.UID), g.DeletionTimestamp.Add(delay))
	}
}

// setChanged asks for a full pass when a StatefulSet's members change.
func (v *cacheView) setChanged(old, s *appsv1.StatefulSet) {
	if old == nil || s == nil || k8s.GCStatefulSet(old) != k8s.GCStatefulSet(s) {
		v.r.judgeAll()
	}
}

// nodeChanged asks for a full pass when a node's readiness changes, if the
// options make readiness matter.
func (v *cacheView) nodeChanged(old, n *corev1.Node) {
	o := v.r.opts.GC
	if !o.DisableTerminatingOnReadyNode && !o.DisableTerminatingOnNotReadyNode {
		return
	}
	if old == nil || n == nil || k8s.NodeReady(old) != k8s.NodeReady(n) {
		v.r.judgeAll()
	}
}

func (v *cacheView) pod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	return cached[*corev1.Pod](v.pods, namespace+"/"+name)
}

func (v *cacheView) podByUID(_ context.Context, uid string) (*corev1.Pod, error) {
	objs, err := v.pods.GetIndexer().ByIndex(uidIndex, uid)
	if err != nil || len(objs) == 0 {
		return nil, err
	}
	return objs[0].(*corev1.Pod), nil
}

func (v *cacheView) node(_ context.Context, name string) (*corev1.Node, error) {
	return cached[*corev1.Node](v.nodes, name)
}

func (v *cacheView) statefulSet(_ context.Context, namespace, name string) (*appsv1.StatefulSet, error) {
	return cached[*appsv1.StatefulSet](v.sets, namespace+"/"+name)
}

func cached[T any](inf cache.SharedIndexInformer, key string) (T, error) {
	var zero T
	obj, ok, err := inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return zero, err
	}
	return obj.(T), nil
}

// SlimPod keeps of a pod only what garbage collection reads (see
// k8s.GCPod), so that the cache of every pod of a large cluster stays
// small; other objects are returned as they are. It is the transform of a
// Runner's own pod informer, for a shared factory's too
// (informers.WithTransform) when nothing else reads more of the cached
// pods.
func SlimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			DeletionTimestamp: p.DeletionTimestamp, DeletionGracePeriodSeconds: p.DeletionGracePeriodSeconds,
		},
		Spec: corev1.PodSpec{
			NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
			TerminationGracePeriodSeconds: p.Spec.TerminationGracePeriodSeconds,
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		out.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: t.FinishedAt}},
			})
		}
	}
	return out, nil
}

// The views' interface, checked.
var (
	_ view = (*liveView)(nil)
	_ view = (*cacheView)(nil)
)
