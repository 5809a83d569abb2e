// Package deploy_test checks the install manifests beside it: that
// kustomize builds them, that every object decodes strictly into its
// Kubernetes type, that the references between them hold, and that
// install.sh installs the binary atomically and follows the token.
package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const namespace = "ipam-system"

// build runs kustomize on this directory and decodes every object it
// yields, strictly (an unknown or duplicate field is an error), into its type
// from client-go's scheme and the apiextensions types.
func build(t *testing.T) []runtime.Object {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	var objs []runtime.Object
	for _, r := range resMap.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		obj, gvk, err := decoder.Decode(y, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", r.GetKind(), r.GetName(), err, y)
		}
		if _, ok := obj.(runtime.Unstructured); ok {
			t.Fatalf("%s %s: decoded as %v, not a typed object", r.GetKind(), r.GetName(), gvk)
		}
		objs = append(objs, obj)
	}
	return objs
}

func TestManifests(t *testing.T) {
	objs := build(t)
	var (
		kinds      []string
		accounts   = map[string]bool{}
		clusterRs  = map[string]*rbacv1.ClusterRole{}
		roles      = map[string]*rbacv1.Role{}
		configMaps = map[string]*corev1.ConfigMap{}
		crds       []string
		ds         *appsv1.DaemonSet
		bindings   []func()
	)
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%T", o))
		switch o := o.(type) {
		case *apiextensionsv1.CustomResourceDefinition:
			crds = append(crds, o.Name)
		case *corev1.Namespace:
			if o.Name != namespace {
				t.Errorf("namespace %s", o.Name)
			}
		case *corev1.ServiceAccount:
			accounts[o.Namespace+"/"+o.Name] = true
		case *corev1.ConfigMap:
			configMaps[o.Namespace+"/"+o.Name] = o
		case *rbacv1.ClusterRole:
			clusterRs[o.Name] = o
		case *rbacv1.Role:
			roles[o.Namespace+"/"+o.Name] = o
		case *rbacv1.ClusterRoleBinding:
			bindings = append(bindings, func() {
				checkBinding(t, "ClusterRoleBinding "+o.Name, o.RoleRef, "", o.Subjects, accounts, clusterRs, roles)
			})
		case *rbacv1.RoleBinding:
			bindings = append(bindings, func() {
				checkBinding(t, "RoleBinding "+o.Name, o.RoleRef, o.Namespace, o.Subjects, accounts, clusterRs, roles)
			})
		case *appsv1.DaemonSet:
			ds = o
		default:
			t.Errorf("unexpected object %T", o)
		}
		if m, ok := o.(interface{ GetNamespace() string }); ok {
			switch o.(type) {
			case *apiextensionsv1.CustomResourceDefinition, *corev1.Namespace, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
				if m.GetNamespace() != "" {
					t.Errorf("%T in namespace %q: cluster-scoped", o, m.GetNamespace())
				}
			default:
				if m.GetNamespace() != namespace {
					t.Errorf("%T in namespace %q, want %s", o, m.GetNamespace(), namespace)
				}
			}
		}
	}
	t.Logf("%d objects: %s", len(objs), strings.Join(kinds, ", "))
	for _, b := range bindings {
		b()
	}
	slices.Sort(crds)
	if want := []string{"ipclaims.ipam.ipamkit.io", "ipcursors.ipam.ipamkit.io", "ipowners.ipam.ipamkit.io"}; !slices.Equal(crds, want) {
		t.Errorf("CRDs %v, want %v", crds, want)
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	spec := ds.Spec.Template.Spec
	if !accounts[namespace+"/"+spec.ServiceAccountName] {
		t.Errorf("DaemonSet runs as service account %q, which the manifests do not make", spec.ServiceAccountName)
	}
	if img := spec.Containers[0].Image; !strings.HasSuffix(img, ":v0.1.0") {
		t.Errorf("DaemonSet image %q: kustomize's images entry did not apply", img)
	}
	// The install script's ConfigMap is generated with a hashed name, and
	// the DaemonSet's volume must name it.
	script, err := os.ReadFile("install.sh")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil || v.ConfigMap.Name == "kube-root-ca.crt" {
			continue
		}
		cm := configMaps[namespace+"/"+v.ConfigMap.Name]
		if cm == nil {
			t.Errorf("DaemonSet volume %s names ConfigMap %q, which the manifests do not make", v.Name, v.ConfigMap.Name)
			continue
		}
		found = cm.Data["install.sh"] == string(script)
	}
	if !found {
		t.Error("no DaemonSet volume holds install.sh")
	}
}

func checkBinding(t *testing.T, what string, ref rbacv1.RoleRef, ns string, subjects []rbacv1.Subject, accounts map[string]bool, clusterRoles map[string]*rbacv1.ClusterRole, roles map[string]*rbacv1.Role) {
	t.Helper()
	switch ref.Kind {
	case "ClusterRole":
		if clusterRoles[ref.Name] == nil {
			t.Errorf("%s: ClusterRole %q is not in the manifests", what, ref.Name)
		}
	case "Role":
		if roles[ns+"/"+ref.Name] == nil {
			t.Errorf("%s: Role %s/%s is not in the manifests", what, ns, ref.Name)
		}
	default:
		t.Errorf("%s: roleRef kind %q", what, ref.Kind)
	}
	for _, s := range subjects {
		if s.Kind != "ServiceAccount" || !accounts[s.Namespace+"/"+s.Name] {
			t.Errorf("%s: subject %s %s/%s is not a service account of the manifests", what, s.Kind, s.Namespace, s.Name)
		}
	}
}

// TestInstallScript runs install.sh as the DaemonSet does, with its paths in
// temporary directories: the binary replaces an older one by a rename and is
// executable, no temporary file is left, the kubeconfig names the API server,
// the CA and the token and is readable by root only, and a rotated token
// (short-lived, as the kubelet rotates projected tokens) reaches the
// kubeconfig at the next check.
func TestInstallScript(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skipf("no sh on PATH: %v", err)
	}
	dir := t.TempDir()
	src, bin, conf, tokens := filepath.Join(dir, "cni-ipam"), filepath.Join(dir, "bin"), filepath.Join(dir, "net.d"), filepath.Join(dir, "token")
	for _, d := range []string{bin, conf, tokens} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, os.WriteFile(src, []byte("new plugin"), 0o644))
	must(t, os.WriteFile(filepath.Join(bin, "cni-ipam"), []byte("old plugin"), 0o755))
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	must(t, os.WriteFile(filepath.Join(tokens, "ca.crt"), ca, 0o644))
	writeToken := func(tok string) { // as the kubelet does: a new file, renamed
		must(t, os.WriteFile(filepath.Join(tokens, ".token.new"), []byte(tok), 0o644))
		must(t, os.Rename(filepath.Join(tokens, ".token.new"), filepath.Join(tokens, "token")))
	}
	writeToken("token-one")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "install.sh")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = append(os.Environ(), "BIN_SRC="+src, "CNI_BIN_DIR="+bin, "CNI_CONF_DIR="+conf, "TOKEN_DIR="+tokens,
		"KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "REFRESH_SECONDS=1")
	must(t, cmd.Start())
	defer func() { cancel(); _ = cmd.Wait() }()

	kubeconfig := filepath.Join(conf, "cni-ipam.kubeconfig")
	waitToken := func(want string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // a loaded machine; it is seconds
		for {
			cfg, err := clientcmd.LoadFromFile(kubeconfig)
			if err == nil && cfg.AuthInfos["cni-ipam"] != nil && cfg.AuthInfos["cni-ipam"].Token == want {
				cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]
				if cl.Server != "https://10.96.0.1:443" || !bytes.Equal(cl.CertificateAuthorityData, ca) {
					t.Errorf("kubeconfig cluster: server %q, CA %q", cl.Server, cl.CertificateAuthorityData)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubeconfig never had token %q (last error %v); install.sh said:\n%s", want, err, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitToken("token-one")
	got, err := os.ReadFile(filepath.Join(bin, "cni-ipam"))
	must(t, err)
	if string(got) != "new plugin" {
		t.Errorf("installed binary %q", got)
	}
	for name, mode := range map[string]os.FileMode{filepath.Join(bin, "cni-ipam"): 0o755, kubeconfig: 0o600} {
		fi, err := os.Stat(name)
		must(t, err)
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	writeToken("token-two")
	waitToken("token-two")
	for _, d := range []string{bin, conf} {
		entries, err := os.ReadDir(d)
		must(t, err)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp.") {
				t.Errorf("temporary file left: %s", filepath.Join(d, e.Name()))
			}
		}
	}

	// An IPv6 API server address is bracketed.
	once := exec.Command(sh, "install.sh")
	once.Env = append(os.Environ(), "BIN_SRC="+src, "CNI_BIN_DIR="+bin, "CNI_CONF_DIR="+conf, "TOKEN_DIR="+tokens,
		"KUBERNETES_SERVICE_HOST=fd00::1", "KUBERNETES_SERVICE_PORT=6443", "ONCE=1", "KUBECONFIG_NAME=v6.kubeconfig")
	out, err := once.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh ONCE=1: %v\n%s", err, out)
	}
	cfg, err := clientcmd.LoadFromFile(filepath.Join(conf, "v6.kubeconfig"))
	must(t, err)
	if s := cfg.Clusters["local"].Server; s != "https://[fd00::1]:6443" {
		t.Errorf("IPv6 server %q", s)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
