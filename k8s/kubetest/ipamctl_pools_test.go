package kubetest_test

import (
	"flag"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s"
	"github.com/ipamkit/ipam/k8s/kubepools"
)

var updatePools = flag.Bool("update-pools", false, "rewrite cmd/ipamctl/testdata/pools-live.golden from the current output")

// TestIpamctlPoolsLive runs ipamctl pools against the in-process API
// server through a kubeconfig: two SpiderIPPools, a SpiderReservedIP over
// part of one, and IPClaims made by an Allocator on the cluster's store;
// the table, and the JSON's counts, must be what the golden file says
// (cmd/ipamctl/testdata/pools-live.golden; regenerate with
// go test ./k8s/kubetest -run TestIpamctlPoolsLive -update-pools).
// Only the pools of this test are compared: others of the shared server
// may exist.
func TestIpamctlPoolsLive(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	kubeconfig := kubeconfigFile(t)
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "usage-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.53.0.0/24", "ips": []any{"10.53.0.10-10.53.0.29"}, "default": true,
	})
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "usage-b", map[string]any{
		"ipVersion": int64(6), "subnet": "fd00:53::/64", "ips": []any{"fd00:53::10-fd00:53::ff"},
	})
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "usage-r", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.53.0.25-10.53.0.29"},
	})
	t.Cleanup(func() {
		deleteSpiderObjects(t, kubepools.IPPoolResource, "usage-a", "usage-b")
		deleteSpiderObjects(t, kubepools.ReservedIPResource, "usage-r")
	})
	c := newGCCluster(t, "usage")
	c.node("usage-node", true)
	src, err := kubepools.Load(ctx, srv.Config(), kubepools.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-1", "web-2", "web-3"} {
		p := c.pod(podSpec{name: name, node: "usage-node", phase: corev1.PodRunning})
		req := k8s.Request(p, nil, nil)
		if _, err := a.Allocate(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"pools", "--kubeconfig", kubeconfig}
	stdout, stderr, code := ipamctl(t, args...)
	if code != 0 {
		t.Fatalf("ipamctl pools: exit %d: %s", code, stderr)
	}
	var b strings.Builder
	b.WriteString("$ ipamctl pools --kubeconfig KUBECONFIG\n")
	for i, line := range strings.SplitAfter(stdout, "\n") {
		if i == 0 || strings.HasPrefix(line, "usage-") {
			b.WriteString(line)
		}
	}
	got := b.String()
	const golden = "../../cmd/ipamctl/testdata/pools-live.golden"
	if *updatePools {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("ipamctl pools differs from %s:\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}
