package kubetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubepools"
)

// syncBuffer is a bytes.Buffer safe for the informers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// applySpider creates or replaces a Spiderpool object with spec.
func applySpider(t testing.TB, gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
	t.Helper()
	r := dynamic.NewForConfigOrDie(srv.Config()).Resource(gvr)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "spiderpool.spidernet.io/v2beta1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
	cur, err := r.Get(t.Context(), name, metav1.GetOptions{})
	if err == nil {
		obj.SetResourceVersion(cur.GetResourceVersion())
		_, err = r.Update(t.Context(), obj, metav1.UpdateOptions{})
	} else {
		_, err = r.Create(t.Context(), obj, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("writing %s %s: %v", kind, name, err)
	}
}

// eventually polls cond until it holds, or fails t after 30 seconds (what
// it waits for comes within a second, but not on a loaded machine).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPoolSource allocates from live SpiderIPPools through the Source: a
// reserved address is skipped, an invalid pool is logged and skipped while
// the others serve, and edits reach the Allocator without a restart.
func TestPoolSource(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "live-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.3.0.0/24", "ips": []any{"10.3.0.10-10.3.0.12"},
	})
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "live-bad", map[string]any{
		"ipVersion": int64(4), "subnet": "10.4.0.0/24", "ips": []any{"10.5.0.1"},
	})
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "live-reserved", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.3.0.11"},
	})

	var log syncBuffer
	src, err := kubepools.New(srv.Config(), kubepools.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if err := src.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := src.Pool("live-bad"); ok {
		t.Error("the invalid pool live-bad is served")
	}
	if l := log.String(); !strings.Contains(l, `SpiderIPPool skipped" name=live-bad`) || !strings.Contains(l, `ips[0]`) {
		t.Errorf("log does not name the invalid pool and its field:\n%s", l)
	}

	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: newStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(i int) (netip.Addr, error) {
		// The pool is chosen as Spiderpool chooses it, by the pod's
		// annotation, so that Spiderpool's filters (disable) apply.
		res, err := a.Allocate(ctx, ipam.Request{Namespace: "ns", Name: fmt.Sprint("pod-", i), UID: fmt.Sprint("live-uid-", i),
			Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4": ["live-a"]}`},
			Interfaces:  []ipam.NIC{{Name: "eth0"}}})
		if err != nil {
			return netip.Addr{}, err
		}
		return res.IPs[0].Address.Addr(), nil
	}
	want := []string{"10.3.0.10", "10.3.0.12"} // .11 is reserved
	for i, w := range want {
		got, err := allocate(i)
		if err != nil || got != netip.MustParseAddr(w) {
			t.Fatalf("Allocate %d = %v, %v; want %s", i, got, err, w)
		}
	}
	if _, err := allocate(2); !errors.Is(err, ipam.ErrNoCandidates) || !strings.Contains(err.Error(), "live-a: exhausted") {
		t.Fatalf("Allocate from a full pool: %v, want ipam.ErrNoCandidates, live-a exhausted", err)
	}

	// The pool grows: served without a restart.
	before, _ := src.Pool("live-a")
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "live-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.3.0.0/24", "ips": []any{"10.3.0.10-10.3.0.13"},
	})
	eventually(t, "the grown pool is served", func() bool { p, _ := src.Pool("live-a"); return p != before })
	if got, err := allocate(2); err != nil || got != netip.MustParseAddr("10.3.0.13") {
		t.Fatalf("Allocate from the grown pool = %v, %v; want 10.3.0.13", got, err)
	}

	// Disabled: no more allocations from it.
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "live-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.3.0.0/24", "ips": []any{"10.3.0.10-10.3.0.20"}, "disable": true,
	})
	eventually(t, "the disabled pool is served", func() bool { p, _ := src.Pool("live-a"); return p != nil && p.Disable })
	if got, err := allocate(3); !errors.Is(err, ipam.ErrNoCandidates) || !strings.Contains(err.Error(), "live-a: disabled") {
		t.Fatalf("Allocate from a disabled pool = %v, %v; want ipam.ErrNoCandidates, live-a disabled", got, err)
	}

	// The invalid pool, fixed, serves; the reservation, deleted, frees .11.
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "live-bad", map[string]any{
		"ipVersion": int64(4), "subnet": "10.4.0.0/24", "ips": []any{"10.4.0.1"},
	})
	eventually(t, "the fixed pool is served", func() bool { _, ok := src.Pool("live-bad"); return ok })
	if err := dynamic.NewForConfigOrDie(srv.Config()).Resource(kubepools.ReservedIPResource).Delete(ctx, "live-reserved", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reservation is gone", func() bool { return src.Reserved(4) == nil })
}
