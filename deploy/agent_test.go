package deploy_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestAgentManifests: the DaemonSet runs the node agent ("cni-ipam agent")
// with its node's name from the downward API, a readiness probe, and the
// socket's host directory /run/ipamkit mounted in it alone; the plugin's
// ClusterRole lets it watch what it follows (cmd/cni-ipam/agent.go).
func TestAgentManifests(t *testing.T) {
	var ds *appsv1.DaemonSet
	var role *rbacv1.ClusterRole
	for _, o := range build(t) {
		switch o := o.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *rbacv1.ClusterRole:
			if o.Name == "ipam:cni-ipam" {
				role = o
			}
		}
	}
	if ds == nil || role == nil {
		t.Fatalf("DaemonSet %v, ClusterRole ipam:cni-ipam %v", ds, role)
	}
	spec := ds.Spec.Template.Spec
	var agent *corev1.Container
	for i, c := range spec.Containers {
		if c.Name == "agent" {
			agent = &spec.Containers[i]
		}
	}
	if agent == nil {
		t.Fatal("no container agent")
	}
	if !slices.Equal(agent.Command[:2], []string{"/usr/local/bin/cni-ipam", "agent"}) || !slices.Contains(agent.Command, "--socket=/run/ipamkit/agent.sock") {
		t.Errorf("agent's command %q", agent.Command)
	}
	node := false
	for _, e := range agent.Env {
		node = node || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !node {
		t.Errorf("agent's env %v: want NODE_NAME from spec.nodeName", agent.Env)
	}
	if p := agent.ReadinessProbe; p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "--probe") {
		t.Errorf("agent's readiness probe %v: want cni-ipam agent --probe", p)
	}
	var socketVol string
	for _, v := range spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/run/ipamkit" {
			socketVol = v.Name
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, m := range c.VolumeMounts {
			if m.Name == socketVol && c.Name != "agent" {
				t.Errorf("container %s mounts the agent's socket directory", c.Name)
			}
			if m.Name == socketVol && m.MountPath != "/run/ipamkit" {
				t.Errorf("the agent mounts its socket directory at %s", m.MountPath)
			}
		}
	}
	if socketVol == "" {
		t.Error("no hostPath volume /run/ipamkit")
	}
	allows := func(group, resource, verb string) bool {
		for _, r := range role.Rules {
			if slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, want := range []struct{ group, resource string }{
		{"", "pods"}, {"", "namespaces"}, {"", "nodes"},
		{"spiderpool.spidernet.io", "spiderippools"}, {"spiderpool.spidernet.io", "spiderreservedips"},
	} {
		for _, verb := range []string{"list", "watch"} {
			if !allows(want.group, want.resource, verb) {
				t.Errorf("ipam:cni-ipam does not allow %s %s.%s, which the agent's informers need", verb, want.resource, want.group)
			}
		}
	}
	if allows("ipam.ipamkit.io", "ipclaims", "watch") {
		t.Error("ipam:cni-ipam allows watching IPClaims: the agent follows no claims")
	}
}
