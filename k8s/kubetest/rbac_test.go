package kubetest_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-helpers/auth/rbac/validation"

	"github.com/ipamkit/ipam/k8s/kubetest"
)

// installNamespace is where deploy/ installs the programs' service accounts.
const installNamespace = "ipam-system"

// grants are the RBAC rules a manifest file gives one service account:
// those of the ClusterRoles bound to it cluster-wide, and those of the
// Roles bound to it in each namespace.
type grants struct {
	cluster    []rbacv1.PolicyRule
	namespaced map[string][]rbacv1.PolicyRule
}

// shippedRBAC reads the RBAC objects of the install manifest file (in
// deploy/, beside this module) and returns what they grant the service
// account installNamespace/account. It skips t when the file is not there
// (this module built outside the repository).
func shippedRBAC(t *testing.T, file, account string) grants {
	t.Helper()
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s is not here (outside the repository): the RBAC check needs the install manifests", file)
	}
	if err != nil {
		t.Fatal(err)
	}
	clusterRoles := map[string][]rbacv1.PolicyRule{}
	roles := map[string][]rbacv1.PolicyRule{} // namespace/name
	var crbs []*rbacv1.ClusterRoleBinding
	var rbs []*rbacv1.RoleBinding
	dec := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := clientgoscheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		switch o := obj.(type) {
		case *rbacv1.ClusterRole:
			clusterRoles[o.Name] = o.Rules
		case *rbacv1.Role:
			roles[o.Namespace+"/"+o.Name] = o.Rules
		case *rbacv1.ClusterRoleBinding:
			crbs = append(crbs, o)
		case *rbacv1.RoleBinding:
			rbs = append(rbs, o)
		}
	}
	isAccount := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == installNamespace && s.Name == account
		})
	}
	g := grants{namespaced: map[string][]rbacv1.PolicyRule{}}
	for _, b := range crbs {
		if isAccount(b.Subjects) && b.RoleRef.Kind == "ClusterRole" {
			g.cluster = append(g.cluster, clusterRoles[b.RoleRef.Name]...)
		}
	}
	for _, b := range rbs {
		if !isAccount(b.Subjects) {
			continue
		}
		switch b.RoleRef.Kind {
		case "ClusterRole":
			g.namespaced[b.Namespace] = append(g.namespaced[b.Namespace], clusterRoles[b.RoleRef.Name]...)
		case "Role":
			g.namespaced[b.Namespace] = append(g.namespaced[b.Namespace], roles[b.Namespace+"/"+b.RoleRef.Name]...)
		}
	}
	if len(g.cluster) == 0 && len(g.namespaced) == 0 {
		t.Fatalf("%s grants service account %s/%s nothing", file, installNamespace, account)
	}
	return g
}

// asRule is the rule that allows exactly r, as RBAC's authorizer matches
// it: the verb, the group, "resource" or "resource/subresource", and the
// object's name when the request names one.
func asRule(r kubetest.Request) rbacv1.PolicyRule {
	res := r.Resource
	if r.Subresource != "" {
		res += "/" + r.Subresource
	}
	rule := rbacv1.PolicyRule{Verbs: []string{r.Verb}, APIGroups: []string{r.APIGroup}, Resources: []string{res}}
	if r.Name != "" {
		rule.ResourceNames = []string{r.Name}
	}
	return rule
}

// allows reports whether g allows r: a rule of a bound ClusterRole, or of
// a Role bound in r's namespace, covers it (k8s.io/component-helpers'
// RBAC rule comparison).
func (g grants) allows(r kubetest.Request) bool {
	rules := g.cluster
	if r.Namespace != "" {
		rules = append(slices.Clip(rules), g.namespaced[r.Namespace]...)
	}
	ok, _ := validation.Covers(rules, []rbacv1.PolicyRule{asRule(r)})
	return ok
}

// checkRBAC checks that every request the API server has recorded from
// the program whose User-Agent starts with agent (in this test and the
// tests before it) is allowed by the RBAC rules that the install manifest
// file grants its service account, and logs the rules that none of them
// used (candidates for removal, or for a test that exercises them).
func checkRBAC(t *testing.T, agent, file, account string) {
	t.Helper()
	g := shippedRBAC(t, file, account)
	var used []rbacv1.PolicyRule
	n := 0
	made := map[string]bool{} // what it asked for, without object names
	for _, r := range srv.Requests() {
		if !strings.HasPrefix(r.UserAgent, agent) {
			continue
		}
		n++
		res := r.Resource
		if r.APIGroup != "" {
			res += "." + r.APIGroup
		}
		if r.Subresource != "" {
			res += "/" + r.Subresource
		}
		where := "cluster-wide"
		if r.Namespace != "" {
			where = "in " + r.Namespace
		}
		made[r.Verb+" "+res+" "+where] = true
		rule := asRule(r)
		used = append(used, rule)
		if !g.allows(r) {
			where := "cluster-wide"
			if r.Namespace != "" {
				where = "in namespace " + r.Namespace
			}
			t.Errorf("%s: %s %s (group %q, subresource %q, name %q) %s: not allowed by %s for service account %s",
				agent, r.Verb, r.Resource, r.APIGroup, r.Subresource, r.Name, where, file, account)
		}
	}
	if n == 0 {
		t.Fatalf("no request from %s recorded: nothing to check %s against", agent, file)
	}
	t.Logf("%s: %d distinct requests, each allowed by %s:\n\t%s", agent, n, file, strings.Join(slices.Sorted(maps.Keys(made)), "\n\t"))
	// The reverse: each verb of each resource a rule names, used or not.
	all := slices.Clone(g.cluster)
	for _, rules := range g.namespaced {
		all = append(all, rules...)
	}
	for _, rule := range all {
		for _, one := range validation.BreakdownRule(rule) {
			usedBy := slices.ContainsFunc(used, func(u rbacv1.PolicyRule) bool {
				ok, _ := validation.Covers([]rbacv1.PolicyRule{one}, []rbacv1.PolicyRule{u})
				return ok
			})
			if !usedBy {
				t.Logf("%s: %s grants %s %v/%v, which no recorded request of %s used", file, account, one.Verbs, one.APIGroups, one.Resources, agent)
			}
		}
	}
}
