package kubetest_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ipamkit/ipam"
	"github.com/ipamkit/ipam/k8s/kubestore"
	"github.com/ipamkit/ipam/store"
	"github.com/ipamkit/ipam/store/storetest"
)

var (
	claimsGVR  = schema.GroupVersionResource{Group: kubestore.Group, Version: kubestore.Version, Resource: kubestore.ClaimResource}
	cursorsGVR = schema.GroupVersionResource{Group: kubestore.Group, Version: kubestore.Version, Resource: kubestore.CursorResource}
	ownersGVR  = schema.GroupVersionResource{Group: kubestore.Group, Version: kubestore.Version, Resource: kubestore.OwnerResource}
)

// cmpAddr compares addresses by value.
var cmpAddr = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// emptyBackend deletes every IPClaim, IPOwner and IPCursor, so that the
// next test starts on an empty store.
func emptyBackend(t testing.TB) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	for _, gvr := range []schema.GroupVersionResource{claimsGVR, ownersGVR, cursorsGVR} {
		if err := dyn.Resource(gvr).DeleteCollection(t.Context(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("deleting every %s: %v", gvr.Resource, err)
		}
	}
}

// newStore opens a Store with a client of its own on the test server.
func newStore(t testing.TB) *kubestore.Store {
	t.Helper()
	s, err := kubestore.New(srv.Config(), kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunConfig(t, storetest.Config{AddressesUnique: true}, func(t *testing.T) storetest.Opener {
		emptyBackend(t)
		return func() store.Store { return newStore(t) }
	})
}

// createRaw creates an IPClaim as written by hand, bypassing the Store.
func createRaw(t *testing.T, name string, labels map[string]string, spec map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kubestore.Group + "/" + kubestore.Version, "kind": "IPClaim",
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
	obj.SetLabels(labels)
	if _, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(claimsGVR).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating %s by hand: %v", name, err)
	}
}

// createRawIndex writes the IPOwner of q by hand, listing the addresses ips
// of pool.
func createRawIndex(t *testing.T, q store.OwnerQuery, pool string, ips ...string) {
	t.Helper()
	var entries []any
	for _, ip := range ips {
		entries = append(entries, map[string]any{"pool": pool, "ip": ip, "token": "by-hand"})
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kubestore.Group + "/" + kubestore.Version, "kind": "IPOwner",
		"metadata": map[string]any{"name": kubestore.OwnerIndexName(q)},
		"spec":     map[string]any{"kind": q.Kind.String(), "id": q.ID, "claims": entries},
	}}
	if _, err := dynamic.NewForConfigOrDie(srv.Config()).Resource(ownersGVR).Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the index of %s by hand: %v", q, err)
	}
}

// wantCorrupt checks that err wraps store.ErrCorrupt and reports exactly the
// objects and fields of want (object name to field path).
func wantCorrupt(t *testing.T, what string, err error, want map[string]string) {
	t.Helper()
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: error %v, want one wrapping store.ErrCorrupt", what, err)
	}
	got := map[string]string{}
	for _, e := range flatten(err) {
		var ce *kubestore.CorruptError
		if errors.As(e, &ce) {
			got[ce.Name] = ce.Field
			if !strings.Contains(e.Error(), ce.Name) || !strings.Contains(e.Error(), ce.Field) {
				t.Errorf("%s: message %q does not name the object and the field", what, e)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("%s: reported objects and fields (-want +got):\n%s\n(error: %v)", what, diff, err)
	}
}

// flatten returns the errors joined in err, or err itself.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestBadObjects writes IPClaims by hand that are no valid claims: List and
// Owned skip them and say which object and field is wrong, and their
// addresses stay taken, for Create and for an Allocator.
func TestBadObjects(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	owner := map[string]any{"namespace": "ns", "name": "web-0", "uid": "u1", "interface": "eth0"}
	labels := map[string]string{kubestore.LabelPool: "bad", kubestore.LabelUID: "u1"}
	createRaw(t, "10.0.0.2", labels, map[string]any{"pool": "bad", "ip": "10.0.0.300", "owner": owner})
	createRaw(t, "10.0.0.3", labels, map[string]any{"pool": "bad", "ip": "10.0.0.4", "owner": owner})
	createRaw(t, "10.0.0.5", labels, map[string]any{"pool": "bad", "ip": "10.0.0.5", "owner": owner, "time": "yesterday"})
	createRaw(t, "10.0.0.7", map[string]string{kubestore.LabelPool: "bad"},
		map[string]any{"pool": "bad", "ip": "10.0.0.7", "owner": map[string]any{"name": "nobody"}})
	// u1's owner index lists two of them, as if they had been written by a
	// Store and then spoilt.
	createRawIndex(t, store.ByUID("u1"), "bad", "10.0.0.2", "10.0.0.5")

	s := newStore(t)
	good, err := s.Create(ctx, store.Claim{Pool: "bad", IP: netip.MustParseAddr("10.0.0.9"),
		Owner: store.Owner{Namespace: "ns", Name: "web-0", UID: "u1", Interface: "eth0"}})
	if err != nil {
		t.Fatal(err)
	}

	claims, err := s.List(ctx, "bad")
	wantCorrupt(t, "List(bad)", err, map[string]string{
		"10.0.0.2": "spec.ip", "10.0.0.3": "metadata.name", "10.0.0.5": "spec.time", "10.0.0.7": "spec.owner",
	})
	if diff := cmp.Diff([]store.Claim{good}, claims, cmpAddr); diff != "" {
		t.Fatalf("List(bad) claims (-want +got):\n%s", diff)
	}
	owned, err := s.Owned(ctx, store.ByUID("u1"))
	wantCorrupt(t, "Owned(u1)", err, map[string]string{"10.0.0.2": "spec.ip", "10.0.0.5": "spec.time"})
	if diff := cmp.Diff([]store.Claim{good}, owned, cmpAddr); diff != "" {
		t.Fatalf("Owned(u1) claims (-want +got):\n%s", diff)
	}
	_, err = s.Get(ctx, "bad", netip.MustParseAddr("10.0.0.2"))
	wantCorrupt(t, "Get(bad/10.0.0.2)", err, map[string]string{"10.0.0.2": "spec.ip"})

	// The addresses the bad objects' names hold stay taken.
	for _, ip := range []string{"10.0.0.2", "10.0.0.3", "10.0.0.5", "10.0.0.7"} {
		_, err := s.Create(ctx, store.Claim{Pool: "bad", IP: netip.MustParseAddr(ip), Owner: store.Owner{UID: "u2"}})
		if !errors.Is(err, store.ErrExists) {
			t.Errorf("Create(bad/%s) over a bad object: %v, want store.ErrExists", ip, err)
		}
	}
	// An Allocator hands out only the free addresses of 10.0.0.0/29
	// (.2 to .6; .1 is the gateway): .4 and .6.
	cat, err := ipam.NewCatalog(&ipam.Pool{Name: "bad", Ranges: []ipam.Range{{Subnet: netip.MustParsePrefix("10.0.0.0/29")}}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := ipam.NewAllocator(ipam.Options{Pools: cat, Store: s})
	if err != nil {
		t.Fatal(err)
	}
	var got []netip.Addr
	for i := range 3 {
		res, err := a.Allocate(ctx, ipam.Request{UID: fmt.Sprint("pod-", i), Interfaces: []ipam.NIC{{Name: "eth0", Pools: []string{"bad"}}}})
		if err != nil {
			if i < 2 || !errors.Is(err, ipam.ErrExhausted) {
				t.Fatalf("Allocate %d: %v", i, err)
			}
			continue
		}
		got = append(got, res.IPs[0].Address.Addr())
	}
	slices.SortFunc(got, netip.Addr.Compare)
	if want := []netip.Addr{netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.6")}; !slices.Equal(got, want) {
		t.Fatalf("the Allocator handed out %v, want %v", got, want)
	}
}

// TestOwnedAtLeast: right after a create through one Store, another Store's
// OwnedAtLeast at the create's revision has the claim, from goroutines at
// once; a revision of 0 asks for a consistent list.
func TestOwnedAtLeast(t *testing.T) {
	emptyBackend(t)
	writer, reader := newStore(t), newStore(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for r := range 10 {
				o := store.Owner{UID: fmt.Sprintf("at-least-%d-%d", g, r), Interface: "eth0"}
				c, err := writer.Create(t.Context(), store.Claim{Pool: "atleast", IP: netip.AddrFrom4([4]byte{10, 66, byte(g), byte(r)}), Owner: o})
				if err != nil {
					t.Error(err)
					return
				}
				got, err := reader.OwnedAtLeast(t.Context(), o.Query(), c.Revision)
				if err != nil || len(got) != 1 || got[0].Revision != c.Revision {
					t.Errorf("OwnedAtLeast(%s, %d) = %v, %v; want the claim just made", o.Query(), c.Revision, got, err)
				}
			}
		})
	}
	wg.Wait()
	o := store.Owner{UID: "at-least-0-0", Interface: "eth0"}
	if got, err := reader.OwnedAtLeast(t.Context(), o.Query(), 0); err != nil || len(got) != 1 {
		t.Errorf("OwnedAtLeast(%s, 0) = %v, %v; want the claim", o.Query(), got, err)
	}
}

// requestCounter counts the HTTP requests of the clients it wraps, but
// watches.
type requestCounter struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Query().Get("watch") != "true" {
		c.n.Add(1)
	}
	return c.rt.RoundTrip(r)
}

// newCountingStore is newStore with its HTTP requests, but watches, counted
// in n.
func newCountingStore(t testing.TB, n *atomic.Int64) *kubestore.Store {
	t.Helper()
	cfg := srv.Config()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return requestCounter{rt, n} }
	s, err := kubestore.New(cfg, kubestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPruneByToken: a Delete prunes from the owner's index the entry of the
// claim it deleted (the token in the claim's annotation), not every entry
// of the address: another entry of it, as a create of the same address
// under way writes before its claim, stays, so that claim cannot go
// missing from its owner's index. (TestFlatRequests shows an index left
// with no entry deleted.)
func TestPruneByToken(t *testing.T) {
	emptyBackend(t)
	ctx := t.Context()
	s := newStore(t)
	owner := store.Owner{UID: "prune-a", Interface: "eth0"}
	c, err := s.Create(ctx, store.Claim{Pool: "prune", IP: netip.MustParseAddr("10.71.0.1"), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	owners := dynamic.NewForConfigOrDie(srv.Config()).Resource(ownersGVR)
	name := kubestore.OwnerIndexName(store.ByUID("prune-a"))
	entries := func() []any {
		t.Helper()
		obj, err := owners.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e, _, _ := unstructured.NestedSlice(obj.Object, "spec", "claims")
		return e
	}
	if got := entries(); len(got) != 1 {
		t.Fatalf("the index after a create has %v, want one entry", got)
	}
	// A second entry of the address, as a create under way writes.
	obj, err := owners.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	under := map[string]any{"pool": "prune", "ip": "10.71.0.1", "token": "under-way"}
	if err := unstructured.SetNestedSlice(obj.Object, append(entries(), under), "spec", "claims"); err != nil {
		t.Fatal(err)
	}
	if _, err := owners.Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := newStore(t).Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{under}, entries()); diff != "" {
		t.Fatalf("the index after the Delete (-want +got):\n%s", diff)
	}
	// Another claim of the owner comes and goes; the entry under way stays.
	c, err = s.Create(ctx, store.Claim{Pool: "prune", IP: netip.MustParseAddr("10.71.0.2"), Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, c.Pool, c.IP, c.Revision); err != nil {
		t.Fatal(err)
	}
	if got := entries(); len(got) != 1 {
		t.Fatalf("the index after a create and a delete has %v, want the entry under way alone", got)
	}
}
