package kubetest_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubepools"
)

// ipamctl runs ipamctl with args, in an environment without a kubeconfig
// of its own (ipamctlEnv), and returns its stdout, stderr and exit code.
func ipamctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return ipamctlEnv(t, nil, args...)
}

// TestIpamctlLive runs ipamctl explain and gc against the server through a
// kubeconfig: explain sees the cluster's pools, pods and IPClaims; gc
// judges the IPClaims against the cluster's pods and, with --release,
// releases what it judges releasable, once.
func TestIpamctlLive(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "ctl-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.52.0.0/24", "ips": []any{"10.52.0.10-10.52.0.12"}, "default": true,
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "ctl-a") })
	c := newGCCluster(t, "ctl")
	c.node("ctl-node", true)
	web := c.pod(podSpec{name: "web", node: "ctl-node", phase: corev1.PodRunning})
	gone := c.pod(podSpec{name: "gone", node: "ctl-node", phase: corev1.PodRunning})
	c.pod(podSpec{name: "next", node: "ctl-node", phase: corev1.PodPending, noIPs: true})

	// web and gone hold addresses, as IPClaims; then gone is deleted.
	src, err := kubepools.Load(ctx, srv.Config(), kubepools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]string{}
	for _, p := range []*corev1.Pod{web, gone} {
		res, err := a.Allocate(ctx, k8s.Request(p, nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		held[p.Name] = res.IPs[0].Address.Addr().String()
	}
	c.deletePod("gone")

	// explain: next gets the one address left.
	out, errOut, code := ipamctl(t, "explain", "--kubeconfig", kubeconfig, "--pod", "ctl/next", "-o", "json")
	if code != 0 && code != 1 {
		t.Fatalf("explain: exit %d: %s", code, errOut)
	}
	var ex struct {
		Pods []struct {
			Pod        string `json:"pod"`
			Interfaces []struct {
				IPs []struct {
					Pool, Address string
				} `json:"ips"`
				Error string `json:"error"`
			} `json:"interfaces"`
		} `json:"pods"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("explain output %q: %v", out, err)
	}
	if len(ex.Pods) != 1 || len(ex.Pods[0].Interfaces) != 1 || len(ex.Pods[0].Interfaces[0].IPs) != 1 {
		t.Fatalf("explain: %s (stderr %s)", out, errOut)
	}
	got := ex.Pods[0].Interfaces[0].IPs[0]
	taken := map[string]bool{held["web"] + "/24": true, held["gone"] + "/24": true}
	if got.Pool != "ctl-a" || taken[got.Address] || !strings.HasPrefix(got.Address, "10.52.0.1") {
		t.Fatalf("explain gave ctl/next %+v; want the address of ctl-a that web and gone (%v) do not hold", got, held)
	}

	// gc: gone's claim is released, web's kept.
	type gcOut struct {
		Claims []struct {
			IP       string `json:"ip"`
			Pod      string `json:"pod"`
			Release  bool   `json:"release"`
			Released bool   `json:"released"`
			Reason   string `json:"reason"`
		} `json:"claims"`
	}
	judge := func(args ...string) map[string]string {
		t.Helper()
		out, errOut, code := ipamctl(t, append([]string{"gc", "--kubeconfig", kubeconfig, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("gc %v: exit %d: %s", args, code, errOut)
		}
		var g gcOut
		if err := json.Unmarshal([]byte(out), &g); err != nil {
			t.Fatalf("gc output %q: %v", out, err)
		}
		m := map[string]string{}
		for _, cl := range g.Claims {
			d := "keep"
			switch {
			case cl.Released:
				d = "released"
			case cl.Release:
				d = "release"
			}
			m[cl.Pod] = d + " " + cl.Reason
		}
		return m
	}
	want := map[string]string{"ctl/web": "keep running", "ctl/gone": "release pod-gone"}
	if got := judge(); !equalMaps(got, want) {
		t.Fatalf("gc: %v, want %v", got, want)
	}
	want["ctl/gone"] = "released pod-gone"
	if got := judge("--release"); !equalMaps(got, want) {
		t.Fatalf("gc --release: %v, want %v", got, want)
	}
	delete(want, "ctl/gone")
	if got := judge("--release"); !equalMaps(got, want) {
		t.Fatalf("gc --release again: %v, want %v", got, want)
	}

	// A server that never answers: given up at --timeout.
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	hung := filepath.Join(t.TempDir(), "hung")
	if err := os.WriteFile(hung, bytes.ReplaceAll(kc, []byte(srv.Addr()), []byte(hungListener(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	// The bound leaves a loaded machine 20 s; ignoring --timeout would
	// take the default, a minute.
	start := time.Now()
	if _, errOut, code := ipamctl(t, "gc", "--kubeconfig", hung, "--timeout", "500ms"); code == 0 || time.Since(start) > 20*time.Second {
		t.Fatalf("gc against a server that never answers: exit %d after %s: %s", code, time.Since(start), errOut)
	}

	// A server that cannot be reached: an error, not a hang.
	if err := srv.StopAPI(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.StartAPI(); err != nil {
			t.Fatal(err)
		}
	}()
	if _, errOut, code := ipamctl(t, "gc", "--kubeconfig", kubeconfig); code == 0 || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("gc with the server down: exit %d: %s", code, errOut)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
