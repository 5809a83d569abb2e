package kubetest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go4.org/netipx"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubepools"
	"github.com/ipamkit/ipam/store"
)

// runSource starts a kubepools.Source with a logger writing to log, waits
// for it to sync, and stops it when t ends.
func runSource(t *testing.T, log *syncBuffer) *kubepools.Source {
	t.Helper()
	src, err := kubepools.New(srv.Config(), kubepools.Options{Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	if err := src.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	return src
}

// spiderObject returns the current object of a Spiderpool resource.
func spiderObject(t *testing.T, gvr schema.GroupVersionResource, name string) (dynamic.ResourceInterface, *unstructured.Unstructured) {
	t.Helper()
	r := dynamic.NewForConfigOrDie(srv.Config()).Resource(gvr)
	u, err := r.Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r, u
}

// deleteSpiderObjects deletes the named objects of gvr, removing their
// finalizers first, and waits until they are gone.
func deleteSpiderObjects(t *testing.T, gvr schema.GroupVersionResource, names ...string) {
	t.Helper()
	r := dynamic.NewForConfigOrDie(srv.Config()).Resource(gvr)
	ctx := context.Background()
	for _, name := range names {
		u, err := r.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if len(u.GetFinalizers()) > 0 {
			u.SetFinalizers(nil)
			if _, err := r.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
				t.Errorf("removing the finalizers of %s: %v", name, err)
			}
		}
		if err := r.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %s: %v", name, err)
		}
	}
}

// TestPoolSourceKeepsPointers: an update that leaves a pool's spec alone (a
// status write, a label) keeps its *ipam.Pool, so the Allocator keeps its
// index; a spec change gives a new one. The reserved sets keep their
// pointer likewise.
func TestPoolSourceKeepsPointers(t *testing.T) {
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "keep-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.31.0.0/24", "ips": []any{"10.31.0.10-10.31.0.20"},
	})
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "keep-r", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.31.0.11"},
	})
	t.Cleanup(func() {
		deleteSpiderObjects(t, kubepools.IPPoolResource, "keep-a")
		deleteSpiderObjects(t, kubepools.ReservedIPResource, "keep-r")
	})
	var log syncBuffer
	src := runSource(t, &log)
	before, ok := src.Pool("keep-a")
	if !ok {
		t.Fatal("pool keep-a not served")
	}
	reserved := src.Reserved(4)
	if reserved == nil || !reserved.Contains(netip.MustParseAddr("10.31.0.11")) {
		t.Fatalf("reserved set %v, want 10.31.0.11 in it", reserved)
	}

	// A status write, as Spiderpool's agent makes on every allocation.
	r, u := spiderObject(t, kubepools.IPPoolResource, "keep-a")
	if err := unstructured.SetNestedField(u.Object, int64(3), "status", "allocatedIPCount"); err != nil {
		t.Fatal(err)
	}
	u, err := r.UpdateStatus(t.Context(), u, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A label, on the pool and on the reservation.
	u.SetLabels(map[string]string{"team": "a"})
	if _, err := r.Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rr, ru := spiderObject(t, kubepools.ReservedIPResource, "keep-r")
	ru.SetLabels(map[string]string{"team": "a"})
	if _, err := rr.Update(t.Context(), ru, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A marker pool written after them: once it is served, so are they.
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "keep-marker", map[string]any{
		"ipVersion": int64(4), "subnet": "10.32.0.0/24", "ips": []any{"10.32.0.1"},
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.IPPoolResource, "keep-marker") })
	eventually(t, "the marker pool is served", func() bool { _, ok := src.Pool("keep-marker"); return ok })
	if after, _ := src.Pool("keep-a"); after != before {
		t.Error("a status write or a label gave pool keep-a a new *ipam.Pool: the Allocator would forget what it knows of it")
	}
	if src.Reserved(4) != reserved {
		t.Error("a label on a SpiderReservedIP gave the reserved set a new pointer")
	}

	// A spec change gives a new pool; a reservation of the same addresses
	// written as another object keeps the set.
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "keep-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.31.0.0/24", "ips": []any{"10.31.0.10-10.31.0.21"},
	})
	eventually(t, "the changed pool is served", func() bool { p, _ := src.Pool("keep-a"); return p != before })
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "keep-r2", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.31.0.11"},
	})
	t.Cleanup(func() { deleteSpiderObjects(t, kubepools.ReservedIPResource, "keep-r2") })
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "keep-marker", map[string]any{
		"ipVersion": int64(4), "subnet": "10.32.0.0/24", "ips": []any{"10.32.0.2"},
	})
	eventually(t, "the marker pool is served", func() bool {
		p, _ := src.Pool("keep-marker")
		return p != nil && p.IPs[0].From() == netip.MustParseAddr("10.32.0.2")
	})
	if src.Reserved(4) != reserved {
		t.Error("a second reservation of the same address gave the reserved set a new pointer")
	}
}

// TestPoolEdits allocates through an Allocator while the SpiderIPPools it
// serves from are edited, each change reaching it without a restart: the
// node list changed, the ips shrunk under existing claims, the pool
// deleted while a finalizer holds it (terminating), an edit that makes it
// invalid (logged by name and field, while another pool keeps serving),
// and reservations added and removed.
func TestPoolEdits(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	poolA := func(ips string, extra ...any) {
		spec := map[string]any{"ipVersion": int64(4), "subnet": "10.33.0.0/24", "ips": []any{ips}}
		for i := 0; i+1 < len(extra); i += 2 {
			spec[extra[i].(string)] = extra[i+1]
		}
		applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "edit-a", spec)
	}
	poolA("10.33.0.10-10.33.0.19", "nodeName", []any{"node-1"})
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "edit-b", map[string]any{
		"ipVersion": int64(4), "subnet": "10.34.0.0/24", "ips": []any{"10.34.0.10-10.34.0.19"},
	})
	t.Cleanup(func() {
		deleteSpiderObjects(t, kubepools.IPPoolResource, "edit-a", "edit-b")
		deleteSpiderObjects(t, kubepools.ReservedIPResource, "edit-r")
	})
	var log syncBuffer
	src := runSource(t, &log)
	st := newStore(t)
	a, err := ipam.NewAllocator(ipam.Options{Pools: src, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	// Each pod names both pools; edit-a, which lists nodes, sorts first.
	seq := 0
	allocateFrom := func(node, pools string) (netip.Addr, string, error) {
		seq++
		res, err := a.Allocate(ctx, ipam.Request{Namespace: "ns", Name: fmt.Sprint("edit-", seq), UID: fmt.Sprint("edit-uid-", seq), Node: node,
			Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4": [` + pools + `]}`},
			Interfaces:  []ipam.NIC{{Name: "eth0"}}})
		if err != nil {
			return netip.Addr{}, "", err
		}
		return res.IPs[0].Address.Addr(), res.IPs[0].Pool, nil
	}
	allocate := func(node string) (netip.Addr, string, error) { return allocateFrom(node, `"edit-a", "edit-b"`) }
	want := func(what string, node, wantPool string, inRange string) netip.Addr {
		t.Helper()
		ip, pool, err := allocate(node)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r := netipxRange(t, inRange)
		if pool != wantPool || !r.Contains(ip) {
			t.Fatalf("%s: got %s from %s, want an address of %s from %s", what, ip, pool, inRange, wantPool)
		}
		return ip
	}
	held := []netip.Addr{
		want("first", "node-1", "edit-a", "10.33.0.10-10.33.0.19"),
		want("second", "node-1", "edit-a", "10.33.0.10-10.33.0.19"),
	}
	waitPool := func(what string, ok func(p *ipam.Pool) bool) {
		t.Helper()
		eventually(t, what, func() bool { p, found := src.Pool("edit-a"); return found && ok(p) })
	}

	// nodeName changed: node-1's pods fall through to edit-b.
	poolA("10.33.0.10-10.33.0.19", "nodeName", []any{"node-2"})
	waitPool("nodeName node-2 served", func(p *ipam.Pool) bool { return slices.Equal(p.NodeName, []string{"node-2"}) })
	want("on node-1 after nodeName changed", "node-1", "edit-b", "10.34.0.10-10.34.0.19")
	want("on node-2 after nodeName changed", "node-2", "edit-a", "10.33.0.10-10.33.0.19")

	// ips shrunk to two addresses the claims above do not hold: they stay
	// in the Store, new claims come from the new range only, and then the
	// pool is full.
	poolA("10.33.0.16-10.33.0.17", "nodeName", []any{"node-1"})
	waitPool("the shrunk pool served", func(p *ipam.Pool) bool { return p.IPs[0].From() == netip.MustParseAddr("10.33.0.16") })
	for i := range 2 {
		want(fmt.Sprint("shrunk ", i), "node-1", "edit-a", "10.33.0.16-10.33.0.17")
	}
	want("shrunk pool full", "node-1", "edit-b", "10.34.0.10-10.34.0.19")
	for _, ip := range held {
		if _, err := st.Get(ctx, "edit-a", ip); err != nil {
			t.Errorf("claim on %s outside the shrunk range: %v, want it kept", ip, err)
		}
	}
	// Released as usual.
	if err := a.Release(ctx, store.Owner{Namespace: "ns", Name: "edit-1", UID: "edit-uid-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "edit-a", held[0]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("claim on %s after its release: %v, want store.ErrNotFound", held[0], err)
	}

	// An edit that makes edit-a invalid: logged by name and field, not
	// served (a pod that names it is told it does not exist, as by
	// Spiderpool), and edit-b keeps serving.
	poolA("10.99.0.1", "nodeName", []any{"node-1"})
	eventually(t, "the invalid pool is dropped", func() bool { _, ok := src.Pool("edit-a"); return !ok })
	if l := log.String(); !strings.Contains(l, `SpiderIPPool skipped" name=edit-a`) || !strings.Contains(l, "ips[0]") {
		t.Errorf("the log does not name the invalid pool edit-a and its field ips[0]:\n%s", l)
	}
	if _, _, err := allocate("node-1"); !errors.Is(err, ipam.ErrNotFound) || !strings.Contains(err.Error(), `"edit-a"`) {
		t.Fatalf("Allocate naming the invalid pool: %v, want ipam.ErrNotFound naming edit-a", err)
	}
	if _, pool, err := allocateFrom("node-1", `"edit-b"`); err != nil || pool != "edit-b" {
		t.Fatalf("with edit-a invalid: served from %q, %v; want edit-b", pool, err)
	}

	// Fixed, then deleted while a finalizer holds it: terminating, no new
	// claims, releases still work.
	poolA("10.33.0.10-10.33.0.19", "nodeName", []any{"node-1"})
	waitPool("the fixed pool served", func(*ipam.Pool) bool { return true })
	r, u := spiderObject(t, kubepools.IPPoolResource, "edit-a")
	u.SetFinalizers([]string{"spiderpool.spidernet.io"})
	if _, err := r.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(ctx, "edit-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPool("the terminating pool served", func(p *ipam.Pool) bool { return p.Terminating })
	res, err := a.Allocate(ctx, ipam.Request{Namespace: "ns", Name: "edit-t", UID: "edit-uid-t", Node: "node-1",
		Annotations: map[string]string{"ipam.spidernet.io/ippool": `{"ipv4": ["edit-a"]}`},
		Interfaces:  []ipam.NIC{{Name: "eth0"}}})
	if !errors.Is(err, ipam.ErrNoCandidates) || !strings.Contains(err.Error(), "terminating") {
		t.Fatalf("Allocate from the terminating pool = %+v, %v; want ipam.ErrNoCandidates naming terminating", res, err)
	}
	if err := a.Release(ctx, store.Owner{Namespace: "ns", Name: "edit-2", UID: "edit-uid-2"}); err != nil {
		t.Fatalf("Release from the terminating pool: %v", err)
	}
	if _, err := st.Get(ctx, "edit-a", held[1]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("claim on %s after its release from the terminating pool: %v, want store.ErrNotFound", held[1], err)
	}

	// A reservation added: edit-b skips it; removed: the set is gone.
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "edit-r", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.34.0.10-10.34.0.18"},
	})
	eventually(t, "the reservation served", func() bool { return src.Reserved(4) != nil })
	want("with edit-b reserved but .19", "node-1", "edit-b", "10.34.0.19-10.34.0.19")
	deleteSpiderObjects(t, kubepools.ReservedIPResource, "edit-r")
	eventually(t, "the reservation gone", func() bool { return src.Reserved(4) == nil })
}

// netipxRange parses "a-b" into a range.
func netipxRange(t *testing.T, s string) netipx.IPRange {
	t.Helper()
	r, err := netipx.ParseIPRange(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLoad reads the pools once, as a CNI plugin does: valid pools and
// reservations served, an invalid pool logged by name and field.
func TestLoad(t *testing.T) {
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "load-a", map[string]any{
		"ipVersion": int64(4), "subnet": "10.35.0.0/24", "ips": []any{"10.35.0.10-10.35.0.20"}, "default": true,
	})
	applySpider(t, kubepools.IPPoolResource, "SpiderIPPool", "load-bad", map[string]any{
		"ipVersion": int64(4), "subnet": "10.36.0.0/24", "gateway": "10.37.0.1",
	})
	applySpider(t, kubepools.ReservedIPResource, "SpiderReservedIP", "load-r", map[string]any{
		"ipVersion": int64(4), "ips": []any{"10.35.0.10"},
	})
	t.Cleanup(func() {
		deleteSpiderObjects(t, kubepools.IPPoolResource, "load-a", "load-bad")
		deleteSpiderObjects(t, kubepools.ReservedIPResource, "load-r")
	})
	var log syncBuffer
	src, err := kubepools.Load(t.Context(), srv.Config(), kubepools.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := src.Pool("load-a"); !ok {
		t.Error("pool load-a not served")
	}
	if !slices.ContainsFunc(slices.Collect(src.DefaultPools()), func(p *ipam.Pool) bool { return p.Name == "load-a" }) {
		t.Error("pool load-a not among the default pools")
	}
	if _, ok := src.Pool("load-bad"); ok {
		t.Error("the invalid pool load-bad is served")
	}
	if l := log.String(); !strings.Contains(l, `SpiderIPPool skipped" name=load-bad`) || !strings.Contains(l, "gateway") {
		t.Errorf("the log does not name the invalid pool load-bad and its field gateway:\n%s", l)
	}
	if r := src.Reserved(4); r == nil || !r.Contains(netip.MustParseAddr("10.35.0.10")) {
		t.Errorf("reserved set %v, want 10.35.0.10 in it", r)
	}
	if err := src.Run(t.Context()); err == nil {
		t.Error("Run of a loaded Source: no error")
	}

	// Bounded by its context, and failing, when the server cannot answer:
	// at the deadline, with ten seconds to spare for a loaded machine (one
	// that ignored it would wait for ever).
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	cfg := srv.Config()
	cfg.Host = "https://" + hungListener(t)
	start := time.Now()
	if _, err := kubepools.Load(ctx, cfg, kubepools.Options{}); err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("Load against a hung server: %v after %s, want an error at the deadline", err, time.Since(start))
	}
}
