package ipam

import (
	"strings"

	"github.com/ipamkit/ipam/internal/k8slabel"
)

// This file holds what selection needs to know of SpiderSubnet's
// auto-created pools (package subnet makes them): the application a pod
// belongs to (AppRef, Request.App) and the podAffinity keys an auto-pool
// matches it by.

// The keys of an auto-pool's podAffinity.matchLabels. Spiderpool matches them
// against the pod's top controller (its application), not the pod's labels.
const (
	LabelAppAPIGroup   = "ipam.spidernet.io/app-api-group"
	LabelAppAPIVersion = "ipam.spidernet.io/app-api-version"
	LabelAppKind       = "ipam.spidernet.io/app-kind"
	LabelAppNamespace  = "ipam.spidernet.io/app-namespace"
	LabelAppName       = "ipam.spidernet.io/app-name"
)

// AppRef names an application: the top controller of a pod, such as the
// Deployment above a pod's ReplicaSet, or the CronJob above its Job.
//
// The zero AppRef names nothing: a pod without a controller. It is a plain
// value, safe to copy and to compare.
type AppRef struct {
	// APIVersion is "group/version", or "version" for the core group:
	// "apps/v1", "batch/v1", "apps.kruise.io/v1alpha1".
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        string
}

// IsZero reports whether r names no application.
func (r AppRef) IsZero() bool { return r == AppRef{} }

// Group returns the API group, "" for the core group.
func (r AppRef) Group() string {
	g, _, ok := strings.Cut(r.APIVersion, "/")
	if !ok {
		return ""
	}
	return g
}

// Version returns the API version without its group.
func (r AppRef) Version() string {
	if _, v, ok := strings.Cut(r.APIVersion, "/"); ok {
		return v
	}
	return r.APIVersion
}

// String returns, for example, "Deployment default/test-app-1".
func (r AppRef) String() string {
	if r.IsZero() {
		return "no application"
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// IsNative reports whether r is one of the Kubernetes controllers whose pod
// count SpiderSubnet follows: a Deployment, ReplicaSet, StatefulSet or
// DaemonSet of apps/v1, or a Job or CronJob of batch/v1. Any other kind is a
// third-party controller.
func (r AppRef) IsNative() bool {
	switch r.APIVersion {
	case "apps/v1":
		switch r.Kind {
		case "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet":
			return true
		}
	case "batch/v1":
		return r.Kind == "Job" || r.Kind == "CronJob"
	}
	return false
}

// StatusName returns the name Spiderpool gives r in a subnet's
// status.controlledIPPools (subnet.ControlledIPs.Application):
// "<group>_<version>_<Kind>_<namespace>_<name>", such as
// "apps_v1_Deployment_default_web", without the group part for the core
// group.
func (r AppRef) StatusName() string {
	parts := []string{r.Version(), r.Kind, r.Namespace, r.Name}
	if g := r.Group(); g != "" {
		parts = append([]string{g}, parts...)
	}
	return strings.Join(parts, "_")
}

// IsAutoPool reports whether p is a pool SpiderSubnet created for an
// application, as the filters recognise one: its podAffinity's matchLabels
// has all five application keys (LabelAppAPIGroup, LabelAppAPIVersion,
// LabelAppKind, LabelAppNamespace and LabelAppName). Such a pool serves only
// the pods whose Request.App matches those five values (see Subject.Check).
//
// Spiderpool tells an auto-pool by its object label
// ipam.spidernet.io/owner-application-name (subnet.LabelOwnerAppName), which
// a Pool does not carry. Its webhook keeps an auto-pool's podAffinity to
// exactly those five keys, and no pool of its making has them otherwise, so
// both tests pick the same pools among Spiderpool's. A pool written by hand
// with the five keys counts as auto-created here, where Spiderpool would
// match its podAffinity against the pod's labels.
func IsAutoPool(p *Pool) bool {
	if p == nil || p.PodAffinity == nil {
		return false
	}
	m := p.PodAffinity.MatchLabels
	for _, k := range [...]string{LabelAppAPIGroup, LabelAppAPIVersion, LabelAppKind, LabelAppNamespace, LabelAppName} {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	return true
}

// admitsApp reports whether the podAffinity sel of an auto-pool admits the
// pods of app, as Spiderpool matches it: each of the five application keys
// of matchLabels holds app's value (as subnet.AppLabels writes it); other keys and
// matchExpressions are not looked at. The zero AppRef is admitted by none.
// It does not allocate unless a value is longer than a label value.
func admitsApp(sel *LabelSelector, app AppRef) bool {
	if app.IsZero() {
		return false
	}
	m := sel.MatchLabels
	return m[LabelAppName] == k8slabel.Value(app.Name) && m[LabelAppNamespace] == k8slabel.Value(app.Namespace) &&
		m[LabelAppKind] == k8slabel.Value(app.Kind) && m[LabelAppAPIVersion] == k8slabel.Value(app.Version()) &&
		m[LabelAppAPIGroup] == k8slabel.Value(app.Group())
}

// affinityApp names the application the podAffinity sel of an auto-pool
// admits, such as "Deployment default/web (apps/v1)".
func affinityApp(sel *LabelSelector) string {
	m := sel.MatchLabels
	gv := m[LabelAppAPIVersion]
	if g := m[LabelAppAPIGroup]; g != "" {
		gv = g + "/" + gv
	}
	return m[LabelAppKind] + " " + m[LabelAppNamespace] + "/" + m[LabelAppName] + " (" + gv + ")"
}
