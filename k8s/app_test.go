package k8s

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/subnet"
)

func controller(apiVersion, kind, name, uid string) []metav1.OwnerReference {
	yes := true
	return []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: types.UID(uid), Controller: &yes}}
}

func meta(name, uid string, owners []metav1.OwnerReference) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID(uid), OwnerReferences: owners}
}

func TestApp(t *testing.T) {
	pod := func(owners []metav1.OwnerReference) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: meta("web-7d9c-x2", "u-pod", owners)}
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: meta("web-7d9c", "u-rs", controller("apps/v1", "Deployment", "web", "u-deploy"))}
	bareRS := &appsv1.ReplicaSet{ObjectMeta: meta("web-7d9c", "u-rs", nil)}
	job := &batchv1.Job{ObjectMeta: meta("nightly-290", "u-job", controller("batch/v1", "CronJob", "nightly", "u-cron"))}
	notOwner := []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u-deploy"}} // not the controller
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		owner   metav1.Object
		want    ipam.AppRef
		wantErr string
	}{
		{name: "no controller", pod: pod(nil)},
		{name: "an owner that is not the controller", pod: pod(notOwner)},
		{name: "nil pod"},
		{name: "a Deployment's pod", pod: pod(controller("apps/v1", "ReplicaSet", "web-7d9c", "u-rs")), owner: rs,
			want: ipam.AppRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web", UID: "u-deploy"}},
		{name: "a ReplicaSet on its own", pod: pod(controller("apps/v1", "ReplicaSet", "web-7d9c", "u-rs")), owner: bareRS,
			want: ipam.AppRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-7d9c", UID: "u-rs"}},
		{name: "a CronJob's pod", pod: pod(controller("batch/v1", "Job", "nightly-290", "u-job")), owner: job,
			want: ipam.AppRef{APIVersion: "batch/v1", Kind: "CronJob", Namespace: "shop", Name: "nightly", UID: "u-cron"}},
		{name: "a StatefulSet's pod needs no owner", pod: pod(controller("apps/v1", "StatefulSet", "db", "u-sts")),
			want: ipam.AppRef{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "shop", Name: "db", UID: "u-sts"}},
		{name: "a third-party controller", pod: pod(controller("apps.kruise.io/v1alpha1", "CloneSet", "shop-front", "u-clone")), owner: rs,
			want: ipam.AppRef{APIVersion: "apps.kruise.io/v1alpha1", Kind: "CloneSet", Namespace: "shop", Name: "shop-front", UID: "u-clone"}},
		{name: "a ReplicaSet of another group is not followed up", pod: pod(controller("example.io/v1", "ReplicaSet", "r", "u-r")),
			want: ipam.AppRef{APIVersion: "example.io/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "r", UID: "u-r"}},
		{name: "the ReplicaSet is needed", pod: pod(controller("apps/v1", "ReplicaSet", "web-7d9c", "u-rs")),
			wantErr: "pod shop/web-7d9c-x2: its controller ReplicaSet web-7d9c is needed to find its application (the Deployment above it, if any): not ready"},
		{name: "a stale ReplicaSet", pod: pod(controller("apps/v1", "ReplicaSet", "web-7d9c", "u-rs-new")), owner: rs,
			wantErr: `pod shop/web-7d9c-x2: its controller is ReplicaSet shop/web-7d9c with uid "u-rs-new", but the object given is shop/web-7d9c with uid "u-rs"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := App(tc.pod, tc.owner)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ipam.ErrNotReady)
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestApplication(t *testing.T) {
	n := func(v int32) *int32 { return &v }
	in := func(v int) *int { return &v }
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-6"]}`}},
		Spec:       corev1.PodSpec{HostNetwork: true},
	}
	ann := map[string]string{ipam.AnnotationSubnet: `{"ipv4":["subnet-6"]}`}
	ref := func(apiVersion, kind, name, uid string) ipam.AppRef {
		return ipam.AppRef{APIVersion: apiVersion, Kind: kind, Namespace: "shop", Name: name, UID: uid}
	}
	for _, tc := range []struct {
		name   string
		obj    metav1.Object
		want   subnet.Application
		notApp bool
	}{
		{name: "Deployment", obj: &appsv1.Deployment{ObjectMeta: meta("web", "u1", nil), Spec: appsv1.DeploymentSpec{Replicas: n(3), Template: tmpl}},
			want: subnet.Application{AppRef: ref("apps/v1", "Deployment", "web", "u1"), Annotations: ann, HostNetwork: true, Replicas: in(3)}},
		{name: "Deployment without replicas", obj: &appsv1.Deployment{ObjectMeta: meta("web", "u1", nil)},
			want: subnet.Application{AppRef: ref("apps/v1", "Deployment", "web", "u1")}},
		{name: "ReplicaSet on its own", obj: &appsv1.ReplicaSet{ObjectMeta: meta("rs", "u2", nil), Spec: appsv1.ReplicaSetSpec{Replicas: n(2), Template: tmpl}},
			want: subnet.Application{AppRef: ref("apps/v1", "ReplicaSet", "rs", "u2"), Annotations: ann, HostNetwork: true, Replicas: in(2)}},
		{name: "a Deployment's ReplicaSet", obj: &appsv1.ReplicaSet{ObjectMeta: meta("rs", "u2", controller("apps/v1", "Deployment", "web", "u1"))}, notApp: true},
		{name: "StatefulSet", obj: &appsv1.StatefulSet{ObjectMeta: meta("db", "u3", nil), Spec: appsv1.StatefulSetSpec{Replicas: n(0), Template: tmpl}},
			want: subnet.Application{AppRef: ref("apps/v1", "StatefulSet", "db", "u3"), Annotations: ann, HostNetwork: true, Replicas: in(0)}},
		{name: "DaemonSet", obj: &appsv1.DaemonSet{ObjectMeta: meta("agent", "u4", nil), Spec: appsv1.DaemonSetSpec{Template: tmpl},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 5}},
			want: subnet.Application{AppRef: ref("apps/v1", "DaemonSet", "agent", "u4"), Annotations: ann, HostNetwork: true, DesiredNumberScheduled: 5}},
		{name: "Job", obj: &batchv1.Job{ObjectMeta: meta("once", "u5", nil), Spec: batchv1.JobSpec{Completions: n(4), Parallelism: n(2), Template: tmpl}},
			want: subnet.Application{AppRef: ref("batch/v1", "Job", "once", "u5"), Annotations: ann, HostNetwork: true, Completions: in(4), Parallelism: in(2)}},
		{name: "a CronJob's Job", obj: &batchv1.Job{ObjectMeta: meta("nightly-1", "u6", controller("batch/v1", "CronJob", "nightly", "u7"))}, notApp: true},
		{name: "CronJob", obj: &batchv1.CronJob{ObjectMeta: meta("nightly", "u7", nil),
			Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Parallelism: n(3), Template: tmpl}}}},
			want: subnet.Application{AppRef: ref("batch/v1", "CronJob", "nightly", "u7"), Annotations: ann, HostNetwork: true, Parallelism: in(3)}},
		{name: "nil Deployment", obj: (*appsv1.Deployment)(nil), notApp: true},
		{name: "nil", obj: nil, notApp: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Application(tc.obj)
			require.NoError(t, err)
			require.Equal(t, !tc.notApp, ok)
			if tc.notApp {
				return
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Application (-want +got):\n%s", d)
			}
			require.NoError(t, got.Validate())
		})
	}
	_, _, err := Application(&corev1.Pod{})
	require.ErrorContains(t, err, "*v1.Pod is not a controller SpiderSubnet follows")
	// The Application shares no memory with the object.
	d := &appsv1.Deployment{ObjectMeta: meta("web", "u1", nil), Spec: appsv1.DeploymentSpec{Replicas: n(3), Template: tmpl}}
	got, _, err := Application(d)
	require.NoError(t, err)
	got.Annotations["x"] = "y"
	*got.Replicas = 9
	require.Len(t, d.Spec.Template.Annotations, 1)
	require.Equal(t, int32(3), *d.Spec.Replicas)
}
