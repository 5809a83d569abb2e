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
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const namespace = "ipam-system"

// serviceMonitorGVR is the prometheus-operator's ServiceMonitor.
var serviceMonitorGVR = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}

// build runs kustomize on this directory and decodes every object it
// yields, strictly (an unknown or duplicate field is an error), into its type
// from client-go's scheme and the apiextensions types.
func build(t *testing.T) []runtime.Object {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	return buildDir(t, dir)
}

// buildWithMonitoring builds deploy/ with the component monitoring/, as a
// user's kustomization that names both would.
func buildWithMonitoring(t *testing.T) []runtime.Object {
	t.Helper()
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// kustomize takes relative paths only.
	rel, err := filepath.Rel(dir, here)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf("resources:\n  - %s\ncomponents:\n  - %s\n", rel, filepath.Join(rel, "monitoring"))
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644))
	return buildDir(t, dir)
}

// buildDir runs kustomize on dir and decodes what it yields: built-in kinds
// and CRDs strictly into their types; the prometheus-operator's
// ServiceMonitor, whose Go types this module does not import, as
// unstructured.
func buildDir(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
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
		if r.GetGvk().Group == serviceMonitorGVR.Group {
			m, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
			continue
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

// TestManifests builds deploy/ with its monitoring/ component and checks
// the objects and the references between them; deploy/ alone holds no
// ServiceMonitor (it installs without the prometheus-operator's CRDs).
func TestManifests(t *testing.T) {
	for _, o := range build(t) {
		if u, ok := o.(*unstructured.Unstructured); ok {
			t.Errorf("deploy/ alone holds %s %s: it would not install without its CRD", u.GetKind(), u.GetName())
		}
	}
	objs := buildWithMonitoring(t)
	var (
		kinds      []string
		accounts   = map[string]bool{}
		clusterRs  = map[string]*rbacv1.ClusterRole{}
		roles      = map[string]*rbacv1.Role{}
		configMaps = map[string]*corev1.ConfigMap{}
		crds       []string
		ds         *appsv1.DaemonSet
		ctrl       *appsv1.Deployment
		pdb        *policyv1.PodDisruptionBudget
		svc        *corev1.Service
		monitor    *unstructured.Unstructured
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
		case *appsv1.Deployment:
			ctrl = o
		case *policyv1.PodDisruptionBudget:
			pdb = o
		case *corev1.Service:
			svc = o
		case *unstructured.Unstructured:
			if o.GetKind() != "ServiceMonitor" {
				t.Errorf("unexpected object %s %s", o.GetKind(), o.GetName())
			}
			monitor = o
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
	checkController(t, ctrl, pdb, svc, monitor, accounts)
}

// checkController checks the controller's Deployment, its
// PodDisruptionBudget, its metrics Service and the ServiceMonitor: two
// replicas that elect a leader, probes on /healthz and /readyz, requests,
// a non-root read-only container, and selectors and ports that meet.
func checkController(t *testing.T, d *appsv1.Deployment, pdb *policyv1.PodDisruptionBudget, svc *corev1.Service, monitor *unstructured.Unstructured, accounts map[string]bool) {
	t.Helper()
	if d == nil || pdb == nil || svc == nil || monitor == nil {
		t.Fatalf("Deployment %v, PodDisruptionBudget %v, Service %v, ServiceMonitor %v: want each", d != nil, pdb != nil, svc != nil, monitor != nil)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("Deployment %s: replicas %v, want 2", d.Name, d.Spec.Replicas)
	}
	pod := d.Spec.Template
	podLabels := labels.Set(pod.Labels)
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Errorf("Deployment %s: selector %v does not match its pods' labels %v (%v)", d.Name, d.Spec.Selector, pod.Labels, err)
	}
	if !accounts[namespace+"/"+pod.Spec.ServiceAccountName] {
		t.Errorf("Deployment runs as service account %q, which the manifests do not make", pod.Spec.ServiceAccountName)
	}
	if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("Deployment %s: pod securityContext %+v, want a non-root user", d.Name, psc)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("Deployment %s: %d containers, want 1", d.Name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if !strings.HasSuffix(c.Image, ":v0.1.0") {
		t.Errorf("Deployment image %q: kustomize's images entry did not apply", c.Image)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--leader-elect=true", "--lease-namespace=$(POD_NAMESPACE)", "--id=$(POD_NAME)", "--listen=:8080"} {
		if !strings.Contains(args, want) {
			t.Errorf("Deployment args %q: no %s", args, want)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("Deployment container securityContext %+v: want a read-only root and no privilege escalation", sc)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("Deployment container requests %v: want cpu and memory", c.Resources.Requests)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for what, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != what || ports[probe.HTTPGet.Port.String()] != 8080 {
			t.Errorf("Deployment probe for %s: %+v, want an HTTP GET of it on the container's port 8080", what, probe)
		}
	}
	if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || !sel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget %s: selector %v does not match the controller's pods (%v)", pdb.Name, pdb.Spec.Selector, err)
	}
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %s: minAvailable %v, want 1 (of 2)", pdb.Name, pdb.Spec.MinAvailable)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service %s: selector %v does not match the controller's pods", svc.Name, svc.Spec.Selector)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = true
		if ports[p.TargetPort.String()] == 0 && p.TargetPort.IntValue() != 8080 {
			t.Errorf("Service %s: port %s targets %s, not a port of the controller", svc.Name, p.Name, p.TargetPort.String())
		}
	}
	// The ServiceMonitor selects the Service and names one of its ports.
	if monitor.GetNamespace() != namespace {
		t.Errorf("ServiceMonitor in namespace %q, want %s", monitor.GetNamespace(), namespace)
	}
	match, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	if len(match) == 0 || !labels.SelectorFromSet(match).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match Service %s's labels %v", match, svc.Name, svc.Labels)
	}
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) == 0 {
		t.Error("ServiceMonitor has no endpoints")
	}
	for _, e := range endpoints {
		port, _, _ := unstructured.NestedString(e.(map[string]any), "port")
		path, _, _ := unstructured.NestedString(e.(map[string]any), "path")
		if !svcPorts[port] || path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint port %q path %q: want a port of Service %s and /metrics", port, path, svc.Name)
		}
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
	ca := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	n := newNode(t, ca)
	bin, conf := n.bin, n.conf
	must(t, os.WriteFile(filepath.Join(bin, "cni-ipam"), []byte("old plugin"), 0o755))
	writeToken := func(tok string) { n.writeToken(t, tok) }
	writeToken("token-one")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, sh, "install.sh")
	var stderr lockedBuffer // written by exec's copying goroutine
	cmd.Stderr = &stderr
	cmd.Env = n.env("KUBERNETES_SERVICE_HOST=10.96.0.1", "KUBERNETES_SERVICE_PORT=443", "REFRESH_SECONDS=1")
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
	once.Env = n.env("KUBERNETES_SERVICE_HOST=fd00::1", "KUBERNETES_SERVICE_PORT=6443", "ONCE=1", "KUBECONFIG_NAME=v6.kubeconfig")
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

// node is a node's files as install.sh sees them, in a temporary
// directory: the image's binary (src), the host's CNI bin and config
// directories, and the projected token volume (tokens: token and ca.crt).
type node struct{ src, bin, conf, tokens string }

func newNode(t *testing.T, ca []byte) node {
	t.Helper()
	dir := t.TempDir()
	n := node{src: filepath.Join(dir, "cni-ipam"), bin: filepath.Join(dir, "bin"), conf: filepath.Join(dir, "net.d"), tokens: filepath.Join(dir, "token")}
	for _, d := range []string{n.bin, n.conf, n.tokens} {
		must(t, os.Mkdir(d, 0o755))
	}
	must(t, os.WriteFile(n.src, []byte("new plugin"), 0o644))
	must(t, os.WriteFile(filepath.Join(n.tokens, "ca.crt"), ca, 0o644))
	return n
}

// writeToken replaces the token file as the kubelet does: a new file,
// renamed.
func (n node) writeToken(t *testing.T, token string) {
	t.Helper()
	must(t, os.WriteFile(filepath.Join(n.tokens, ".token.new"), []byte(token), 0o644))
	must(t, os.Rename(filepath.Join(n.tokens, ".token.new"), filepath.Join(n.tokens, "token")))
}

// env is install.sh's environment on n, with the variables extra.
func (n node) env(extra ...string) []string {
	return append(append(os.Environ(), "BIN_SRC="+n.src, "CNI_BIN_DIR="+n.bin, "CNI_CONF_DIR="+n.conf, "TOKEN_DIR="+n.tokens), extra...)
}

// lockedBuffer is a bytes.Buffer safe for one writer and one reader at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
