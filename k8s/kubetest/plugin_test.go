package kubetest_test

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
)

// The programs the tests run, built once per test binary: the CNI plugin
// with -tags kubernetes, the plugin's default build (cni-ipam-lean, which
// forwards to a node agent but has no Kubernetes client), and ipamctl.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// programs builds the plugin and ipamctl from this repository (the go.work
// workspace), and returns the directory that holds them.
func programs(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "kubetest-bin-")
		if buildErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg, tags string }{
			{"cni-ipam", "../../cmd/cni-ipam", "kubernetes"},
			{"cni-ipam-lean", "../../cmd/cni-ipam", ""},
			{"ipamctl", "../../cmd/ipamctl", ""},
		} {
			if buildErr = goBuild(filepath.Join(binDir, b.out), b.pkg, b.tags); buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// goBuild builds the program pkg, static, into the file out.
func goBuild(out, pkg, tags string) error {
	cmd := exec.Command("go", "build", "-tags", tags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, msg)
	}
	return nil
}

// kubeconfigFile writes the server's kubeconfig for a program to read.
func kubeconfigFile(t testing.TB) string {
	t.Helper()
	kc, err := srv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cniCall is one run of the plugin.
type cniCall struct {
	command, container, ifname, args string
	conf                             []byte
	bin                              string // the program; "": cni-ipam
}

// cniResult is what the plugin printed: a result or an error.
type cniResult struct {
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
	Code uint   `json:"code"`
	Msg  string `json:"msg"`
}

func (r cniResult) addr(t *testing.T) netip.Addr {
	t.Helper()
	if len(r.IPs) != 1 {
		t.Fatalf("result with %d addresses, want 1: %+v", len(r.IPs), r)
	}
	p, err := netip.ParsePrefix(r.IPs[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

// cniRun is one run of the plugin, with what it printed and its exit
// status.
type cniRun struct {
	stdout, stderr string
	exit           int
	took           time.Duration
}

// runRaw runs the plugin for c.
func (c cniCall) runRaw(t testing.TB, env ...string) cniRun {
	t.Helper()
	dir := programs(t)
	bin := cmp.Or(c.bin, "cni-ipam")
	cmd := exec.Command(filepath.Join(dir, bin))
	cmd.Env = append(os.Environ(), "CNI_COMMAND="+c.command, "CNI_CONTAINERID="+c.container, "CNI_NETNS=/var/run/netns/kubetest",
		"CNI_IFNAME="+c.ifname, "CNI_PATH="+dir, "CNI_ARGS="+c.args)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = bytes.NewReader(c.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := cniRun{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return r
}

// run runs the plugin and returns what it printed, and how long it took.
func (c cniCall) run(t *testing.T, env ...string) (cniResult, time.Duration) {
	t.Helper()
	raw := c.runRaw(t, env...)
	var r cniResult
	if raw.stdout != "" {
		if err := json.Unmarshal([]byte(raw.stdout), &r); err != nil {
			t.Fatalf("%s: output %q: %v", c.command, raw.stdout, err)
		}
	}
	if (raw.exit != 0) != (r.Code != 0) {
		t.Fatalf("%s: exit %d with output %s (stderr %s)", c.command, raw.exit, raw.stdout, raw.stderr)
	}
	return r, raw.took
}

func (c cniCall) ok(t *testing.T) cniResult {
	t.Helper()
	r, _ := c.run(t)
	if r.Code != 0 {
		t.Fatalf("%s %s %s: error %d: %s", c.command, c.container, c.args, r.Code, r.Msg)
	}
	return r
}

// pluginConf is a network config whose ipam section has a kubernetes
// section with kubeconfig, and extra fields.
func pluginConf(t *testing.T, kubeconfig string, extra string) []byte {
	t.Helper()
	return fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan",
		"ipam": {"type": "cni-ipam", "kubernetes": {"kubeconfig": %q}%s}}`, kubeconfig, extra)
}

func podArgs(p *corev1.Pod) string {
	return fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_UID=%s", p.Namespace, p.Name, p.UID)
}

// TestPlugin runs the CNI plugin, built with -tags kubernetes, against the
// server through a kubeconfig: pools from SpiderIPPools (the CNI config's
// default pool, or the pod's annotation), claims owned by the pod's UID,
// ADD again, CHECK, DEL, a StatefulSet pod's claim kept by DEL, GC leaving
// the cluster's claims alone, STATUS, and errors: a replaced pod, a
// missing pod, and the server down (11, try again later; STATUS 50); and
// every request it made is allowed by deploy/rbac-plugin.yaml.
func TestPlugin(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	for name, net := range map[string]string{"plug-a": "10.50.0.", "plug-b": "10.51.0."} {
		applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", name, map[string]any{
			"ipVersion": int64(4), "subnet": net + "0/24", "ips": []any{net + "10-" + net + "19"}, "gateway": net + "1",
		})
	}
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "plug-a", "plug-b") })
	c := newGCCluster(t, "plug")
	c.node("plug-node", true)
	web := c.pod(podSpec{name: "web", node: "plug-node", phase: corev1.PodRunning})
	conf := pluginConf(t, kubeconfig, `, "default_ipv4_ippool": ["plug-a"]`)
	st := newStore(t)

	add := cniCall{command: "ADD", container: "c-web", ifname: "eth0", args: podArgs(web), conf: conf}
	ip := add.ok(t).addr(t)
	if !netip.MustParsePrefix("10.50.0.0/24").Contains(ip) {
		t.Fatalf("ADD gave %s, want an address of plug-a", ip)
	}
	got, err := st.Get(ctx, "plug-a", ip)
	if err != nil {
		t.Fatal(err)
	}
	if o := got.Owner; o.UID != string(web.UID) || o.Namespace != "plug" || o.Name != "web" || o.ContainerID != "c-web" || o.Interface != "eth0" {
		t.Fatalf("the claim's owner is %+v, want the pod's uid, name, container and interface", o)
	}
	if again := add.ok(t).addr(t); again != ip {
		t.Fatalf("ADD again gave %s, want %s", again, ip)
	}
	check := add
	check.command = "CHECK"
	check.conf = fmt.Appendf(nil, `{"cniVersion": "1.0.0", "name": "kube", "type": "macvlan", "prevResult": {"cniVersion": "1.0.0", "ips": [{"address": "%s/24"}]},
		"ipam": {"type": "cni-ipam", "kubernetes": {"kubeconfig": %q}, "default_ipv4_ippool": ["plug-a"]}}`, ip, kubeconfig)
	check.ok(t)

	// The pod's annotation chooses the pool, as in Spiderpool: the plugin
	// reads it from the cluster.
	annotated := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "plug", Name: "annotated",
		Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4": ["plug-b"]}`}},
		Spec: corev1.PodSpec{NodeName: "plug-node"}}
	cs := kubernetes.NewForConfigOrDie(srv.Config())
	if annotated, err = cs.CoreV1().Pods("plug").Create(ctx, annotated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ip := (cniCall{command: "ADD", container: "c-ann", ifname: "eth0", args: podArgs(annotated), conf: conf}).ok(t).addr(t); !netip.MustParsePrefix("10.51.0.0/24").Contains(ip) {
		t.Fatalf("ADD for the annotated pod gave %s, want an address of plug-b", ip)
	}

	// DEL releases; a StatefulSet pod's claim outlives DEL.
	del := add
	del.command = "DEL"
	del.ok(t)
	if _, err := st.Get(ctx, "plug-a", ip); err == nil {
		t.Fatalf("the claim of %s outlived DEL", ip)
	}
	c.statefulSet("db", 1)
	db := c.pod(podSpec{name: "db-0", node: "plug-node", phase: corev1.PodRunning, set: "db"})
	dbAdd := cniCall{command: "ADD", container: "c-db", ifname: "eth0", args: podArgs(db), conf: conf}
	dbIP := dbAdd.ok(t).addr(t)
	dbDel := dbAdd
	dbDel.command = "DEL"
	dbDel.ok(t)
	if got, err := st.Get(ctx, "plug-a", dbIP); err != nil || !got.Owner.Stable {
		t.Fatalf("the StatefulSet pod's claim after DEL: %+v, %v; want it kept, stable", got, err)
	}

	// GC names this node's attachments only: the cluster's claims stay.
	gc := cniCall{command: "GC", conf: fmt.Appendf(nil, `{"cniVersion": "1.1.0", "name": "kube", "type": "macvlan", "cni.dev/valid-attachments": [],
		"ipam": {"type": "cni-ipam", "kubernetes": {"kubeconfig": %q}}}`, kubeconfig)}
	gc.ok(t)
	if _, err := st.Get(ctx, "plug-a", dbIP); err != nil {
		t.Fatalf("GC released a claim of the cluster: %v", err)
	}

	// A pod replaced under its name, a pod that does not exist.
	stale := add
	stale.args = strings.Replace(podArgs(web), string(web.UID), "old-uid", 1)
	if r, _ := stale.run(t); r.Code == 0 || !strings.Contains(r.Msg, "the pod was replaced") {
		t.Fatalf("ADD for a replaced pod: %+v, want an error saying so", r)
	}
	missing := add
	missing.args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=plug;K8S_POD_NAME=nobody"
	if r, _ := missing.run(t); r.Code == 0 || !strings.Contains(r.Msg, "plug/nobody does not exist") {
		t.Fatalf("ADD for a missing pod: %+v, want an error saying so", r)
	}

	status := cniCall{command: "STATUS", conf: pluginConf(t, kubeconfig, "")}
	status.ok(t)
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.StartAPI(); err != nil {
			t.Fatal(err)
		}
	})
	if r, took := add.run(t); r.Code != 11 {
		t.Errorf("ADD with the server down: %+v after %s, want code 11", r, took)
	} else {
		t.Logf("ADD with the server down: %s: %s", took, r.Msg)
	}
	if r, _ := del.run(t); r.Code != 11 {
		t.Errorf("DEL with the server down: %+v, want code 11", r)
	}
	if r, _ := status.run(t); r.Code != 50 {
		t.Errorf("STATUS with the server down: %+v, want code 50", r)
	}
	if err := srv.StartAPI(); err != nil {
		t.Fatal(err)
	}
	status.ok(t)
	if _, err := st.Get(ctx, "plug-a", dbIP); err != nil {
		t.Errorf("after the restart: %v", err)
	}
	// Every request the plugin made is allowed by the RBAC it ships with.
	checkRBAC(t, "cni-ipam", "../../deploy/rbac-plugin.yaml", "cni-ipam")
}

// TestPluginInitCost: what the packages of the plugin built with -tags
// kubernetes allocate when it starts (GODEBUG=inittrace=1), which every CNI
// call pays; the default build, without the Kubernetes client, is pinned
// by cmd/cni-ipam's TestInitCost.
func TestPluginInitCost(t *testing.T) {
	cmd := exec.Command(filepath.Join(programs(t), "cni-ipam"))
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1", "CNI_COMMAND=VERSION")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	var bytesTotal, allocs, pkgs int
	var clock float64
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init <package> @<t> ms, <clock> ms clock, <bytes> bytes, <n> allocs
		f := strings.Fields(sc.Text())
		if len(f) != 11 || f[0] != "init" {
			continue
		}
		b, _ := strconv.Atoi(f[7])
		n, _ := strconv.Atoi(f[9])
		ms, _ := strconv.ParseFloat(f[4], 64)
		bytesTotal, allocs, pkgs, clock = bytesTotal+b, allocs+n, pkgs+1, clock+ms
	}
	t.Logf("-tags kubernetes: %d packages initialised: %d bytes in %d allocations, %.2f ms", pkgs, bytesTotal, allocs, clock)
	if pkgs == 0 {
		t.Fatalf("no inittrace output: %s", stderr.String())
	}
	// About 740 KB when this was written; client-go's generated clientset
	// (every API group's scheme) would add megabytes.
	if bytesTotal > 2<<20 {
		t.Errorf("the plugin's packages allocate %d bytes at start-up, want under 2 MiB", bytesTotal)
	}
}

// TestPluginDelByUID: with K8S_POD_UID, DEL finds the pod's claims by its
// UID, through the owner index (GETs by name), and releases only those of
// its own container: a DEL of an older sandbox of the same pod leaves the
// claims of the current one. The claim's container label is removed by
// hand, so that only a read by UID finds it: a DEL that listed by container
// ID would leave it. Without K8S_POD_UID, DEL still releases, by container
// ID (the slow path). ADD records the round-robin cursor per pool and node.
func TestPluginDelByUID(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "del-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.52.0.0/24", "ips": []any{"10.52.0.10-10.52.0.19"}, "gateway": "10.52.0.1",
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "del-a") })
	c := newGCCluster(t, "deluid")
	c.node("del-node", true)
	pod := c.pod(podSpec{name: "web", node: "del-node", phase: corev1.PodRunning})
	conf := pluginConf(t, kubeconfig, `, "default_ipv4_ippool": ["del-a"]`)
	st := newStore(t)

	add := cniCall{command: "ADD", container: "c-1", ifname: "eth0", args: podArgs(pod), conf: conf}
	ip := add.ok(t).addr(t)
	cur, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(cursorsGVR).Get(ctx, "del-a.del-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the cursor of pool del-a on node del-node: %v", err)
	}
	if got, _, _ := unstructured.NestedString(cur.Object, "spec", "ip"); got != ip.String() {
		t.Fatalf("the cursor of del-a on del-node is %q, want %s", got, ip)
	}

	// Only a read by UID finds the claim now.
	name, _ := kubestore.ClaimName(ip)
	claims := dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR)
	obj, err := claims.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := obj.GetLabels()
	delete(labels, kubestore.LabelContainer)
	obj.SetLabels(labels)
	if _, err := claims.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	old := add
	old.command, old.container = "DEL", "c-0"
	old.ok(t)
	if _, err := st.Get(ctx, "del-a", ip); err != nil {
		t.Fatalf("DEL of another sandbox of the pod released its claim: %v", err)
	}
	del := add
	del.command = "DEL"
	del.ok(t)
	if got, err := st.Get(ctx, "del-a", ip); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after DEL with K8S_POD_UID: %+v, %v; want the claim released", got, err)
	}

	// Without K8S_POD_UID: by container ID.
	add.container = "c-2"
	ip2 := add.ok(t).addr(t)
	noUID := add
	noUID.command = "DEL"
	noUID.args = fmt.Sprintf("IgnoreUnknown=1;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s", pod.Namespace, pod.Name)
	noUID.ok(t)
	if got, err := st.Get(ctx, "del-a", ip2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after DEL without K8S_POD_UID: %+v, %v; want the claim released", got, err)
	}
}
