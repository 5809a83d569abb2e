package k8s

import (
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/subnet"
)

// This file finds a pod's application (its top controller), for
// ipam.Request.App, and turns the Kubernetes controllers SpiderSubnet follows
// into subnet.Application values.

// App returns the application of pod, its top controller, as Spiderpool's
// agent works it out, for ipam.Request.App:
//
//   - a pod without a controller owner reference has none: the zero AppRef;
//   - a pod controlled by an apps/v1 ReplicaSet that an apps/v1 Deployment
//     controls belongs to the Deployment; one controlled by a batch/v1 Job
//     that a batch/v1 CronJob controls, to the CronJob;
//   - any other controller (a StatefulSet, a DaemonSet, a ReplicaSet or Job
//     on its own, a third-party controller such as an OpenKruise CloneSet)
//     is the application.
//
// The application is in the pod's namespace, and its UID is the one the
// owner references record.
//
// owner is the object the pod's controller reference names, as the caller
// read it (from an informer's cache, say). It is needed only when that is an
// apps/v1 ReplicaSet or a batch/v1 Job, to look one step up, and is ignored
// otherwise (nil is fine). If it is needed and nil, or is not the object the
// reference names (another namespace, name or UID: a stale cache), the error
// wraps ipam.ErrNotReady: read it again and retry.
func App(pod *corev1.Pod, owner metav1.Object) (ipam.AppRef, error) {
	if pod == nil {
		return ipam.AppRef{}, nil
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return ipam.AppRef{}, nil
	}
	app := refApp(pod.Namespace, ref)
	var up string // the kind that may control the owner
	switch {
	case ref.APIVersion == "apps/v1" && ref.Kind == "ReplicaSet":
		up = "Deployment"
	case ref.APIVersion == "batch/v1" && ref.Kind == "Job":
		up = "CronJob"
	default:
		return app, nil
	}
	if owner == nil {
		return ipam.AppRef{}, fmt.Errorf("pod %s/%s: its controller %s %s is needed to find its application (the %s above it, if any): %w",
			pod.Namespace, pod.Name, ref.Kind, ref.Name, up, ipam.ErrNotReady)
	}
	if owner.GetNamespace() != pod.Namespace || owner.GetName() != ref.Name || owner.GetUID() != ref.UID {
		return ipam.AppRef{}, fmt.Errorf("pod %s/%s: its controller is %s %s/%s with uid %q, but the object given is %s/%s with uid %q: %w",
			pod.Namespace, pod.Name, ref.Kind, pod.Namespace, ref.Name, ref.UID, owner.GetNamespace(), owner.GetName(), owner.GetUID(), ipam.ErrNotReady)
	}
	if top := metav1.GetControllerOfNoCopy(owner); top != nil && top.APIVersion == ref.APIVersion && top.Kind == up {
		return refApp(pod.Namespace, top), nil
	}
	return app, nil
}

func refApp(namespace string, ref *metav1.OwnerReference) ipam.AppRef {
	return ipam.AppRef{APIVersion: ref.APIVersion, Kind: ref.Kind, Namespace: namespace, Name: ref.Name, UID: string(ref.UID)}
}

// Application returns the SpiderSubnet application of a Kubernetes
// controller: an *appsv1.Deployment, *appsv1.ReplicaSet,
// *appsv1.StatefulSet, *appsv1.DaemonSet, *batchv1.Job or *batchv1.CronJob,
// as read from the API (its TypeMeta may be empty). It reports whether obj is
// an application of its own: a ReplicaSet that a Deployment controls, or a
// Job that a CronJob controls, is not (its pods belong to the controller
// above it, as App says), and neither is nil. Any other type is an error.
//
// The annotations and hostNetwork are the pod template's; the pod count
// fields are those subnet.Application.PodCount reads (spec.replicas,
// status.desiredNumberScheduled, a Job's or a CronJob's job template's
// completions and parallelism). The Application shares no memory with obj.
func Application(obj metav1.Object) (app subnet.Application, ok bool, err error) {
	var tmpl *corev1.PodTemplateSpec
	switch o := obj.(type) {
	case *appsv1.Deployment:
		if o == nil {
			return app, false, nil
		}
		app.Replicas, tmpl = intPtr(o.Spec.Replicas), &o.Spec.Template
		app.AppRef = objApp("apps/v1", "Deployment", o)
	case *appsv1.ReplicaSet:
		if o == nil || controlledBy(o, "apps/v1", "Deployment") {
			return app, false, nil
		}
		app.Replicas, tmpl = intPtr(o.Spec.Replicas), &o.Spec.Template
		app.AppRef = objApp("apps/v1", "ReplicaSet", o)
	case *appsv1.StatefulSet:
		if o == nil {
			return app, false, nil
		}
		app.Replicas, tmpl = intPtr(o.Spec.Replicas), &o.Spec.Template
		app.AppRef = objApp("apps/v1", gc.KindStatefulSet, o)
	case *appsv1.DaemonSet:
		if o == nil {
			return app, false, nil
		}
		app.DesiredNumberScheduled, tmpl = int(o.Status.DesiredNumberScheduled), &o.Spec.Template
		app.AppRef = objApp("apps/v1", "DaemonSet", o)
	case *batchv1.Job:
		if o == nil || controlledBy(o, "batch/v1", "CronJob") {
			return app, false, nil
		}
		app.Completions, app.Parallelism, tmpl = intPtr(o.Spec.Completions), intPtr(o.Spec.Parallelism), &o.Spec.Template
		app.AppRef = objApp("batch/v1", "Job", o)
	case *batchv1.CronJob:
		if o == nil {
			return app, false, nil
		}
		js := &o.Spec.JobTemplate.Spec
		app.Completions, app.Parallelism, tmpl = intPtr(js.Completions), intPtr(js.Parallelism), &js.Template
		app.AppRef = objApp("batch/v1", "CronJob", o)
	case nil:
		return app, false, nil
	default:
		return app, false, fmt.Errorf("%T is not a controller SpiderSubnet follows (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob)", obj)
	}
	app.Annotations = maps.Clone(tmpl.Annotations)
	app.HostNetwork = tmpl.Spec.HostNetwork
	return app, true, nil
}

func objApp(apiVersion, kind string, o metav1.Object) ipam.AppRef {
	return ipam.AppRef{APIVersion: apiVersion, Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(), UID: string(o.GetUID())}
}

// controlledBy reports whether o's controller is of that API version and
// kind.
func controlledBy(o metav1.Object, apiVersion, kind string) bool {
	ref := metav1.GetControllerOfNoCopy(o)
	return ref != nil && ref.APIVersion == apiVersion && ref.Kind == kind
}

func intPtr(p *int32) *int {
	if p == nil {
		return nil
	}
	n := int(*p)
	return &n
}
