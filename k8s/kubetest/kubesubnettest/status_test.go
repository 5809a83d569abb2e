package kubesubnettest

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam/k8s/kubesubnet"
)

// TestRunnerIgnoresStatusWrites: a write of a SpiderSubnet's status (the
// count columns kubeusage writes, once per interval) does not make the
// Runner read the cluster again; a change of its labels does. Before the
// Runner told them apart, each status write was a rebuild.
func TestRunnerIgnoresStatusWrites(t *testing.T) {
	ctx := t.Context()
	createSubnet(t, "status-4", "10.72.0.0/16", "10.72.0.10-10.72.0.20", "")
	_, logs := startRunner(t, kubesubnet.Options{})
	reads := func() int { return strings.Count(logs.String(), "kubesubnet: read the cluster") }
	if n := reads(); n != 1 {
		t.Fatalf("%d reads of the cluster at start; want 1:\n%s", n, logs)
	}
	subnets := dyn(t).Resource(kubesubnet.SubnetResource)
	for i := range 3 {
		patch := []byte(`{"status":{"allocatedIPCount":` + string(rune('1'+i)) + `,"totalIPCount":11}}`)
		if _, err := subnets.Patch(ctx, "status-4", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // each would be a rebuild of its own
	}
	patch := []byte(`{"metadata":{"labels":{"kubesubnettest":"changed"}}}`)
	if _, err := subnets.Patch(ctx, "status-4", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the read of the cluster after the label change", func() (bool, string) { return reads() >= 2, logs.String() })
	time.Sleep(time.Second)
	if n := reads(); n != 2 {
		t.Errorf("%d reads of the cluster after 3 status writes and a label change; want 2:\n%s", n, logs)
	}
}
