package kubegc

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/gc"
	"github.com/ipamkit/ipam/store/memstore"
)

// fakeView is a cluster as a map: pods by namespace/name.
type fakeView struct {
	pods  map[string]*corev1.Pod
	reads int
}

func (v *fakeView) pod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	v.reads++
	return v.pods[ns+"/"+name], nil
}

func (v *fakeView) podByUID(_ context.Context, uid string) (*corev1.Pod, error) {
	v.reads++
	for _, p := range v.pods {
		if string(p.UID) == uid {
			return p, nil
		}
	}
	return nil, nil
}

func (v *fakeView) node(context.Context, string) (*corev1.Node, error) { return nil, nil }

func (v *fakeView) statefulSet(context.Context, string, string) (*appsv1.StatefulSet, error) {
	return nil, nil
}

func running(ns, name, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "192.0.2.1"}}}}
}

// TestConfirm: a release decided from a stale cache (a pod it has not seen
// yet, an old incarnation of the pod) is judged again against the API
// server, and only what that judgement releases is released.
func TestConfirm(t *testing.T) {
	ctx := t.Context()
	pool := &ipam.Pool{Name: "p", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.0.0.0/24")}}}
	cat, err := ipam.NewCatalog(pool)
	if err != nil {
		t.Fatal(err)
	}
	st := memstore.New()
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	claimed := map[string]netip.Addr{}
	for _, name := range []string{"new", "reborn", "gone", "stale-alive"} {
		res, err := a.Allocate(ctx, ipam.Request{Namespace: "ns", Name: name, UID: name + "-uid",
			Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"p"}}}})
		if err != nil {
			t.Fatal(err)
		}
		claimed[name] = res.IPs[0].Address.Addr()
	}
	time.Sleep(time.Millisecond) // the snapshot is taken after the claims
	cached := &fakeView{pods: map[string]*corev1.Pod{
		// "new" is not in the cache yet; "reborn" is, as its old
		// incarnation; "gone" is not; "stale-alive" is, but is gone.
		"ns/reborn":      running("ns", "reborn", "reborn-old-uid"),
		"ns/stale-alive": running("ns", "stale-alive", "stale-alive-uid"),
	}}
	server := &fakeView{pods: map[string]*corev1.Pod{
		"ns/new":    running("ns", "new", "new-uid"),
		"ns/reborn": running("ns", "reborn", "reborn-uid"),
	}}
	r := &Runner{alloc: a, log: slog.New(slog.DiscardHandler), fromCache: cached, fromServer: server}
	p := r.CollectAll(ctx)
	if p.Err != nil {
		t.Fatal(p.Err)
	}
	released := map[string]gc.Reason{}
	for _, d := range p.Released() {
		released[d.Claim.Owner.Name] = d.Reason
	}
	if len(released) != 1 || released["gone"] != gc.ReleasePodGone {
		t.Errorf("released %v, want only gone's claim, for pod-gone", released)
	}
	for _, d := range p.Decisions {
		if d.Claim.Owner.Name == "new" && d.Reason != gc.KeepRunning {
			t.Errorf("claim of the pod the cache had not seen: %s (%s), want kept as running", d.Reason, d.Message)
		}
	}
	for name, ip := range claimed {
		_, err := st.Get(ctx, "p", ip)
		if (name == "gone") != (err != nil) {
			t.Errorf("claim of %s after the pass: %v", name, err)
		}
	}
	// The server was asked about the three candidates only.
	if server.reads != 3 {
		t.Errorf("%d reads of the server, want 3 (new, reborn, gone)", server.reads)
	}
}
